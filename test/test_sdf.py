"""Smooth SDFs: derivatives against central differences, zero levels, blending, the G1 fit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bcg_ros.core import sdf
from bcg_ros.core import terrain as T
from bcg_ros.robot import g1, g1_sdf, meshes

H = 1e-6
"""Central-difference step [m] (float64)."""
RTOL = 1e-5
"""Derivative error relative to the largest entry of the checked Hessian (or 1)."""
I3 = np.eye(3)
ROT = np.linalg.qr(np.random.default_rng(7).normal(size=(3, 3)))[0]
HALF = np.array([0.05, 0.03, 0.02])
CUBE_N = np.concatenate([I3, -I3])


@pytest.fixture(scope='module', autouse=True)
def x64():
    """Float64 for the whole module: the checks compare derivatives to 1e-5."""
    with jax.enable_x64(True):
        yield


def shapes():
    """Name -> SDF of one point, for every representation (terrain in the world frame)."""
    a, b = np.array([0.01, -0.02, -0.04]), np.array([-0.01, 0.02, 0.05])
    c = np.array([0.01, 0.0, -0.01])
    # An L of two boxes (smooth polytopes) whose nearest piece changes along x = z.
    ell_n = np.stack([CUBE_N, CUBE_N])
    ell_d = np.array([[0.06, 0.02, 0.02, 0.0, 0.02, 0.02],
                      [0.02, 0.02, 0.06, 0.02, 0.02, 0.0]])
    rough = T.rough(0.05, 0.5, seed=3)
    return {
        'sphere': lambda p: sdf.sphere(jnp.asarray(c), 0.03, p),
        'capsule': lambda p: sdf.capsule(jnp.asarray(a), jnp.asarray(b), 0.02, p),
        'rounded_box': lambda p: sdf.rounded_box(jnp.asarray(c), jnp.asarray(ROT),
                                                 jnp.asarray(HALF), 0.005, p),
        'ellipsoid': lambda p: sdf.ellipsoid(jnp.asarray(c), jnp.asarray(ROT),
                                             jnp.asarray(HALF), p),
        'polytope': lambda p: sdf.polytope(jnp.asarray(CUBE_N @ ROT.T), jnp.full(6, 0.03), p),
        'union': lambda p: sdf.decomposition(jnp.asarray(ell_n), jnp.asarray(ell_d),
                                             jnp.full(2, sdf.polytope_shift(sdf.BETA)), p),
        'terrain_rough': lambda p: sdf.terrain(rough, p),
        'terrain_slope': lambda p: sdf.terrain(T.slope(20.0, start=-5.0), p),
    }


def fd_errors(f, points: np.ndarray):
    """Worst gradient and Hessian errors against central differences, relative."""
    points = jnp.asarray(points, jnp.float64)
    value = jax.jit(jax.vmap(f))
    grad = jax.jit(jax.vmap(jax.grad(f)))
    hess = jax.jit(jax.vmap(jax.hessian(f)))
    g, hm = np.asarray(grad(points)), np.asarray(hess(points))
    assert np.all(np.isfinite(g)) and np.all(np.isfinite(hm))
    g_fd = np.zeros_like(g)
    h_fd = np.zeros_like(hm)
    for k in range(3):
        e = jnp.zeros(3).at[k].set(H)
        g_fd[:, k] = (np.asarray(value(points + e)) - np.asarray(value(points - e))) / (2 * H)
        h_fd[:, :, k] = (np.asarray(grad(points + e)) - np.asarray(grad(points - e))) / (2 * H)
    scale = np.maximum(np.abs(hm).max((1, 2)), 1.0)
    g_err = np.abs(g - g_fd).max(1) / scale
    h_err = np.abs(hm - h_fd).max((1, 2)) / scale
    return float(g_err.max()), float(h_err.max())


def near_surfaces(n: int, seed: int) -> np.ndarray:
    """Points within 8 cm of the origin (the primitives sit there) and on rough ground."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-0.08, 0.08, (n, 3))


@pytest.mark.parametrize('name', list(shapes()))
def test_gradient_and_hessian_match_central_differences(name):
    f = shapes()[name]
    pts = near_surfaces(200, 0)
    if name.startswith('terrain'):
        pts = pts * np.array([20.0, 20.0, 1.0]) + np.array([1.5, 0.0, 0.0])
    g_err, h_err = fd_errors(f, pts)
    assert g_err < RTOL and h_err < RTOL, (name, g_err, h_err)


def test_derivatives_are_finite_at_centres_axes_and_medial_planes():
    f = shapes()
    spots = {
        'sphere': [[0.01, 0.0, -0.01]],
        'capsule': [[0.01, -0.02, -0.04], [0.0, 0.0, 0.005], [-0.01, 0.02, 0.05]],
        'rounded_box': [[0.01, 0.0, -0.01],
                        np.array([0.01, 0.0, -0.01]) + ROT @ np.array([0.01, 0.01, 0.0])],
        'ellipsoid': [[0.01, 0.0, -0.01]],
        'polytope': [[0.0, 0.0, 0.0]],
        'union': [[0.01, 0.0, 0.01], [0.0, 0.0, 0.0]],
    }
    for name, pts in spots.items():
        v, g, hm = jax.jit(jax.vmap(lambda p: sdf.derivatives(f[name], p)))(
            jnp.asarray(np.array(pts), jnp.float64))
        assert np.all(np.isfinite(g)) and np.all(np.isfinite(hm)), name
        assert np.all(np.asarray(v) < 0), name


def test_zero_levels_sit_on_the_exact_surfaces():
    rng = np.random.default_rng(1)
    u = rng.normal(size=(4000, 3))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    c = jnp.zeros(3)
    # Sphere and ellipsoid: zero exactly on the surface, unit-length gradient there.
    sph = jax.vmap(lambda p: sdf.sphere(c, 0.03, p))(jnp.asarray(0.03 * u))
    assert np.abs(np.asarray(sph)).max() < 1e-12
    ell = lambda p: sdf.ellipsoid(c, jnp.asarray(ROT), jnp.asarray(HALF), p)  # noqa: E731
    surf = jnp.asarray((u * HALF) @ ROT.T)
    assert np.abs(np.asarray(jax.vmap(ell)(surf))).max() < 1e-12
    gn = np.linalg.norm(np.asarray(jax.vmap(jax.grad(ell))(surf)), axis=1)
    eps = sdf.ELLIPSOID_SOFTENING
    assert np.all(gn <= 1.0 + 1e-12) and np.all(gn >= 1.0 / np.sqrt(1.0 + eps * eps) - 1e-12)
    # Capsule and rounded box against their exact SDFs, within 3 mm of the surface.
    pts = rng.uniform(-0.1, 0.1, (40000, 3))
    a, b = np.array([0.0, 0.0, -0.05]), np.array([0.0, 0.0, 0.05])
    t = np.clip(pts[:, 2], -0.05, 0.05)[:, None]
    exact = np.linalg.norm(pts - t * np.array([0.0, 0.0, 1.0]), axis=1) - 0.03
    cap = np.asarray(jax.vmap(lambda p: sdf.capsule(jnp.asarray(a), jnp.asarray(b), 0.03, p))(
        jnp.asarray(pts)))
    band = np.abs(exact) < 3e-3
    assert np.abs(cap - exact)[band].max() < 2e-5
    q = np.abs(pts) - (HALF - 0.005)
    exact = np.linalg.norm(np.maximum(q, 0), axis=1) + np.minimum(q.max(1), 0) - 0.005
    box = np.asarray(jax.vmap(lambda p: sdf.rounded_box(c, jnp.eye(3), jnp.asarray(HALF),
                                                        0.005, p))(jnp.asarray(pts)))
    band = np.abs(exact) < 3e-3
    assert np.abs(box - exact)[band].max() < 0.2 * sdf.SMOOTHING
    # Polytope (a cube): on the hard cube's surface, within the stated ln(3) / 2 beta.
    on = rng.uniform(-0.03, 0.03, (20000, 3))
    k = rng.integers(0, 3, len(on))
    on[np.arange(len(on)), k] = 0.03 * rng.choice([-1.0, 1.0], len(on))
    cube = np.asarray(jax.vmap(lambda p: sdf.polytope(jnp.asarray(CUBE_N), jnp.full(6, 0.03),
                                                      p))(jnp.asarray(on)))
    assert np.abs(cube).max() <= sdf.polytope_shift(sdf.BETA) + 1e-12
    # Terrain: on a slope, the distance to the plane; on rough ground, zero on the ground.
    slope = T.slope(20.0, start=-5.0)
    p = jnp.asarray(rng.uniform(-0.5, 0.5, (100, 3)) + np.array([2.0, 0.0, 0.0]))
    n = np.array([-np.sin(np.radians(20.0)), 0.0, np.cos(np.radians(20.0))])
    plane = (np.asarray(p) - np.array([0.0, 0.0, np.tan(np.radians(20.0)) * 5.0])) @ n
    np.testing.assert_allclose(np.asarray(sdf.terrain(slope, p)), plane, atol=1e-6)
    rough = T.rough(0.05, 0.5, seed=3)
    xy = jnp.asarray(rng.uniform(-3.0, 3.0, (100, 2)))
    on_ground = jnp.concatenate([xy, rough.height(xy)[:, None]], 1)
    assert np.abs(np.asarray(sdf.terrain(rough, on_ground))).max() < 1e-12


def switch_points(values, grads, n: int, seed: int, centre=(0.0, 0.0, 0.0),
                  spread: float = 0.08, width: float = 1e-3):
    """
    Points on the switch (pieces 0 and 1 equal, the hard min's kink) and offsets within width.

    Random points around ``centre`` are moved onto phi_0 = phi_1 by Newton steps; those
    that do not get there within 1 nm, or where both pieces share a plane (same normal,
    no kink), are dropped.
    """
    rng = np.random.default_rng(seed)
    p = jnp.asarray(rng.uniform(-spread, spread, (n, 3)) + np.asarray(centre))
    for _ in range(12):
        v, g = values(p), grads(p)
        dv, dg = v[:, 0] - v[:, 1], g[:, 0] - g[:, 1]
        p = p - (dv / jnp.sum(dg * dg, 1))[:, None] * dg
    v, g = np.asarray(values(p)), np.asarray(grads(p))
    p = p[(np.abs(v[:, 0] - v[:, 1]) < 1e-9) & (np.linalg.norm(g[:, 0] - g[:, 1], axis=1) > 0.1)]
    assert len(p) >= 20, len(p)
    u = rng.normal(size=p.shape)
    return p, u / np.linalg.norm(u, axis=1, keepdims=True) * rng.uniform(0, width, (len(p), 1))


def test_union_has_no_jump_where_the_nearest_piece_changes():
    ell_n = jnp.asarray(np.stack([CUBE_N, CUBE_N]))
    ell_d = jnp.asarray([[0.06, 0.02, 0.02, 0.0, 0.02, 0.02],
                         [0.02, 0.02, 0.06, 0.02, 0.02, 0.0]])
    shift = jnp.full(2, sdf.polytope_shift(sdf.BETA))
    piece = jax.vmap(sdf.polytope, (0, 0, None, None, 0))
    values = jax.jit(jax.vmap(lambda p: piece(ell_n, ell_d, p, sdf.BETA, shift)))
    grads = jax.jit(jax.vmap(jax.jacobian(lambda p: piece(ell_n, ell_d, p, sdf.BETA, shift))))
    union = lambda p: sdf.decomposition(ell_n, ell_d, shift, p)  # noqa: E731
    on, off = switch_points(values, grads, 800, 2)
    # Within 1 mm of the switch: derivatives still match central differences ...
    g_err, h_err = fd_errors(union, np.asarray(on + off))
    assert g_err < RTOL and h_err < RTOL, (g_err, h_err)
    # ... and across it (1 micrometre either side) value and normal move by O(1 um), while
    # the hard min's normal jumps by the angle between the pieces' normals.
    step = 1e-6 * np.asarray(grads(on)[:, 0] - grads(on)[:, 1])
    step /= np.linalg.norm(step, axis=1, keepdims=True) / 1e-6
    f, g = jax.vmap(union), jax.vmap(jax.grad(union))
    dv = np.abs(np.asarray(f(on + step) - f(on - step)))
    dn = np.linalg.norm(np.asarray(g(on + step) - g(on - step)), axis=1)
    assert dv.max() < 3e-6 and dn.max() < 2e-6 / sdf.TEMPERATURE
    hard_jump = np.linalg.norm(np.asarray(grads(on + step)[:, 0] - grads(on - step)[:, 1]), axis=1)
    assert np.median(hard_jump) > 0.1
    # The blend weights are the union's gradient split by piece.
    w = np.asarray(jax.vmap(lambda v: sdf.blend_weights(v))(values(on)))
    g_mix = np.einsum('nk,nkj->nj', w, np.asarray(grads(on)))
    np.testing.assert_allclose(np.asarray(g(on)), g_mix, atol=1e-12)


def test_vectorised_evaluation_over_envs_bodies_points_matches_a_loop():
    rng = np.random.default_rng(3)
    b, p, m = 3, 2, 5
    normals = rng.normal(size=(b, p, m, 3))
    normals /= np.linalg.norm(normals, axis=-1, keepdims=True)
    offsets = rng.uniform(0.02, 0.05, (b, p, m))
    offsets[1, 1] = g1_sdf.EMPTY_OFFSET  # body 1 has one piece
    normals[1, 1] = 0.0
    shapes = sdf.PolytopeSet(jnp.asarray(normals), jnp.asarray(offsets),
                             jnp.full((b, p), sdf.polytope_shift(sdf.BETA)))
    pts = rng.uniform(-0.06, 0.06, (4, b, 7, 3))
    got = np.asarray(jax.jit(shapes.evaluate)(jnp.asarray(pts)))
    assert got.shape == (4, b, 7)
    for e in range(4):
        for i in range(b):
            for k in range(7):
                ref = float(shapes.body(i, jnp.asarray(pts[e, i, k])))
                assert abs(got[e, i, k] - ref) < 1e-12
    one = sdf.polytope(jnp.asarray(normals[1, 0]), jnp.asarray(offsets[1, 0]),
                       jnp.asarray(pts[0, 1, 0]))
    assert abs(float(one) - got[0, 1, 0]) < 1e-12  # the empty piece weighs nothing
    # Primitives map over bodies (parameters) and points with jax.vmap alike.
    centres, radii = rng.uniform(-0.02, 0.02, (b, 3)), rng.uniform(0.01, 0.03, b)
    q = rng.uniform(-0.05, 0.05, (b, 7, 3))
    per_body = jax.vmap(jax.vmap(sdf.sphere, (None, None, 0)), (0, 0, 0))
    vals = np.asarray(per_body(jnp.asarray(centres), jnp.asarray(radii), jnp.asarray(q)))
    loop = [[float(sdf.sphere(jnp.asarray(centres[i]), radii[i], jnp.asarray(q[i, k])))
             for k in range(7)] for i in range(b)]
    np.testing.assert_allclose(vals, loop, atol=1e-15)


@pytest.fixture(scope='module')
def g1_set():
    return g1_sdf.load()


def test_g1_set_covers_every_body_and_mirrors_left_to_right(g1_set):
    names, shapes = g1_set
    assert names == tuple(b.name for b in g1.BODIES)
    assert shapes.normals.shape[:1] == (len(names),)
    n = np.asarray(shapes.normals)
    for i, name in enumerate(names):
        if name.startswith('right_'):
            j = names.index(name.replace('right_', 'left_', 1))
            np.testing.assert_array_equal(n[i], n[j] * np.array([1.0, -1.0, 1.0]))
            np.testing.assert_array_equal(np.asarray(shapes.offsets[i]),
                                          np.asarray(shapes.offsets[j]))


def test_g1_decomposition_derivatives_near_piece_switches(g1_set):
    names, shapes = g1_set
    i = names.index('torso_link')
    normals = jnp.asarray(shapes.normals[i], jnp.float64)
    offsets = jnp.asarray(shapes.offsets[i], jnp.float64)
    shift = jnp.asarray(shapes.shift[i], jnp.float64)
    piece = jax.vmap(sdf.polytope, (0, 0, None, None, 0))

    def top2(p):
        v = piece(normals, offsets, p, shapes.beta, shift)
        return jnp.sort(v)[:2]

    values = jax.jit(jax.vmap(top2))
    grads = jax.jit(jax.vmap(jax.jacobian(top2)))
    on, off = switch_points(values, grads, 200, 4, centre=(0.0, 0.0, 0.2), spread=0.15)
    body = lambda p: sdf.decomposition(normals, offsets, shift, p, shapes.beta,  # noqa: E731
                                       shapes.temperature)
    g_err, h_err = fd_errors(body, np.asarray(on + off))
    assert g_err < RTOL and h_err < RTOL, (g_err, h_err)


SKIN_MAX_MM = 5.0
"""Largest |SDF| at a link's convex-hull vertices allowed (README: the measured table)."""
OUT_MAX_MM = 3.5
"""Largest distance of any mesh vertex outside its link's SDF allowed."""


def test_g1_fit_error_against_the_official_meshes(g1_set):
    if not meshes.OFFICIAL_XML.is_file():
        pytest.skip(f'{meshes.OFFICIAL_XML} is absent (reference material is not part of the '
                    'repository): the fit cannot be checked against the meshes')
    errors = g1_sdf.fit_errors(g1_set, meshes.link_vertices(parts=g1_sdf.PARTS))
    worst = {k: max(e[k] for e in errors.values()) for k in ('skin_max', 'out_max')}
    assert worst['skin_max'] < SKIN_MAX_MM and worst['out_max'] < OUT_MAX_MM, \
        g1_sdf.error_table(errors)
