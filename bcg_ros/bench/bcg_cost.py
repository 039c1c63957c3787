"""
What BCG costs in training: a SHAC + BCG iteration over a plain one, side by side.

Two :class:`bcg_ros.train.Trainer` of the same preset, clip, batch and seed, one with
``g1.bcg.enabled=false``, take turns for the same number of iterations (so machine load
hits both alike); the figure is the ratio of their median iteration times, at the
bundle rate the BCG run really has (printed, with the bundles dropped for want of a
slot). Beside it, a breakdown of one physics substep of a branch batch (B states of one
env, forward only): the smooth dynamics (kinematics, mass matrix, bias forces: what a
branch a centimetre from the mean state could share with it), the contact terms (what a
branch must recompute) and the implicit solve (shareable with a factorisation).
"""

import argparse
import statistics
import tempfile
import time
from typing import Dict, List

RESULT = 'bcg_cost_ratio'


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bcg-bench bcg-cost``."""
    parser.add_argument('--preset', default='cpu', help='bcg-train preset of both runs')
    parser.add_argument('--motion', default='jump', help='reference clip of both runs')
    parser.add_argument('--iterations', type=int, default=12,
                        help='timed iterations of each run (--quick: 4), after 2 untimed')
    parser.add_argument('--set', dest='overrides', action='append', default=[],
                        metavar='SECTION.FIELD=VALUE', help='bcg-train override of both runs')


def _trainer(preset: str, motion: str, overrides: List[str], bcg: bool, out: str):
    from bcg_ros import train
    items = dict(train.parse_set(overrides), **{
        'run.progress_bar': False, 'run.tensorboard': False, 'run.evaluate': False,
        'run.export': False, 'run.checkpoint_every': 10 ** 6, 'run.curves_every': 10 ** 6,
        'g1.motion': motion, 'g1.bcg.enabled': bcg})
    return train.Trainer(train.make_config(preset, None, items), out, resume=False)


def _substep_parts(trainer, repeats: int = 20) -> Dict[str, float]:
    """Median forward time [ms] of a branch batch's substep parts (B states of one env)."""
    import jax
    import jax.numpy as jnp

    from bcg_ros.core import sim as simulator

    env = trainer.env
    sim, cfg = env.sim, env.config.bcg
    s0 = jax.tree.map(lambda x: x[0], trainer.state.env_state.bcg.sim)
    states = jax.tree.map(lambda x: jnp.broadcast_to(x, (cfg.branches,) + x.shape), s0)

    def smooth(q, v):
        return simulator.smooth_dynamics(sim, q, v)

    def contact(q, v):
        return simulator.contact_terms(sim, smooth(q, v)[0], v)[1]

    def solve(q, v):
        d, mass = smooth(q, v)
        return jnp.linalg.solve(mass, d.qfrc_bias)

    target = jnp.zeros((cfg.branches, sim.num_actions), sim.dtype)
    fns = {'substep': jax.jit(jax.vmap(lambda q, v, t: simulator.substep(
               sim, simulator.SimState(q, v), t)[0].qvel)),
           'smooth_dynamics': jax.jit(jax.vmap(lambda q, v, t: smooth(q, v)[0].qfrc_bias)),
           'smooth+contact': jax.jit(jax.vmap(lambda q, v, t: contact(q, v))),
           'smooth+mass_solve': jax.jit(jax.vmap(lambda q, v, t: solve(q, v)))}
    out = {}
    for name, fn in fns.items():
        jax.block_until_ready(fn(states.qpos, states.qvel, target))
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(states.qpos, states.qvel, target))
            times.append(time.perf_counter() - t0)
        out[name] = 1e3 * statistics.median(times)
    return out


def run(args: argparse.Namespace) -> int:
    """Time both runs and print ``bcg_cost_ratio: X`` last."""
    import os

    from bcg_ros.jax_cache import enable_compilation_cache

    enable_compilation_cache()
    n = 4 if args.quick else args.iterations
    with tempfile.TemporaryDirectory(prefix='bcg_bench_cost_') as tmp:
        runs = {'bcg': _trainer(args.preset, args.motion, args.overrides, True,
                                os.path.join(tmp, 'bcg')),
                'plain': _trainer(args.preset, args.motion, args.overrides, False,
                                  os.path.join(tmp, 'plain'))}
        for name, tr in runs.items():
            print(f'{name}: compiling the training step ...', flush=True)
            print(f'{name}: compiled in {tr.compile():.1f} s', flush=True)
        times = {name: [] for name in runs}
        metrics = []
        for i in range(n + 2):
            for name, tr in runs.items():
                t0 = time.perf_counter()
                m = tr.step()
                if i >= 2:
                    times[name].append(time.perf_counter() - t0)
                    if name == 'bcg':
                        metrics.append(m)
        parts = _substep_parts(runs['bcg']) if runs['bcg'].cfg.run.env == 'g1' else {}
    cfg = runs['bcg'].cfg
    med = {name: statistics.median(t) for name, t in times.items()}
    rate = statistics.mean(m['bundle_rate'] for m in metrics)
    dropped = statistics.mean(m.get('bundle_dropped_rate', 0.0) for m in metrics)
    load = os.getloadavg()[0]
    print(f'--preset {args.preset} --motion {args.motion}: {runs["bcg"].env.num_envs} envs x '
          f'{cfg.shac.horizon} steps, B = {cfg.g1.bcg.branches}, H = {cfg.g1.bcg.horizon}, '
          f'max_bundled = {cfg.g1.bcg.max_bundled}; {n} timed iterations each, load {load:.1f}')
    for name in runs:
        print(f'{name}: median iteration {med[name]:.2f} s '
              f'(min {min(times[name]):.2f}, max {max(times[name]):.2f})')
    print(f'bcg: bundle rate {rate:.3f} of env-steps, dropped {dropped:.3f}')
    print(f'cost model 1 + B * P(bundled): {1 + cfg.g1.bcg.branches * rate:.2f}')
    if parts:
        print(f'one substep of a {cfg.g1.bcg.branches}-state branch batch, forward [ms]: ' +
              ', '.join(f'{k} {v:.2f}' for k, v in parts.items()))
    if rate == 0.0:
        print('BCG never triggered: the ratio cannot differ from plain by construction')
    print(f'{RESULT}: {med["bcg"] / med["plain"]:.2f}')
    return 0
