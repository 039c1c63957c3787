"""
The implicit hard-contact backend against the penalty simulator and MJX, on a box and a step.

Four parts on the scene of :mod:`bcg_ros.bench.box_step`, side by side in one run:

- accuracy against timestep: two passive scenes (a box sliding at 2 m/s into the step;
  a box thrown at 1 m/s onto the step's top from 10 cm above it), MuJoCo in C at 2 ms
  the reference, every simulator at each timestep; the error is the RMS over the
  trajectory (sampled every CONTROL_DT) of the distance between the box's positions.
  The last line, ``ostrich_dt_ratio``, is the largest timestep up to which the implicit
  backend stays, on both scenes, within the error the penalty simulator (the training
  simulator) has at 2 ms, over the reference's 2 ms; the same ratio at a fixed 1 cm
  (TOLERANCE) is printed beside it. Both JAX simulators measure a sphere's depth along
  the vertical, which on the step's steep face leaves them about 1 cm from MuJoCo at
  every timestep: a floor of the contact geometry, not of the timestep;
- gradient quality: :func:`bcg_ros.bench.box_step.optimise` from the same random
  initialisations through each differentiable backend: final loss and success count;
- speed: the median time of one warm forward+backward pass of that optimisation's
  batch, per backend (each at its own timestep), with the machine's load;
- memory: XLA's compiled memory analysis of one gradient against horizon T (one
  physics step per target), for the implicit backend (final LU kept, or refactorised in
  the backward pass) and MJX (plain, and with ``jax.checkpoint`` per step).

Everything runs in float64 (tiny models; one dtype for all).
"""

import argparse
import os
import statistics
import time
from typing import Dict, List, Sequence, Tuple

import numpy as np

RESULT = 'ostrich_dt_ratio'
TOLERANCE = 0.01
"""A fixed tolerance [m] of RMS position error against the reference, printed beside the
penalty simulator's own error at 2 ms (the last line's tolerance)."""
REFERENCE_DT = 0.002
"""MuJoCo's usual timestep [s], the reference's."""
TIMESTEPS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1)
DURATION = 1.5
"""Length of each accuracy scene [s]."""
SIMULATORS = ('implicit', 'penalty', 'mjx')
TRAJOPT_DT = {'implicit': 0.02, 'penalty': 0.005, 'mjx': 0.005}
"""Timestep of each backend in the optimisation: ten times MuJoCo's for the implicit
backend; the training simulator's substep for the others."""


def scenes() -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    """(qpos0, qvel0) of each accuracy scene (module docstring)."""
    from bcg_ros.bench import box_step as bs

    return {'slide': (np.array([0.0, bs.REST_Z]), np.array([2.0, 0.0])),
            'drop': (np.array([0.7, bs.STEP_HEIGHT + bs.REST_Z + 0.1]), np.array([1.0, 0.0]))}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bcg-bench ostrich``."""
    parser.add_argument('--inits', type=int, default=10,
                        help='random initialisations of the optimisation (--quick: 3)')
    parser.add_argument('--iterations', type=int, default=200,
                        help='Adam iterations (--quick: 100)')
    parser.add_argument('--horizon', type=float, default=3.0,
                        help='optimisation horizon [s] (--quick: 2)')
    parser.add_argument('--lr', type=float, default=0.02, help='Adam learning rate [m]')
    parser.add_argument('--seed', type=int, default=0, help='seed of the initialisations')
    parser.add_argument('--horizons', default='10,100,1000',
                        help='memory: gradient horizons T in steps (--quick: 10,100)')
    parser.add_argument('--repeats', type=int, default=7,
                        help='speed: timed gradients per backend (--quick: 3)')
    parser.add_argument('--timesteps', default=','.join(f'{t:g}' for t in TIMESTEPS),
                        help='accuracy: timesteps [s], ascending, each dividing 0.1 s')
    parser.add_argument('--duration', type=float, default=DURATION,
                        help='accuracy: length of each scene [s]')
    parser.add_argument('--parts', default='accuracy,trajopt,speed,memory',
                        help='which parts to run (speed needs trajopt)')


def rms_error(a: np.ndarray, b: np.ndarray) -> float:
    """RMS over samples of the Euclidean distance between positions [K, 2] (inf if not finite)."""
    d = np.sqrt(np.mean(np.sum((np.asarray(a) - np.asarray(b)) ** 2, -1)))
    return float(d) if np.isfinite(d) else float('inf')


def accuracy(timesteps: Sequence[float], duration: float = DURATION,
             simulators: Sequence[str] = SIMULATORS) -> Dict[str, Dict[str, List[float]]]:
    """Error [m] of each simulator at each timestep against MuJoCo at 2 ms: [scene][name][i]."""
    from bcg_ros.bench import box_step as bs

    knots = int(round(duration / bs.CONTROL_DT))
    targets = np.zeros((knots, 2))
    out = {}
    for scene, (q, v) in scenes().items():
        ref = bs.simulate('mujoco', REFERENCE_DT, q, v, targets, actuated=False)
        out[scene] = {name: [rms_error(bs.simulate(name, dt, q, v, targets, actuated=False), ref)
                             for dt in timesteps]
                      for name in ('mujoco',) + tuple(simulators)}
    return out


def reference_error(duration: float = DURATION, fine: float = 0.0005) -> Dict[str, float]:
    """RMS error [m] of the reference (MuJoCo at 2 ms) against MuJoCo at ``fine``, per scene."""
    from bcg_ros.bench import box_step as bs

    targets = np.zeros((int(round(duration / bs.CONTROL_DT)), 2))
    return {scene: rms_error(*(bs.simulate('mujoco', dt, q, v, targets, actuated=False)
                               for dt in (REFERENCE_DT, fine)))
            for scene, (q, v) in scenes().items()}


def dt_ratio(timesteps: Sequence[float], errors: Sequence[Sequence[float]],
             tolerances: Sequence[float]) -> float:
    """
    Largest timestep up to which every scene's error stays within its tolerance, over 2 ms.

    ``errors``: one list per scene, aligned with ``timesteps`` (ascending);
    ``tolerances``: one per scene. 0 if the smallest timestep already fails.
    """
    best = 0.0
    for i, dt in enumerate(timesteps):
        if any(not e[i] <= tol for e, tol in zip(errors, tolerances)):
            break
        best = dt
    return best / REFERENCE_DT


def _accuracy_lines(timesteps, acc) -> List[str]:
    lines = []
    for scene, rows in acc.items():
        lines.append(f'{scene}: RMS position error [cm] against MuJoCo at '
                     f'{REFERENCE_DT * 1e3:g} ms')
        lines.append(f'  {"dt [ms]":10}' + ''.join(f'{dt * 1e3:>9g}' for dt in timesteps))
        for name, errs in rows.items():
            lines.append(f'  {name:10}' + ''.join(f'{e * 100:9.3f}' for e in errs))
    return lines


def trajopt(inits: int, knots: int, iterations: int, lr: float, seed: int,
            simulators: Sequence[str] = SIMULATORS):
    """Run the optimisation through each backend: (results by name, grad fns, targets0)."""
    from bcg_ros.bench import box_step as bs

    targets0 = bs.initial_targets(inits, knots, seed)
    results, grads = {}, {}
    for name in simulators:
        b = bs.backend(name, TRAJOPT_DT[name])
        grads[name] = bs.grad_fn(b)
        t0 = time.perf_counter()
        results[name] = bs.optimise(b, targets0, iterations, lr, grads[name])
        print(f'  {name} (dt {TRAJOPT_DT[name] * 1e3:g} ms): {time.perf_counter() - t0:.1f} s '
              'with compile', flush=True)
    return results, grads, targets0


def speed(grads, targets0, repeats: int) -> Dict[str, float]:
    """Median seconds of one warm forward+backward pass of the batch, per backend."""
    import jax
    import jax.numpy as jnp

    u = jnp.asarray(targets0)
    out = {}
    for name, g in grads.items():
        jax.block_until_ready(g(u))
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(g(u))
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times)
    return out


MEMORY_VARIANTS = ('implicit', 'implicit-refactor', 'mjx', 'mjx-checkpoint')


def gradient_memory(variant: str, horizon: int) -> float:
    """Peak bytes (XLA's analysis: arguments + outputs + temporaries) of one T-step gradient."""
    import jax
    import jax.numpy as jnp

    from bcg_ros.bench import box_step as bs
    from bcg_ros.bench import throughput
    from bcg_ros.core import implicit

    name = variant.split('-')[0]
    cfg = implicit.ImplicitConfig(dt=TRAJOPT_DT['implicit'],
                                  save_factorization=variant != 'implicit-refactor')
    b = bs.backend(name, TRAJOPT_DT[name], n=1, checkpoint=variant.endswith('checkpoint'),
                   implicit_cfg=cfg)

    def loss(u):
        return bs.goal_loss(b.rollout(jnp.asarray(bs.START), jnp.zeros(2), u))

    compiled = jax.jit(jax.grad(loss)).lower(jnp.zeros((horizon, 2))).compile()
    mb = throughput.memory_mb(compiled)
    return float('nan') if mb is None else mb * 2 ** 20


def state_bytes() -> Dict[str, int]:
    """Bytes of one state: the implicit backend's (q, v, impulses) and MJX's whole mjx.Data."""
    import jax

    from bcg_ros.bench import box_step as bs
    from bcg_ros.core import implicit

    s = implicit.reset(implicit.build(bs.penalty_sim(bs.CONTROL_DT)), bs.START)
    d = bs.mjx_data(bs.mjx_scene(TRAJOPT_DT['mjx']), bs.START, np.zeros(2))
    return {name: sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))
            for name, tree in (('implicit', s), ('mjx', d))}


def run(args) -> int:
    """Measure and print the four parts; the last line is ``ostrich_dt_ratio: X``."""
    from bcg_ros.jax_cache import enable_compilation_cache

    enable_compilation_cache()
    import jax
    # Float64 for this benchmark only: a caller in the same process keeps its own setting.
    with jax.enable_x64(True):
        return _measure(args)


def _measure(args) -> int:
    """The body of :func:`run`, under float64."""
    from bcg_ros.bench import box_step as bs

    quick = args.quick
    parts = set(args.parts.split(','))
    inits = 3 if quick else args.inits
    iterations = 100 if quick else args.iterations
    horizon = 2.0 if quick else args.horizon
    repeats = 3 if quick else args.repeats
    horizons = [int(t) for t in ('10,100' if quick else args.horizons).split(',')]
    print(f'box over a {bs.STEP_HEIGHT * 100:g} cm step; load average at the start '
          f'{os.getloadavg()[0]:.2f}', flush=True)
    ratio = float('nan')
    if 'accuracy' in parts:
        t0 = time.perf_counter()
        timesteps = [float(t) for t in args.timesteps.split(',')]
        acc = accuracy(timesteps, args.duration)
        print('\n'.join(_accuracy_lines(timesteps, acc)))
        print('the reference itself: MuJoCo at 0.5 ms differs from it by ' + ', '.join(
            f'{e * 100:.3f} cm ({scene})' for scene, e in reference_error(args.duration).items()))
        implicit_errors = [rows['implicit'] for rows in acc.values()]
        if timesteps[0] == REFERENCE_DT:
            tols = [rows['penalty'][0] for rows in acc.values()]
        else:
            tols = [TOLERANCE] * len(acc)
        ratio = dt_ratio(timesteps, implicit_errors, tols)
        fixed = dt_ratio(timesteps, implicit_errors, [TOLERANCE] * len(acc))
        print('tolerance: the penalty simulator at 2 ms, ' + ', '.join(
            f'{t * 100:.3f} cm ({scene})' for t, scene in zip(tols, acc)) + '; implicit within '
            f'it up to {ratio * REFERENCE_DT * 1e3:g} ms; within {TOLERANCE * 100:g} cm up to '
            f'{fixed * REFERENCE_DT * 1e3:g} ms (ratio {fixed:g}) ({time.perf_counter() - t0:.0f} '
            's)', flush=True)
    knots = int(round(horizon / bs.CONTROL_DT))
    if parts & {'trajopt', 'speed'}:
        print(f'trajectory optimisation: {inits} random initialisations, {knots} targets over '
              f'{horizon:g} s, Adam lr {args.lr:g}, {iterations} iterations; success: final '
              f'position within {bs.SUCCESS_TOLERANCE * 100:g} cm of the goal '
              f'{bs.GOAL.round(3).tolist()}', flush=True)
        results, grads, targets0 = trajopt(inits, knots, iterations, args.lr, args.seed)
        print('\n'.join(bs.summary(results)))
        if 'speed' in parts:
            times = speed(grads, targets0, repeats)
            print(f'speed: one forward+backward pass of the batch ({inits} x {horizon:g} s), '
                  f'median of {repeats}; load {os.getloadavg()[0]:.2f}')
            for name, s in times.items():
                steps = knots * bs.steps_per_knot(TRAJOPT_DT[name])
                print(f'  {name:10} {s * 1e3:9.1f} ms  ({steps} steps of '
                      f'{TRAJOPT_DT[name] * 1e3:g} ms, {s / steps * 1e3:.3f} ms per step)')
            print(f'  mjx / implicit: {times["mjx"] / times["implicit"]:.1f}x per pass')
    if 'memory' in parts:
        sizes = state_bytes()
        print(f'memory: peak bytes of one gradient (XLA memory analysis) against T steps; a '
              f'state is {sizes["implicit"]} B (implicit), {sizes["mjx"]} B (mjx.Data)')
        print(f'  {"T":20}' + ''.join(f'{t:>12}' for t in horizons) + f'{"B/step":>10}')
        for variant in MEMORY_VARIANTS:
            mem = [gradient_memory(variant, t) for t in horizons]
            slope = (mem[-1] - mem[-2]) / (horizons[-1] - horizons[-2])
            print(f'  {variant:20}' + ''.join(f'{m / 2 ** 20:10.3f}MB' for m in mem)
                  + f'{slope:10.0f}', flush=True)
    print(f'{RESULT}: {ratio:g}')
    return 0
