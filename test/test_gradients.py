"""
Gradients through the batched simulator: finite across touch-down and lift-off, equal to FD.

The hopper (test/sim_models.py) with a stiff leg (kp 3000, kd 30) hops under a
3 Hz square wave of leg targets: over 32 control steps (128 substeps) the foot
sphere lands, the retracting leg lifts it off, and it lands again. Control
steps are rematerialised (SimConfig.remat, jax.checkpoint per control step).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sim_models import hopper

from bcg_ros.core import contact
from bcg_ros.core import networks
from bcg_ros.core import sim as simulator

STEPS = 32
N_ENVS = 8


def with_k(sim, k):
    """Return the simulator with contact stiffness ``k`` (same compiled functions)."""
    return dataclasses.replace(
        sim, contact=contact.ContactParams.from_config(contact.ContactConfig(k=k), sim.dtype))


def square_wave(dtype):
    """Leg targets [T, 1]: +-4 cm at 3 Hz."""
    t = np.arange(STEPS) * 0.02
    return jnp.asarray(0.04 * np.sign(np.sin(2 * np.pi * 3.0 * t) + 1e-9)[:, None], dtype)


def returns(sim, params, u, state):
    """
    Return per-env returns [N] and StepInfo [N, T].

    The action is the square wave, plus a small policy MLP of the state, plus
    open-loop actions u [N, T, 1]; the return is the summed base height minus
    a penalty on the foot's speed.
    """
    base = square_wave(sim.dtype)

    def body(s, xs):
        wave, u_t = xs
        obs = jnp.concatenate([s.qpos, s.qvel], -1)
        a = wave + 0.01 * networks.mlp_apply(params, obs) + u_t
        s, info = simulator.step_batch(sim, s, a)
        r = s.qpos[:, 1] - 0.01 * s.qvel[:, 2] ** 2
        return s, (r, info)

    _, (r, info) = jax.lax.scan(body, state, (base, jnp.swapaxes(u, 0, 1)))
    return jnp.sum(r, 0), jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), info)


@jax.jit
def value_and_grads(sim, params, u, state):
    """Summed return, d/d params, d/d u, and the foot depth [N, T]."""
    def total(p, a):
        r, info = returns(sim, p, a, state)
        return jnp.sum(r), info.depth[..., 0]

    (r, depth), (g_p, g_u) = jax.value_and_grad(total, argnums=(0, 1), has_aux=True)(params, u)
    return r, g_p, g_u, depth


def setup(dtype, seed=0, n=N_ENVS, exact_gradient=False):
    """Hopper simulator, policy parameters, zero open-loop actions, initial states."""
    m, sim = hopper(simulator.SimConfig(dtype=dtype, exact_gradient=exact_gradient),
                    kp=3000.0, kd=30.0)
    params = networks.mlp_init(jax.random.PRNGKey(seed), [2 * m.nv, 16, 1], out_scale=1.0)
    params = jax.tree.map(lambda x: x.astype(sim.dtype), params)
    q = np.tile(m.qpos0, (n, 1))
    q[:, 1] = np.linspace(-0.06, -0.02, n)
    return m, sim, params, jnp.zeros((n, STEPS, 1), sim.dtype), simulator.reset(sim, q)


def touchdowns_and_liftoffs(depth):
    """Count sign changes of the foot depth [N, T] upward (touch-down) and downward."""
    d = np.asarray(depth) > 0
    return np.sum(~d[:, :-1] & d[:, 1:], 1), np.sum(d[:, :-1] & ~d[:, 1:], 1)


@pytest.mark.parametrize('k', [50.0, 100.0, 300.0])
def test_gradients_finite_across_touchdown_and_liftoff(k):
    m, sim, params, u, state = setup('float32')
    assert sim.config.remat, 'control steps should be rematerialised'
    r, g_p, g_u, depth = value_and_grads(with_k(sim, k), params, u, state)
    down, up = touchdowns_and_liftoffs(depth)
    assert np.all(down >= 1) and np.all(up >= 1), (down, up)
    assert np.isfinite(float(r))
    leaves = [g_u] + jax.tree.leaves(g_p)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in leaves)
    # The gradient is not trivially zero, before and after the first touch-down.
    first = int(np.argmax(np.asarray(depth[0]) > 0))
    assert float(jnp.max(jnp.abs(g_u[:, :first]))) > 0
    assert float(jnp.max(jnp.abs(g_u[:, first:]))) > 0
    assert float(sum(jnp.sum(jnp.abs(x)) for x in jax.tree.leaves(g_p))) > 0


@pytest.fixture
def x64():
    """Float64 for the duration of one test."""
    with jax.enable_x64(True):
        yield


@pytest.mark.parametrize('k', [50.0, 300.0])
def test_gradients_match_central_differences_in_float64(x64, k):
    # The contact model is smooth (sigmoid, softplus; the Hunt-Crossley relu only where
    # the force is already 0), so a central difference in float64 with eps = 1e-6 has an
    # O(eps^2) truncation error: with SimConfig.exact_gradient (the derivative of the
    # discrete step, implicit matrices included) the directional derivatives agree to
    # 1e-5 relative.
    m, sim, params, u, state = setup('float64', n=2, exact_gradient=True)
    sim = with_k(sim, k)
    _, g_p, g_u, depth = value_and_grads(sim, params, u, state)
    down, up = touchdowns_and_liftoffs(depth)
    assert np.all(down >= 1) and np.all(up >= 1), (down, up)
    rng = np.random.default_rng(1)
    eps = 1e-6
    for trial in range(3):
        dp = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), x.dtype), params)
        du = jnp.asarray(rng.normal(size=u.shape), u.dtype)
        analytic = float(jnp.sum(g_u * du) + sum(
            jnp.sum(a * b) for a, b in zip(jax.tree.leaves(g_p), jax.tree.leaves(dp))))
        shift = functools.partial(jax.tree.map, lambda x, d, s: x + s * eps * d)
        plus = value_and_grads(sim, shift(params, dp, jax.tree.map(lambda _: 1.0, dp)),
                               u + eps * du, state)[0]
        minus = value_and_grads(sim, shift(params, dp, jax.tree.map(lambda _: -1.0, dp)),
                                u - eps * du, state)[0]
        fd = float(plus - minus) / (2 * eps)
        assert analytic == pytest.approx(fd, rel=1e-5, abs=1e-8), (trial, analytic, fd)


def sliding_hopper_grad_norms(exact, k=300.0, n=16, seed=0):
    """
    Per-env norms of d(summed x + z of the base) / d(open-loop leg targets) [N].

    The hopper lands from up to 10 cm while sliding at up to +-0.5 m/s, so friction
    takes each foot from slip to stick within the 32 control steps.
    """
    m, sim = hopper(simulator.SimConfig(exact_gradient=exact), kp=3000.0, kd=30.0)
    sim = with_k(sim, k)
    rng = np.random.default_rng(seed)
    q = np.tile(m.qpos0, (n, 1))
    q[:, 1] = rng.uniform(0.0, 0.1, n)
    v = np.zeros((n, m.nv))
    v[:, 0] = rng.uniform(-0.5, 0.5, n)
    grads = _sliding_grad(sim, simulator.reset(sim, q, v), jnp.zeros((n, STEPS, 1)))
    return np.linalg.norm(np.asarray(grads).reshape(n, -1), axis=1)


@jax.jit
def _sliding_grad(sim, state, u):
    def total(u):
        def body(s, u_t):
            s, _ = simulator.step_batch(sim, s, u_t)
            return s, s.qpos[:, 0] + s.qpos[:, 1]

        return jnp.sum(jax.lax.scan(body, state, jnp.swapaxes(u, 0, 1))[1])

    return jax.grad(total)(u)


@pytest.mark.parametrize('seed', [0, 1])
def test_frozen_implicit_matrices_remove_the_stick_slip_tail(seed):
    # Measured (k = 300, 16 envs, seeds 0-3): exact per-env norms max / median 18-48,
    # variance 416-2910; frozen (the default) max / median 1.3-2.1, variance 0.6-2.5. The exact
    # derivative of the implicit step carries the friction smoothing's second derivative
    # (1 / eps^2) at the slip-to-stick transition; the default leaves it out.
    exact = sliding_hopper_grad_norms(True, seed=seed)
    frozen = sliding_hopper_grad_norms(False, seed=seed)
    assert np.all(np.isfinite(exact)) and np.all(np.isfinite(frozen))
    assert np.max(exact) / np.median(exact) > 8.0, exact
    assert np.max(frozen) / np.median(frozen) < 4.0, frozen
    assert np.var(exact) > 20.0 * np.var(frozen), (np.var(exact), np.var(frozen))
    # Where nothing is sharp the two agree: the typical env's gradient is the same size.
    assert np.median(frozen) == pytest.approx(np.median(exact), rel=0.25)


def test_frozen_gradient_is_close_to_exact_where_the_dynamics_are_smooth():
    # Hopping straight up and down (no slip), k = 50: the default gradient has cosine
    # similarity above 0.99 with the exact one (measured 0.9992), and its norm is
    # within 5 % (measured 1.5 % smaller).
    _, sim, params, u, state = setup('float32')
    _, _, g_exact, _ = value_and_grads(
        with_k(dataclasses.replace(sim, config=dataclasses.replace(
            sim.config, exact_gradient=True)), 50.0), params, u, state)
    _, _, g_frozen, _ = value_and_grads(with_k(sim, 50.0), params, u, state)
    a, b = np.asarray(g_exact).ravel(), np.asarray(g_frozen).ravel()
    cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    assert cos > 0.99, cos
    assert np.linalg.norm(b) == pytest.approx(np.linalg.norm(a), rel=0.05)


@pytest.fixture(scope='module')
def g1_grads():
    """One compile: per-env policy gradients of 16 G1 envs over 16 control steps, plain."""
    from bcg_ros.bench import g1_grad
    from bcg_ros.core import bcg

    s = g1_grad.make_setup()
    fn = g1_grad.bcg_grad_fn(s, bcg.BCGConfig(enabled=False), 16)
    state = g1_grad.initial_states(s, 16, 0)
    params = g1_grad.init_policy(s, jax.random.PRNGKey(0), 16)
    return s, fn, params, state


@pytest.mark.slow
@pytest.mark.parametrize('k', [50.0, 300.0])
def test_g1_policy_gradients_finite(g1_grads, k):
    from bcg_ros.bench import g1_grad

    s, fn, params, state = g1_grads
    g, ret, _, fmax = fn(g1_grad.with_k(s.sim, k), params, state, jax.random.PRNGKey(1))
    assert float(fmax) > 50.0, 'no touch-down in the horizon'
    flat = g1_grad.flat(g)
    assert np.all(np.isfinite(flat)) and np.all(np.isfinite(np.asarray(ret)))
    assert np.all(np.linalg.norm(flat, axis=1) > 0)
