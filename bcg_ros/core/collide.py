"""
Whole-body contacts from smooth SDFs: broad phase, narrow phase and blending, all in JAX.

Every body is a soft-min union of smooth convex polytopes (:mod:`bcg_ros.core.sdf`; the
G1's are fitted to its meshes, :mod:`bcg_ros.robot.g1_sdf`). From those shapes,
:func:`geometry` derives, once and offline, what the contact pipeline needs per body:
``V`` surface points (the polytopes' corners that lie on the union's skin, projected
onto its smooth zero level and thinned by farthest-point sampling), ``E`` edges
between them (the longest edges of their convex hull) and a bounding sphere.

Per env and physics step, with fixed shapes and no data-dependent control flow (it
jits, vmaps and differentiates):

- **Broad phase.** Each body's bounding-sphere clearance above the terrain; the ``K``
  lowest bodies are kept (``lax.top_k`` over K + 1), and each gets a hand-over weight
  ``1 - exp(-(x / w)^3)``, x its clearance's margin below the (K + 1)-th lowest. A
  body that drops out of the K had weight 0 (and two zero derivatives) as it left and
  one that enters starts at 0, so forces stay continuous across a change of the set;
  the other kept bodies' weights change slope there, by ``3 x^2 exp(-x^3) / w``, which
  is nil for a body more than about 3 w below the one left out. Self-collision pairs
  (the legs' links, left against right) are chosen the same way by the gap between
  their bounding spheres.
- **Narrow phase.** Vertex-SDF contacts: each kept body's surface points in the other
  side's SDF (the terrain's, :func:`bcg_ros.core.sdf.terrain`, or the other body's
  polytope union). Edge-SDF contacts: along each edge, S interior samples and their
  softmax weights ``exp(-phi / T)``; the contact is the weighted mean of the samples
  and of their distances, a smooth stand-in for the deepest point of the edge.
- **Blending over a convex decomposition** is the union's soft-min itself: a point's
  distance and normal (the gradient) are the pieces' softmax-weighted values, so
  neither jumps where the nearest piece changes.

The result (:class:`Contacts`) lists, for every candidate contact, the two bodies (the
world is body 0), the point, the penetration depth (positive inside), the normal (the
direction of the force on the first body) and the weight. :mod:`bcg_ros.core.sim`
feeds them to the same force law as its foot spheres (``SimConfig.whole_body``).
"""

from dataclasses import dataclass, field
from typing import Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from bcg_ros.core import contact, sdf


@dataclass(frozen=True)
class CollideConfig:
    """Sizes and widths of the whole-body contact pipeline."""

    bodies: int = 4
    """K: bodies per env kept by the terrain broad phase."""
    pairs: int = 2
    """Self-collision pairs per env kept by the broad phase (0: none)."""
    vertices: int = 16
    """V: surface points per body (vertex-SDF contacts)."""
    edges: int = 12
    """E: edges per body (edge-SDF contacts)."""
    edge_samples: int = 8
    """S: samples along an edge for its smooth deepest point."""
    edge_temperature: float = 2e-3
    """T [m] of the softmax along an edge."""
    handover: float = 0.02
    """w [m]: clearance margin over which a kept body's weight rises from 0 to 1."""
    exclude: Tuple[str, ...] = ('left_ankle_roll_link', 'right_ankle_roll_link')
    """Bodies left to other contacts (the foot spheres)."""

    def __post_init__(self):
        """Reject sizes the pipeline cannot run with, naming the field."""
        for name in ('bodies', 'vertices', 'edge_samples'):
            if int(getattr(self, name)) < 1:
                raise ValueError(f'CollideConfig.{name}: must be >= 1, got {getattr(self, name)}')
        for name in ('pairs', 'edges'):
            if int(getattr(self, name)) < 0:
                raise ValueError(f'CollideConfig.{name}: must be >= 0, got {getattr(self, name)}')
        for name in ('edge_temperature', 'handover'):
            if not getattr(self, name) > 0:
                raise ValueError(f'CollideConfig.{name}: must be > 0, got {getattr(self, name)}')


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Geometry:
    """Collision bodies [B]: shapes, surface points, edges, bounding spheres (body frames)."""

    shapes: sdf.PolytopeSet
    """[B] SDFs."""
    vertices: jax.Array
    """[B, V, 3] surface points."""
    edges: jax.Array
    """[B, E, 2, 3] edge end points."""
    center: jax.Array
    """[B, 3] bounding-sphere centres."""
    radius: jax.Array
    """[B] bounding-sphere radii [m]."""
    body: Tuple[int, ...] = field(metadata=dict(static=True))
    """Model body id of each collision body."""
    pairs: Tuple[Tuple[int, int], ...] = field(metadata=dict(static=True))
    """Self-collision candidates (indices into the collision bodies)."""
    config: CollideConfig = field(metadata=dict(static=True))


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Contacts:
    """C candidate contacts of one env; a contact pushes ``body_a`` along ``normal``."""

    body_a: jax.Array
    """[C] model body id the normal force acts on along +normal."""
    body_b: jax.Array
    """[C] model body id it reacts on (0: the world)."""
    point: jax.Array
    """[C, 3] world contact point."""
    depth: jax.Array
    """[C] penetration [m], positive inside."""
    normal: jax.Array
    """[C, 3] unit world normal."""
    weight: jax.Array
    """[C] broad-phase hand-over weight in [0, 1]."""


# --- offline: surface points and edges of a polytope union ---------------------------


def polytope_corners(normals: np.ndarray, offsets: np.ndarray, tol: float = 1e-7) -> np.ndarray:
    """Corners [N, 3] of the polytope {p : normals . p <= offsets}, planes three at a time."""
    m = len(normals)
    tri = np.array([(i, j, k) for i in range(m) for j in range(i + 1, m)
                    for k in range(j + 1, m)]).reshape(-1, 3)
    a, b = normals[tri], offsets[tri]                                   # [T, 3, 3], [T, 3]
    ok = np.abs(np.linalg.det(a)) > 1e-9
    pts = np.linalg.solve(a[ok], b[ok][..., None])[..., 0]
    pts = pts[np.all(pts @ normals.T <= offsets + tol, axis=1)]
    if not len(pts):
        return np.zeros((0, 3))
    _, keep = np.unique(np.round(pts / 1e-6), axis=0, return_index=True)
    return pts[np.sort(keep)]


def farthest_points(points: np.ndarray, n: int) -> np.ndarray:
    """``n`` of ``points`` chosen by farthest-point sampling (repeats when there are fewer)."""
    if len(points) == 0:
        raise ValueError('farthest_points: no points')
    chosen = [int(np.argmax(np.linalg.norm(points - points.mean(0), axis=1)))]
    dist = np.linalg.norm(points - points[chosen[0]], axis=1)
    while len(chosen) < n:
        nxt = int(np.argmax(dist))
        chosen.append(nxt)
        dist = np.minimum(dist, np.linalg.norm(points - points[nxt], axis=1))
    return points[chosen]


def _project(shapes: sdf.PolytopeSet, index: int, points: np.ndarray,
             iterations: int = 8) -> np.ndarray:
    """Points moved onto body ``index``'s smooth zero level by Newton steps along the gradient."""
    p = jnp.asarray(points, shapes.normals.dtype)
    for _ in range(iterations):
        phi, g = _sdf_and_grad(shapes, index, p)
        p = p - (phi / jnp.maximum(jnp.sum(g * g, -1), 1e-12))[:, None] * g
    return np.asarray(p, np.float64)


def body_surface(shapes: sdf.PolytopeSet, index: int, vertices: int,
                 edges: int) -> Tuple[np.ndarray, np.ndarray]:
    """Surface points [V, 3] and edges [E, 2, 3] of body ``index`` of ``shapes``."""
    from scipy.spatial import ConvexHull

    normals = np.asarray(shapes.normals[index], np.float64)
    offsets = np.asarray(shapes.offsets[index], np.float64)
    corners = [polytope_corners(n, d) for n, d in zip(normals, offsets) if np.any(d > -100.0)]
    pts = np.concatenate([c for c in corners if len(c)], axis=0)
    # Corners of a piece buried in another piece are not on the union's skin.
    phi = np.asarray(_sdf_and_grad(shapes, index, jnp.asarray(pts, shapes.normals.dtype))[0])
    pts = pts[phi > -1e-3]
    pts = pts[ConvexHull(pts).vertices]
    pts = _project(shapes, index, farthest_points(pts, vertices))
    if edges == 0:
        return pts, np.zeros((0, 2, 3))
    hull = ConvexHull(pts)
    pairs = {tuple(sorted((int(s[a]), int(s[b])))) for s in hull.simplices
             for a, b in ((0, 1), (1, 2), (0, 2))}
    pairs = sorted(pairs, key=lambda ij: -np.linalg.norm(pts[ij[0]] - pts[ij[1]]))
    pairs = (pairs * (edges // max(len(pairs), 1) + 1))[:edges]
    return pts, np.stack([pts[list(ij)] for ij in pairs])


def geometry(names: Sequence[str], shapes: sdf.PolytopeSet, body_ids: Sequence[int],
             config: CollideConfig = CollideConfig(),
             pairs: Sequence[Tuple[str, str]] = (), dtype=jnp.float32) -> Geometry:
    """
    The collision bodies of ``shapes`` (one per name, model ids ``body_ids``) but ``exclude``.

    ``pairs``: body names that may collide with each other (self-collision candidates).
    """
    keep = [i for i, n in enumerate(names) if n not in config.exclude]
    if not keep:
        raise ValueError('collide.geometry: every body is excluded')
    verts, edges = zip(*(body_surface(shapes, i, config.vertices, config.edges) for i in keep))
    verts, edges = np.stack(verts), np.stack(edges).reshape(len(keep), config.edges, 2, 3)
    lo, hi = verts.min(1), verts.max(1)
    center = 0.5 * (lo + hi)
    radius = np.linalg.norm(verts - center[:, None], axis=-1).max(1)
    index = {names[i]: k for k, i in enumerate(keep)}
    missing = [n for pair in pairs for n in pair if n not in index]
    if missing:
        raise ValueError(f'collide.geometry: self-collision bodies {missing} are not '
                         'collision bodies')
    sub = jax.tree.map(lambda x: jnp.asarray(np.asarray(x)[keep], dtype), shapes)
    arr = lambda x: jnp.asarray(x, dtype)                             # noqa: E731
    return Geometry(sub, arr(verts), arr(edges), arr(center), arr(radius),
                    tuple(int(body_ids[i]) for i in keep),
                    tuple((index[a], index[b]) for a, b in pairs), config)


# --- per env, per step --------------------------------------------------------------


def handover_weights(clearance: jax.Array, k: int, width: float) -> Tuple[jax.Array, jax.Array]:
    """
    Indices [k] of the ``k`` smallest ``clearance`` and their hand-over weights [k].

    Weight ``1 - exp(-(x / width)^3)``, x the margin below the (k + 1)-th smallest: 0
    where a member is about to swap with the first one left out, so the weighted set
    changes continuously. All weights are 1 when nothing is left out.
    """
    n = clearance.shape[-1]
    if k >= n:
        return jnp.arange(n), jnp.ones((n,), clearance.dtype)
    neg, idx = jax.lax.top_k(-clearance, k + 1)
    margin = jnp.maximum(neg[:k] - neg[k], 0.0) / width
    return idx[:k], -jnp.expm1(-margin ** 3)


def _to_world(pos: jax.Array, rot: jax.Array, local: jax.Array) -> jax.Array:
    """Points ``local`` [..., N, 3] (or [..., N, 2, 3]) of frames ``pos`` [..., 3], ``rot``."""
    flat = local.reshape(local.shape[:len(pos.shape) - 1] + (-1, 3))
    world = pos[..., None, :] + jnp.einsum('...ij,...nj->...ni', rot, flat)
    return world.reshape(local.shape)


def _edge_contacts(phi_fn, ends: jax.Array, samples: int, temperature: float):
    """Smooth deepest point [E, 3] and its distance [E] along edges ``ends`` [E, 2, 3]."""
    t = (jnp.arange(samples, dtype=ends.dtype) + 0.5) / samples
    pts = ends[:, :1] + t[None, :, None] * (ends[:, 1:] - ends[:, :1])      # [E, S, 3]
    phi = phi_fn(pts)                                                         # [E, S]
    w = jax.nn.softmax(-phi / temperature, -1)
    return jnp.einsum('es,esk->ek', w, pts), jnp.sum(w * phi, -1)


def _frames(geom: Geometry, xpos: jax.Array, xmat: jax.Array):
    """Collision bodies' positions [B, 3], rotations [B, 3, 3], bounding-sphere centres."""
    ids = np.asarray(geom.body)
    pos, rot = xpos[ids], xmat[ids]
    return pos, rot, pos + jnp.einsum('bij,bj->bi', rot, geom.center)


def terrain_contacts(geom: Geometry, xpos: jax.Array, xmat: jax.Array,
                     ground: contact.Terrain) -> Contacts:
    """Contacts [K (V + E)] of the K bodies nearest the ground, from the bodies' frames."""
    c = geom.config
    ids = np.asarray(geom.body)
    pos, rot, centers = _frames(geom, xpos, xmat)
    clearance = sdf.terrain(ground, centers) - geom.radius
    sel, weight = handover_weights(clearance, c.bodies, c.handover)
    p, r = pos[sel], rot[sel]
    verts = _to_world(p, r, geom.vertices[sel])                               # [K, V, 3]
    edges = _to_world(p, r, geom.edges[sel])                                  # [K, E, 2, 3]
    phi_v = sdf.terrain(ground, verts)
    pt_e, phi_e = jax.vmap(lambda e: _edge_contacts(
        lambda x: sdf.terrain(ground, x), e, c.edge_samples, c.edge_temperature))(edges)
    point = jnp.concatenate([verts, pt_e], 1)                                 # [K, V + E, 3]
    phi = jnp.concatenate([phi_v, phi_e], 1)
    k, n = phi.shape
    body = jnp.broadcast_to(jnp.asarray(ids)[sel][:, None], (k, n))
    normal = ground.normal(point[..., :2])
    return Contacts(body.reshape(-1), jnp.zeros((k * n,), body.dtype), point.reshape(-1, 3),
                    -phi.reshape(-1), normal.reshape(-1, 3),
                    jnp.broadcast_to(weight[:, None], (k, n)).reshape(-1))


def _body_sdf(shapes: sdf.PolytopeSet, index: jax.Array, local: jax.Array) -> jax.Array:
    """SDF of collision body ``index`` (traced) at points ``local`` [..., 3] in its frame."""
    flat = local.reshape(-1, 3)
    return jax.vmap(lambda p: shapes.body(index, p))(flat).reshape(local.shape[:-1])


@jax.jit
def _sdf_and_grad(shapes: sdf.PolytopeSet, index, points: jax.Array):
    """Value [N] and gradient [N, 3] of body ``index``'s SDF at ``points`` [N, 3] (offline use)."""
    return jax.vmap(jax.value_and_grad(lambda p: _body_sdf(shapes, index, p)))(points)


def self_contacts(geom: Geometry, xpos: jax.Array, xmat: jax.Array) -> Optional[Contacts]:
    """Contacts [2 P (V + E)] of the P closest candidate pairs, each body in the other's SDF."""
    c = geom.config
    if not geom.pairs or c.pairs == 0:
        return None
    ids = np.asarray(geom.body)
    pa, pb = (np.asarray(x) for x in zip(*geom.pairs))
    pos, rot, centers = _frames(geom, xpos, xmat)
    gap = (jnp.linalg.norm(centers[pa] - centers[pb], axis=-1)
           - geom.radius[pa] - geom.radius[pb])
    sel, weight = handover_weights(gap, c.pairs, c.handover)
    out = []
    for first, second in ((pa, pb), (pb, pa)):
        a, b = jnp.asarray(first)[sel], jnp.asarray(second)[sel]

        def one(a, b):
            def phi_b(x):                                  # world points in b's SDF
                return _body_sdf(geom.shapes, b, sdf.to_body(pos[b], rot[b], x))
            verts = _to_world(pos[a], rot[a], geom.vertices[a])
            edges = _to_world(pos[a], rot[a], geom.edges[a])
            pt_e, phi_e = _edge_contacts(phi_b, edges, c.edge_samples, c.edge_temperature)
            # The force on a points out of b: b's SDF gradient, in world axes.
            phi_one = lambda x: phi_b(x[None])[0]                     # noqa: E731
            phi_v, grad_v = jax.vmap(jax.value_and_grad(phi_one))(verts)
            point = jnp.concatenate([verts, pt_e], 0)
            phi = jnp.concatenate([phi_v, phi_e], 0)
            grad = jnp.concatenate([grad_v, jax.vmap(jax.grad(phi_one))(pt_e)], 0)
            normal = grad / jnp.linalg.norm(grad, axis=-1, keepdims=True)
            return point, phi, normal

        point, phi, normal = jax.vmap(one)(a, b)                              # [P, N, ...]
        n = phi.shape[1]
        out.append(Contacts(
            jnp.repeat(jnp.asarray(ids)[a], n), jnp.repeat(jnp.asarray(ids)[b], n),
            point.reshape(-1, 3), -phi.reshape(-1), normal.reshape(-1, 3),
            jnp.repeat(weight, n)))
    return concat(out)


def concat(parts: Sequence[Optional[Contacts]]) -> Contacts:
    """One :class:`Contacts` of several (None entries skipped)."""
    parts = [p for p in parts if p is not None]
    return jax.tree.map(lambda *xs: jnp.concatenate(xs, 0), *parts)


def whole_body(geom: Geometry, xpos: jax.Array, xmat: jax.Array,
               ground: contact.Terrain) -> Contacts:
    """Terrain and self-collision contacts of one env from its bodies' frames."""
    return concat([terrain_contacts(geom, xpos, xmat, ground), self_contacts(geom, xpos, xmat)])


def count(geom: Optional[Geometry]) -> int:
    """Number of candidate contacts :func:`whole_body` gives per env (0 without geometry)."""
    if geom is None:
        return 0
    c = geom.config
    per_body = c.vertices + c.edges
    pairs = min(c.pairs, len(geom.pairs)) if geom.pairs else 0
    return min(c.bodies, len(geom.body)) * per_body + 2 * pairs * per_body


LEG_LINKS = ('hip_pitch_link', 'hip_roll_link', 'hip_yaw_link', 'knee_link',
             'ankle_pitch_link', 'ankle_roll_link')


def g1_leg_pairs(exclude: Sequence[str] = ()) -> Tuple[Tuple[str, str], ...]:
    """Left-leg against right-leg links (the G1's legs collide), less ``exclude``."""
    return tuple((f'left_{a}', f'right_{b}') for a in LEG_LINKS for b in LEG_LINKS
                 if f'left_{a}' not in exclude and f'right_{b}' not in exclude)
