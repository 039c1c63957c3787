"""
Does the simulator's gradient improve the return? Gradient ascent on the G1 rollout.

The policy of :mod:`bcg_ros.bench.g1_grad` (random init, standing reward, envs
dropped from 1-5 cm) is trained by Adam on the mean over envs of the per-env
policy gradients, fresh initial states every iteration, twice: with the default
backward pass (the implicit step's matrices frozen) and with
``SimConfig(exact_gradient=True)`` (the exact derivative of the discrete step).
Printed: the mean return and the gradient norm per iteration for each; last
line ``ascent_return_gain: X``, the frozen run's mean return over its last
quarter minus its first iteration's (> 0: the gradient improves the return).
"""

import numpy as np

from bcg_ros.jax_cache import enable_compilation_cache


def add_arguments(parser):
    """Benchmark options."""
    parser.add_argument('--envs', type=int, default=16)
    parser.add_argument('--horizon', type=int, default=16, help='control steps')
    parser.add_argument('--iterations', type=int, default=40, help='(--quick: 12)')
    parser.add_argument('--k', type=float, default=300.0, help='contact stiffness')
    parser.add_argument('--lr', type=float, default=1e-3, help='Adam learning rate')
    parser.add_argument('--no-exact', action='store_true', help='skip the exact-gradient run')


def ascend(setup, sim, horizon, envs, iterations, lr, log):
    """Return the mean return per iteration of Adam ascent from the same initial policy."""
    import jax
    import jax.numpy as jnp
    import optax

    from bcg_ros.bench import g1_grad
    from bcg_ros.core import bcg

    fn = g1_grad.bcg_grad_fn(setup, bcg.BCGConfig(enabled=False), horizon)
    params = jax.tree.map(lambda x: x[0], g1_grad.init_policy(setup, jax.random.PRNGKey(0), 1))
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(lr))
    opt_state = opt.init(params)
    returns = []
    for it in range(iterations):
        state = g1_grad.initial_states(setup, envs, it)
        per_env = jax.tree.map(lambda x: jnp.broadcast_to(x, (envs,) + x.shape), params)
        g, ret, _, _ = fn(sim, per_env, state, jax.random.PRNGKey(it))
        g = jax.tree.map(lambda x: -jnp.mean(x, 0), g)
        norm = float(optax.global_norm(g))
        upd, opt_state = opt.update(g, opt_state, params)
        params = optax.apply_updates(params, upd)
        returns.append(float(jnp.mean(ret)))
        log(f'  iteration {it:3d}: mean return {returns[-1]:8.3f}, gradient norm {norm:9.3g}')
    return np.asarray(returns)


def run(args) -> int:
    """Measure and print; the last line is ``ascent_return_gain: X``."""
    enable_compilation_cache()
    from bcg_ros.bench import g1_grad
    from bcg_ros.core import sim as simulator

    iterations = 12 if args.quick else args.iterations
    results = {}
    for name, exact in (('frozen', False), ('exact', True)):
        if exact and args.no_exact:
            continue
        setup = g1_grad.make_setup(simulator.SimConfig(exact_gradient=exact))
        sim = g1_grad.with_k(setup.sim, args.k)
        print(f'{name} gradient (SimConfig.exact_gradient={exact}), {args.envs} envs x '
              f'{args.horizon} steps, k = {args.k:g}, Adam lr {args.lr:g}', flush=True)
        results[name] = ascend(setup, sim, args.horizon, args.envs, iterations, args.lr,
                               lambda s: print(s, flush=True))
    quarter = max(1, iterations // 4)
    for name, r in results.items():
        print(f'{name}: first {r[0]:.3f}, last quarter {np.mean(r[-quarter:]):.3f}, '
              f'best {np.max(r):.3f}')
    gain = float(np.mean(results['frozen'][-quarter:]) - results['frozen'][0])
    print(f'ascent_return_gain: {gain:.3f}')
    return 0
