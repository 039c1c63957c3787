"""
Signed distance functions for contact, twice continuously differentiable everywhere.

Convention: ``phi(p) < 0`` inside a shape, ``> 0`` outside, zero on its surface, for a
point ``p`` [3] in the shape's (its body's) frame [m]; near the surface ``grad phi`` is
the outward normal. Every function here is a pure function of (shape parameters,
point), written for one point, so ``jax.vmap`` maps it over points, bodies and envs
and ``jax.grad`` / ``jax.hessian`` give the normal and the curvature
(:func:`derivatives`). :class:`PolytopeSet` evaluates a whole robot's bodies at once.

The exact distance functions of these shapes have kinks: a sphere's centre, a capsule's
axis and the planes through its end points, a box's edges and its medial surfaces
inside, and, in a union, wherever the nearest piece changes. A contact model that
differentiates its depth twice (a stiffness, and a gradient through it) would see
those kinks as jumps, so each is replaced by a smooth operation with a stated width:

- smooth norm ``|x|_eps = sqrt(|x|^2 + eps^2)``, with the radius compensated
  (``sqrt(r^2 + eps^2)``) so a round surface stays exactly where it is;
- smooth clamp of width ``w`` (two softplus ramps), for the nearest point on a capsule's
  segment and a box's core, off the exact nearest point only within a few ``w`` of the
  clamp's ends;
- smooth max, log-sum-exp with sharpness ``beta``: ``max <= lse <= max + ln(k) / beta``
  for ``k`` arguments near the maximum, for convex polytopes (a max over half-spaces);
- soft-min with temperature ``tau``: ``min - tau ln(k) <= softmin <= min``, for a union
  of convex pieces; its gradient is the softmax-weighted mean of the pieces' normals
  (:func:`blend_weights`), so neither value nor normal jumps when the nearest piece
  changes.

Terrain (:func:`terrain`): the vertical distance to the ground times the normal's z
(exact on a plane, first order on curved ground), over any
:class:`bcg_ros.core.contact.Terrain`, e.g. the C2 spline
:class:`bcg_ros.core.terrain.HeightField`.
"""

import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Tuple

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp

from bcg_ros.core import contact

SOFTENING = 1e-3
"""eps [m] of the smooth norm: curvature at a centre or on an axis is about 1 / eps."""
SMOOTHING = 5e-4
"""w [m] of the smooth clamps and of a box's smooth max (its edges are rounded over w)."""
ELLIPSOID_SOFTENING = 0.25
"""eps of the ellipsoid's scaled norms, in units of its radii (only deep inside)."""
BETA = 1000.0
"""Default polytope sharpness [1/m]: faces meet in rounded edges about 1 / beta wide."""
TEMPERATURE = 1e-3
"""Default soft-min temperature [m] of a union of convex pieces."""


def smooth_norm(x: jax.Array, eps: float = SOFTENING) -> jax.Array:
    """``sqrt(|x|^2 + eps^2)`` over the last axis: |x| far from 0, smooth at 0."""
    return jnp.sqrt(jnp.sum(x * x, -1) + eps * eps)


def smooth_clamp(u: jax.Array, lo, hi, width: float = SMOOTHING) -> jax.Array:
    """``clamp(u, lo, hi)`` with its corners rounded over ``width`` (C-infinity)."""
    return lo + width * (jax.nn.softplus((u - lo) / width) - jax.nn.softplus((u - hi) / width))


def sphere(center: jax.Array, radius, p: jax.Array, eps: float = SOFTENING) -> jax.Array:
    """Sphere of ``radius`` [m] around ``center`` [3]; exact zero level, smooth at the centre."""
    return smooth_norm(p - center, eps) - jnp.sqrt(radius * radius + eps * eps)


def capsule(a: jax.Array, b: jax.Array, radius, p: jax.Array, width: float = SMOOTHING,
            eps: float = SOFTENING) -> jax.Array:
    """
    Capsule: the points within ``radius`` [m] of the segment ``a``-``b`` [3] (a != b).

    The nearest point on the segment is found by a smooth clamp (no Hessian jump on the
    planes through the end points), the radial distance by a smooth norm (none on the
    axis); along the cylinder the zero level is exact.
    """
    e = b - a
    length = jnp.linalg.norm(e)
    axis = e / length
    u = smooth_clamp(jnp.dot(p - a, axis), 0.0, length, width)
    return sphere(a + u * axis, radius, p, eps)


def rounded_box(center: jax.Array, rot: jax.Array, half: jax.Array, radius, p: jax.Array,
                width: float = SMOOTHING) -> jax.Array:
    """
    Box of half extents ``half`` [3] whose edges are rounded by ``radius`` [m] (< half).

    ``rot`` [3, 3]: its columns are the box axes in the body frame. The exact SDF of the
    core box (``half - radius``) is ``|max(q, 0)| + min(max_i q_i, 0)`` with ``q = |x| -
    core``; here ``|x|``, both maxima and the min are smooth over ``width``, which
    rounds the core's edges by about ``width`` on top of ``radius``.
    """
    x = (p - center) @ rot
    core = half - radius
    q = jnp.sqrt(x * x + width * width) - jnp.sqrt(core * core + width * width)
    out = width * jax.nn.softplus(q / width)
    outside = smooth_norm(out, 1e-2 * width)
    m = width * logsumexp(q / width)
    inside = m - width * jax.nn.softplus(m / width)
    return outside + inside - radius


def ellipsoid(center: jax.Array, rot: jax.Array, radii: jax.Array, p: jax.Array,
              eps: float = ELLIPSOID_SOFTENING) -> jax.Array:
    """
    Ellipsoid with semi-axes ``radii`` [3] along the columns of ``rot`` [3, 3].

    The usual bound ``k0 (k0 - 1) / k1`` with ``k0 = |x / r|`` and ``k1 = |x / r^2|``:
    zero exactly on the surface, a gradient of nearly unit length there (the softening
    shortens it by at most a factor sqrt(1 + eps^2)), about the distance nearby, and
    smooth at the centre, where both norms are softened by ``eps`` (relative to the radii).
    """
    x = (p - center) @ rot
    k0 = smooth_norm(x / radii, eps) / math.sqrt(1.0 + eps * eps)
    k1 = smooth_norm(x / (radii * radii), eps / jnp.max(radii)) / (1.0 + eps * eps)
    return k0 * (k0 - 1.0) / k1


def polytope_shift(beta: float) -> float:
    """
    Offset [m] that centres a smooth polytope's zero level on the hard one's: ln(3) / 2 beta.

    Log-sum-exp exceeds the max by 0 on a face, ln 2 / beta on an edge and ln 3 / beta
    at a vertex where three planes meet; subtracting half the vertex excess leaves the
    zero level within ln(3) / 2 beta (plane distance) of the hard polytope's everywhere
    but at vertices of four or more planes.
    """
    return math.log(3.0) / (2.0 * beta)


def polytope(normals: jax.Array, offsets: jax.Array, p: jax.Array, beta: float = BETA,
             shift: Optional[float] = None) -> jax.Array:
    """
    Smooth convex polytope ``{p : n_i . p <= d_i}``: ``lse_beta(n_i . p - d_i) - shift``.

    ``normals`` [M, 3] unit outward normals, ``offsets`` [M] d_i [m], ``beta`` [1/m] the
    sharpness, ``shift`` [m] default :func:`polytope_shift`. Inside, max_i (n_i . p -
    d_i) is the exact negative distance to the surface; outside it is a lower bound.
    """
    shift = polytope_shift(beta) if shift is None else shift
    return logsumexp(beta * (normals @ p - offsets), -1) / beta - shift


def smooth_union(values: jax.Array, temperature: float = TEMPERATURE) -> jax.Array:
    """Soft-min over the last axis, ``-tau ln sum exp(-phi / tau)``: within tau ln k below min."""
    return -temperature * logsumexp(-values / temperature, -1)


def blend_weights(values: jax.Array, temperature: float = TEMPERATURE) -> jax.Array:
    """Each piece's share of a soft-min [..., k] (its gradient): softmax of ``-phi / tau``."""
    return jax.nn.softmax(-values / temperature, -1)


def decomposition(normals: jax.Array, offsets: jax.Array, shift: jax.Array, p: jax.Array,
                  beta: float = BETA, temperature: float = TEMPERATURE) -> jax.Array:
    """A body as a smooth union of smooth convex polytopes: normals [P, M, 3], offsets [P, M]."""
    pieces = jax.vmap(polytope, (0, 0, None, None, 0))(normals, offsets, p, beta, shift)
    return smooth_union(pieces, temperature)


def terrain(ground: contact.Terrain, p: jax.Array) -> jax.Array:
    """
    Signed distance of ``p`` [..., 3] (world frame) from the ground, positive above.

    ``(z - h(x, y)) n_z``: exact for a plane at any tilt; on curved ground the error
    grows like the curvature times the squared distance, so it is small where contact
    happens. Smooth wherever the ground's height is twice differentiable.
    """
    xy = p[..., :2]
    return (p[..., 2] - ground.height(xy)) * ground.normal(xy)[..., 2]


def derivatives(f: Callable[[jax.Array], jax.Array],
                p: jax.Array) -> Tuple[jax.Array, jax.Array, jax.Array]:
    """Value, gradient [3] and Hessian [3, 3] of a scalar SDF ``f`` at one point ``p`` [3]."""
    value, grad = jax.value_and_grad(f)(p)
    return value, grad, jax.hessian(f)(p)


def to_body(pos: jax.Array, rot: jax.Array, points: jax.Array) -> jax.Array:
    """World points [..., 3] in a body's frame at ``pos`` [3] with axes ``rot`` [3, 3]."""
    return (points - pos) @ rot


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class PolytopeSet:
    """
    Bodies [B] each made of P smooth convex polytopes of M planes, blended by soft-min.

    A body with fewer pieces pads with empty ones (normals 0, offsets -1 km), which sit
    a kilometre outside and so never take weight in the soft-min.
    """

    normals: jax.Array
    """[B, P, M, 3] unit outward plane normals in the body frame."""
    offsets: jax.Array
    """[B, P, M] plane offsets d [m]: piece = {p : normals . p <= offsets}."""
    shift: jax.Array
    """[B, P] offset [m] subtracted from each piece's log-sum-exp."""
    beta: float = field(default=BETA, metadata=dict(static=True))
    """Sharpness [1/m] of every polytope."""
    temperature: float = field(default=TEMPERATURE, metadata=dict(static=True))
    """Soft-min temperature [m] of the union of a body's pieces."""

    def body(self, index, p: jax.Array) -> jax.Array:
        """SDF of body ``index`` (an int, or traced) at one point ``p`` [3] in its frame."""
        return decomposition(self.normals[index], self.offsets[index], self.shift[index], p,
                             self.beta, self.temperature)

    def evaluate(self, points: jax.Array) -> jax.Array:
        """SDF [..., B, N] of points [..., B, N, 3], each in its own body's frame."""
        s = jnp.einsum('bpmk,...bnk->...bnpm', self.normals.astype(points.dtype), points)
        s = s - self.offsets.astype(points.dtype)[:, None]
        shift = self.shift.astype(points.dtype)[:, None]
        pieces = logsumexp(self.beta * s, -1) / self.beta - shift
        return smooth_union(pieces, self.temperature)
