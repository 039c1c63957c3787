"""
Where the G1's policy-gradient variance comes from: the return's sensitivity to each state.

From a checkpoint of a SHAC run on the G1 (its policy, normalisers, critic, ADD
discriminator, environment and k), the envs are reset as training resets them
and run ``--warmup`` horizons under the policy. Then one rollout of SHAC's actor
loss adds a zero offset to the simulator state (qpos, qvel) before every control
step; one backward pass gives, per env and step, ``|dL/ds_t|``, the loss's
sensitivity to the state at step t, beside every env's own policy gradient.
Each env-step is labelled with what happened in it and the next step (BCG's
window): a stiff contact (some sphere's normal force above BCG's tau, the
trigger), a touch-down, a foot that slips while in contact, a joint at its
limit, a bundle, an episode end. The report says which events the largest
sensitivities come with, whether the trigger catches them, and, over a sweep of
horizons from the same states, how the sensitivity of the first state and the
gradient variance grow with the horizon (closed-loop amplification).

Last line: ``sensitivity_top1_caught: X``, the share of the top 1 % env-steps
(by ``|dL/ds_t|``, at the run's horizon) that BCG's trigger catches.
"""

import dataclasses
import pathlib
import time
from typing import Dict, Sequence

import numpy as np

from bcg_ros.jax_cache import enable_compilation_cache

WINDOW = 2
"""Control steps an event counts for: the step it happens in and the one before it."""
TOP = 0.01
"""The heavy tail: this share of env-steps with the largest sensitivity."""


def add_arguments(parser):
    """Options of ``bcg-bench sensitivity``."""
    parser.add_argument('--checkpoint', default='training/jump-cpu-long/checkpoint.npz',
                        help='checkpoint of a SHAC run on the G1 (default: the jump run)')
    parser.add_argument('--envs', type=int, default=32, help='envs (--quick: 8)')
    parser.add_argument('--horizons', default='8,16,24,32',
                        help='horizons of the sweep (--quick: 8,16); the run\'s own is added')
    parser.add_argument('--estimator', choices=('plain', 'bcg'), default='plain',
                        help='the gradient studied: plain, or with BCG (the run\'s settings)')
    parser.add_argument('--warmup', type=int, default=1,
                        help='horizons run under the policy before measuring')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--slip', type=float, default=0.1,
                        help='a contacting sphere slips above this horizontal speed [m/s]')
    parser.add_argument('--limit-margin', type=float, default=0.02,
                        help='a joint is at its limit within this of it [rad]')


def shift_state(env_state, x):
    """Add ``x = (dqpos [B, nq], dqvel [B, nv])`` to a G1 state, its open branches alike."""
    from bcg_ros.core import bcg as bcg_mod
    from bcg_ros.core import sim as simulator

    b = env_state.bcg
    dq, dv = x
    sim = simulator.SimState(b.sim.qpos + dq, b.sim.qvel + dv)
    branches = simulator.SimState(b.branches.qpos + dq[:, None], b.branches.qvel + dv[:, None])
    return dataclasses.replace(env_state, bcg=bcg_mod.BCGState(sim, branches, b.left))


PROBE = ('contact_force', 'contact_depth', 'contact_point', 'qpos')
"""Per-step info the study reads (the G1 env's step info)."""


def sensitivity_fn(env, cfg):
    """
    Jitted ``(state, key) -> (|dL/ds_t| [H, B], per-env grads, data, env state after)``.

    ``L`` is every env's own SHAC actor loss (the batch loss times the env count),
    ``s_t`` the simulator state (qpos, qvel) before control step t.
    """
    import jax
    import jax.numpy as jnp

    from bcg_ros.core import shac

    n, h = env.num_envs, cfg.shac.horizon
    nq, nv = env.sim.mjx_model.nq, env.sim.nv

    def fn(st, key):
        def loss(actor, offsets):
            value, aux = shac._rollout(actor, st, key, cfg.shac, cfg.add, env,
                                       per_env=True, shift=shift_state, offsets=offsets,
                                       probe=PROBE)
            return n * value, aux

        dtype = st.env_state.bcg.sim.qpos.dtype
        zeros = (jnp.zeros((h, n, nq), dtype), jnp.zeros((h, n, nv), dtype))
        actor = jax.tree.map(lambda x: jnp.broadcast_to(x, (n,) + x.shape), st.actor)
        (g_actor, (g_q, g_v)), (env_state, data) = jax.grad(
            loss, argnums=(0, 1), has_aux=True)(actor, zeros)
        sens = jnp.sqrt(jnp.sum(g_q ** 2, -1) + jnp.sum(g_v ** 2, -1))
        return sens, g_actor, data, env_state

    return jax.jit(fn)


def label_events(data: Dict[str, np.ndarray], tau: float, dt: float,
                 sphere_foot: Sequence[int], limit_qpos: Sequence[int], lower: np.ndarray,
                 upper: np.ndarray, slip: float = 0.1,
                 margin: float = 0.02) -> Dict[str, np.ndarray]:
    """
    Boolean ``[H, B]`` per event, for what happens in control step t.

    ``data``: the rollout's per-step arrays, ``probe`` (sphere normal force, depth
    and contact point after each step, qpos after each step), ``bundle`` and
    ``done``; ``sphere_foot``: the foot of each sphere. A foot is down when one of
    its spheres penetrates. A touch-down is a foot down after step t and not after
    step t - 1; a slip a foot down after both whose spheres' mean contact point moved
    faster than ``slip`` [m/s] along the ground (a foot rolling from heel to toe
    moves single spheres, not their mean).
    """
    p = data['probe']
    force, depth = np.asarray(p['contact_force']), np.asarray(p['contact_depth'])
    point, qpos = np.asarray(p['contact_point']), np.asarray(p['qpos'])
    feet = np.asarray(sphere_foot)
    done = np.asarray(data['done']) > 0
    # An episode that ended at t - 1 restarted: its feet's history is not this step's.
    fresh = np.concatenate([np.zeros_like(done[:1]), done[:-1]], 0)
    touchdown = np.zeros_like(done)
    slipping = np.zeros_like(done)
    for f in np.unique(feet):
        down = (depth[..., feet == f] > 0).any(-1)
        before = np.concatenate([down[:1], down[:-1]], 0) & ~fresh
        centre = point[..., feet == f, :2].mean(-2)
        prev = np.concatenate([centre[:1], centre[:-1]], 0)
        speed = np.linalg.norm(centre - prev, axis=-1) / dt
        touchdown |= down & ~before & ~fresh
        slipping |= down & before & (speed > slip)
    q = qpos[..., np.asarray(limit_qpos, int)]
    return {
        'stiff contact (trigger)': force.max(-1) > tau,
        'touch-down': touchdown,
        'slip': slipping,
        'joint at limit': ((q < lower + margin) | (q > upper - margin)).any(-1),
        'bundle': np.asarray(data['bundle']) > 0,
        'episode end': done,
    }


def windowed(event: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """``[H, B]``: the event happens in step t or in the ``window - 1`` steps after it."""
    out = event.copy()
    for k in range(1, window):
        out[:-k] |= event[k:]
    return out


def tail_table(sens: np.ndarray, events: Dict[str, np.ndarray], top: float = TOP):
    """
    Per event: its share of env-steps, of the summed squared sensitivity, and of the top.

    Returns rows ``(name, rate, median with, median without, share of sum |dL/ds|^2,
    share of the top env-steps)`` and the top's threshold. Non-finite sensitivities
    count as the largest.
    """
    s = np.where(np.isfinite(sens), sens, np.inf).ravel()
    finite = np.where(np.isfinite(s), s, np.nanmax(np.where(np.isfinite(s), s, np.nan)))
    sq = finite ** 2
    k = max(1, int(round(top * s.size)))
    order = np.argsort(-s, kind='stable')
    in_top = np.zeros(s.size, bool)
    in_top[order[:k]] = True
    rows = []
    for name, ev in events.items():
        e = windowed(ev).ravel()
        med = (lambda m: float(np.median(finite[m])) if m.any() else float('nan'))
        rows.append((name, float(e.mean()), med(e), med(~e),
                     float(sq[e].sum() / sq.sum()) if sq.sum() > 0 else 0.0,
                     float(e[in_top].mean())))
    return rows, float(finite[order[k - 1]])


def horizon_row(horizon: int, sens: np.ndarray, grads: np.ndarray) -> Dict[str, float]:
    """The first state's sensitivity across envs and the gradients' summed variance."""
    s0 = sens[0]
    var = float(np.sum(np.var(grads, axis=0, ddof=1)))
    norms = np.linalg.norm(grads, axis=1)
    return dict(horizon=horizon, s0_median=float(np.median(s0)),
                s0_p90=float(np.percentile(s0, 90)), s0_max=float(np.max(s0)),
                grad_var=var, grad_norm_median=float(np.median(norms)),
                grad_norm_max=float(np.max(norms)))


def run(args) -> int:
    """The sensitivity study of one checkpoint; last line the trigger's share of the tail."""
    import jax

    from bcg_ros.bench import g1_grad
    from bcg_ros.bench.variance import _training_setup, copy_env_with_bcg

    enable_compilation_cache()
    if args.quick:
        args.envs, args.horizons = min(args.envs, 8), '8,16'
    path = pathlib.Path(args.checkpoint)
    t0 = time.perf_counter()
    cfg, big, env, [(st, meta)] = _training_setup([path], args.envs)
    bcg_cfg = big.g1.bcg
    if args.estimator == 'plain':
        env = copy_env_with_bcg(env, dataclasses.replace(bcg_cfg, enabled=False))
    run_h = int(big.shac.horizon)
    horizons = sorted({int(h) for h in args.horizons.split(',')} | {run_h})
    sim = env.sim
    lower = np.asarray(sim.limit_lower)
    upper = np.asarray(sim.limit_upper)
    dt = float(sim.config.dt * sim.config.substeps)
    it = int(meta['iteration'])
    print(f'{path}: motion {big.g1.motion!r}, iteration {it}, {args.envs} envs, k '
          f'{float(big.g1.sim.contact.k):g}, {args.estimator} estimator, tau '
          f'{bcg_cfg.tau:g} N, run horizon {run_h}; setup {time.perf_counter() - t0:.1f} s',
          flush=True)

    key = jax.random.PRNGKey(args.seed + it)
    k_reset, k_warm, k_grad = jax.random.split(key, 3)
    st = dataclasses.replace(st, env_state=jax.device_get(env.reset(k_reset)))
    fns = {}

    def measure(h, state, k):
        if h not in fns:
            fns[h] = sensitivity_fn(env, dataclasses.replace(
                big, shac=dataclasses.replace(big.shac, horizon=h)))
        t1 = time.perf_counter()
        out = jax.device_get(jax.block_until_ready(fns[h](state, k)))
        print(f'  horizon {h}: {time.perf_counter() - t1:.1f} s (compile included the '
              f'first time)', flush=True)
        return out

    for w in range(args.warmup):
        after = measure(run_h, st, jax.random.fold_in(k_warm, w))[3]
        st = dataclasses.replace(st, env_state=after)
    sens, grads, data, _ = measure(run_h, st, k_grad)
    events = label_events(data, bcg_cfg.tau, dt, sim.sphere_foot, sim.limit_qpos, lower,
                          upper, args.slip, args.limit_margin)
    rows, threshold = tail_table(np.asarray(sens), events)
    flat_s = np.asarray(sens).ravel()
    print(f'\n|dL/ds_t| over {flat_s.size} env-steps: median {np.median(flat_s):.3g}, '
          f'p99 {np.percentile(flat_s, 99):.3g}, max {np.max(flat_s):.3g} '
          f'(max / median {np.max(flat_s) / max(np.median(flat_s), 1e-30):.3g}); '
          f'top {TOP:.0%} above {threshold:.3g}')
    print(f'events in step t or t+1; E_track {float(np.mean(data["e_track"])):.1f} cm')
    print(f'{"event":<24} {"env-steps":>9} {"median with":>11} {"without":>9} '
          f'{"share of sum s^2":>16} {"share of top":>12}')
    for name, rate, m_with, m_without, share, top_share in rows:
        print(f'{name:<24} {rate:9.1%} {m_with:11.3g} {m_without:9.3g} {share:16.1%} '
              f'{top_share:12.1%}')
    g = g1_grad.flat(grads)
    d = np.sum((g - g.mean(axis=0)) ** 2, axis=1)
    worst = np.argsort(-d)[:max(1, len(d) // 10)]
    print(f'\nper-env gradients: the top 10 % of envs hold {d[worst].sum() / d.sum():.1%} of '
          f'the summed variance; their largest |dL/ds_t| is at steps '
          f'{sorted(int(np.argmax(np.asarray(sens)[:, b])) for b in worst)}')

    print(f'\nhorizon sweep from the same states ({args.envs} envs):')
    print(f'{"H":>4} {"|dL/ds_0| median":>17} {"p90":>9} {"max":>9} {"grad var":>10} '
          f'{"|g| median":>10} {"|g| max":>9}')
    for h in horizons:
        s_h, g_h = (sens, grads) if h == run_h else measure(h, st, k_grad)[:2]
        r = horizon_row(h, np.asarray(s_h), g1_grad.flat(g_h))
        print(f'{h:4d} {r["s0_median"]:17.3g} {r["s0_p90"]:9.3g} {r["s0_max"]:9.3g} '
              f'{r["grad_var"]:10.4g} {r["grad_norm_median"]:10.3g} {r["grad_norm_max"]:9.3g}')
    caught = next(r[5] for r in rows if r[0] == 'stiff contact (trigger)')
    print(f'sensitivity_top1_caught: {caught:.3f}')
    return 0
