"""The NumPy leg chains against MuJoCo on the project's G1: kinematics, Jacobians, RNE."""

import mujoco
import numpy as np
import pytest

from bcg_ros.robot import g1, legs
from bcg_ros.robot import model as g1_model
from bcg_ros.rotation import quat_to_matrix


@pytest.fixture(scope='module')
def robot():
    return g1_model.load()


def _random_state(rng):
    quat = rng.normal(size=4)
    return dict(quat=quat / np.linalg.norm(quat),
                q=np.array(g1.DEFAULT_POSE) + rng.normal(scale=0.3, size=g1.NUM_JOINTS),
                dq=rng.normal(scale=2.0, size=g1.NUM_JOINTS), gyro=rng.normal(size=3),
                acc_lin=3.0 * rng.normal(size=3), acc_ang=5.0 * rng.normal(size=3),
                qdd=20.0 * rng.normal(size=g1.NUM_JOINTS))


def _mujoco(robot, s, with_acc: bool):
    """MuJoCo's foot poses, leg Jacobians and RNE with the pelvis at the origin."""
    m = robot.model
    d = mujoco.MjData(m)
    d.qpos[:] = 0.0
    d.qpos[3:7] = s['quat']
    d.qpos[robot.qpos_adr] = s['q']
    d.qvel[3:6] = s['gyro']
    d.qvel[robot.qvel_adr] = s['dq']
    mujoco.mj_kinematics(m, d)
    mujoco.mj_comPos(m, d)
    mujoco.mj_comVel(m, d)
    if with_acc:
        d.qacc[0:3] = s['acc_lin']
        d.qacc[3:6] = s['acc_ang']
        d.qacc[robot.qvel_adr] = s['qdd']
    bias = np.zeros(m.nv)
    mujoco.mj_rne(m, d, int(with_acc), bias)
    jacp, jacr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
    out = []
    for foot in robot.foot_bodies:
        mujoco.mj_jacBody(m, d, jacp, jacr, int(foot))
        out.append((d.xpos[foot].copy(), d.xmat[foot].reshape(3, 3).copy(),
                    np.vstack([jacp, jacr]).copy(), bias))
    return d.xmat[robot.root_body].reshape(3, 3).copy(), out


def test_chains_are_the_legs_in_motor_order():
    left, right = legs.leg_chains()
    assert left.bodies[-1] == g1.FOOT_BODIES[0] and right.bodies[-1] == g1.FOOT_BODIES[1]
    assert left.bodies[0] == 'left_hip_pitch_link' and len(left.bodies) == 6
    assert list(left.slots) == list(range(0, 6)) and list(right.slots) == list(range(6, 12))


@pytest.mark.parametrize('with_acc', [False, True])
def test_chains_match_mujoco(robot, with_acc):
    rng = np.random.default_rng(3)
    for _ in range(4):
        s = _random_state(rng)
        rotation, feet = _mujoco(robot, s, with_acc)
        np.testing.assert_allclose(rotation, quat_to_matrix(s['quat']), atol=1e-12)
        for chain, (pos, rot, jac, bias) in zip(legs.leg_chains(), feet):
            pose = legs.place(chain, rotation, s['q'][chain.slots])
            dofs = robot.qvel_adr[chain.slots]
            np.testing.assert_allclose(pose.foot_pos, pos, atol=1e-12)
            np.testing.assert_allclose(pose.foot_rot, rot, atol=1e-12)
            np.testing.assert_allclose(pose.jacobian(), jac[:, dofs], atol=1e-12)
            zero = np.zeros(3)
            qdd = s['qdd'][chain.slots] if with_acc else np.zeros(6)
            tau = legs.inverse_dynamics(
                chain, pose, rotation @ s['gyro'],
                rotation @ s['acc_ang'] if with_acc else zero,
                s['acc_lin'] if with_acc else zero, s['dq'][chain.slots], qdd)
            # MuJoCo's RNE leaves the rotors' armature out of M qacc; the chains add it.
            np.testing.assert_allclose(tau - chain.armature * qdd, bias[dofs], atol=1e-9)
            assert np.abs(bias[dofs]).max() > 1.0, 'a trivial comparison'
