"""
``bcg-bench gnn``: few-shot real-to-sim on the box scene, and a learned simulator on top.

A seed draws a hidden box scene (:mod:`bcg_ros.real2sim.boxes`: floor and box friction,
the boxes' masses, the contact's softness); its "real" logs are a few runs of it,
measured with noise. Printed side by side:

- **Parameter recovery:** each hidden parameter, the nominal value, and the estimates
  calibrated from 1, 2 and 5 logs (multiple shooting, 0.5 s windows).
- **Held-out trajectory error** (logs no fit sees): the boxes' mean position error
  after 1 s and 5 s, each window started from a logged state under the logged
  commands, for MuJoCo with the nominal, the calibrated and the hidden parameters
  (the last is the noise floor) and for the learned simulator (:mod:`bcg_ros.real2sim.gnn`),
  trained on synthetic runs of the calibrated scene.
- **Control through it:** box 0 pushed to a goal 0.4 m away in 3 s by Adam on the
  command sequence through the learned simulator and through MJX (calibrated), each
  judged in the hidden scene (MuJoCo); ``--quick`` leaves MJX out.

Last line ``learned_sim_error_ratio: X``: the learned simulator's 5 s error over the
nominal scene's.
"""

import argparse
import pathlib
import tempfile
import time

import numpy as np

SETS = (1, 2, 5)
"""Calibration logs of the data-efficiency rows (the last is the headline)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``bcg-bench gnn``."""
    p.add_argument('--seed', type=int, default=11, help='draws the hidden scene (default 11)')
    p.add_argument('--iterations', type=int, default=0,
                   help='learned simulator training iterations (default 15000, --quick 200)')
    p.add_argument('--pushforward', type=int, default=0,
                   help='train on states the learned simulator reaches by itself, up to this '
                        'many steps on (GNNConfig.pushforward; default 0: one-step training)')
    p.add_argument('--synthetic', type=int, default=0,
                   help='synthetic runs of 5 s to train on (default 400, --quick 16)')
    p.add_argument('--starts', type=int, default=0,
                   help='push tasks (default 3, --quick 1)')
    p.add_argument('--learned', default='',
                   help='a learned simulator to judge instead of training one (a '
                        'learned_sim.npz of an earlier run)')
    p.add_argument('--out', default='', help='folder for the logs, data and the trained '
                   'simulator (default: a new temporary folder)')


def run(args) -> int:
    """Make the logs, calibrate, train, compare; the last line is the ratio."""
    from bcg_ros.jax_cache import enable_compilation_cache
    enable_compilation_cache()
    import jax

    from bcg_ros.real2sim import boxes, gnn

    begin = time.monotonic()
    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix='bcg_gnn_'))
    out.mkdir(parents=True, exist_ok=True)
    quick = args.quick
    seconds = 4.0 if quick else 10.0
    sets = SETS[:2] if quick else SETS
    hidden = boxes.draw(args.seed)
    logs = boxes.make_logs(hidden, sets[-1], seconds, seed=1000 * args.seed + 1)
    held = boxes.make_logs(hidden, 1 if quick else 3, seconds, seed=1000 * args.seed + 2)
    boxes.save(logs, out / 'logs.npz')
    boxes.save(held, out / 'held_out.npz')
    cal_cfg = boxes.CalibrationConfig(max_evaluations=60 if quick else 400)
    fits = {}
    for n in sets:
        t0 = time.monotonic()
        fits[n] = boxes.calibrate(logs[:n], cal_cfg)
        print(f'calibrated from {n} log(s) in {time.monotonic() - t0:.0f} s '
              f'({fits[n].evaluations} simulations of all windows)', flush=True)
    calibrated = fits[sets[-1]].params

    if args.learned:
        trained = gnn.load(args.learned)
        print(f'learned simulator: {args.learned} (not retrained)\n', flush=True)
    else:
        count = args.synthetic or (16 if quick else 400)
        steps = 100 if quick else 250
        t0 = time.monotonic()
        data = boxes.generate(calibrated, count, steps, seed=1000 * args.seed + 3)
        print(f'{count} synthetic runs of {steps * boxes.CONTROL_DT:.0f} s of the calibrated '
              f'scene in {time.monotonic() - t0:.0f} s', flush=True)
        cfg = gnn.GNNConfig(iterations=args.iterations or (200 if quick else 15000),
                            pushforward=args.pushforward)
        trained = gnn.train(data, cfg, log=lambda line: print(line, flush=True))
        gnn.save(trained, out / 'learned_sim.npz')
        print(f'learned simulator trained in {trained.seconds:.0f} s '
              f'({cfg.iterations} iterations of {cfg.batch} transitions, pushforward '
              f'{cfg.pushforward})\n', flush=True)

    print(f'hidden scene: seed {args.seed}; calibration logs {sets[-1]} x {seconds:.0f} s, '
          f'held out {len(held)} x {seconds:.0f} s\n')
    print('## Parameter recovery\n')
    print('| parameter | hidden | nominal | ' + ' | '.join(f'{n} log(s)' for n in sets) + ' |')
    print('|---|---|---|' + '---|' * len(sets))
    for i, name in enumerate(boxes.NAMES):
        vals = [np.exp(p.vector()[i]) for p in
                [hidden, boxes.BoxParams()] + [fits[n].params for n in sets]]
        print(f'| {name} | ' + ' | '.join(f'{v:.3f}' for v in vals) + ' |')

    horizons = (50, 250) if not quick else (50, 200)
    sims = [('MuJoCo, nominal', boxes.BoxParams()), ('MuJoCo, hidden (noise floor)', hidden)]
    sims += [(f'MuJoCo, calibrated on {n} log(s)', fits[n].params) for n in sets]
    print('\n## Held-out trajectory error: boxes\' mean position error [cm]\n')
    print('| simulator | ' + ' | '.join(f'after {h * boxes.CONTROL_DT:.0f} s' for h in horizons)
          + ' |')
    print('|---|' + '---|' * len(horizons))
    errors = {}
    for label, params in sims:
        m = boxes.model(params)
        errors[label] = [boxes.horizon_error(lambda s, a: boxes.simulate(m, s, a), held, h)
                         for h in horizons]
    errors['learned simulator (GNN)'] = [boxes.horizon_error(trained.simulate, held, h)
                                         for h in horizons]
    for label, errs in errors.items():
        print(f'| {label} | ' + ' | '.join(f'{100 * e:.2f}' for e in errs) + ' |')

    print('\n## Control: box 0 pushed 0.4 m in 3 s, judged in the hidden scene\n')
    task = boxes.PushTask()
    starts = args.starts or (1 if quick else 3)
    rng = np.random.default_rng(1000 * args.seed + 4)
    judge = boxes.model(hidden)

    def learned(s, u):
        return gnn.rollout(trained.params, trained.stats, trained.cfg, s, u)
    backends = [('learned simulator', learned)]
    if not quick:
        backends.append(('MJX, calibrated', boxes.mjx_rollout(calibrated)))
    inits, iters = (2, 10) if quick else (2, 40)
    print(f'{inits} runs of {iters} Adam steps per task; the distance the optimiser reached '
          f'in its own simulator, then in the hidden scene\n')
    print('| through | its own simulator [cm] | hidden scene [cm] | successes (< 5 cm) | '
          'seconds |')
    print('|---|---|---|---|---|')
    tasks = [boxes.push_start(rng, task) for _ in range(starts)]
    for label, fn in backends:
        t0 = time.monotonic()
        dists, own = [], []
        forward = jax.jit(fn)
        for s0, goal in tasks:
            u, _ = boxes.optimise_push(fn, s0, goal, task, inits, iters)
            final = boxes.simulate(judge, s0, u)[-1, 0, :2]
            dists.append(float(np.linalg.norm(final - goal)))
            mine = np.asarray(forward(np.asarray(s0, np.float32), np.asarray(u, np.float32)))
            own.append(float(np.linalg.norm(mine[-1, 0, :2] - goal)))
        ok = sum(d < task.success for d in dists)
        print(f'| {label} | ' + ', '.join(f'{100 * d:.1f}' if np.isfinite(d) else 'diverged'
                                          for d in own) + ' | ' +
              ', '.join(f'{100 * d:.1f}' for d in dists) +
              f' | {ok}/{len(dists)} | {time.monotonic() - t0:.0f} |', flush=True)
    untouched = [float(np.linalg.norm(s0[0, :2] - g)) for s0, g in tasks]
    print('| (no push) | | ' + ', '.join(f'{100 * d:.1f}' for d in untouched) + ' | | |')

    ratio = errors['learned simulator (GNN)'][-1] / errors['MuJoCo, nominal'][-1]
    cal_ratio = errors[f'MuJoCo, calibrated on {sets[-1]} log(s)'][-1] / \
        errors['MuJoCo, nominal'][-1]
    print(f'\ncalibrated over nominal after {horizons[-1] * boxes.CONTROL_DT:.0f} s: '
          f'{cal_ratio:.3f}')
    print(f'{time.monotonic() - begin:.0f} s in all; logs, data and the learned simulator '
          f'in {out}')
    print(f'learned_sim_error_ratio: {ratio:.3f}')
    return 0
