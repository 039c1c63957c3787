"""
BCG's foot perturbation on the G1: contact-local, exact, orientation held.

Kinematics only (no simulator step), so the compile stays in seconds.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bcg_ros import motion as motion_mod
from bcg_ros.core import bcg
from bcg_ros.core import sim as simulator
from bcg_ros.robot import g1

CFG = bcg.BCGConfig()


@pytest.fixture(scope='module')
def g1_sim():
    return simulator.build_g1()


def clip_state(sim, frame: int, seed: int) -> simulator.SimState:
    """The dance clip's pose at ``frame`` with random joint and root speeds (std 1)."""
    clip = motion_mod.load_motion('dance')
    qpos = np.array(sim.mjx_model.qpos0, np.float32)
    qpos[:3] = clip.root_pos[frame]
    qpos[3:7] = clip.root_quat[frame]
    qpos[np.asarray(sim.act_qpos)] = clip.joint_pos[frame]
    qvel = np.random.default_rng(seed).normal(0.0, 1.0, sim.nv).astype(np.float32)
    return simulator.reset(sim, qpos, qvel)


def test_leg_chains_are_the_six_leg_joints(g1_sim):
    chains = bcg.leg_chains(g1_sim)
    assert len(chains) == 2
    dof_names = [g1.JOINT_NAMES[g1_sim.act_dof.index(d)] for d in chains[0][0]]
    assert dof_names == ['left_hip_pitch_joint', 'left_hip_roll_joint', 'left_hip_yaw_joint',
                         'left_knee_joint', 'left_ankle_pitch_joint', 'left_ankle_roll_joint']
    assert all(n.startswith('right_') for n in
               (g1.JOINT_NAMES[g1_sim.act_dof.index(d)] for d in chains[1][0]))


@pytest.mark.parametrize('moving', [(True, False), (True, True)])
def test_perturbation_moves_only_the_contacting_legs_by_the_sample(g1_sim, moving):
    sim = g1_sim
    state = clip_state(sim, frame=40, seed=1)
    key_p, key_v = jax.random.split(jax.random.PRNGKey(3))
    dp = bcg.ball(CFG, key_p, (2,), CFG.sigma_p, sim.dtype)
    dv = bcg.ball(CFG, key_v, (2,), CFG.sigma_v, sim.dtype)
    moving = jnp.asarray(moving)
    out = jax.jit(jax.vmap(lambda p, v: bcg.perturb_feet(sim, CFG, state, p, v, moving)))(dp, dv)

    frames = jax.jit(simulator.foot_frames)
    pos0, rot0, jac0 = frames(sim, state.qpos)
    vel0 = np.asarray(jac0 @ state.qvel)
    chains = bcg.leg_chains(sim)
    changed_q = sorted(a for f, (_, adrs) in enumerate(chains) if moving[f] for a in adrs)
    changed_v = sorted(d for f, (dofs, _) in enumerate(chains) if moving[f] for d in dofs)
    still_q = np.setdiff1d(np.arange(sim.mjx_model.nq), changed_q)
    still_v = np.setdiff1d(np.arange(sim.nv), changed_v)
    for b in range(CFG.branches):
        q, v = out.qpos[b], out.qvel[b]
        # Root (free joint) and every joint off the contacting legs: bit for bit.
        np.testing.assert_array_equal(np.asarray(q)[still_q], np.asarray(state.qpos)[still_q])
        np.testing.assert_array_equal(np.asarray(v)[still_v], np.asarray(state.qvel)[still_v])
        pos, rot, jac = frames(sim, q)
        vel = np.asarray(jac @ v)
        for f in range(2):
            want_p = np.asarray(dp[b, f]) if moving[f] else np.zeros(3)
            want_v = np.asarray(dv[b, f]) if moving[f] else np.zeros(3)
            np.testing.assert_allclose(np.asarray(pos[f] - pos0[f]), want_p, atol=1e-4)
            np.testing.assert_allclose(vel[f, :3] - vel0[f, :3], want_v, atol=1e-3)
            angle = np.linalg.norm(np.asarray(bcg._rotation_error(rot0[f], rot[f])))
            assert angle < 1e-3, f'foot {f} turned {angle} rad'
            np.testing.assert_allclose(vel[f, 3:], vel0[f, 3:], atol=1e-3)
    # Something moved: the samples are about a centimetre.
    moved = np.asarray(out.qpos)[:, changed_q] - np.asarray(state.qpos)[changed_q]
    assert float(np.max(np.abs(moved))) > 1e-3


def test_ball_samples_lie_in_the_ball_and_fill_it():
    cfg = bcg.BCGConfig(branches=4000, antithetic=True)
    e = np.asarray(bcg.ball(cfg, jax.random.PRNGKey(0), (), 0.01, jnp.float32))
    r = np.linalg.norm(e, axis=-1)
    assert r.max() <= 0.01 + 1e-7
    np.testing.assert_array_equal(e[:2000], -e[2000:])
    # Uniform in the ball: P(r < s R) = s^3; the mean radius is 3/4 R.
    assert abs(np.mean(r < 0.005) - 0.125) < 0.03
    assert abs(r.mean() / 0.01 - 0.75) < 0.02
    # Directions uniform: no axis preferred.
    np.testing.assert_allclose(np.mean(e[:2000] ** 2, axis=0) / np.mean(r ** 2), 1 / 3,
                               atol=0.04)
