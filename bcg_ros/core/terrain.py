"""
Terrain for the differentiable simulator and the MuJoCo evaluator: one surface, two engines.

A :class:`HeightField` is the ground ``z = h(x, y)`` as a uniform bicubic B-spline
over a grid of control heights: twice continuously differentiable everywhere
(value, slope and curvature have no jumps, so contact forces and their gradients
have none either), linear functions reproduced exactly (a slope is a slope), and
evaluated with a fixed 4 x 4 gather per point, so it jits, vmaps and
differentiates with no data-dependent control flow. It implements
:class:`bcg_ros.core.contact.Terrain` (``height``, ``normal``), so the contact
model takes it as it takes :class:`~bcg_ros.core.contact.Plane`.

MuJoCo sees the same surface: :func:`mujoco_hfield` samples it on a grid finer
than its control spacing for an ``hfield`` geom (MuJoCo interpolates those samples
linearly). Reference motions recorded on flat ground follow the terrain through
:func:`lift_motion`, which raises each frame by the ground height under the pelvis:
the tracking targets climb, while the policy observes the clip as recorded (the
robot's runtime knows no terrain).

Terrains by name (:func:`from_spec`), x forward from a flat start around the origin:

- ``flat``: the plane z = 0;
- ``slope:DEG[:START]``: uphill along +x at DEG degrees from x = START (default 1 m);
- ``steps:HEIGHT[:LENGTH[:START]]``: stairs up along +x, HEIGHT [m] each, LENGTH
  [m] deep (default 0.4), from x = START (default 1 m), edges rounded over 4 cm;
- ``rough:AMPLITUDE[:WAVELENGTH[:SEED]]``: random hills of +-AMPLITUDE [m] with
  WAVELENGTH [m] between control points (default 0.5), flat within 0.5 m of the origin;
- a ``.npz`` file with ``heights`` [nx, ny] (control heights, m), ``spacing`` (m)
  and ``origin`` (x, y of heights[0, 0], m).
"""

import dataclasses
import math
import pathlib
from dataclasses import dataclass, field
from typing import Tuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from bcg_ros.core import contact

EXTENT = ((-4.0, 10.0), (-4.0, 4.0))
"""Default x and y range [m] of generated terrains; beyond it the edge height continues."""


class TerrainError(ValueError):
    """A terrain spec or file that does not describe a terrain."""


def _basis(t):
    """Cubic B-spline weights [..., 4] at t in [0, 1] and their derivatives d/dt."""
    s = 1.0 - t
    w = jnp.stack([s ** 3, 3 * t ** 3 - 6 * t ** 2 + 4, -3 * t ** 3 + 3 * t ** 2 + 3 * t + 1,
                   t ** 3], -1) / 6.0
    dw = jnp.stack([-0.5 * s ** 2, 1.5 * t ** 2 - 2 * t, -1.5 * t ** 2 + t + 0.5,
                    0.5 * t ** 2], -1)
    return w, dw


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class HeightField:
    """Ground ``z = h(x, y)``, a bicubic B-spline over control heights (module docstring)."""

    control: jax.Array
    """[nx, ny] control heights [m], control point (i, j) at origin + spacing * (i, j)."""
    origin: jax.Array
    """[2] x, y of control point (0, 0) [m]."""
    spacing: float = field(metadata=dict(static=True))
    """Distance between control points [m]."""

    @property
    def domain(self) -> Tuple[Tuple[float, float], Tuple[float, float]]:
        """
        Where the surface is its spline, (x range, y range) [m]: one cell in from the edges.

        Beyond it the height of the nearest point of the domain continues.
        """
        nx, ny = self.control.shape
        ox, oy = (float(v) for v in np.asarray(self.origin))
        return ((ox + self.spacing, ox + (nx - 2) * self.spacing),
                (oy + self.spacing, oy + (ny - 2) * self.spacing))

    def _cell(self, xy):
        """Control-patch indices [..., 2] and cell coordinates t [..., 2] of points xy."""
        nx, ny = self.control.shape
        u = (xy - self.origin.astype(xy.dtype)) / self.spacing
        hi = jnp.asarray([nx - 3, ny - 3], u.dtype)
        u = jnp.clip(u, 1.0, hi + 1.0)
        i = jnp.clip(jnp.floor(jax.lax.stop_gradient(u)), 1.0, hi)
        return i.astype(jnp.int32), u - i

    def _patch(self, i):
        """The 4 x 4 control heights [..., 4, 4] around cells ``i``."""
        off = jnp.arange(-1, 3)
        ix = i[..., 0:1] + off
        iy = i[..., 1:2] + off
        return self.control[ix[..., :, None], iy[..., None, :]]

    def height_and_slope(self, xy: jax.Array):
        """Height [...] and its gradient (dh/dx, dh/dy) [..., 2] at points ``xy`` [..., 2]."""
        i, t = self._cell(xy)
        c = self._patch(i).astype(xy.dtype)
        wx, dwx = _basis(t[..., 0])
        wy, dwy = _basis(t[..., 1])
        h = jnp.einsum('...a,...ab,...b->...', wx, c, wy)
        hx = jnp.einsum('...a,...ab,...b->...', dwx, c, wy) / self.spacing
        hy = jnp.einsum('...a,...ab,...b->...', wx, c, dwy) / self.spacing
        return h, jnp.stack([hx, hy], -1)

    def height(self, xy: jax.Array) -> jax.Array:
        """Ground height [m] below horizontal points ``xy`` [..., 2]."""
        return self.height_and_slope(xy)[0]

    def normal(self, xy: jax.Array) -> jax.Array:
        """Upward unit normal [..., 3] of the ground at ``xy`` [..., 2]."""
        _, g = self.height_and_slope(xy)
        n = jnp.concatenate([-g, jnp.ones_like(g[..., :1])], -1)
        return n / jnp.linalg.norm(n, axis=-1, keepdims=True)


def _grid(spacing: float, extent=EXTENT):
    """Control-point coordinates xs [nx], ys [ny] covering ``extent`` with one spare cell."""
    (x0, x1), (y0, y1) = extent
    xs = np.arange(x0 - spacing, x1 + 2 * spacing, spacing)
    ys = np.arange(y0 - spacing, y1 + 2 * spacing, spacing)
    return xs, ys


def from_heights(heights: np.ndarray, spacing: float, origin=(0.0, 0.0),
                 source: str = 'heights') -> HeightField:
    """A :class:`HeightField` of control heights [nx, ny] (at least 4 x 4, finite)."""
    h = np.asarray(heights, np.float64)
    if h.ndim != 2 or min(h.shape) < 4:
        raise TerrainError(f'{source}: heights must be a 2-D grid of at least 4 x 4, '
                           f'got shape {h.shape}')
    if not np.all(np.isfinite(h)):
        raise TerrainError(f'{source}: heights hold non-finite values')
    if not (np.isfinite(spacing) and spacing > 0):
        raise TerrainError(f'{source}: spacing must be > 0, got {spacing}')
    o = np.asarray(origin, np.float64).reshape(-1)
    if o.shape != (2,) or not np.all(np.isfinite(o)):
        raise TerrainError(f'{source}: origin must be two finite numbers, got {origin}')
    return HeightField(jnp.asarray(h, jnp.float32), jnp.asarray(o, jnp.float32), float(spacing))


def slope(degrees: float, start: float = 1.0, spacing: float = 0.25) -> HeightField:
    """Uphill along +x at ``degrees`` from x = ``start``, flat before (a 0.5 m rounded kink)."""
    xs, ys = _grid(spacing)
    h = math.tan(math.radians(degrees)) * np.maximum(xs - start, 0.0)
    return from_heights(np.repeat(h[:, None], len(ys), 1), spacing, (xs[0], ys[0]), 'slope')


def steps(height: float, length: float = 0.4, start: float = 1.0,
          spacing: float = 0.02, extent=(EXTENT[0], (-1.5, 1.5))) -> HeightField:
    """
    Stairs up along +x: ``height`` [m] per step, ``length`` [m] deep, from x = ``start``.

    ``extent``: the (x, y) ranges [m] the control grid covers (a small scene needs less).
    """
    if length <= 4 * spacing:
        raise TerrainError(f'steps: a step must be deeper than {4 * spacing} m, got {length}')
    xs, ys = _grid(spacing, extent)
    h = height * np.floor(np.maximum(xs - start, -1e-9) / length + 1.0) * (xs >= start)
    return from_heights(np.repeat(h[:, None], len(ys), 1), spacing, (xs[0], ys[0]), 'steps')


def rough(amplitude: float, wavelength: float = 0.5, seed: int = 0) -> HeightField:
    """Random hills: control heights uniform in +-``amplitude``, flat around the origin."""
    xs, ys = _grid(wavelength)
    h = np.random.default_rng(seed).uniform(-amplitude, amplitude, (len(xs), len(ys)))
    near = np.hypot(xs[:, None], ys[None, :]) < 0.5 + 2 * wavelength
    h[near] = 0.0
    return from_heights(h, wavelength, (xs[0], ys[0]), 'rough')


def load(path: Union[str, pathlib.Path]) -> HeightField:
    """A terrain file: ``heights``, ``spacing`` and ``origin`` in an npz."""
    path = pathlib.Path(path)
    try:
        with np.load(path) as f:
            missing = [k for k in ('heights', 'spacing', 'origin') if k not in f.files]
            if missing:
                raise TerrainError(f'{path}: missing field(s) {missing} (an npz with heights, '
                                   'spacing and origin)')
            return from_heights(f['heights'], float(f['spacing']), f['origin'], str(path))
    except (OSError, ValueError) as exc:
        if isinstance(exc, TerrainError):
            raise
        raise TerrainError(f'{path}: not a terrain npz ({exc})') from None


def save(terrain: HeightField, path: Union[str, pathlib.Path]) -> pathlib.Path:
    """Write a terrain file :func:`load` reads."""
    path = pathlib.Path(path)
    np.savez(path, heights=np.asarray(terrain.control), spacing=terrain.spacing,
             origin=np.asarray(terrain.origin))
    return path


def from_spec(spec: str) -> contact.Terrain:
    """The terrain a name or file gives (module docstring); TerrainError naming the spec."""
    spec = str(spec).strip()
    if spec in ('', 'flat'):
        return contact.Plane()
    name, *args = spec.split(':')
    makers = {'slope': (slope, (float, float)), 'steps': (steps, (float, float, float)),
              'rough': (rough, (float, float, int))}
    if name in makers:
        fn, types = makers[name]
        if not 1 <= len(args) <= len(types):
            raise TerrainError(f'terrain {spec!r}: {name} takes 1 to {len(types)} numbers '
                               f'separated by ":"')
        try:
            values = [t(a) for t, a in zip(types, args)]
        except ValueError:
            raise TerrainError(f'terrain {spec!r}: {args} are not numbers') from None
        if not all(math.isfinite(v) for v in values):
            raise TerrainError(f'terrain {spec!r}: non-finite value')
        return fn(*values)
    if spec.endswith('.npz'):
        return load(spec)
    raise TerrainError(f'terrain {spec!r}: not flat, slope:DEG, steps:HEIGHT, '
                       'rough:AMPLITUDE or an .npz file')


def heights_at(terrain: contact.Terrain, xy: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Height [...] and gradient [..., 2] at points ``xy`` [..., 2], as NumPy arrays."""
    xy = jnp.asarray(xy, jnp.float32)
    if isinstance(terrain, HeightField):
        h, g = terrain.height_and_slope(xy)
    else:
        h, g = terrain.height(xy), jnp.zeros_like(xy)
    return np.asarray(h, np.float64), np.asarray(g, np.float64)


def mujoco_hfield(terrain: HeightField, name: str = 'terrain', resolution: float = 0.0):
    """
    The surface sampled for MuJoCo (:class:`bcg_ros.robot.model.Ground`) over its domain.

    ``resolution`` [m]: sample spacing (default: a quarter of the control spacing,
    at most 2 cm); MuJoCo interpolates between samples linearly.
    """
    from bcg_ros.robot import model as model_mod

    res = resolution or min(terrain.spacing / 4.0, 0.02)
    (x0, x1), (y0, y1) = terrain.domain
    ncol = int(round((x1 - x0) / res)) + 1
    nrow = int(round((y1 - y0) / res)) + 1
    xs, ys = np.linspace(x0, x1, ncol), np.linspace(y0, y1, nrow)
    grid = np.stack(np.meshgrid(xs, ys, indexing='xy'), -1)           # [nrow, ncol, 2]
    h, _ = heights_at(terrain, grid)
    lo, hi = float(h.min()), float(h.max())
    elevation = max(hi - lo, 1e-6)
    return model_mod.Ground(name, (h - lo) / elevation, (0.5 * (x0 + x1), 0.5 * (y0 + y1)),
                            (0.5 * (x1 - x0), 0.5 * (y1 - y0), elevation, 0.5), lo)


TILE_CELL = 0.04
"""Spacing [m] of :func:`mujoco_tiles`' boxes."""
TILE_OVERLAPS = (0.03, 0.02, 0.01, 0.0)
"""How far [m] a tile may reach past its cell, tried from the first: the farthest whose
top stays within ``TILE_TOLERANCE`` of the surface. Three centimetres is six G1 foot-sphere
radii: a sphere sunk in up to a centimetre (a landing at 1 ms) still has its centre
over the top of every tile it touches, not beside a side face."""
TILE_TOLERANCE = 0.001
"""Largest height error [m] of a tile's top over its footprint's edge."""


def mujoco_tiles(terrain: HeightField, region: Tuple[Tuple[float, float], ...],
                 cell: float = TILE_CELL, thickness: float = 0.05) -> np.ndarray:
    """
    Boxes [N, 10] (centre, quaternion, half sizes) that stand in for ``terrain`` in MuJoCo.

    One box per ``cell`` of ``region`` ((x0, x1), (y0, y1), clipped to the terrain's
    domain), its top face the tangent plane at the cell's centre, reaching past the
    cell as far as ``TILE_OVERLAPS`` and ``TILE_TOLERANCE`` allow (less where the ground
    curves sharply, as at a step's edge). MuJoCo's heightfield is a union of prisms: a
    small sphere sunk into one near its edge is pushed out through the prism's vertical
    side, sideways. Overlapping boxes give box-sphere contacts, exact primitives whose
    normals follow the top faces.
    """
    (dx0, dx1), (dy0, dy1) = terrain.domain
    (x0, x1), (y0, y1) = region
    x0, x1, y0, y1 = max(x0, dx0), min(x1, dx1), max(y0, dy0), min(y1, dy1)
    xs = np.arange(x0 + 0.5 * cell, x1, cell)
    ys = np.arange(y0 + 0.5 * cell, y1, cell)
    xy = np.stack(np.meshgrid(xs, ys, indexing='ij'), -1).reshape(-1, 2)
    h, g = heights_at(terrain, xy)
    reach = np.zeros(len(h))
    edge = np.array([[sx, sy] for sx in (-1, 0, 1) for sy in (-1, 0, 1) if sx or sy], float)
    for overlap in reversed(TILE_OVERLAPS):   # the farthest that fits wins
        points = xy[:, None] + (0.5 * cell + overlap) * edge             # [N, 8, 2]
        surface, _ = heights_at(terrain, points)
        plane = h[:, None] + np.sum(g[:, None] * (points - xy[:, None]), -1)
        fits = np.max(np.abs(plane - surface), -1) <= TILE_TOLERANCE
        reach = np.where(fits, overlap, reach)
    normal = np.concatenate([-g, np.ones_like(h)[:, None]], -1)
    normal /= np.linalg.norm(normal, axis=-1, keepdims=True)
    # The rotation taking z to the normal: about z x n by the angle between them.
    axis = np.stack([-normal[:, 1], normal[:, 0], np.zeros_like(h)], -1)
    half_angle = 0.5 * np.arccos(np.clip(normal[:, 2], -1.0, 1.0))
    sin = np.sin(half_angle) / np.maximum(np.linalg.norm(axis, axis=-1), 1e-12)
    quat = np.concatenate([np.cos(half_angle)[:, None], axis * sin[:, None]], -1)
    top = np.concatenate([xy, h[:, None]], -1)
    half = np.stack([0.5 * cell + reach, 0.5 * cell + reach,
                     np.full_like(h, thickness)], -1)
    return np.concatenate([top - thickness * normal, quat, half], -1)


def lift_motion(motion, terrain: contact.Terrain):
    """
    ``motion`` raised frame by frame by the ground height under its pelvis (flat: itself).

    The tracking targets follow the ground; ``flat`` keeps the clip as recorded, which
    is what the policy observes (the robot's runtime knows no terrain either).
    """
    if isinstance(terrain, contact.Plane):
        return motion
    h, g = heights_at(terrain, motion.root_pos[:, :2])
    root = motion.root_pos.copy()
    root[:, 2] += h
    key = motion.key_pos.copy()
    key[..., 2] += h[:, None]
    vel = motion.root_lin_vel.copy()
    vel[:, 2] += np.sum(g * motion.root_lin_vel[:, :2], -1)
    return dataclasses.replace(motion, root_pos=root, key_pos=key, root_lin_vel=vel,
                               flat=motion.observed)
