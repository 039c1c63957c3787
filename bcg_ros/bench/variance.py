"""
Gradient variance of G1 policy gradients with and without BCG (the paper's Fig. 3).

Without ``--checkpoints``: one policy (random init, :mod:`bcg_ros.bench.g1_grad`),
per-env policy gradients over a 32-step horizon from dropped standing G1 states,
at k = 50, 100, 300, plain and with BCG (the paper's tau, B, sigmas, H).

With ``--checkpoints`` (the checkpoints of one training run, e.g. those
``run.keep_checkpoints`` keeps at 0/25/50/100 %), during training as the paper
measures it: each checkpoint's own policy, observation normaliser, critic and
ADD discriminator, in the run's own environment (clip, reward, randomisation),
the per-env gradient of SHAC's actor loss over the run's horizon. The envs
start where training would have them: reset as training resets them, then run
``--warmup`` horizons under the policy at the run's k. From those states both
estimators (plain and BCG, the run's BCG settings) get identical states and
keys at every k.

The figure per cell is the summed sample variance of all gradient components
across envs, with a bootstrap band (resampling the envs; plain and BCG
resampled together for the ratio). One compile serves every k (k is an array
of the simulator).
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
    parser.add_argument('--checkpoints', nargs='+', default=None, metavar='NPZ',
                        help='checkpoints of one training run: measure during training '
                             '(--envs, --ks and --bootstrap apply; the horizon and the BCG '
                             'settings are the run\'s)')
    parser.add_argument('--warmup', type=int, default=2,
                        help='horizons run under each policy before measuring (--checkpoints)')


def summed_variance(gram: np.ndarray, sq: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """
    Summed sample variance of per-env gradients under resampling ``counts`` [R, N].

    With G the Gram matrix of the per-env gradients g_i and c the multiplicity
    of each env in a resample of n envs: sum_j var_j = (c . |g_i|^2 - c^T G c / n) / (n - 1).
    """
    n = counts.sum(axis=1)
    return (counts @ sq - np.einsum('ri,ij,rj->r', counts, gram, counts) / n) / (n - 1)


def bootstrap(g_plain: np.ndarray, g_bcg: np.ndarray, resamples: int, seed: int):
    """
    Return point values and 5-95 % bands of the plain, BCG variances and their ratio.

    ``out['std']`` holds the standard deviation of each over the resamples (the
    paper's shading).
    """
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
            'ratio': (ratio, band(ratios)),
            'std': {'plain': float(np.std(out['plain'][1])), 'bcg': float(np.std(out['bcg'][1])),
                    'ratio': float(np.std(ratios))}}


def robust_ratios(g_plain: np.ndarray, g_bcg: np.ndarray, trim: float = 0.05):
    """
    Variance ratios (plain over BCG) that a few envs cannot swing, and the mean gradients.

    Per env, d_i = |g_i - median g|^2 (the component-wise median: one huge env
    moves the mean, so every env would be far from it): ``median`` is median(d)
    plain over BCG, ``trimmed`` the mean of d without its top ``trim`` share;
    ``norm_ratio`` is |mean g| BCG over plain and ``cosine`` the cosine of the
    two mean gradients (a variance bought with a shrunken or turned gradient is
    no gain).
    """
    def spread(g):
        return np.sum((g - np.median(g, axis=0)) ** 2, axis=1)

    def trimmed(d):
        keep = max(1, int(round(len(d) * (1.0 - trim))))
        return float(np.mean(np.sort(d)[:keep]))

    d_p, d_b = spread(g_plain), spread(g_bcg)
    m_p, m_b = g_plain.mean(axis=0), g_bcg.mean(axis=0)
    n_p, n_b = float(np.linalg.norm(m_p)), float(np.linalg.norm(m_b))
    return {'median': float(np.median(d_p) / np.median(d_b)),
            'trimmed': trimmed(d_p) / trimmed(d_b),
            'norm_ratio': n_b / n_p, 'cosine': float(m_p @ m_b / (n_p * n_b))}


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
    if args.checkpoints:
        return run_training(args)
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


# --- during training ---------------------------------------------------------

def _training_setup(paths, envs: int):
    """Return (config, env of ``envs`` envs, learner states by checkpoint) of one run."""
    import jax

    from bcg_ros.core import shac
    from bcg_ros.train import checkpoint
    from bcg_ros.train.config import (ConfigError, TrainConfig, config_to_dict,
                                      flatten_mapping, make_config, with_defaults)
    from bcg_ros.train.trainer import make_env

    metas = [checkpoint.read_meta(p) for p in paths]
    configs = [m.get('config', {}) for m in metas]
    if any(c != configs[0] for c in configs[1:]):
        raise ConfigError(f'{paths[0]}: --checkpoints come from runs with other configurations')
    items = flatten_mapping(with_defaults(configs[0], config_to_dict(TrainConfig())))
    cfg = make_config(None, None, items)
    if cfg.run.algo != 'shac' or cfg.run.env != 'g1':
        raise ConfigError(f'{paths[0]}: a SHAC run on the G1 is needed, not '
                          f'{cfg.run.algo} on {cfg.run.env}')
    template = shac.init(cfg.shac, cfg.add, make_env(cfg), jax.random.PRNGKey(0))
    states = [checkpoint.load(p, template, transient=('env_state',)) for p in paths]
    big = make_config(None, None, {**items, 'g1.num_envs': envs})
    return cfg, big, make_env(big), states


def _per_env_grad_fn(env, cfg, shac_mod):
    """Jitted ``(sim, state, key) -> (per-env grads, env_state, bundled [H, N], f_max)``."""
    import copy

    import jax
    import jax.numpy as jnp

    n = env.num_envs

    def fn(sim, st, key):
        env_k = copy.copy(env)
        env_k.sim = sim

        def loss(actor):
            value, (env_state, data) = shac_mod._rollout(
                actor, st, key, cfg.shac, cfg.add, env_k, per_env=True)
            # The batch mean times n: each env's own loss; its gradient is that env's.
            return n * value, (env_state, data)

        actor = jax.tree.map(lambda x: jnp.broadcast_to(x, (n,) + x.shape), st.actor)
        g, (env_state, data) = jax.grad(loss, has_aux=True)(actor)
        return g, env_state, data['bundle'], data['e_track']

    return jax.jit(fn)


def run_training(args) -> int:
    """Fig. 3 during training: per checkpoint and k, plain against BCG; last line the ratio."""
    import dataclasses

    import jax

    from bcg_ros.bench import g1_grad
    from bcg_ros.core import bcg as bcg_mod
    from bcg_ros.core import shac

    paths = [pathlib.Path(p) for p in args.checkpoints]
    ks = [float(k) for k in args.ks.split(',')]
    if 300.0 not in ks:
        ks.append(300.0)
    t0 = time.perf_counter()
    cfg, big, env, states = _training_setup(paths, args.envs)
    bcg_cfg = big.g1.bcg
    plain_env = copy_env_with_bcg(env, dataclasses.replace(bcg_cfg, enabled=False))
    fns = {'plain': _per_env_grad_fn(plain_env, big, shac),
           'bcg': _per_env_grad_fn(env, big, shac)}
    run_k = float(big.g1.sim.contact.k)
    print(f'{paths[0].parent}: motion {big.g1.motion!r}, {args.envs} envs (training ran '
          f'{cfg.g1.num_envs}) x {big.shac.horizon} steps, k of the run {run_k:g}; BCG B = '
          f'{bcg_cfg.branches}, H = {bcg_cfg.horizon}, sigma_p {bcg_cfg.sigma_p:g} m, sigma_v '
          f'{bcg_cfg.sigma_v:g} m/s, tau {bcg_cfg.tau:g} N; '
          f'setup {time.perf_counter() - t0:.1f} s',
          flush=True)
    rows = []
    for path, (st, meta) in zip(paths, states):
        it = int(meta['iteration'])
        key = jax.random.PRNGKey(args.seed + it)
        k_reset, k_warm, k_grad = jax.random.split(key, 3)
        # Host arrays throughout: a state fresh from reset and one from a rollout then have
        # the same types (no weak types), so the jitted estimators compile once.
        st = dataclasses.replace(st, env_state=jax.device_get(env.reset(k_reset)))
        for w in range(args.warmup):
            t1 = time.perf_counter()
            _, env_state, _, _ = jax.block_until_ready(fns['plain'](
                g1_grad.with_k(env.sim, run_k), st, jax.random.fold_in(k_warm, w)))
            st = dataclasses.replace(st, env_state=jax.device_get(env_state))
            if not rows and w == 0:
                print(f'compiled and ran the plain estimator in {time.perf_counter() - t1:.1f} s',
                      flush=True)
        for k in ks:
            sim = g1_grad.with_k(env.sim, k)
            grads, bundled = {}, None
            for name, fn in fns.items():
                s0 = dataclasses.replace(st, env_state=dataclasses.replace(
                    st.env_state, bcg=jax.device_get(
                        bcg_mod.init_batch(sim, bcg_cfg, st.env_state.bcg.sim))))
                t1 = time.perf_counter()
                g, _, bundle, e_track = jax.block_until_ready(fn(sim, s0, k_grad))
                grads[name] = g1_grad.flat(g)
                if name == 'bcg':
                    bundled = np.asarray(bundle)
                if not np.all(np.isfinite(grads[name])):
                    print(f'{path.name} k={k:g} {name}: non-finite gradient components')
                print(f'  {path.name} k={k:g} {name}: {time.perf_counter() - t1:.1f} s, '
                      f'E_track {float(np.mean(e_track)):.1f} cm', flush=True)
            b = bootstrap(grads['plain'], grads['bcg'], args.bootstrap, args.seed)
            rob = robust_ratios(grads['plain'], grads['bcg'])
            triggered = bundled.any(axis=0)
            g_p = grads['plain']
            d_p = np.sum((g_p - g_p.mean(axis=0)) ** 2, axis=1)   # summed variance by env
            share = float(d_p[triggered].sum() / d_p.sum())
            rows.append(dict(iteration=it, k=k, **b, **rob, rate=float(bundled.mean()),
                             envs_triggered=float(triggered.mean()), share=share))
    total = int(max(r['iteration'] for r in rows)) or 1
    print()
    print(f'{"iter":>6} {"k":>6} {"plain var":>10} {"BCG var":>10} {"ratio +- std":>16} '
          f'{"median":>7} {"trimmed":>7} {"|g| B/P":>7} {"cos":>6} {"bundled":>7} '
          f'{"envs trig":>9} {"share":>6}')
    for r in rows:
        mark = '' if r['rate'] > 0 else '  (BCG never triggered: equal by construction)'
        counts = 0.5 <= r['norm_ratio'] <= 2.0
        mark += '' if counts or not r['rate'] else '  (|g| ratio outside [0.5, 2]: not counted)'
        print(f'{r["iteration"]:6d} {r["k"]:6g} {r["plain"][0]:10.4g} {r["bcg"][0]:10.4g} '
              f'{r["ratio"][0]:8.3f} +- {r["std"]["ratio"]:5.2f} {r["median"]:7.3f} '
              f'{r["trimmed"]:7.3f} {r["norm_ratio"]:7.3f} {r["cosine"]:6.3f} {r["rate"]:7.1%} '
              f'{r["envs_triggered"]:9.1%} {r["share"]:6.1%}{mark}')
    print('share: the part of the plain variance that comes from envs with a BCG trigger '
          'in the horizon')
    path = pathlib.Path(args.png)
    plot_training(rows, total, path)
    print(f'figure: {path.resolve()}')
    last = max(r['iteration'] for r in rows)
    r300 = next(r for r in rows if r['k'] == 300.0 and r['iteration'] == last)
    print(f'variance_ratio_k300: {r300["ratio"][0]:.3f}')
    return 0


def copy_env_with_bcg(env, bcg_cfg):
    """A shallow copy of a G1 env with other BCG settings (same simulator and clip)."""
    import copy
    import dataclasses

    out = copy.copy(env)
    out.config = dataclasses.replace(env.config, bcg=bcg_cfg)
    return out


def plot_training(rows, total: int, path):
    """Write variance against training progress, one pair of lines per k, +- one std shaded."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    ks = sorted({r['k'] for r in rows})
    fig, axes = plt.subplots(1, len(ks), figsize=(3.2 * len(ks), 3.2), squeeze=False)
    for ax, k in zip(axes[0], ks):
        sel = sorted((r for r in rows if r['k'] == k), key=lambda r: r['iteration'])
        x = np.array([100.0 * r['iteration'] / total for r in sel])
        for name, label in (('plain', 'plain'), ('bcg', 'BCG')):
            v = np.array([r[name][0] for r in sel])
            sd = np.array([r['std'][name] for r in sel])
            ax.plot(x, v, 'o-', label=label)
            ax.fill_between(x, np.maximum(v - sd, v * 1e-3), v + sd, alpha=0.25)
        ax.set_yscale('log')
        ax.set_title(f'k = {k:g}')
        ax.set_xlabel('training [%]')
    axes[0][0].set_ylabel('summed gradient variance')
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
