"""
Forward+backward env-substeps per second: plain, BCG, and MJX with its own contacts.

The three run the same thing on the same G1 model and batch: a policy rollout
(:mod:`bcg_ros.bench.g1_grad`) of N envs over T control steps of 4 physics
substeps, and jax.grad of its return with respect to the policy parameters.
Plain and BCG go through :mod:`bcg_ros.core.sim` (MJX smooth dynamics, the
project's contact); MJX goes through ``mjx.step`` with MJX's contacts and
constraint solver at ``opt.iterations = 1`` (the only setting reverse mode
gets through). Each runs on one CPU core and then with the envs split over all cores
(one JAX device per core, :func:`bcg_ros.jax_cache.cpu_cores`); the last line compares
plain and MJX on the same cores. Compile times are printed next to each; peak memory is XLA's
memory analysis of each compiled gradient (arguments + outputs + temporaries)
and the process's peak RSS.
"""

import resource

import numpy as np

from bcg_ros.jax_cache import cpu_cores, enable_compilation_cache


def add_arguments(parser):
    """Options of ``bcg-bench throughput``."""
    parser.add_argument('--envs', type=int, default=64, help='batch (--quick: 16)')
    parser.add_argument('--horizon', type=int, default=32, help='control steps (--quick: 16)')
    parser.add_argument('--k', type=float, default=300.0, help='contact stiffness')
    parser.add_argument('--repeats', type=int, default=5,
                        help='timed calls after compile (their median)')
    parser.add_argument('--no-mjx', action='store_true', help='skip the MJX comparison')
    parser.add_argument('--max-bundled', type=int, default=-1,
                        help='also time BCG with the branch work gathered for this many envs '
                             '(BCGConfig.max_bundled; -1: envs / 8; 0: skip that row)')


def memory_mb(compiled):
    """Return XLA's estimate of the executable's peak memory [MB], or None."""
    try:
        m = compiled.memory_analysis()
        total = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
                 - m.alias_size_in_bytes)
        return total / 2 ** 20
    except Exception:  # noqa: B902 - not every backend reports it
        return None


def _layouts(envs: int):
    """(label, devices) to time on: one core, and all cores that divide the envs."""
    import jax

    from bcg_ros.train.trainer import split_devices

    devices = split_devices(jax.local_devices(), envs)
    layouts = [('1 core', devices[:1])]
    if len(devices) > 1:
        layouts.append((f'{len(devices)} cores', devices))
    return layouts


def _placed(devices, batched, shared=()):
    """``batched`` split along their leading (env) axis over ``devices``; ``shared`` copied."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.asarray(devices), ('envs',))
    return ([jax.device_put(x, NamedSharding(mesh, PartitionSpec('envs'))) for x in batched],
            [jax.device_put(x, NamedSharding(mesh, PartitionSpec())) for x in shared])


def run(args) -> int:
    """Measure and print; the last line is ``grad_speedup_vs_mjx: X``."""
    enable_compilation_cache(host_devices=cpu_cores())
    import jax

    from bcg_ros.bench import g1_grad
    from bcg_ros.core import bcg

    envs = 16 if args.quick else args.envs
    horizon = 16 if args.quick else args.horizon
    repeats = args.repeats
    s = g1_grad.make_setup()
    sim = g1_grad.with_k(s.sim, args.k)
    state = g1_grad.initial_states(s, envs, 0)
    params = g1_grad.init_policy(s, jax.random.PRNGKey(0), envs)
    key = jax.random.PRNGKey(1)
    substeps = envs * horizon * s.sim.config.substeps
    layouts = _layouts(envs)
    print(f'G1 (nv {s.sim.nv}), {envs} envs x {horizon} control steps x '
          f'{s.sim.config.substeps} substeps = {substeps} env-substeps per gradient, '
          f'k = {args.k:g}; the envs split over {", ".join(lb for lb, _ in layouts)} '
          f'(one JAX CPU device per core)', flush=True)
    gather = max(1, envs // 8) if args.max_bundled < 0 else args.max_bundled
    configs = [('plain', bcg.BCGConfig(enabled=False)), ('bcg', bcg.BCGConfig())]
    if 0 < gather < envs:
        configs.append((f'bcg-m{gather}', bcg.BCGConfig(max_bundled=gather)))
    rows = {}
    for label, devices in layouts:
        if not args.no_mjx:
            fn, _ = g1_grad.mjx_grad_fn(s, horizon, iterations=1)
            batched, _ = _placed(devices, [params, state.qpos, state.qvel])
            c_s, it_s, out, compiled = g1_grad.timed(fn, *batched, repeats=repeats)
            finite = all(bool(jax.numpy.all(jax.numpy.isfinite(x)))
                         for x in jax.tree.leaves(out))
            rows['mjx', label] = (c_s, it_s, memory_mb(compiled), None)
            print(f'mjx (iterations 1), {label}: compile {c_s:.1f} s, {it_s:.2f} s per '
                  f'gradient, {substeps / it_s:.0f} env-substeps/s, gradient finite: {finite}',
                  flush=True)
        for name, cfg in configs:
            fn = g1_grad.bcg_grad_fn(s, cfg, horizon)
            (p, st), (sm, k) = _placed(devices, [params, state], [sim, key])
            c_s, it_s, out, compiled = g1_grad.timed(fn, sm, p, st, k, repeats=repeats)
            rows[name, label] = (c_s, it_s, memory_mb(compiled), float(out[2]))
            print(f'{name}, {label}: compile {c_s:.1f} s, {it_s:.2f} s per gradient, '
                  f'{substeps / it_s:.0f} env-substeps/s, bundle rate {float(out[2]):.1%}',
                  flush=True)
    print()
    print(f'{"":8} {"cores":>8} {"compile s":>10} {"s/grad":>8} {"substeps/s":>11} '
          f'{"XLA peak MB":>12}')
    for label, _ in layouts:
        for name in [c[0] for c in configs] + ['mjx']:
            if (name, label) not in rows:
                continue
            c_s, it_s, mem, _ = rows[name, label]
            mem_s = f'{mem:12.0f}' if mem is not None else f'{"n/a":>12}'
            print(f'{name:8} {label:>8} {c_s:10.1f} {it_s:8.2f} {substeps / it_s:11.0f} {mem_s}')
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f'peak RSS of this process: {rss:.0f} MB (batch {envs})')
    one, top = layouts[0][0], layouts[-1][0]
    if top != one:
        for name in ['plain', 'mjx']:
            if (name, top) in rows:
                print(f'{name} on {top} against 1 core: '
                      f'{rows[name, one][1] / rows[name, top][1]:.2f}x')
    ratio = rows['bcg', top][1] / rows['plain', top][1]
    print(f'BCG iteration cost: {ratio:.2f}x plain (goal <= 1.3x)')
    for name, _ in configs[2:]:
        print(f'{name} iteration cost: {rows[name, top][1] / rows["plain", top][1]:.2f}x plain, '
              f'bundle rate {rows[name, top][3]:.1%} (all envs: {rows["bcg", top][3]:.1%})')
    if ('mjx', top) not in rows:
        print('grad_speedup_vs_mjx: nan')
        return 0
    if top != one:
        print(f'plain on {top} against MJX on 1 core: '
              f'{rows["mjx", one][1] / rows["plain", top][1]:.2f}x')
    print(f'BCG vs MJX ({top}): {rows["mjx", top][1] / rows["bcg", top][1]:.2f}x')
    # Like for like: both on the same cores.
    print(f'grad_speedup_vs_mjx: {rows["mjx", top][1] / rows["plain", top][1]:.2f}')
    return 0
