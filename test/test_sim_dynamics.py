"""The simulator on tiny inline models: MuJoCo agreement in free flight, contact, batching."""

import dataclasses

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from sim_models import hopper, tumbler

from bcg_ros.core import contact
from bcg_ros.core import sim as simulator


def test_free_flight_matches_mujoco():
    # Away from the ground and with kd = 0 (MuJoCo applies our PD as an explicit ctrl, we
    # treat kd implicitly), the smooth dynamics must be MuJoCo's implicitfast step: same
    # mass matrix, bias forces, implicit joint damping and quaternion integration.
    m, sim = tumbler(simulator.SimConfig())
    rng = np.random.default_rng(0)
    qvel0 = rng.normal(0, 2.0, m.nv)
    target = np.array([0.5, -0.4])
    state = simulator.reset(sim, m.qpos0, qvel0)
    run = jax.jit(lambda s: jax.lax.scan(
        lambda c, _: (simulator.substep(sim, c, jnp.asarray(target, sim.dtype))[0], c.qvel),
        s, None, length=20))
    final, _ = run(state)
    m.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    d = mujoco.MjData(m)
    d.qvel[:] = qvel0
    for _ in range(20):
        d.qfrc_applied[6:] = np.array([20.0, 10.0]) * (target - d.qpos[7:])
        mujoco.mj_step(m, d)
    # float32 over 20 steps of a tumbling body: 1e-4 rad/s, 1e-5 rad.
    np.testing.assert_allclose(np.asarray(final.qvel), d.qvel, atol=1e-4)
    np.testing.assert_allclose(np.asarray(final.qpos), d.qpos, atol=1e-5)


def test_a_step_takes_one_target_per_physics_step():
    # A command that reaches the motors part-way through a control step: the step with
    # [substeps, A] targets is its physics steps under those rows, one after another.
    m, sim = tumbler(simulator.SimConfig(substeps=4))
    state = simulator.reset(sim, m.qpos0, np.random.default_rng(1).normal(0, 1.0, m.nv))
    old, new = jnp.asarray([0.5, -0.4], sim.dtype), jnp.asarray([-0.3, 0.6], sim.dtype)
    rows = jnp.stack([old, new, new, new])
    stepped, _ = jax.jit(lambda s: simulator.step(sim, s, rows))(state)
    by_hand = state
    for target in rows:
        by_hand = simulator.substep(sim, by_hand, target)[0]
    np.testing.assert_allclose(np.asarray(stepped.qpos), np.asarray(by_hand.qpos), atol=1e-6)
    whole, _ = jax.jit(lambda s: simulator.step(sim, s, new))(state)
    rows_new, _ = jax.jit(lambda s: simulator.step(sim, s, jnp.stack([new] * 4)))(state)
    np.testing.assert_allclose(np.asarray(whole.qvel), np.asarray(rows_new.qvel), atol=1e-6)
    assert np.abs(np.asarray(whole.qvel) - np.asarray(stepped.qvel)).max() > 1e-3


@pytest.fixture(scope='module')
def hopper_rollout():
    """A jitted 80-step rollout of the hopper taking the Sim as an argument (one compile)."""
    m, sim = hopper(simulator.SimConfig(), kp=5000.0, kd=50.0)  # stiff leg: the foot carries it
    run = jax.jit(lambda sm, s, a: simulator.rollout(sm, s, a))
    return m, sim, run


def test_drop_settles_and_penetration_shrinks_with_k(hopper_rollout):
    m, sim, run = hopper_rollout
    actions = jnp.zeros((80, 1), sim.dtype)
    depth = {}
    for k in (50.0, 100.0, 300.0):
        sm = dataclasses.replace(
            sim, contact=contact.ContactParams.from_config(contact.ContactConfig(k=k)))
        final, info = run(sm, simulator.reset(sm, m.qpos0), actions)
        assert bool(jnp.all(jnp.isfinite(final.qpos)))
        assert float(jnp.max(jnp.abs(final.qvel))) < 0.05, f'k={k}: not at rest'
        depth[k] = float(jnp.mean(info.depth[-20:, 0]))  # the foot sphere carries the box
    assert depth[50.0] > depth[100.0] > depth[300.0] > 0.0, depth


def test_step_info_shapes_and_batch_equals_single(hopper_rollout):
    m, sim, _ = hopper_rollout
    q = np.tile(m.qpos0, (3, 1))
    q[:, 1] = [0.0, -0.07, -0.09]
    states = simulator.reset(sim, q)
    actions = jnp.array([[0.0], [0.02], [-0.02]], sim.dtype)
    batch, info = jax.jit(simulator.step_batch)(sim, states, actions)
    assert info.depth.shape == (3, 3) and info.contact_point.shape == (3, 3, 3)
    assert info.key_points.shape == (3, 1, 3) and info.body_pos.shape == (3, m.nbody, 3)
    single, _ = jax.jit(simulator.step)(
        sim, simulator.SimState(states.qpos[1], states.qvel[1]), actions[1])
    np.testing.assert_allclose(batch.qpos[1], single.qpos, rtol=1e-6, atol=1e-7)
    assert float(jnp.max(info.normal_force[2])) > float(jnp.max(info.normal_force[0]))


def test_float64_needs_x64():
    if jax.config.jax_enable_x64:
        pytest.skip('x64 is on in this process')
    with pytest.raises(ValueError, match='jax_enable_x64'):
        hopper(simulator.SimConfig(dtype='float64'))


def test_joint_limit_spring_does_not_bounce_a_light_joint():
    """
    The tumbler's elbow (I ~ 0.012 kg m^2) thrown into its +1 rad limit at 10 rad/s.

    Its limit spring (K beta / 4 = 25,000 N m/rad) is far past the explicit stability
    bound at 5 ms (dt sqrt(K beta / 4 I) ~ 7); treated explicitly it throws the elbow back
    to 0.59 rad in 0.2 s. Implicit in position it stops at the limit and stays by its
    PD target (0.95 rad): overshoot under 0.05 rad, final angle within 0.05 rad.
    """
    m, sim = tumbler(simulator.SimConfig())
    q0 = np.array(m.qpos0)
    q0[8] = 0.95

    def run(v0):
        s = simulator.SimState(jnp.asarray(q0, sim.dtype), jnp.zeros(sim.nv).at[7].set(v0))

        def body(s, _):
            s = simulator.substep(sim, s, jnp.array([0.0, 0.95]))[0]
            return s, s.qpos[8]
        return jax.lax.scan(body, s, None, length=40)

    final, elbow = jax.jit(run)(10.0)
    assert float(jnp.max(elbow)) < 1.05
    assert abs(float(final.qpos[8]) - 0.95) < 0.05, float(final.qpos[8])
    grad = jax.grad(lambda v: run(v)[0].qpos[8])(10.0)
    assert np.isfinite(float(grad)) and abs(float(grad)) < 0.05
