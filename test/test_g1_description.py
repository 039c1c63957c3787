"""The G1 description: generated files current, MJCF and URDF consistent with g1.py."""

import xml.etree.ElementTree as ET

import mujoco
import numpy as np
import pytest

from bcg_ros.robot import description, g1, model


def test_generated_files_are_current():
    assert description.MJCF_PATH.read_text() == description.mjcf_string(), \
        'bcg_ros/models/g1_29dof.xml is stale: run python -m bcg_ros.robot.description'
    assert description.URDF_PATH.read_text() == description.urdf_string(), \
        'urdf/g1_29dof.urdf is stale: run python -m bcg_ros.robot.description'


def test_joint_table_is_the_29_dof_motor_order():
    assert g1.NUM_JOINTS == 29
    assert g1.JOINT_NAMES[0] == 'left_hip_pitch_joint'
    assert g1.JOINT_NAMES[12:15] == ('waist_yaw_joint', 'waist_roll_joint', 'waist_pitch_joint')
    assert g1.JOINT_NAMES[28] == 'right_wrist_yaw_joint'
    for j in g1.JOINTS:
        assert j.range[0] <= j.default <= j.range[1], j.name
        assert j.effort > 0 and j.velocity > 0 and j.kp > 0 and j.kd > 0, j.name


def test_mjcf_indexes_joints_in_motor_order():
    m = model.load()
    assert m.model.nu == 29 and m.model.nq == 36
    names = [mujoco.mj_id2name(m.model, mujoco.mjtObj.mjOBJ_JOINT, m.model.dof_jntid[a])
             for a in m.qvel_adr]
    assert tuple(names) == g1.JOINT_NAMES
    np.testing.assert_array_equal(m.actuator_ids, np.arange(29))
    np.testing.assert_allclose(m.model.jnt_range[1:], np.array([j.range for j in g1.JOINTS]))
    np.testing.assert_allclose(m.model.actuator_ctrlrange[:, 1], g1.TORQUE_LIMIT)


def test_only_foot_spheres_collide():
    m = model.load().model
    colliding = [i for i in range(m.ngeom) if m.geom_contype[i] or m.geom_conaffinity[i]]
    floor = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, 'floor')
    spheres = sorted(set(colliding) - {floor})
    assert len(spheres) == 8
    data = mujoco.MjData(m)
    mujoco.mj_kinematics(m, data)
    for gid, (foot, pos) in zip(spheres, g1.FOOT_SPHERES):
        assert m.geom_type[gid] == mujoco.mjtGeom.mjGEOM_SPHERE
        assert m.geom_size[gid][0] == pytest.approx(g1.FOOT_SPHERE_RADIUS)
        assert mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, m.geom_bodyid[gid]) == foot
        np.testing.assert_allclose(m.geom_pos[gid], pos)


def test_key_sites_and_stand_keyframe():
    gm = model.load()
    m = gm.model
    for name, link, pos in g1.KEY_POINTS:
        sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, name)
        assert sid >= 0, name
        assert mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, m.site_bodyid[sid]) == link
    data = mujoco.MjData(m)
    data.qpos[:] = gm.standing_qpos()
    mujoco.mj_kinematics(m, data)
    spheres = [i for i in range(m.ngeom) if m.geom_group[i] == 3]
    bottoms = data.geom_xpos[spheres, 2] - g1.FOOT_SPHERE_RADIUS
    assert bottoms.min() == pytest.approx(0.0, abs=1e-6)
    np.testing.assert_allclose(data.qpos[gm.qpos_adr], g1.DEFAULT_POSE)


def test_default_pd_holds_the_stand_pose_in_mujoco():
    gm = model.load()
    m, data = gm.model, mujoco.MjData(gm.model)
    data.qpos[:] = gm.standing_qpos()
    kp, kd = np.array(g1.DEFAULT_KP), np.array(g1.DEFAULT_KD)
    q0, lim = np.array(g1.DEFAULT_POSE), np.array(g1.TORQUE_LIMIT)
    for _ in range(int(2.0 / m.opt.timestep)):
        q, dq = data.qpos[gm.qpos_adr], data.qvel[gm.qvel_adr]
        data.ctrl[:] = np.clip(kp * (q0 - q) - kd * dq, -lim, lim)
        mujoco.mj_step(m, data)
    # Stands: pelvis within 1 cm of its start height, joints within 0.1 rad of the pose.
    assert abs(data.qpos[2] - gm.standing_qpos()[2]) < 0.01
    assert np.abs(data.qpos[gm.qpos_adr] - q0).max() < 0.1


def test_urdf_matches_the_description():
    root = ET.fromstring(description.URDF_PATH.read_text())
    joints = {j.get('name'): j for j in root.findall('joint') if j.get('type') == 'revolute'}
    assert tuple(joints) == g1.JOINT_NAMES
    for b in g1.BODIES[1:]:
        j = joints[b.joint.name]
        assert j.find('parent').get('link') == b.parent
        assert j.find('child').get('link') == b.name
        lim = j.find('limit')
        assert float(lim.get('lower')) == pytest.approx(b.joint.range[0])
        assert float(lim.get('upper')) == pytest.approx(b.joint.range[1])
        assert float(lim.get('effort')) == pytest.approx(b.joint.effort)
        np.testing.assert_allclose([float(x) for x in j.find('origin').get('xyz').split()],
                                   b.pos)
    links = {link.get('name'): link for link in root.findall('link')}
    for b in g1.BODIES:
        mass = float(links[b.name].find('inertial/mass').get('value'))
        assert mass == pytest.approx(b.mass)
        # Full tensor written in the link frame has the body's principal moments.
        i = links[b.name].find('inertial/inertia')
        t = np.array([[float(i.get(a)) for a in row] for row in
                      (('ixx', 'ixy', 'ixz'), ('ixy', 'iyy', 'iyz'), ('ixz', 'iyz', 'izz'))])
        np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(t)), np.sort(b.inertia),
                                   rtol=1e-6, atol=1e-9)


def test_urdf_joint_frames_reproduce_mujoco_kinematics():
    """Chaining the URDF origins gives the same world body positions as MuJoCo."""
    root = ET.fromstring(description.URDF_PATH.read_text())
    gm = model.load()
    data = mujoco.MjData(gm.model)
    data.qpos[:] = gm.model.qpos0
    data.qpos[2] = 0.0
    mujoco.mj_kinematics(gm.model, data)
    frames = {g1.ROOT_BODY: np.eye(4)}
    for j in root.findall('joint'):
        if j.get('type') != 'revolute':
            continue
        xyz = [float(x) for x in j.find('origin').get('xyz').split()]
        r, p, y = (float(x) for x in j.find('origin').get('rpy').split())
        cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
        rot = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]]) @ \
            np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]]) @ \
            np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
        t = np.eye(4)
        t[:3, :3], t[:3, 3] = rot, xyz
        frames[j.find('child').get('link')] = frames[j.find('parent').get('link')] @ t
    for name, t in frames.items():
        bid = mujoco.mj_name2id(gm.model, mujoco.mjtObj.mjOBJ_BODY, name)
        np.testing.assert_allclose(t[:3, 3], data.xpos[bid], atol=1e-6, err_msg=name)
        np.testing.assert_allclose(t[:3, :3], data.xmat[bid].reshape(3, 3), atol=1e-6,
                                   err_msg=name)


def test_loader_errors_name_the_file_and_the_field(tmp_path):
    with pytest.raises(model.ModelError, match='no such model file'):
        model.load(tmp_path / 'missing.xml')
    broken = tmp_path / 'one_joint.xml'
    broken.write_text('<mujoco><worldbody><body name="pelvis"><freejoint/>'
                      '<geom size="0.1"/></body></worldbody></mujoco>')
    with pytest.raises(model.ModelError, match=r"one_joint\.xml: joint 'left_hip_pitch_joint'"):
        model.load(broken)
