"""
The joint PD in MuJoCo is integrated soundly (bcg_ros.robot.pd).

The G1 is held in the air (its pelvis fixed to the world) at the default pose
under the PD: every joint speed settles below 0.1 rad/s within 0.5 s at the
evaluator's 5 ms step, on the project's MJCF and on the official model, for
each gain set. Knocked off the pose, the same set-up under MuJoCo's Euler
integrator rings up, which is what the implicit integrator is for.
g1_sim_node's motor layer applies the robot's PD law through the same actuators.
"""

import pathlib

import mujoco
import numpy as np
import pytest

from bcg_ros.robot import g1, pd
from bcg_ros.robot.model import DEFAULT_MJCF

OFFICIAL = pathlib.Path(__file__).resolve().parents[2] / 'shared' / 'reference' / \
    'g1_official' / 'g1_29dof.xml'
DT = 0.005
GAINS = {'default': (np.asarray(g1.DEFAULT_KP), np.asarray(g1.DEFAULT_KD)),
         'stiff': (2.0 * np.asarray(g1.DEFAULT_KP), 2.0 * np.asarray(g1.DEFAULT_KD))}
"""The project's gains, and twice them (further past Euler's explicit bound)."""


def _held(path: pathlib.Path):
    """The model with its pelvis fixed 0.5 m up; joint and actuator ids in motor order."""
    spec = mujoco.MjSpec.from_file(str(path))
    pelvis = spec.body(g1.ROOT_BODY)
    pelvis.pos = np.asarray(pelvis.pos) + [0.0, 0.0, 0.5]
    for j in list(pelvis.joints):
        spec.delete(j)   # the pelvis welded to the world
    for key in list(spec.keys):
        spec.delete(key)   # sized for the free joint
    m = spec.compile()
    # Nothing to touch in the air; the welded pelvis would otherwise collide with its
    # children, which MuJoCo no longer filters as parent and child.
    m.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
    jids = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, n) for n in g1.JOINT_NAMES]
    acts = [int(np.flatnonzero(m.actuator_trnid[:, 0] == j)[0]) for j in jids]
    return m, m.jnt_qposadr[jids], m.jnt_dofadr[jids], np.asarray(acts)


def _settle_speed(path, kp, kd, integrator=None, offset=0.0, seconds=1.0):
    """Max joint speed [rad/s] over 0.5..seconds, from the default pose (+- offset [rad])."""
    m, qadr, vadr, acts = _held(path)
    pd.use_pd_actuators(m, acts, np.asarray(g1.TORQUE_LIMIT))
    if integrator is not None:
        m.opt.integrator = integrator
    m.opt.timestep = DT
    d = mujoco.MjData(m)
    rng = np.random.default_rng(0)
    target = np.asarray(g1.DEFAULT_POSE)
    d.qpos[qadr] = target + rng.uniform(-offset, offset, g1.NUM_JOINTS)
    late = 0.0
    for step in range(int(round(seconds / DT))):
        pd.set_pd(m, d, acts, kp, kd, target)
        mujoco.mj_step(m, d)
        speed = np.abs(d.qvel[vadr])
        if not np.all(np.isfinite(speed)):
            return np.inf
        if (step + 1) * DT >= 0.5:
            late = max(late, float(speed.max()))
    return late


MODELS = [pytest.param(DEFAULT_MJCF, id='project'),
          pytest.param(OFFICIAL, id='official', marks=pytest.mark.skipif(
              not OFFICIAL.is_file(), reason='../shared/reference (the official G1) absent'))]


@pytest.mark.parametrize('path', MODELS)
@pytest.mark.parametrize('gains', sorted(GAINS))
def test_held_g1_settles_under_the_implicit_pd(path, gains):
    kp, kd = GAINS[gains]
    assert _settle_speed(path, kp, kd) < 0.1


def test_euler_does_not_settle_at_the_same_step():
    # Knocked 0.1 rad off the pose, the light ankles ring up under Euler's explicit damping
    # (about 12 rad/s); the implicit PD rings down (the slowest mode, the waist, at 0.2 rad/s).
    kp, kd = GAINS['default']
    assert _settle_speed(DEFAULT_MJCF, kp, kd, offset=0.1) < 0.5
    assert _settle_speed(DEFAULT_MJCF, kp, kd, mujoco.mjtIntegrator.mjINT_EULER,
                         offset=0.1) > 5.0


def test_pd_force_is_the_robot_law_clamped():
    m, qadr, vadr, acts = _held(DEFAULT_MJCF)
    lim = np.asarray(g1.TORQUE_LIMIT)
    pd.use_pd_actuators(m, acts, lim)
    assert m.opt.integrator == pd.INTEGRATOR
    d = mujoco.MjData(m)
    rng = np.random.default_rng(1)
    d.qpos[qadr] = rng.uniform(-0.3, 0.3, g1.NUM_JOINTS)
    d.qvel[vadr] = rng.uniform(-2.0, 2.0, g1.NUM_JOINTS)
    kp, kd = rng.uniform(0, 300, g1.NUM_JOINTS), rng.uniform(0, 8, g1.NUM_JOINTS)
    q_t, dq_t = rng.uniform(-1, 1, g1.NUM_JOINTS), rng.uniform(-1, 1, g1.NUM_JOINTS)
    tau_ff = rng.uniform(-5, 5, g1.NUM_JOINTS)
    pd.set_pd(m, d, acts, kp, kd, q_t, dq_t, tau_ff)
    mujoco.mj_forward(m, d)
    want = np.clip(tau_ff + kp * (q_t - d.qpos[qadr]) + kd * (dq_t - d.qvel[vadr]), -lim, lim)
    np.testing.assert_allclose(d.actuator_force[acts], want, rtol=1e-9, atol=1e-9)
    assert np.any(np.abs(want) == lim)   # some joints clamp


def test_g1_sim_node_uses_the_same_pd():
    from bcg_ros.robot.g1_sim import G1Sim, G1SimConfig
    from bcg_ros.robot import lowlevel

    sim = G1Sim(G1SimConfig(elastic_band=False))
    assert sim.model.opt.integrator == pd.INTEGRATOR
    q = np.asarray(g1.DEFAULT_POSE) + 0.05
    sim.command = lowlevel.pd_command(q, np.asarray(g1.DEFAULT_KP), np.asarray(g1.DEFAULT_KD),
                                      g1.MODE_MACHINE_29DOF)
    q_now = sim.data.qpos[sim.robot.qpos_adr].copy()
    dq_now = sim.data.qvel[sim.robot.qvel_adr].copy()
    sim.step()
    want = np.clip(np.asarray(g1.DEFAULT_KP) * (q - q_now) - np.asarray(g1.DEFAULT_KD) * dq_now,
                   -np.asarray(g1.TORQUE_LIMIT), np.asarray(g1.TORQUE_LIMIT))
    np.testing.assert_allclose(sim.tau, want, rtol=1e-6, atol=1e-6)
