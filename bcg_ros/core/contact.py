"""
Smooth sphere-terrain contact: depth, activation, normal and friction force.

The ground is anything with a height and a normal at a horizontal point
(:class:`Terrain`): :class:`Plane`, or a smooth heightfield
(:class:`bcg_ros.core.terrain.HeightField`: slopes, steps, rough ground, files).

Normal force of one sphere at penetration depth ``d`` [m] (positive when
penetrating) and penetration rate ``d_dot`` [m/s]::

    f_n = s_k(d) * c * (b + softplus(k d)) * max(0, 1 + alpha * d_dot)
    s_k(d) = 1 / (1 + exp(-k d))

The activation ``s_k`` scales the contact's impulse (impulse = f_n * dt). The
factor ``c (b + softplus(k d))`` makes the force grow like ``c k d`` once the
sphere is well inside (stiffness c k: k is the contact stiffness), and makes the
resting depth scale like 1/k (s_k and softplus depend on ``k d`` only), so k
sets both how sharp the contact is and how deep the feet sink. The last factor
is Hunt-Crossley damping: it dissipates on impact and never pulls.

Friction is Coulomb, smoothed: ``f_t = -mu f_n v_t / sqrt(|v_t|^2 + eps^2)``.
"""

from dataclasses import dataclass, field
from typing import Protocol

import jax
import jax.numpy as jnp


class Terrain(Protocol):
    """The ground as seen by a contact sphere."""

    def height(self, xy: jax.Array) -> jax.Array:
        """Ground height [m] below horizontal points ``xy`` [..., 2]."""

    def normal(self, xy: jax.Array) -> jax.Array:
        """Upward unit normal [..., 3] of the ground at ``xy`` [..., 2]."""


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Plane:
    """Flat ground ``z = z0``."""

    z0: jax.Array = field(default_factory=lambda: jnp.zeros(()))
    """Ground height [m]."""

    def height(self, xy: jax.Array) -> jax.Array:
        """Ground height below ``xy``: ``z0`` everywhere."""
        return jnp.broadcast_to(self.z0, xy.shape[:-1]).astype(xy.dtype)

    def normal(self, xy: jax.Array) -> jax.Array:
        """Upward normal: +z everywhere."""
        n = jnp.zeros(xy.shape[:-1] + (3,), xy.dtype)
        return n.at[..., 2].set(1.0)


@dataclass(frozen=True)
class ContactConfig:
    """Parameters of the smooth contact model (see the module docstring)."""

    k: float = 300.0
    """Contact stiffness [1/m]: sharpness of s_k(d); 50 is soft, 300 deployable."""
    force_scale: float = 30.0
    """c [N]: force per sphere at k d = 0 is 0.85 c; stiffness when deep is c k [N/m]."""
    damping: float = 5.0
    """alpha [s/m]: Hunt-Crossley damping, relative force increase per m/s of approach."""
    friction: float = 1.0
    """mu: Coulomb friction coefficient (the MJCF's foot-sphere friction)."""
    friction_eps: float = 0.01
    """eps [m/s]: slip speed below which friction is smoothed towards zero."""
    offset: float = 1.0
    """b: offset of the force shape; 1 gives a resting depth of about 0.73 / k [m] for the G1."""


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class ContactParams:
    """ContactConfig as arrays, so one compiled simulator serves every k."""

    k: jax.Array
    force_scale: jax.Array
    damping: jax.Array
    friction: jax.Array
    friction_eps: jax.Array
    offset: jax.Array

    @staticmethod
    def from_config(cfg: ContactConfig, dtype=jnp.float32) -> 'ContactParams':
        """Arrays of ``dtype`` holding the fields of ``cfg``."""
        return ContactParams(*(jnp.asarray(getattr(cfg, f), dtype) for f in (
            'k', 'force_scale', 'damping', 'friction', 'friction_eps', 'offset')))


def activation(d: jax.Array, k: jax.Array) -> jax.Array:
    """s_k(d) = 1 / (1 + exp(-k d)): how much of the contact is on at depth d."""
    return jax.nn.sigmoid(k * d)


def sphere_depth(center: jax.Array, radius: float, terrain: Terrain):
    """
    Penetration depth [...], upward normal [..., 3] and contact point [..., 3].

    Depth is measured along the vertical (exact for a plane, a good approximation
    for gentle terrain); the contact point is the sphere's lowest point along
    the normal.
    """
    xy = center[..., :2]
    n = terrain.normal(xy)
    depth = radius - (center[..., 2] - terrain.height(xy)) * n[..., 2]
    point = center - radius * n
    return depth, n, point


def penetration_totals(depth, xp=jnp):
    """
    Sum [mm] and count of the penetrating contacts among ``depth`` [..., S] (m, positive in).

    The mean penetration is the total sum over the total count, over whatever is pooled
    (steps, envs, runs): only penetrating contacts count, in training and in MuJoCo.
    """
    inside = depth > 0
    return (1e3 * xp.sum(xp.where(inside, depth, 0.0), axis=-1),
            xp.sum(inside, axis=-1).astype(depth.dtype))


def mean_penetration(total_mm, count, xp=jnp):
    """Mean penetration [mm] of pooled :func:`penetration_totals`; NaN if nothing penetrated."""
    total, n = xp.sum(total_mm), xp.sum(count)
    return xp.where(n > 0, total / xp.maximum(n, 1), xp.nan)


def normal_force(depth: jax.Array, depth_rate: jax.Array, p: ContactParams) -> jax.Array:
    """f_n [N] >= 0 of each sphere (module docstring)."""
    kd = p.k * depth
    spring = p.force_scale * jax.nn.sigmoid(kd) * (p.offset + jax.nn.softplus(kd))
    return spring * jax.nn.relu(1.0 + p.damping * depth_rate)


def friction_force(f_n: jax.Array, v_t: jax.Array, p: ContactParams) -> jax.Array:
    """Smoothed Coulomb friction [..., 3] opposing the tangential velocity v_t."""
    speed = jnp.sqrt(jnp.sum(v_t * v_t, axis=-1, keepdims=True) + p.friction_eps ** 2)
    return -p.friction * f_n[..., None] * v_t / speed


def sphere_forces(depth, normal, velocity, p: ContactParams):
    """World contact force [..., 3] and normal force [...] on spheres moving at ``velocity``."""
    v_n = jnp.sum(velocity * normal, axis=-1)
    f_n = normal_force(depth, -v_n, p)
    v_t = velocity - v_n[..., None] * normal
    force = f_n[..., None] * normal + friction_force(f_n, v_t, p)
    return force, f_n
