"""Whole-body contacts: geometry, the broad phase's hand-over, MuJoCo's primitives, derivatives."""

import dataclasses

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from bcg_ros.bench import sdf as bench_sdf
from bcg_ros.core import collide, sdf
from bcg_ros.core import sim as simulator
from bcg_ros.core import terrain as T
from bcg_ros.robot import g1_sdf

CUBE_N = np.concatenate([np.eye(3), -np.eye(3)])
HALF = 0.05
CHECKED = ('flat', 'rough:0.05')
"""Terrains of the derivative check here (bcg-bench sdf checks all of bench_sdf.TERRAINS)."""


@pytest.fixture(scope='module', autouse=True)
def x64():
    """Float64 for the whole module: derivatives are compared to 1e-4."""
    with jax.enable_x64(True):
        yield


def cube_shapes(n: int = 1) -> sdf.PolytopeSet:
    """``n`` cubes of half-size HALF as one-piece smooth polytopes."""
    shift = sdf.polytope_shift(sdf.BETA)
    return sdf.PolytopeSet(jnp.asarray(np.broadcast_to(CUBE_N, (n, 1, 6, 3))),
                           jnp.full((n, 1, 6), HALF), jnp.full((n, 1), shift))


def random_rotation(rng) -> np.ndarray:
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    return q * np.sign(np.diag(r)) * np.linalg.det(q * np.sign(np.diag(r)))


def test_surface_points_lie_on_the_zero_level_inside_their_bounding_sphere():
    names, shapes = g1_sdf.load()
    shapes = jax.tree.map(lambda x: x.astype(jnp.float64), shapes)
    cfg = collide.CollideConfig()
    geom = collide.geometry(names, shapes, list(range(1, len(names) + 1)), cfg,
                            collide.g1_leg_pairs(cfg.exclude), dtype=jnp.float64)
    assert len(geom.body) == len(names) - len(cfg.exclude)
    phi = jax.vmap(lambda b, v: collide._body_sdf(geom.shapes, b, v))(
        jnp.arange(len(geom.body)), geom.vertices)
    assert float(jnp.max(jnp.abs(phi))) < 1e-6
    for pts in (geom.vertices, geom.edges.reshape(len(geom.body), -1, 3)):
        dist = jnp.linalg.norm(pts - geom.center[:, None], axis=-1)
        assert bool(jnp.all(dist <= geom.radius[:, None] + 1e-9))
    # The points spread over each body: the farthest pair spans most of its bounding sphere.
    span = np.max(np.linalg.norm(np.asarray(geom.vertices)[:, :, None]
                                 - np.asarray(geom.vertices)[:, None], axis=-1), axis=(1, 2))
    assert np.all(span > 1.5 * np.asarray(geom.radius))
    assert len(geom.pairs) == 25 and collide.count(geom) == (4 + 2 * 2) * (16 + 12)


def test_handover_weights_are_continuous_across_a_change_of_the_set():
    # Body 2 rises past body 3: the kept set {0, 1, 2} becomes {0, 1, 3}.
    def weighted(c2):
        clearance = jnp.array([-0.05, -0.01, c2, 0.03, 0.5])
        idx, w = collide.handover_weights(clearance, 3, 0.02)
        return np.asarray(jnp.zeros(5).at[idx].set(w))
    below, above = weighted(0.03 - 1e-7), weighted(0.03 + 1e-7)
    assert np.abs(below - above).max() < 1e-6
    assert below[2] < 1e-15 and above[3] < 1e-15
    far = weighted(-0.2)
    assert np.allclose(far[:3], [1.0, 1.0 - np.exp(-8.0), 1.0], atol=1e-12) and far[3] == 0.0
    idx, w = collide.handover_weights(jnp.array([0.1, -0.1]), 4, 0.02)
    assert sorted(np.asarray(idx).tolist()) == [0, 1] and np.all(np.asarray(w) == 1.0)


def _mujoco_contacts(xml: str):
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    return [(-d.contact[i].dist, np.array(d.contact[i].frame[:3])) for i in range(d.ncon)]


def _box_xml(pos, quat, extra=''):
    p, q = ' '.join(map(str, pos)), ' '.join(map(str, quat))
    return (f'<mujoco><worldbody>{extra}<body pos="{p}" quat="{q}"><freejoint/>'
            f'<geom type="box" size="{HALF} {HALF} {HALF}"/></body></worldbody></mujoco>')


@pytest.mark.parametrize('slope', [0.0, 20.0])
def test_a_box_on_the_ground_matches_mujoco(slope):
    rng = np.random.default_rng(3)
    geom = collide.geometry(('box',), cube_shapes(), [1], dataclasses.replace(
        collide.CollideConfig(), exclude=(), bodies=1, pairs=0), dtype=jnp.float64)
    if slope:
        ground = T.slope(slope, start=-5.0)
        a = np.radians(slope)
        tilt = (f'<geom type="plane" size="5 5 .1" euler="0 {-slope} 0" '
                f'pos="0 0 {5.0 * np.tan(a)}"/>')
        normal = np.array([-np.sin(a), 0.0, np.cos(a)])
    else:
        ground, tilt, normal = T.from_spec('flat'), '<geom type="plane" size="5 5 .1"/>', \
            np.array([0.0, 0.0, 1.0])
    for _ in range(5):
        rot = random_rotation(rng)
        corners = (np.array(np.meshgrid(*[[-HALF, HALF]] * 3)).reshape(3, -1).T) @ rot.T
        xy = rng.uniform(-0.5, 0.5, 2)
        h = float(ground.height(jnp.asarray(xy)))
        depth = 0.004
        # Place the lowest corner `depth` below the ground along its normal.
        lowest = np.min(corners @ normal)
        pos = np.array([xy[0], xy[1], h]) + normal * (-lowest - depth)
        c = collide.terrain_contacts(geom, jnp.asarray(pos[None]), jnp.asarray(rot[None]),
                                     ground)
        ours = float(jnp.max(c.depth))
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, rot.reshape(-1))
        theirs = _mujoco_contacts(_box_xml(pos, quat, tilt))
        assert theirs, 'MuJoCo found no contact'
        best, frame = max(theirs, key=lambda t: t[0])
        assert abs(ours - best) < 1e-3, (ours, best)
        n_ours = np.asarray(c.normal)[int(jnp.argmax(c.depth))]
        angle = np.degrees(np.arccos(np.clip(abs(n_ours @ frame), -1.0, 1.0)))
        assert angle < 2.0, angle


def test_two_boxes_match_mujoco():
    rng = np.random.default_rng(5)
    cfg = dataclasses.replace(collide.CollideConfig(), exclude=(), bodies=1, pairs=1)
    geom = collide.geometry(('a', 'b'), cube_shapes(2), [1, 2], cfg, [('a', 'b')],
                            dtype=jnp.float64)
    for _ in range(4):
        rot = random_rotation(rng)
        corners = (np.array(np.meshgrid(*[[-HALF, HALF]] * 3)).reshape(3, -1).T) @ rot.T
        # Box a's lowest corner 3 mm into box b's top face (b axis-aligned below it).
        pos_a = np.array([0.01, -0.01, 0.0]) - corners[np.argmin(corners[:, 2])]
        pos_a[2] += -0.003
        pos_b = np.array([0.0, 0.0, -HALF])
        xpos = jnp.asarray(np.stack([np.zeros(3), pos_a, pos_b]))
        xmat = jnp.asarray(np.stack([np.eye(3), rot, np.eye(3)]))
        c = collide.self_contacts(geom, xpos, xmat)
        ours = float(jnp.max(c.depth))
        qa = np.zeros(4)
        mujoco.mju_mat2Quat(qa, rot.reshape(-1))
        xml = (f'<mujoco><worldbody><body pos="{" ".join(map(str, pos_a))}" '
               f'quat="{" ".join(map(str, qa))}"><freejoint/><geom type="box" '
               f'size="{HALF} {HALF} {HALF}"/></body><body pos="0 0 {-HALF}"><freejoint/>'
               f'<geom type="box" size="{HALF} {HALF} {HALF}"/></body></worldbody></mujoco>')
        theirs = _mujoco_contacts(xml)
        best, frame = max(theirs, key=lambda t: t[0])
        assert abs(ours - best) < 1e-3, (ours, best)
        n_ours = np.asarray(c.normal)[int(jnp.argmax(c.depth))]
        assert np.degrees(np.arccos(np.clip(abs(n_ours @ frame), -1.0, 1.0))) < 2.0


@pytest.fixture(scope='module')
def g1_sims():
    """Float64 G1 simulators with whole-body contacts, one per terrain."""
    with jax.enable_x64(True):
        cfg = simulator.SimConfig(dtype='float64', whole_body=True)
        return {t: simulator.build_g1(dataclasses.replace(cfg, terrain=t)) for t in CHECKED}


@pytest.mark.parametrize('terrain', CHECKED)
def test_whole_body_contact_derivatives_match_central_differences(g1_sims, terrain):
    sim = g1_sims[terrain]
    qs = bench_sdf.lying_poses(sim, 3, seed=len(terrain))
    depth = jax.jit(jax.vmap(lambda q: simulator.body_contacts(sim, q).depth))(jnp.asarray(qs))
    assert np.all(np.max(np.asarray(depth), 1) > 0.0), 'a pose touches nothing: the check is empty'
    errs = bench_sdf.hessian_errors(sim, qs, bench_sdf.random_directions(
        qs, np.random.default_rng(11)))
    assert errs.max() < 1e-4, errs


def test_a_fallen_g1_rests_on_its_links_and_without_them_falls_through(g1_sims):
    with jax.enable_x64(False):
        out = {}
        for wb in (True, False):
            sim = simulator.build_g1(simulator.SimConfig(whole_body=wb))
            q0 = np.zeros(sim.mjx_model.nq)
            q0[2], q0[3], q0[5] = 0.45, np.cos(0.6), np.sin(0.6)   # pitched 69 deg forward
            state = simulator.reset(sim, jnp.asarray(q0, jnp.float32))
            actions = jnp.zeros((100, sim.num_actions), jnp.float32)
            _, info = jax.jit(lambda s: simulator.rollout(sim, s, actions))(state)
            out[wb] = np.asarray(info.body_pos)[..., 2]
    assert np.all(np.isfinite(out[True]))
    assert out[True].min() > -0.02, out[True].min()
    assert out[True][-1].max() < 0.5        # it lies on the ground
    assert not np.all(np.isfinite(out[False])) or out[False].min() < -0.1
