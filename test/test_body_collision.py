"""Whole-body collision for the MuJoCo judge, and the floor the loader adds."""

import pathlib
import re

import mujoco
import numpy as np
import pytest

from bcg_ros.robot import description, g1, model

OFFICIAL = pathlib.Path(__file__).resolve().parents[2] / 'shared' / 'reference' / 'g1_official'
needs_official = pytest.mark.skipif(
    not (OFFICIAL / 'g1_29dof.xml').is_file(),
    reason=f'the official G1 model is not at {OFFICIAL}')


def _robot_geoms(m: mujoco.MjModel):
    return [i for i in range(m.ngeom) if m.geom_bodyid[i] != 0]


def _lowest(m: mujoco.MjModel, d: mujoco.MjData, geoms) -> float:
    """Lowest world z over the geoms' surfaces (spheres, capsules, boxes) and body origins."""
    low = float(d.xpos[1:, 2].min())
    for i in geoms:
        z, rz, s = d.geom_xpos[i][2], d.geom_xmat[i].reshape(3, 3)[2], m.geom_size[i]
        kind = m.geom_type[i]
        if kind == mujoco.mjtGeom.mjGEOM_BOX:
            low = min(low, z - np.abs(rz) @ s)
        elif kind == mujoco.mjtGeom.mjGEOM_CAPSULE:
            low = min(low, z - s[0] - abs(rz[2]) * s[1])
        elif kind == mujoco.mjtGeom.mjGEOM_SPHERE:
            low = min(low, z - s[0])
    return low


def _fall(gm: model.G1Model, spin, seconds: float):
    """Drop the G1 from its standing pose, motors off, tipped by angular velocity ``spin``."""
    m = gm.model
    d = mujoco.MjData(m)
    d.qpos[:] = gm.standing_qpos()
    d.qvel[3:6] = spin
    geoms = [i for i in _robot_geoms(m) if m.geom_group[i] == 3]
    lowest, root = np.inf, np.inf
    for _ in range(int(seconds / m.opt.timestep)):
        mujoco.mj_step(m, d)
        lowest, root = min(lowest, _lowest(m, d, geoms)), min(root, d.qpos[2])
    return lowest, root, d


def _contact_names(m: mujoco.MjModel, d: mujoco.MjData):
    return [tuple(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, g) or f'#{g}' for g in c.geom)
            for c in d.contact[:d.ncon]]


def test_collision_table_covers_every_link():
    assert {c.body for c in g1.COLLISION} == {b.name for b in g1.BODIES}
    names = [c.name for c in g1.COLLISION]
    assert len(set(names)) == len(names) and all(n.endswith('_collision') for n in names)
    for c in g1.COLLISION:
        assert c.kind in ('capsule', 'box', 'sphere'), c.name
        assert len(c.size) == {'capsule': 2, 'box': 3, 'sphere': 1}[c.kind], c.name
        assert min(c.size) > 0 and np.linalg.norm(c.quat) == pytest.approx(1.0, abs=1e-5)


def test_whole_body_falls_onto_the_floor():
    gm = model.load(whole_body=True)
    for spin in ((0.0, 1.0, 0.0), (1.0, 0.0, 0.0)):
        lowest, root, d = _fall(gm, spin, 3.0)
        assert lowest > -0.02, (spin, lowest)
        assert root > 0.05 and d.qpos[2] > 0.05, (spin, root)
        assert d.qpos[2] < 0.4, 'it should have fallen over'


def test_foot_spheres_alone_let_a_fallen_robot_sink():
    lowest, root, _ = _fall(model.load(), (0.0, 1.0, 0.0), 1.5)
    assert lowest < -0.1 and root < 0.0


def test_training_model_collides_only_through_the_foot_spheres():
    m = model.load().model
    floor = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, 'floor')
    colliding = [i for i in range(m.ngeom) if m.geom_contype[i] or m.geom_conaffinity[i]]
    names = sorted(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, i)
                   for i in colliding if i != floor)
    assert names == sorted(f'{s}_foot_{k}' for s in ('left', 'right') for k in range(4))
    assert m.nexclude == 0
    shapes = [i for i in range(m.ngeom)
              if (mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, i) or '').endswith('_collision')]
    assert len(shapes) == len(g1.COLLISION)
    assert all(m.geom_group[i] == 3 for i in shapes)


def test_whole_body_switches_on_the_shapes_and_keeps_the_inertias():
    plain, whole = model.load(), model.load(whole_body=True)
    a, b = plain.model, whole.model
    assert not plain.added_floor and not whole.added_floor
    for i in range(b.ngeom):
        name = mujoco.mj_id2name(b, mujoco.mjtObj.mjOBJ_GEOM, i) or ''
        if name.endswith('_collision'):
            assert b.geom_contype[i] == 1 and b.geom_conaffinity[i] == 1, name
    for field in ('body_mass', 'body_inertia', 'body_ipos', 'body_iquat'):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    np.testing.assert_allclose(a.body_mass[1:], [x.mass for x in g1.BODIES])
    np.testing.assert_allclose(a.body_inertia[1:], [x.inertia for x in g1.BODIES])


def test_stand_keyframe_touches_only_feet_on_floor():
    gm = model.load(whole_body=True)
    m, d = gm.model, mujoco.MjData(gm.model)
    d.qpos[:] = gm.standing_qpos()
    mujoco.mj_forward(m, d)
    names = _contact_names(m, d)
    assert names, 'the feet should touch the floor'
    for pair in names:
        assert 'floor' in pair and any(re.fullmatch(r'(left|right)_foot_\d', n) for n in pair), \
            pair


def test_crossed_legs_collide_with_each_other():
    gm = model.load(whole_body=True)
    m, d = gm.model, mujoco.MjData(gm.model)
    d.qpos[:] = gm.standing_qpos()
    d.qpos[gm.qpos_adr[g1.joint_index('left_hip_roll_joint')]] = -0.3
    d.qpos[gm.qpos_adr[g1.joint_index('right_hip_roll_joint')]] = 0.3
    mujoco.mj_forward(m, d)
    pairs = {frozenset(p) for p in _contact_names(m, d)}
    assert frozenset(('left_knee_link_collision', 'right_knee_link_collision')) in pairs
    # Without whole-body collision the same pose has no leg-on-leg contact.
    plain = model.load()
    d = mujoco.MjData(plain.model)
    d.qpos[:] = gm.standing_qpos()
    d.qpos[gm.qpos_adr[g1.joint_index('left_hip_roll_joint')]] = -0.3
    d.qpos[gm.qpos_adr[g1.joint_index('right_hip_roll_joint')]] = 0.3
    mujoco.mj_forward(plain.model, d)
    assert all('floor' in p for p in _contact_names(plain.model, d))


def _stand(gm: model.G1Model, seconds: float, pd: bool) -> float:
    """Lowest root height over ``seconds`` from the standing pose, default PD on or motors off."""
    m, d = gm.model, mujoco.MjData(gm.model)
    d.qpos[:] = gm.standing_qpos()
    kp, kd, q0 = np.array(g1.DEFAULT_KP), np.array(g1.DEFAULT_KD), np.array(g1.DEFAULT_POSE)
    lowest = np.inf
    for _ in range(int(seconds / m.opt.timestep)):
        if pd:
            d.ctrl[gm.actuator_ids] = np.clip(
                kp * (q0 - d.qpos[gm.qpos_adr]) - kd * d.qvel[gm.qvel_adr],
                -np.array(g1.TORQUE_LIMIT), g1.TORQUE_LIMIT)
        mujoco.mj_step(m, d)
        lowest = min(lowest, d.qpos[2])
    return lowest


def test_robot_only_file_gets_a_floor(tmp_path):
    text = description.MJCF_PATH.read_text()
    floorless = re.sub(r'\s*<geom name="floor"[^>]*/>', '', text)
    assert floorless != text
    path = tmp_path / 'robot_only.xml'
    path.write_text(floorless)
    for whole_body in (False, True):
        gm = model.load(path, whole_body=whole_body)
        assert gm.added_floor
        floor = mujoco.mj_name2id(gm.model, mujoco.mjtObj.mjOBJ_GEOM, 'floor')
        assert floor >= 0 and gm.model.geom_type[floor] == mujoco.mjtGeom.mjGEOM_PLANE
        np.testing.assert_allclose(gm.model.geom_friction[floor], model.FLOOR_FRICTION)
        assert _stand(gm, 1.0, pd=True) > 0.3
    assert _stand(gm, 1.0, pd=False) > 0.0


@needs_official
def test_official_robot_only_model_gets_a_floor():
    gm = model.load(OFFICIAL / 'g1_29dof.xml', whole_body=True)
    assert gm.added_floor
    m = gm.model
    assert (m.geom_type == mujoco.mjtGeom.mjGEOM_PLANE).sum() == 1
    assert m.nexclude == 0, 'its own mesh collision is left as it is'
    assert _stand(gm, 1.0, pd=True) > 0.3
    assert _stand(gm, 1.0, pd=False) > 0.0


@needs_official
def test_official_scene_keeps_its_floor():
    gm = model.load(OFFICIAL / 'scene_29dof.xml', whole_body=True)
    assert not gm.added_floor
    assert (gm.model.geom_type == mujoco.mjtGeom.mjGEOM_PLANE).sum() == 1
