"""The project's G1 against Unitree's official model (../shared/reference/g1_official)."""

import mujoco
import numpy as np
import pytest

from bcg_ros.robot import g1, model


@pytest.fixture(scope='module')
def official(reference_dir):
    return model.load(reference_dir / 'g1_official' / 'g1_29dof.xml')


@pytest.fixture(scope='module')
def ours():
    return model.load()


def _body(m, name):
    bid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, name)
    assert bid >= 0, name
    return bid


def test_official_model_loads_unchanged(reference_dir, official):
    text = (reference_dir / 'g1_official' / 'g1_29dof.xml').read_text()
    assert 'floating_base_joint' in text
    assert official.model.nu == 29


def test_same_joint_names_and_order(official, ours):
    for gm in (official, ours):
        names = [mujoco.mj_id2name(gm.model, mujoco.mjtObj.mjOBJ_JOINT, i)
                 for i in range(1, gm.model.njnt)]
        assert tuple(names) == g1.JOINT_NAMES
        act = [mujoco.mj_id2name(gm.model, mujoco.mjtObj.mjOBJ_JOINT,
                                 gm.model.actuator_trnid[a, 0]) for a in gm.actuator_ids]
        assert tuple(act) == g1.JOINT_NAMES


def test_same_axes_limits_and_joint_properties(official, ours):
    a, b = official.model, ours.model
    for name in g1.JOINT_NAMES:
        ja = mujoco.mj_name2id(a, mujoco.mjtObj.mjOBJ_JOINT, name)
        jb = mujoco.mj_name2id(b, mujoco.mjtObj.mjOBJ_JOINT, name)
        np.testing.assert_allclose(a.jnt_axis[ja], b.jnt_axis[jb], err_msg=name)
        np.testing.assert_allclose(a.jnt_range[ja], b.jnt_range[jb], err_msg=name)
        np.testing.assert_allclose(a.jnt_actfrcrange[ja], b.jnt_actfrcrange[jb], err_msg=name)
        da, db = a.jnt_dofadr[ja], b.jnt_dofadr[jb]
        for field in ('dof_armature', 'dof_damping', 'dof_frictionloss'):
            assert getattr(a, field)[da] == pytest.approx(getattr(b, field)[db]), (name, field)
    np.testing.assert_allclose(a.actuator_ctrlrange[official.actuator_ids],
                               b.actuator_ctrlrange[ours.actuator_ids])


def test_same_body_offsets_masses_and_inertias(official, ours):
    a, b = official.model, ours.model
    for body in g1.BODIES:
        ia, ib = _body(a, body.name), _body(b, body.name)
        assert mujoco.mj_id2name(a, mujoco.mjtObj.mjOBJ_BODY, a.body_parentid[ia]) == \
            mujoco.mj_id2name(b, mujoco.mjtObj.mjOBJ_BODY, b.body_parentid[ib])
        if body.parent is not None:
            np.testing.assert_allclose(a.body_pos[ia], b.body_pos[ib], atol=1e-6,
                                       err_msg=body.name)
        np.testing.assert_allclose(a.body_quat[ia], b.body_quat[ib], atol=1e-6,
                                   err_msg=body.name)
        assert a.body_mass[ia] == pytest.approx(b.body_mass[ib], abs=1e-6), body.name
        np.testing.assert_allclose(a.body_inertia[ia], b.body_inertia[ib], atol=1e-6,
                                   err_msg=body.name)
        np.testing.assert_allclose(a.body_ipos[ia], b.body_ipos[ib], atol=1e-6,
                                   err_msg=body.name)
        np.testing.assert_allclose(a.body_iquat[ia], b.body_iquat[ib], atol=1e-6,
                                   err_msg=body.name)
    assert a.body_mass.sum() == pytest.approx(b.body_mass.sum(), abs=1e-6)


def test_same_foot_spheres(official, ours):
    def spheres(m):
        out = []
        for i in range(m.ngeom):
            if m.geom_type[i] == mujoco.mjtGeom.mjGEOM_SPHERE and \
                    m.geom_size[i][0] == pytest.approx(g1.FOOT_SPHERE_RADIUS):
                out.append((mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, m.geom_bodyid[i]),
                            tuple(np.round(m.geom_pos[i], 9))))
        return sorted(out)
    assert spheres(official.model) == spheres(ours.model) == \
        sorted((f, tuple(p)) for f, p in g1.FOOT_SPHERES)


def test_same_imu_site(official, ours):
    for gm in (official, ours):
        sid = mujoco.mj_name2id(gm.model, mujoco.mjtObj.mjOBJ_SITE, g1.IMU_SITE)
        assert sid >= 0
        assert gm.model.site_bodyid[sid] == gm.root_body
        np.testing.assert_allclose(gm.model.site_pos[sid], g1.IMU_POS)


def test_standing_pose_is_the_same_in_both(official, ours):
    np.testing.assert_allclose(official.standing_qpos(), ours.standing_qpos(), atol=1e-6)
