"""
Gradient variance of G1 policy gradients with and without BCG (the paper's Fig. 3).

One policy (random init, :mod:`bcg_ros.bench.g1_grad`), per-env policy
gradients over a 32-step horizon from dropped standing G1 states, at k = 50,
100, 300, plain and with BCG (the paper's tau, B, sigmas, H). The figure per
cell is the summed sample variance of all gradient components across envs,
with a bootstrap band (resampling the envs; plain and BCG resampled together
for the ratio). One compile serves every k (k is an array of the simulator).
"""

import pathlib
import time

import numpy as np

from bcg_ros.jax_cache import enable_compilation_cache


def add_arguments(parser):
    """Options of ``bcg-bench variance``."""
    parser.add_argument('--envs', type=int, default=64, help='envs (--quick: 16)')
    parser.add_argument('--horizon', type=int, default=32, help='control steps (--quick: 16)')
    parser.add_argument('--ks', default='50,100,300', help='contact stiffnesses (--quick: 300)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--bootstrap', type=int, default=1000, help='bootstrap resamples')
    parser.add_argument('--png', default='variance.png', help='figure path')
    parser.add_argument('--tau', type=float, default=400.0,
                        help="BCG trigger [N] (default: the paper's 400)")


def summed_variance(gram: np.ndarray, sq: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """
    Summed sample variance of per-env gradients under resampling ``counts`` [R, N].

    With G the Gram matrix of the per-env gradients g_i and c the multiplicity
    of each env in a resample of n envs: sum_j var_j = (c . |g_i|^2 - c^T G c / n) / (n - 1).
    """
    n = counts.sum(axis=1)
    return (counts @ sq - np.einsum('ri,ij,rj->r', counts, gram, counts) / n) / (n - 1)


def bootstrap(g_plain: np.ndarray, g_bcg: np.ndarray, resamples: int, seed: int):
    """Return point values and 5-95 % bands of the plain, BCG variances and their ratio."""
    n = g_plain.shape[0]
    rng = np.random.default_rng(seed)
    counts = np.stack([np.bincount(rng.integers(0, n, n), minlength=n)
                       for _ in range(resamples)]).astype(np.float64)
    ones = np.ones((1, n))
    out = {}
    for name, g in (('plain', g_plain), ('bcg', g_bcg)):
        gram, sq = g @ g.T, np.sum(g * g, axis=1)
        out[name] = (float(summed_variance(gram, sq, ones)[0]),
                     summed_variance(gram, sq, counts))
    ratio = out['plain'][0] / out['bcg'][0]
    ratios = out['plain'][1] / out['bcg'][1]
    band = lambda x: (float(np.percentile(x, 5)), float(np.percentile(x, 95)))  # noqa: E731
    return {'plain': (out['plain'][0], band(out['plain'][1])),
            'bcg': (out['bcg'][0], band(out['bcg'][1])),
            'ratio': (ratio, band(ratios))}


def plot(rows, path):
    """Write the variance-vs-k figure (log scale, bootstrap bands as error bars)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    ks = [r['k'] for r in rows]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, label, off in (('plain', 'plain', -0.08), ('bcg', 'BCG', 0.08)):
        v = np.array([r[name][0] for r in rows])
        lo = np.array([r[name][1][0] for r in rows])
        hi = np.array([r[name][1][1] for r in rows])
        x = np.arange(len(ks)) + off
        ax.errorbar(x, v, yerr=[v - lo, hi - v], fmt='o-', capsize=3, label=label)
    ax.set_xticks(np.arange(len(ks)), [f'k={k:g}' for k in ks])
    ax.set_yscale('log')
    ax.set_ylabel('summed gradient variance')
    ax.set_title('G1 policy-gradient variance across envs')
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args) -> int:
    """Measure and print the table; the last line is ``variance_ratio_k300: X``."""
    enable_compilation_cache()
    import jax

    from bcg_ros.bench import g1_grad
    from bcg_ros.core import bcg

    envs = 16 if args.quick else args.envs
    horizon = 16 if args.quick else args.horizon
    ks = [300.0] if args.quick else [float(k) for k in args.ks.split(',')]
    if 300.0 not in ks:
        ks.append(300.0)
    t0 = time.perf_counter()
    s = g1_grad.make_setup()
    state = g1_grad.initial_states(s, envs, args.seed)
    params = g1_grad.init_policy(s, jax.random.PRNGKey(args.seed), envs)
    key = jax.random.PRNGKey(args.seed + 1)
    print(f'G1 (nv {s.sim.nv}), {envs} envs, horizon {horizon} control steps '
          f'({horizon * s.sim.config.substeps} substeps), policy MLP {list(g1_grad.HIDDEN)}, '
          f'setup {time.perf_counter() - t0:.1f} s; BCG tau {args.tau:g} N', flush=True)
    fns = {}
    for name, cfg in (('plain', bcg.BCGConfig(enabled=False)),
                      ('bcg', bcg.BCGConfig(tau=args.tau))):
        fns[name] = (cfg, g1_grad.bcg_grad_fn(s, cfg, horizon))
    rows, cost = [], {}
    compiled = {}
    for k in ks:
        sim = g1_grad.with_k(s.sim, k)
        grads, info = {}, {}
        for name, (cfg, fn) in fns.items():
            if name not in compiled:
                c_s, it_s, out, compiled[name] = g1_grad.timed(fn, sim, params, state, key,
                                                               repeats=1)
                cost[name] = c_s
                cost[(name, k)] = it_s
                print(f'{name}: compile {c_s:.1f} s, {it_s:.2f} s per gradient', flush=True)
            else:
                t1 = time.perf_counter()
                out = jax.block_until_ready(compiled[name](sim, params, state, key))
                cost[(name, k)] = time.perf_counter() - t1
            g, ret, rate, fmax = out
            grads[name] = g1_grad.flat(g)
            info[name] = (float(np.mean(ret)), float(rate), float(fmax))
            if not np.all(np.isfinite(grads[name])):
                print(f'k={k:g} {name}: non-finite gradient components')
        b = bootstrap(grads['plain'], grads['bcg'], args.bootstrap, args.seed)
        norms = {n: np.linalg.norm(g, axis=1) for n, g in grads.items()}
        rows.append(dict(k=k, **b, rate=info['bcg'][1], fmax=info['plain'][2],
                         ret=info['plain'][0], norms=norms))
    print()
    print(f'{"k":>6} {"plain var [5-95%]":>30} {"BCG var [5-95%]":>30} '
          f'{"ratio [5-95%]":>22} {"bundle":>7} {"max f_n":>8}')
    for r in rows:
        p, q, x = r['plain'], r['bcg'], r['ratio']
        print(f'{r["k"]:6g} {p[0]:11.4g} [{p[1][0]:.3g}, {p[1][1]:.3g}] '
              f'{q[0]:11.4g} [{q[1][0]:.3g}, {q[1][1]:.3g}] '
              f'{x[0]:7.2f} [{x[1][0]:.2f}, {x[1][1]:.2f}] {r["rate"]:7.1%} {r["fmax"]:8.0f}')
    print('\nper-env gradient norm, median / max (heavy tails show as max >> median):')
    for r in rows:
        n = r['norms']
        print(f'  k={r["k"]:g}: plain {np.median(n["plain"]):.3g} / {np.max(n["plain"]):.3g}, '
              f'BCG {np.median(n["bcg"]):.3g} / {np.max(n["bcg"]):.3g}')
    print(f'\ncost per gradient iteration ({envs} envs x {horizon} steps; one timed call per k):')
    for r in rows:
        t_plain, t_bcg = cost[('plain', r['k'])], cost[('bcg', r['k'])]
        print(f'  k={r["k"]:g}: plain {t_plain:.2f} s, BCG {t_bcg:.2f} s '
              f'({t_bcg / t_plain:.2f}x), bundle rate {r["rate"]:.1%}')
    print(f'compile: plain {cost["plain"]:.1f} s, BCG {cost["bcg"]:.1f} s')
    path = pathlib.Path(args.png)
    plot(rows, path)
    print(f'figure: {path.resolve()}')
    r300 = next(r for r in rows if r['k'] == 300.0)
    print(f'variance_ratio_k300: {r300["ratio"][0]:.3f}')
    return 0
