#!/usr/bin/env python3
"""
Fit collision primitives to the official G1 meshes and print them for g1.py.

Each link's meshes (the official model's visual geoms, in the link frame) are
covered by one primitive that holds every vertex. Candidates are aligned with
the link's own axes and with the principal axes of its vertices; a link takes
its smallest capsule unless a box is much smaller (capsules roll and slide over
the floor and each other without catching on edges). The pelvis is a box in its
link axes. The torso is a mirrored pair of upright capsules (parts 'left' and
'right'): their rounded edges keep clear of the upper arms where a box's
corners would not. The head is a shape of its own (a part of ``torso_link``),
and each foot is a box with the mesh's height whose sole is the rectangle
through the foot sphere centres: every corner of the sole lies in a sphere, so
the feet meet the floor through the eight spheres at any tilt, as in training.
Right-side links take the mirror image of the left-side fit, so the two sides
are exactly symmetric; the script reports how far the right side's own fit is
from that mirror image.

The printed ``COLLISION`` block is what :mod:`bcg_ros.robot.g1` stores.

Run from the repository root:
``PYTHONPATH=. python scripts/fit_collision.py [--official PATH]``.
"""

import argparse
import pathlib
import sys
from dataclasses import dataclass
from typing import Dict, Tuple

import mujoco
import numpy as np
from scipy.spatial import ConvexHull

from bcg_ros.robot import g1, meshes


PARTS = {'head_link': 'head'}
"""Meshes fitted as a shape of their own, as a named part of their link."""
BOX_LINKS = ('pelvis',)
"""Links fitted with a box in their own axes."""
TWIN_LINKS = ('torso_link',)
"""Links fitted with two upright capsules mirrored through y = 0."""
CAPSULE_SLACK = 1.35
"""A capsule is kept while its volume is at most this times the smallest box's."""
SOLE = np.array([p for f, p in g1.FOOT_SPHERES if f == g1.FOOT_BODIES[0]])
"""Foot sphere centres in the ankle-roll frame (the same in both feet)."""


@dataclass
class Fit:
    """One fitted primitive in MuJoCo's convention (capsule size: radius, half-length)."""

    kind: str
    pos: np.ndarray
    rot: np.ndarray
    """Columns: the shape's axes in the link frame (a capsule lies along the third)."""
    size: np.ndarray

    def volume(self) -> float:
        """Volume of the shape."""
        if self.kind == 'box':
            return float(8.0 * np.prod(self.size))
        r = self.size[0]
        half = self.size[1] if self.kind == 'capsule' else 0.0
        return float(np.pi * r * r * 2.0 * half + 4.0 / 3.0 * np.pi * r ** 3)

    def outside(self, pts: np.ndarray) -> np.ndarray:
        """Distance of each point outside the shape (0 inside)."""
        loc = (pts - self.pos) @ self.rot
        if self.kind == 'box':
            return np.linalg.norm(np.maximum(np.abs(loc) - self.size, 0.0), axis=1)
        half = self.size[1] if self.kind == 'capsule' else 0.0
        axial = np.clip(loc[:, 2], -half, half)
        d = np.linalg.norm(loc - np.outer(axial, [0.0, 0.0, 1.0]), axis=1)
        return np.maximum(d - self.size[0], 0.0)


def hull(pts: np.ndarray) -> np.ndarray:
    """The convex hull's vertices: a convex shape holds the points iff it holds these."""
    return pts[ConvexHull(pts).vertices]


def _circle(xy: np.ndarray) -> Tuple[np.ndarray, float]:
    """Approximate smallest circle around 2-D points (Badoiu-Clarkson iterations)."""
    c = 0.5 * (xy.min(0) + xy.max(0))
    for i in range(1, 400):
        far = xy[np.argmax(np.sum((xy - c) ** 2, axis=1))]
        c = c + (far - c) / (i + 1)
    return c, float(np.sqrt(np.max(np.sum((xy - c) ** 2, axis=1))))


def _capsule(pts: np.ndarray, frame: np.ndarray, axis: int) -> Fit:
    """The capsule along ``frame[:, axis]`` that holds every point."""
    rot = np.roll(frame, 2 - axis, axis=1)
    if np.linalg.det(rot) < 0:
        rot[:, 0] = -rot[:, 0]
    loc = pts @ rot
    c, r = _circle(loc[:, :2])
    rho2 = np.sum((loc[:, :2] - c) ** 2, axis=1)
    reach = np.sqrt(np.maximum(r * r - rho2, 0.0))
    # A point is held when some centre on the segment is within its reach along the axis.
    a, b = np.min(loc[:, 2] + reach), np.max(loc[:, 2] - reach)
    if b < a:
        a = b = 0.5 * (a + b)
    centre = rot @ np.array([c[0], c[1], 0.5 * (a + b)])
    return Fit('capsule', centre, rot, np.array([r, 0.5 * (b - a)]))


def _box(pts: np.ndarray, frame: np.ndarray) -> Fit:
    loc = pts @ frame
    lo, hi = loc.min(0), loc.max(0)
    return Fit('box', frame @ (0.5 * (lo + hi)), frame.copy(), 0.5 * (hi - lo))


def _sphere(pts: np.ndarray) -> Fit:
    c = 0.5 * (pts.min(0) + pts.max(0))
    for i in range(1, 400):
        far = pts[np.argmax(np.sum((pts - c) ** 2, axis=1))]
        c = c + (far - c) / (i + 1)
    r = float(np.sqrt(np.max(np.sum((pts - c) ** 2, axis=1))))
    return Fit('sphere', c, np.eye(3), np.array([r]))


def fit(pts: np.ndarray) -> Fit:
    """The smallest capsule (or sphere) holding every point, or a box where much smaller."""
    _, vecs = np.linalg.eigh(np.cov((pts - pts.mean(0)).T))
    frames = [np.eye(3), vecs * np.sign(np.linalg.det(vecs))]
    round_ = min([_sphere(pts)] + [_capsule(pts, f, k) for f in frames for k in range(3)],
                 key=Fit.volume)
    box = min((_box(pts, f) for f in frames), key=Fit.volume)
    return round_ if round_.volume() <= CAPSULE_SLACK * box.volume() else box


def foot_box(pts: np.ndarray) -> Fit:
    """The foot: a box in the link axes from the sphere centres' sole to the mesh top."""
    half_y = np.abs(SOLE[:, 1]).max()
    lo = np.array([SOLE[:, 0].min(), -half_y, SOLE[:, 2].max()])
    hi = np.array([SOLE[:, 0].max(), half_y, pts[:, 2].max()])
    return Fit('box', 0.5 * (lo + hi), np.eye(3), 0.5 * (hi - lo))


def twin_capsules(pts: np.ndarray) -> Tuple[Fit, Fit]:
    """Two upright capsules at y = +-a that hold every point, least stadium prism."""
    q = np.column_stack([pts[:, 0], np.abs(pts[:, 1]), pts[:, 2]])
    best = None
    for a in np.linspace(0.0, q[:, 1].max(), 61):
        for cx in np.linspace(q[:, 0].min(), q[:, 0].max(), 101):
            rho2 = (q[:, 0] - cx) ** 2 + (q[:, 1] - a) ** 2
            r = float(np.sqrt(rho2.max()))
            reach = np.sqrt(np.maximum(r * r - rho2, 0.0))
            lo, hi = np.min(q[:, 2] + reach), np.max(q[:, 2] - reach)
            hi = max(hi, lo)
            size = (4.0 * a * r + np.pi * r * r) * (hi - lo + 2.0 * r)
            if best is None or size < best[0]:
                best = (size, a, cx, r, lo, hi)
    _, a, cx, r, lo, hi = best
    left = Fit('capsule', np.array([cx, a, 0.5 * (lo + hi)]), np.eye(3),
               np.array([r, 0.5 * (hi - lo)]))
    return left, mirror(left)


def mirror(f: Fit) -> Fit:
    """The shape reflected through the link's y = 0 plane."""
    s = np.diag([1.0, -1.0, 1.0])
    return Fit(f.kind, s @ f.pos, s @ f.rot @ s, f.size.copy())


def quat(rot: np.ndarray) -> np.ndarray:
    """Unit quaternion (w, x, y, z), w >= 0, of a rotation matrix."""
    q = np.zeros(4)
    mujoco.mju_mat2Quat(q, rot.reshape(-1))
    return q if q[0] >= 0 else -q


def _tuple(xs, digits: int) -> str:
    """Python text of a tuple of rounded floats (no negative zeros)."""
    items = [repr(round(float(x), digits) + 0.0) for x in xs]
    return '(' + ', '.join(items) + (',)' if len(items) == 1 else ')')


def main(argv=None) -> int:
    """Fit every link and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument('--official', type=pathlib.Path, default=meshes.OFFICIAL_XML,
                        help='the official g1_29dof.xml (its meshes/ beside it)')
    args = parser.parse_args(argv)
    if not args.official.is_file():
        print(f'{args.official}: no such file', file=sys.stderr)
        return 1
    verts = meshes.link_vertices(args.official, PARTS)
    fits: Dict[Tuple[str, str], Fit] = {}
    for (link, part), pts in list(verts.items()):
        pts = verts[link, part] = hull(pts)
        if link in g1.FOOT_BODIES:
            fits[link, part] = foot_box(pts)
        elif link in TWIN_LINKS and not part:
            # Each capsule holds its own side's half of the link.
            fits[link, 'left'], fits[link, 'right'] = twin_capsules(pts)
            verts[link, 'left'], verts[link, 'right'] = pts[pts[:, 1] >= 0], pts[pts[:, 1] <= 0]
        elif link in BOX_LINKS and not part:
            fits[link, part] = _box(pts, np.eye(3))
        else:
            fits[link, part] = fit(pts)
    print('# link                      part  kind     volume[cm3]  right-vs-mirror[mm]  '
          'outside-max[mm]')
    rows = []
    for b in g1.BODIES:
        for (link, part), f in fits.items():
            if link != b.name:
                continue
            err = ''
            if link.startswith('right_'):
                own = f
                f = mirror(fits[link.replace('right_', 'left_', 1), part])
                err = f'{1e3 * np.abs(own.pos - f.pos).max():.1f}/' \
                      f'{1e3 * np.abs(own.size - f.size).max():.1f}' \
                    if own.kind == f.kind else f'own fit: {own.kind}'
            out = 1e3 * f.outside(verts[link, part]).max()
            print(f'# {link:27s} {part:5s} {f.kind:8s} {1e6 * f.volume():8.1f}     '
                  f'{err:>12s}        {out:6.1f}')
            rows.append((link, part, f))
    print('COLLISION: Tuple[CollisionShape, ...] = (')
    for link, part, f in rows:
        tail = f", part='{part}'" if part else ''
        print(f"    CollisionShape('{link}', '{f.kind}', {_tuple(f.pos, 4)},\n"
              f"                   {_tuple(quat(f.rot), 6)}, {_tuple(f.size, 4)}{tail}),")
    print(')')
    return 0


if __name__ == '__main__':
    sys.exit(main())
