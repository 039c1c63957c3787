"""
Bundled Contact Gradients on the tiny hopper (test/sim_models.py, 10 kg box, leg kp 300).

The hopper collides through its foot sphere only: BCG perturbs contacting feet through
their legs, and a contact on the floating base itself (the box's corner spheres) would
get no offset (sim_models.hopper's ``corners``).

Contact stiffness k = 1000 unless a test says otherwise (see
test_bcg_reduces_gradient_variance for why), tau = 300 N: the hopper resting
on its foot carries about 100 N on the foot sphere, so only impacts trigger.
"""

import dataclasses
import functools

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from sim_models import hopper

from bcg_ros.core import bcg
from bcg_ros.core import contact
from bcg_ros.core import sim as simulator

K = 1000.0
TAU = 300.0
N_ENVS = 64
STEPS = 24
DROP = 0.5
"""Base raised 0.5 m: the foot (8 cm above the ground at qpos0) lands at about 3.4 m/s."""


def with_k(sim, k):
    """Return the simulator with contact stiffness ``k`` (same compiled functions)."""
    return dataclasses.replace(
        sim, contact=contact.ContactParams.from_config(contact.ContactConfig(k=k), sim.dtype))


@pytest.fixture(scope='module')
def hop():
    # No rematerialisation: these rollouts are short, and it halves the compile.
    m, sim = hopper(simulator.SimConfig(remat=False), corners=False)
    return m, with_k(sim, K)


def drop_states(m, sim, n, height, seed):
    """``n`` hopper states at rest, the base raised by ``height`` +- 1 cm (uniform)."""
    rng = np.random.default_rng(seed)
    q = np.tile(m.qpos0, (n, 1))
    q[:, 1] = height + rng.uniform(-0.01, 0.01, n)
    return simulator.reset(sim, q)


def base_return(info):
    """Return -sum_t sum_env (z_base - 0.15)^2 over a rollout's StepInfo [T, N]."""
    z = info.body_pos[:, :, 1, 2]
    return -jnp.sum((z - 0.15) ** 2)


@functools.partial(jax.jit, static_argnums=1)
def return_and_grad(sim, cfg, state, actions, key):
    """Return, d return / d actions [T, N, A], final state, and bundle flags [T, N]."""
    def loss(a):
        final, info = bcg.rollout_batch(sim, cfg, bcg.init_batch(sim, cfg, state), a, key)
        return base_return(info.step), (final.sim, info.bundled, info.step.normal_force)

    (r, (final, bundled, force)), g = jax.value_and_grad(loss, has_aux=True)(actions)
    return r, g, final, bundled, force


def test_zero_offsets_give_the_plain_rollout_and_disabled_is_sim_step(hop):
    m, sim = hop
    state = drop_states(m, sim, 8, DROP, seed=0)
    actions = jnp.full((STEPS, 8, 1), 0.01, sim.dtype)
    key = jax.random.PRNGKey(0)
    off = bcg.BCGConfig(enabled=False)
    r0, g0, f0, bundled0, _ = return_and_grad(sim, off, state, actions, key)
    assert not bool(jnp.any(bundled0))
    zero = bcg.BCGConfig(tau=TAU, sigma_p=0.0, sigma_v=0.0)
    r1, g1, f1, bundled, _ = return_and_grad(sim, zero, state, actions, key)
    assert int(jnp.sum(bundled)) >= 8, 'no bundle ran: the comparison would be vacuous'
    # Ten identical branches: their mean is the plain state up to float32 rounding of the mean.
    np.testing.assert_allclose(f1.qpos, f0.qpos, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(f1.qvel, f0.qvel, rtol=1e-5, atol=1e-5)
    assert float(r1) == pytest.approx(float(r0), rel=1e-5)
    np.testing.assert_allclose(g1, g0, rtol=1e-4, atol=1e-4 * float(jnp.max(jnp.abs(g0))))
    # Disabled: the wrapper is sim.step_batch, bit for bit (so r0, g0 are the plain ones).
    b = bcg.init_batch(sim, off, state)
    s_b, i_b = jax.jit(bcg.step_batch, static_argnums=1)(sim, off, b, actions[0], key)
    s_p, i_p = jax.jit(simulator.step_batch)(sim, state, actions[0])
    np.testing.assert_array_equal(s_b.sim.qpos, s_p.qpos)
    np.testing.assert_array_equal(s_b.sim.qvel, s_p.qvel)
    np.testing.assert_array_equal(i_b.step.normal_force, i_p.normal_force)
    assert not bool(jnp.any(i_b.bundled))


@pytest.fixture(scope='module')
def stepper():
    """Jitted single BCG and plain steps (independent offsets, so the mean is no plain state)."""
    cfg = bcg.BCGConfig(tau=TAU, antithetic=False)
    return (cfg, jax.jit(bcg.step_batch, static_argnums=1), jax.jit(simulator.step_batch),
            jax.jit(jax.vmap(simulator.step, in_axes=(None, 0, None))))


def test_state_after_a_bundle_is_the_branch_mean(hop, stepper):
    m, sim = hop
    cfg, bstep, pstep, branch_step = stepper
    n = 4
    state = drop_states(m, sim, n, 0.3, seed=1)
    action = jnp.zeros((n, 1), sim.dtype)
    s = bcg.init_batch(sim, cfg, state)
    for t in range(40):
        key = jax.random.PRNGKey(100 + t)
        _, plain_info = pstep(sim, s.sim, action)
        nxt, info = bstep(sim, cfg, s, action, key)
        if bool(jnp.any(info.triggered)):
            break
        s = nxt
    else:
        pytest.fail('no env triggered a bundle in 40 steps')
    env = int(jnp.argmax(info.triggered))
    # The bundle by hand: offsets from the env's key, B branches for H steps, their mean.
    env_key = jax.random.split(key, n)[env]
    one = simulator.SimState(s.sim.qpos[env], s.sim.qvel[env])
    branches = bcg.branch_starts(sim, cfg, one, plain_info.normal_force[env], env_key)
    assert float(jnp.max(jnp.abs(branches.qpos - one.qpos))) > 1e-3, 'offsets vanished'
    plain = one
    s_bcg = s
    keys = [key, jax.random.PRNGKey(999)]
    for h in range(cfg.horizon):
        branches, _ = branch_step(sim, branches, action[env])
        plain, _ = pstep(sim, jax.tree.map(lambda x: x[None], plain), action[env][None])
        plain = jax.tree.map(lambda x: x[0], plain)
        s_bcg, info = bstep(sim, cfg, s_bcg, action, keys[h])
        assert bool(info.bundled[env])
        mean_q = jnp.mean(branches.qpos, axis=0)
        mean_v = jnp.mean(branches.qvel, axis=0)
        np.testing.assert_allclose(s_bcg.sim.qpos[env], mean_q, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(s_bcg.sim.qvel[env], mean_v, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(s_bcg.branches.qvel[env], branches.qvel, rtol=1e-5,
                                   atol=1e-5)
    # The mean of independent offsets through a stiff contact is not the plain state.
    assert float(jnp.max(jnp.abs(s_bcg.sim.qvel[env] - plain.qvel))) > 1e-4
    assert int(s_bcg.left[env]) == 0, 'the bundle did not close after H steps'


def landing_batch(m, sim):
    """
    Return four hopper states, of which envs 0 and 2 land hard this step.

    Envs 0 and 2 fall onto the ground at 2.6 m/s (their foot 1 mm above it); 1 and 3
    hang 20 cm up and fall freely.
    """
    q = np.tile(m.qpos0, (4, 1))
    q[:, 1] = [-0.079, 0.2, -0.079, 0.2]
    v = np.zeros((4, 3))
    v[:, 1] = [-2.6, 0.0, -2.6, 0.0]
    return simulator.reset(sim, q, v)


def test_only_triggering_envs_are_bundled(hop, stepper):
    m, sim = hop
    cfg, bstep, pstep, _ = stepper
    state = landing_batch(m, sim)
    action = jnp.zeros((4, 1), sim.dtype)
    plain, pinfo = pstep(sim, state, action)
    new, info = bstep(sim, cfg, bcg.init_batch(sim, cfg, state), action, jax.random.PRNGKey(3))
    expect = np.asarray(jnp.max(pinfo.normal_force, -1) > cfg.tau)
    assert expect.tolist() == [True, False, True, False], pinfo.normal_force
    assert np.asarray(info.triggered).tolist() == expect.tolist()
    assert np.asarray(info.bundled).tolist() == expect.tolist()
    assert np.asarray(new.left).tolist() == [cfg.horizon - 1, 0, cfg.horizon - 1, 0]
    # Untouched envs continue exactly as sim.step; bundled ones from their branch mean.
    for i in (1, 3):
        np.testing.assert_array_equal(new.sim.qvel[i], plain.qvel[i])
        np.testing.assert_array_equal(new.sim.qpos[i], plain.qpos[i])
    for i in (0, 2):
        np.testing.assert_allclose(new.sim.qvel[i], jnp.mean(new.branches.qvel[i], 0),
                                   rtol=1e-5, atol=1e-5)
        assert float(jnp.max(jnp.abs(new.sim.qvel[i] - plain.qvel[i]))) > 1e-4


def test_max_bundled_gathers_the_bundling_envs(hop, stepper):
    m, sim = hop
    cfg, bstep, _, _ = stepper
    state = bcg.init_batch(sim, cfg, landing_batch(m, sim))   # envs 0 and 2 trigger
    action = jnp.zeros((4, 1), sim.dtype)
    key = jax.random.PRNGKey(3)
    full, finfo = bstep(sim, cfg, state, action, key)
    # Two slots for two triggers: the gathered step is the full one.
    two = dataclasses.replace(cfg, max_bundled=2)
    new, info = bstep(sim, two, state, action, key)
    for a, b in zip(jax.tree.leaves((new.sim, new.left, info)),
                    jax.tree.leaves((full.sim, full.left, finfo))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    assert not bool(jnp.any(info.dropped))
    # One slot: env 0 (first in env order) bundles as before, env 2 runs plain and counts
    # as dropped; a bundle once open keeps its slot next step, ahead of new triggers.
    one = dataclasses.replace(cfg, max_bundled=1)
    new, info = bstep(sim, one, state, action, key)
    assert np.asarray(info.bundled).tolist() == [True, False, False, False]
    assert np.asarray(info.dropped).tolist() == [False, False, True, False]
    np.testing.assert_allclose(new.sim.qvel[0], full.sim.qvel[0], rtol=1e-6, atol=1e-7)
    plain, _ = simulator.step_batch(sim, state.sim, action)
    np.testing.assert_array_equal(new.sim.qvel[2], plain.qvel[2])
    _, info2 = bstep(sim, one, new, action, jax.random.PRNGKey(4))
    assert bool(info2.bundled[0]) and not bool(info2.triggered[0])
    assert not bool(info2.bundled[2])
    with pytest.raises(ValueError, match='max_bundled'):
        bcg.BCGConfig(max_bundled=-1)


def gradient_variance(g):
    """Summed sample variance over all components of per-env gradients [T, N, A] (axis 1)."""
    return float(jnp.sum(jnp.var(g, axis=1, ddof=1)))


def test_bcg_reduces_gradient_variance(hop):
    """
    Variance of d return / d actions across envs dropped from 0.5 m +- 1 cm: plain vs BCG.

    Why these values: the plain gradient blows up when a sphere's activation
    length 1/k is short against what the foot travels in one physics step at
    impact (v dt); which substep lands inside the activation zone then changes
    from env to env, and so does the gradient. Dropped from 0.5 m the foot hits
    at about 3.4 m/s, 17 mm per 5 ms step: k = 1000 (1/k = 1 mm) makes the
    contact stiff for the hopper, and BCG's 1 cm position offsets of the foot
    span the zone many times over. Measured with the foot-only hopper (64 envs,
    24 steps, tau 300 N; seed 0 and 1 at k = 1000, seed 0 at k = 300): ratios 8.9,
    5.2 and 6.0. With the box's corner spheres colliding too (they land at 8.7 kN
    when the leg bottoms out, on the floating base, which BCG leaves put) the same
    runs give 1.5, 1.5 and 0.59: bundling the feet does nothing for a stiff contact
    elsewhere. tau = 300 N bundles only the impact (12.5 % of env-steps) and not
    the hopper resting on its foot.
    """
    m, sim = hop
    actions = jnp.zeros((STEPS, N_ENVS, 1), sim.dtype)
    plain_cfg = bcg.BCGConfig(enabled=False)
    bcg_cfg = bcg.BCGConfig(tau=TAU)
    ratios = {}
    for k, seed in ((K, 0), (K, 1), (300.0, 0)):
        sm = with_k(sim, k)
        state = drop_states(m, sm, N_ENVS, DROP, seed)
        key = jax.random.PRNGKey(seed)
        _, g_plain, _, _, force = return_and_grad(sm, plain_cfg, state, actions, key)
        _, g_bcg, _, bundled, _ = return_and_grad(sm, bcg_cfg, state, actions, key)
        assert bool(jnp.all(jnp.isfinite(g_plain))) and bool(jnp.all(jnp.isfinite(g_bcg)))
        assert float(jnp.max(force)) > TAU, 'no stiff contact in the rollout'
        rate = float(jnp.mean(bundled))
        assert 0.0 < rate < 0.3, f'bundle rate {rate}'
        ratios[(k, seed)] = gradient_variance(g_plain) / gradient_variance(g_bcg)
    assert ratios[(K, 0)] >= 3.0, ratios
    assert ratios[(K, 1)] >= 3.0, ratios
    assert ratios[(300.0, 0)] >= 3.0, ratios


def leaf_operations(jaxpr) -> int:
    """Equations of a jaxpr, counting those inside scans, conds and calls instead of them."""
    total = 0
    for eqn in jaxpr.eqns:
        kinds = (jax.extend.core.Jaxpr, jax.extend.core.ClosedJaxpr)
        inner = [v for v in eqn.params.values() if isinstance(v, kinds)]
        inner += [b for v in eqn.params.values() if isinstance(v, tuple)
                  for b in v if isinstance(b, kinds)]
        if inner:
            total += sum(leaf_operations(getattr(j, 'jaxpr', j)) for j in inner)
        else:
            total += 1
    return total


def test_the_simulator_is_traced_once_for_envs_and_branches(hop):
    """
    The plain step and the branches go through one traced simulator step.

    XLA compiles what JAX traces: a second copy of the simulator step for the branches
    (forward and backward) would double the training step's compile. So the gradient of
    a BCG step, gather included, traces less than 1.5 times the plain one's operations.
    """
    m, sim = hop
    state = drop_states(m, sim, 4, DROP, seed=0)
    action = jnp.zeros((4, 1), sim.dtype)

    def count(cfg):
        def loss(a):
            new, _ = bcg.step_batch(sim, cfg, bcg.init_batch(sim, cfg, state), a,
                                    jax.random.PRNGKey(0))
            return jnp.sum(new.sim.qvel ** 2)
        return leaf_operations(jax.make_jaxpr(jax.grad(loss))(action).jaxpr)

    plain = count(bcg.BCGConfig(enabled=False))
    for cfg in (bcg.BCGConfig(tau=TAU), bcg.BCGConfig(tau=TAU, max_bundled=2)):
        assert count(cfg) < 1.5 * plain, (count(cfg), plain)
