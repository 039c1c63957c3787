"""Terrain: a C2 heightfield the simulator stands on, the same surface in MuJoCo, motions on it."""

import copy
import dataclasses
from typing import Tuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from bcg_ros import motion as motion_mod
from bcg_ros.core import contact
from bcg_ros.core import sim as simulator
from bcg_ros.core import terrain as T
from bcg_ros.robot import g1, model

from sim_models import hopper

ROUGH = T.rough(0.05, 0.5, seed=3)


def test_slopes_and_flats_are_reproduced_exactly():
    t = T.slope(10.0, start=1.0)
    xy = jnp.array([[2.0, 0.3], [5.5, -1.0], [-1.0, 0.0]])
    h, g = t.height_and_slope(xy)
    tan = np.tan(np.radians(10.0))
    np.testing.assert_allclose(np.asarray(h), [tan * 1.0, tan * 4.5, 0.0], atol=1e-5)
    np.testing.assert_allclose(np.asarray(g)[:2], [[tan, 0.0]] * 2, atol=1e-5)
    n = np.asarray(t.normal(xy[:1]))[0]
    np.testing.assert_allclose(n, [-np.sin(np.radians(10.0)), 0.0, np.cos(np.radians(10.0))],
                               atol=1e-5)
    assert isinstance(T.from_spec('flat'), contact.Plane)


def test_slope_is_the_height_gradient_and_curvature_has_no_jump_at_cell_edges():
    # Points straddling a cell edge by 1e-4 cells: value, slope and curvature agree.
    edge = float(ROUGH.origin[0]) + 12 * ROUGH.spacing
    eps = 1e-4 * ROUGH.spacing
    xy = jnp.array([[edge - eps, 0.83], [edge + eps, 0.83]], jnp.float32)
    h, g = ROUGH.height_and_slope(xy)
    auto = jax.vmap(jax.grad(lambda p: ROUGH.height(p)))(xy)
    np.testing.assert_allclose(np.asarray(g), np.asarray(auto), rtol=1e-4, atol=1e-6)
    hess = np.asarray(jax.vmap(jax.hessian(lambda p: ROUGH.height(p)))(xy))
    scale = np.abs(hess).max()
    assert scale > 1e-3, 'the rough test terrain must be curved here'
    assert np.abs(hess[0] - hess[1]).max() < 1e-2 * scale
    assert abs(float(h[0] - h[1])) < 1e-5 and np.abs(np.asarray(g[0] - g[1])).max() < 1e-3


def _ray_heights(g: model.G1Model, xy):
    d = mujoco.MjData(g.model)
    mujoco.mj_forward(g.model, d)
    mask = np.array([1, 1, 1, 1, 1, 0], np.uint8)        # not the hidden floor's group
    out = []
    for x, y in xy:
        dist = mujoco.mj_ray(g.model, d, np.array([x, y, 5.0]), np.array([0.0, 0.0, -1.0]),
                             mask, 1, -1, np.zeros(1, np.int32))
        out.append(5.0 - dist)
    return np.array(out)


@pytest.mark.parametrize('spec', ['rough:0.05:0.5:3', 'steps:0.08', 'slope:8'])
def test_mujoco_stands_on_the_same_surface(spec):
    t = T.from_spec(spec)
    g = model.load(ground=T.mujoco_hfield(t, spec))
    assert g.ground == spec and not g.added_floor
    rng = np.random.default_rng(0)
    xy = np.stack([rng.uniform(0.8, 6.0, 40), rng.uniform(-1.0, 1.0, 40)], -1)   # off the robot
    h, _ = T.heights_at(t, xy)
    z = _ray_heights(g, xy)
    # MuJoCo interpolates its samples linearly: within a millimetre of the spline.
    assert np.abs(z - h).max() < 1e-3, (spec, np.abs(z - h).max())
    planes = g.model.geom_type == mujoco.mjtGeom.mjGEOM_PLANE
    assert not np.any(g.model.geom_contype[planes] | g.model.geom_conaffinity[planes])


@pytest.mark.parametrize('spec', ['rough:0.05:0.5:3', 'slope:8', 'steps:0.08'])
def test_mujoco_tiles_follow_the_surface(spec):
    t = T.from_spec(spec)
    region = ((0.8, 3.0), (-0.5, 0.5))
    ground = dataclasses.replace(T.mujoco_hfield(t, spec), tiles=T.mujoco_tiles(t, region))
    g = model.load(ground=ground)
    tiles = np.array([g.model.geom(i).name.startswith('terrain_tile')
                      for i in range(g.model.ngeom)])
    assert tiles.sum() == 55 * 25 and np.all(g.model.geom_contype[tiles] == 1)
    assert np.all(g.model.geom_type[tiles] == mujoco.mjtGeom.mjGEOM_BOX)
    hfield = g.model.geom_type == mujoco.mjtGeom.mjGEOM_HFIELD
    assert not np.any(g.model.geom_contype[hfield] | g.model.geom_conaffinity[hfield])
    rng = np.random.default_rng(0)
    xy = np.stack([rng.uniform(0.9, 2.9, 40), rng.uniform(-0.4, 0.4, 40)], -1)
    h, _ = T.heights_at(t, xy)
    z = _ray_heights(g, xy)
    # Tangent planes reaching past their cells only as far as they stay within 1 mm.
    assert np.abs(z - h).max() < T.TILE_TOLERANCE, (spec, np.abs(z - h).max())


def _drop(g: model.G1Model, height: float, dt: float) -> Tuple[np.ndarray, float]:
    """Pelvis position after a G1 held by its PD at the default pose falls ``height``."""
    from bcg_ros.robot import pd

    m = copy.deepcopy(g.model)
    m.opt.timestep = dt
    pd.use_pd_actuators(m, g.actuator_ids, np.asarray(g1.TORQUE_LIMIT, float))
    d = mujoco.MjData(m)
    d.qpos[:] = g.standing_qpos()
    d.qpos[2] += height
    pd.set_pd(m, d, g.actuator_ids, np.asarray(g1.DEFAULT_KP, float),
              np.asarray(g1.DEFAULT_KD, float), g.standing_qpos()[g.qpos_adr])
    tilt = 0.0
    for _ in range(int(round(1.5 / dt))):
        mujoco.mj_step(m, d)
        up_z = 1.0 - 2.0 * (d.qpos[4] ** 2 + d.qpos[5] ** 2)
        tilt = max(tilt, float(np.degrees(np.arccos(np.clip(up_z, -1.0, 1.0)))))
    return d.qpos[:3].copy(), tilt


def _landing_models(reference_dir, official: bool):
    path = reference_dir / 'g1_official' / 'scene_29dof.xml' if official else None
    t = T.from_spec('slope:10:3')   # flat for 3 m: the floor's twin where the robot lands
    ground = dataclasses.replace(T.mujoco_hfield(t, 'slope:10:3'),
                                 tiles=T.mujoco_tiles(t, ((-1.0, 1.0), (-1.0, 1.0))))
    tiled = model.load(path, whole_body=official, ground=ground)
    return model.load(path, whole_body=official), tiled


@pytest.mark.parametrize('official', [False, True], ids=['project', 'official'])
def test_a_held_g1_lands_on_tiles_as_on_the_floor(official, request):
    """The G1's 5 mm foot spheres land on the tiles as on the plane, at the evaluator's step."""
    from bcg_ros.eval.rollout import TERRAIN_SIM_DT

    ref = request.getfixturevalue('reference_dir') if official else None
    floor, tiled = _landing_models(ref, official)
    for height in (0.05, 0.1, 0.2):
        (p_floor, tilt_floor), (p_tiles, tilt_tiles) = (
            _drop(floor, height, TERRAIN_SIM_DT), _drop(tiled, height, TERRAIN_SIM_DT))
        assert np.linalg.norm(p_tiles - p_floor) < 0.015, (height, p_floor, p_tiles)
        assert abs(tilt_tiles - tilt_floor) < 1.0, (height, tilt_floor, tilt_tiles)


def test_steps_rise_by_their_height():
    t = T.steps(0.1, length=0.5, start=1.0)
    h, _ = T.heights_at(t, np.array([[0.5, 0.0], [1.25, 0.0], [1.75, 0.0], [2.25, 0.2]]))
    np.testing.assert_allclose(h, [0.0, 0.1, 0.2, 0.3], atol=1e-4)


@pytest.mark.parametrize('spec, match', [
    ('bumpy', "terrain 'bumpy': not flat"),
    ('slope:abc', "terrain 'slope:abc'"),
    ('steps:0.1:0.01', 'a step must be deeper'),
    ('rough:1:2:3:4', 'takes 1 to 3 numbers'),
])
def test_bad_specs_are_named(spec, match):
    with pytest.raises(T.TerrainError, match=match):
        T.from_spec(spec)


def test_terrain_files_round_trip_and_bad_ones_name_the_field(tmp_path):
    p = T.save(ROUGH, tmp_path / 'ground.npz')
    back = T.from_spec(str(p))
    np.testing.assert_array_equal(np.asarray(back.control), np.asarray(ROUGH.control))
    assert back.spacing == ROUGH.spacing
    bad = tmp_path / 'bad.npz'
    np.savez(bad, heights=np.zeros((5, 5)), spacing=0.1)
    with pytest.raises(T.TerrainError, match=r"bad.npz: missing field\(s\) \['origin'\]"):
        T.load(bad)
    nan = tmp_path / 'nan.npz'
    np.savez(nan, heights=np.full((5, 5), np.nan), spacing=0.1, origin=[0.0, 0.0])
    with pytest.raises(T.TerrainError, match='nan.npz: heights hold non-finite'):
        T.load(nan)


def test_a_motion_is_lifted_by_the_ground_under_its_pelvis():
    m = motion_mod.load_motion('run', g1.CONTROL_DT)
    t = T.slope(5.0, start=1.0)
    lifted = T.lift_motion(m, t)
    h, _ = T.heights_at(t, m.root_pos[:, :2])
    np.testing.assert_allclose(lifted.root_pos[:, 2] - m.root_pos[:, 2], h, atol=1e-6)
    np.testing.assert_allclose(lifted.key_pos[..., 2] - m.key_pos[..., 2],
                               np.repeat(h[:, None], m.key_pos.shape[1], 1), atol=1e-6)
    assert h[-1] > 0.1, 'the run clip ends well up the slope'
    assert T.lift_motion(m, contact.Plane()) is m


def test_a_lifted_motion_is_observed_as_recorded():
    """The policy's reference window is the flat clip's, as the robot's runtime gives it."""
    from bcg_ros import contract as ct

    m = motion_mod.load_motion('run', g1.CONTROL_DT)
    lifted = T.lift_motion(m, T.steps(0.05))
    assert lifted.flat is m and lifted.observed is m and m.observed is m
    assert T.lift_motion(lifted, T.slope(3.0)).flat is m, 'lifting twice keeps the recording'
    ids = np.arange(g1.NUM_JOINTS)
    step = m.num_frames - 10
    got, want = ct.reference_window(lifted, ids, step), ct.reference_window(m, ids, step)
    assert lifted.root_pos[step + 1, 2] > m.root_pos[step + 1, 2] + 0.3, 'up the stairs'
    for name in ('joint_pos', 'root_quat', 'root_height', 'root_lin_vel'):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    half = motion_mod.resample(lifted, 25.0)
    assert half.flat is not None and half.flat.num_frames == half.num_frames
    np.testing.assert_allclose(half.flat.root_pos, motion_mod.resample(m, 25.0).root_pos)


def test_the_simulator_stands_on_a_heightfield():
    """The hopper settles 10 cm higher on ground raised by 10 cm, its foot on the surface."""
    m, sim = hopper(simulator.SimConfig(), kp=5000.0, kd=50.0)
    xs, ys = T._grid(0.25, ((-1.0, 1.0), (-1.0, 1.0)))
    raised = T.from_heights(np.full((len(xs), len(ys)), 0.1), 0.25, (xs[0], ys[0]))
    run = jax.jit(lambda sm, s: simulator.rollout(sm, s, jnp.zeros((60, 1), sm.dtype)))
    finals = {}
    for name, ground in (('flat', contact.Plane()), ('raised', raised)):
        sm = dataclasses.replace(sim, terrain=jax.tree.map(lambda x: x.astype(sim.dtype), ground))
        q0 = m.qpos0.copy()
        q0[1] += 0.1 if name == 'raised' else 0.0
        final, info = run(sm, simulator.reset(sm, q0))
        assert float(jnp.max(jnp.abs(final.qvel))) < 0.05, f'{name}: not at rest'
        finals[name] = (float(final.qpos[1]), float(info.depth[-1, 0]))
    assert finals['raised'][0] - finals['flat'][0] == pytest.approx(0.1, abs=1e-3)
    assert finals['raised'][1] == pytest.approx(finals['flat'][1], abs=2e-4)


def test_the_evaluator_judges_on_the_terrain_it_is_given(tmp_path):
    from bcg_ros import policies
    from bcg_ros.eval import report, rollout
    from bcg_ros.eval.evaluator import EvalConfig, evaluate, training_terrain
    from bcg_ros.eval.render import RenderConfig
    from bcg_ros.eval.synthetic import quiet_rollout
    from bcg_ros.runtime.policy import load_policy

    name = policies.shipped()[0] if policies.shipped() else pytest.skip('no shipped policy')
    p = load_policy(policies.path(name))
    assert training_terrain(p) == 'flat'
    cfg = EvalConfig(policy=str(policies.path(name)), runs=1, baselines=(),
                     rollout=quiet_rollout(duration=0.2), render=RenderConfig(filmstrip=False),
                     terrain='slope:5:-1')
    ev = evaluate(cfg, policy=p)
    flat = motion_mod.load_motion(name, g1.CONTROL_DT)
    h, _ = T.heights_at(T.slope(5.0, -1.0), flat.root_pos[:1, :2])
    assert h[0] > 0.05
    assert ev.motion.root_pos[0, 2] == pytest.approx(flat.root_pos[0, 2] + h[0], abs=1e-6)
    assert ev.runs[0].root_pos[0, 2] > flat.root_pos[0, 2] + h[0] - 0.05  # stood on the slope
    result = report.write(ev, tmp_path, plots=False)
    assert result['terrain'] == 'slope:5:-1' and result['sim_dt'] == rollout.TERRAIN_SIM_DT
    assert 'terrain `slope:5:-1`' in report.markdown(result)


def test_bcg_train_names_a_bad_terrain(tmp_path, capsys):
    from bcg_ros.train import cli
    rc = cli.main(['--preset', 'cpu', '--set', 'g1.sim.terrain=bumpy', '--out', str(tmp_path)])
    assert rc == 2
    assert "bcg-train: error: terrain 'bumpy'" in capsys.readouterr().err
