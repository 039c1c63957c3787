"""The base state estimator: pure terms by hand, then against MuJoCo's ground truth."""

import subprocess
import sys

import mujoco
import numpy as np
import pytest

from bcg_ros.runtime import estimator as est
from bcg_ros.bench import estimator as bench
from bcg_ros.robot import g1
from bcg_ros.robot import model as g1_model


@pytest.fixture(scope='module')
def robot():
    return g1_model.load()


@pytest.fixture(scope='module')
def estimator(robot):
    return est.StateEstimator(est.EstimatorConfig())


def _sample_from(robot, d, tau=None):
    return est.Sample(quat=d.sensor('imu_quat').data.copy(), gyro=d.sensor('imu_gyro').data.copy(),
                      acc=d.sensor('imu_acc').data.copy(), q=d.qpos[robot.qpos_adr].copy(),
                      dq=d.qvel[robot.qvel_adr].copy(),
                      tau=(d.actuator_force[robot.actuator_ids].copy() if tau is None else tau))


def test_core_does_not_import_rclpy():
    code = 'import sys, bcg_ros.runtime.estimator; assert "rclpy" not in sys.modules'
    subprocess.run([sys.executable, '-c', code], check=True)


def test_hysteresis_holds_between_thresholds():
    # on above 60, off below 30: 0 -> 50 (stays off) -> 70 (on) -> 40 (stays on) -> 20 (off).
    flag = np.array([False])
    seen = []
    for force in (0.0, 50.0, 70.0, 40.0, 31.0, 20.0, 50.0):
        flag = est.hysteresis(flag, np.array([force]), on=60.0, off=30.0)
        seen.append(bool(flag[0]))
    assert seen == [False, False, True, True, True, False, False]


def test_share_vertical_force_reproduces_the_wrench():
    offsets = np.array([[-0.05, 0.025, -0.03], [-0.05, -0.025, -0.03],
                        [0.12, 0.03, -0.03], [0.12, -0.03, -0.03]])
    # 100 N a little ahead of and left of the centre: every share is positive.
    fz, cop = 100.0, np.array([0.03, 0.005])
    wrench = np.array([0.0, 0.0, fz, cop[1] * fz, -cop[0] * fz, 0.0])
    share = est.share_vertical_force(offsets, wrench)
    assert np.all(share > 0)
    np.testing.assert_allclose(share.sum(), fz, rtol=1e-6)
    np.testing.assert_allclose(share @ offsets[:, :2], cop * fz, atol=1e-6)


def test_a_moving_stance_sphere_leaves_contact(estimator):
    # Pelvis predicted at 1 m/s forward. The left foot's spheres stand still (their
    # velocity relative to the pelvis is -1 m/s); on the right foot, two spheres slide
    # sideways at 0.3 m/s (a heel slipping) and two stand. Then the whole right foot swings
    # at 2 m/s.
    x = np.zeros(est.STATE_SIZE)
    x[3] = 1.0
    cov = np.eye(est.STATE_SIZE) * 1e-4
    rel = np.tile([-1.0, 0.0, 0.0], (est.NUM_SPHERES, 1))
    right = np.flatnonzero(est.SPHERE_FOOT == 1)
    rel[right[:2], 1] = 0.3
    kin = est._Kinematics(np.zeros((est.NUM_SPHERES, 3)), rel, np.zeros((2, 3)),
                          np.tile(np.eye(3), (2, 1, 1)), np.zeros((2, 6)))
    every = np.ones(est.NUM_SPHERES, bool)
    feet, spheres = estimator._gate(x, cov, kin, np.ones(2, bool), every, every)
    assert feet.all()
    assert spheres.tolist() == [True] * 4 + [False, False, True, True]
    rel[right] = [1.0, 0.0, 0.0]
    feet, spheres = estimator._gate(x, cov, kin, np.ones(2, bool), every, every)
    assert feet.tolist() == [True, False] and not spheres[right].any()
    # A sphere that only just touched down (not yet in stance) is not judged.
    stance = every.copy()
    stance[right] = False
    feet, spheres = estimator._gate(x, cov, kin, np.ones(2, bool), stance, every)
    assert feet.all() and spheres.all()


def test_config_errors_name_the_field():
    with pytest.raises(est.EstimatorConfigError, match='contact_off_force'):
        est.EstimatorConfig(contact_on_force=20.0, contact_off_force=30.0)
    with pytest.raises(est.EstimatorConfigError, match='kinematics_noise'):
        est.EstimatorConfig(kinematics_noise=0.0)


def test_contact_force_recovered_from_torques(robot, estimator):
    """A known ground force on the left foot, balanced by the motors, comes back."""
    m = robot.model
    d = mujoco.MjData(m)
    d.qpos[:] = robot.standing_qpos()
    d.qpos[0:3] = 0.0
    tilt = np.empty(4)
    mujoco.mju_axisAngle2Quat(tilt, np.array([0.3, 1.0, 0.0]) / np.hypot(0.3, 1.0), 0.1)
    d.qpos[3:7] = tilt
    mujoco.mj_forward(m, d)
    foot = robot.foot_bodies[0]
    point = d.xpos[foot] + d.xmat[foot].reshape(3, 3) @ np.array(g1.FOOT_SPHERES[0][1])
    force = np.array([12.0, -7.0, 180.0])
    qfrc_ext = np.zeros(m.nv)
    mujoco.mj_applyFT(m, d, force, np.zeros(3), point, foot, qfrc_ext)
    # Static balance of the joint rows: tau + J^T F = gravity torques (no motion, no damping).
    tau = (d.qfrc_bias - qfrc_ext)[robot.qvel_adr]
    kin = estimator.kinematics(_sample_from(robot, d, tau))
    # Within 1 N and 0.2 N m (the damped least squares biases by about 0.1 %).
    np.testing.assert_allclose(kin.wrench[0, :3], force, atol=1.0)
    lever = point - d.xpos[foot]
    np.testing.assert_allclose(kin.wrench[0, 3:], np.cross(lever, force), atol=0.2)
    np.testing.assert_allclose(kin.wrench[1], 0.0, atol=1.0)
    # Without the model's gravity torques the legs' own weight reads as a foot force.
    raw = est.StateEstimator(est.EstimatorConfig(compensate_bias=False,
                                                 compensate_inertia=False))
    err = np.abs(raw.kinematics(_sample_from(robot, d, tau)).wrench[0, 2] - force[2])
    assert err > 20.0


def test_static_robot_has_zero_velocity(robot, estimator):
    m = robot.model
    d = mujoco.MjData(m)
    d.qpos[:] = robot.standing_qpos()
    kp, kd, q0 = (np.array(v) for v in (g1.DEFAULT_KP, g1.DEFAULT_KD, g1.DEFAULT_POSE))
    dt = m.opt.timestep

    def pd_step():
        d.ctrl[robot.actuator_ids] = kp * (q0 - d.qpos[robot.qpos_adr]) \
            - kd * d.qvel[robot.qvel_adr]
        mujoco.mj_step(m, d)

    for _ in range(int(2.0 / dt)):   # settle
        pd_step()
    assert np.linalg.norm(d.qvel[0:3]) < 0.005, 'the PD stand itself is not at rest'
    state = estimator.initial_state(_sample_from(robot, d), position_xy=d.qpos[0:2])
    p_start = d.qpos[0:3].copy()
    for _ in range(int(1.0 / dt)):
        pd_step()
        state, e = estimator.step(state, _sample_from(robot, d), dt)
    assert np.all(e.foot_contact) and np.all(e.sphere_contact)
    assert np.linalg.norm(e.velocity) < 0.01
    assert np.linalg.norm(e.position - p_start) < 0.01
    # Standing on two feet: each carries about half the weight.
    weight = m.body_subtreemass[robot.root_body] * 9.81
    np.testing.assert_allclose(e.foot_wrench[:, 2].sum(), weight, rtol=0.05)


def test_velocity_rmse_on_a_short_mujoco_run(robot):
    """Stand with pushes, then step: RMSE under 0.08 m/s, contact F1 over 0.9."""
    cfg = bench.ScenarioConfig(stand_s=1.2, walk_s=2.5)
    trace = bench.simulate(cfg, est.EstimatorConfig(), robot)
    res = bench.metrics(trace)
    assert trace.contact_true.any(axis=1).all(), 'the robot left the ground'
    assert (~trace.contact_true).any(), 'no foot ever swung'
    assert res['velocity_rmse_mps'] < 0.08, res
    assert res['contact_f1'] > 0.9, res
    assert res['drift_per_m'] < 0.1, res


def test_f1_score_by_hand():
    truth = np.array([1, 1, 0, 0, 1], bool)
    pred = np.array([1, 0, 1, 0, 1], bool)
    # tp 2, fp 1, fn 1: 2*2 / (4 + 1 + 1).
    assert bench.f1_score(truth, pred) == pytest.approx(4 / 6)
