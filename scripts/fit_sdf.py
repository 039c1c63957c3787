#!/usr/bin/env python3
"""
Fit smooth SDFs (unions of smooth convex polytopes) to the official G1 meshes.

Each link's mesh vertices (in the link frame, :mod:`bcg_ros.robot.meshes`) are split
into pieces by k-means (``PIECES``; one piece for most links, a few for the concave
ones), the head being a piece of the torso of its own. Each piece is a smooth convex
polytope (:func:`bcg_ros.core.sdf.polytope`) of ``PLANES`` planes: the normals start
at area-weighted spherical k-means of its convex hull's facet normals and the offsets
at the hull's support, then all planes move to minimise the mean squared SDF over
points spread evenly on the hull's surface (L-BFGS, float64). The pieces of a link are
blended by soft-min (:func:`bcg_ros.core.sdf.smooth_union`). Right-side links take the
mirror image of the left-side fit, so the two sides are exactly symmetric.

Writes ``bcg_ros/models/g1_sdf.npz`` (read by :mod:`bcg_ros.robot.g1_sdf`) and prints
the fit error per link against its meshes (:func:`bcg_ros.robot.g1_sdf.fit_errors`).

Run from the repository root: ``PYTHONPATH=. .venv/bin/python scripts/fit_sdf.py``.
"""

import argparse
import pathlib
import sys
import time
from typing import Dict, List, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize
from scipy.spatial import ConvexHull

from bcg_ros.core import sdf
from bcg_ros.robot import g1, g1_sdf, meshes

PIECES = {'pelvis': 2, 'left_hip_yaw_link': 2, 'left_knee_link': 2,
          'left_ankle_roll_link': 2, 'torso_link': 4, 'left_wrist_yaw_link': 2}
"""Convex pieces of the concave links (left side; the right mirrors it); others take one."""
PLANES = 24
"""Planes per convex piece."""
SAMPLES = 3000
"""Points spread on each piece's hull surface for the fit."""


def _kmeans(x: np.ndarray, k: int, weights: np.ndarray = None, sphere: bool = False,
            iterations: int = 50) -> np.ndarray:
    """Labels [n] of ``k`` clusters; farthest-point start, so it is deterministic."""
    w = np.ones(len(x)) if weights is None else weights
    centres = [x[np.argmax(w)]]
    for _ in range(1, k):
        d = np.min([np.sum((x - c) ** 2, 1) for c in centres], 0)
        centres.append(x[np.argmax(d * w)])
    c = np.array(centres)
    for _ in range(iterations):
        labels = np.argmin(((x[:, None] - c[None]) ** 2).sum(-1), 1)
        for j in range(k):
            if np.any(labels == j):
                c[j] = np.average(x[labels == j], 0, w[labels == j])
                if sphere:
                    c[j] /= max(np.linalg.norm(c[j]), 1e-12)
    return labels


def surface_samples(pts: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Points spread evenly (by area) on the convex hull of ``pts``, and its vertices."""
    h = ConvexHull(pts)
    tri = pts[h.simplices]
    area = 0.5 * np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1)
    pick = rng.choice(len(tri), n, p=area / area.sum())
    u, v = rng.uniform(size=(2, n))
    flip = u + v > 1
    u[flip], v[flip] = 1 - u[flip], 1 - v[flip]
    t = tri[pick]
    on = t[:, 0] + u[:, None] * (t[:, 1] - t[:, 0]) + v[:, None] * (t[:, 2] - t[:, 0])
    return np.concatenate([on, pts[h.vertices]])


def fit_piece(pts: np.ndarray, rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray]:
    """Normals [PLANES, 3] and offsets [PLANES] of a smooth polytope fitted to ``pts``."""
    h = ConvexHull(pts)
    tri = pts[h.simplices]
    area = 0.5 * np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1)
    normals = h.equations[:, :3]
    labels = _kmeans(normals, PLANES, area, sphere=True)
    n0 = np.array([np.average(normals[labels == j], 0, area[labels == j])
                   if np.any(labels == j) else rng.normal(size=3) for j in range(PLANES)])
    n0 /= np.linalg.norm(n0, axis=1, keepdims=True)
    shift = sdf.polytope_shift(sdf.BETA)
    d0 = (pts @ n0.T).max(0) - shift
    x = jnp.asarray(surface_samples(pts, SAMPLES, rng))

    def loss(theta):
        n = theta[:, :3] / jnp.linalg.norm(theta[:, :3], axis=1, keepdims=True)
        phi = jax.vmap(lambda p: sdf.polytope(n, theta[:, 3], p, sdf.BETA, shift))(x)
        return 1e6 * jnp.mean(phi * phi)

    fun = jax.jit(jax.value_and_grad(loss))
    theta0 = np.concatenate([n0, d0[:, None]], 1)
    res = scipy.optimize.minimize(lambda t: [np.asarray(a, np.float64).reshape(-1) if i else
                                             float(a) for i, a in enumerate(fun(t.reshape(
                                                 PLANES, 4)))],
                                  theta0.reshape(-1), jac=True, method='L-BFGS-B',
                                  options=dict(maxiter=500))
    theta = res.x.reshape(PLANES, 4)
    n = theta[:, :3] / np.linalg.norm(theta[:, :3], axis=1, keepdims=True)
    return n, theta[:, 3]


def mirror(normals: np.ndarray) -> np.ndarray:
    """Plane normals reflected through the link's y = 0 plane (offsets stay)."""
    return normals * np.array([1.0, -1.0, 1.0])


def main(argv=None) -> int:
    """Fit every link, write the npz and print the errors."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument('--official', type=pathlib.Path, default=meshes.OFFICIAL_XML,
                        help='the official g1_29dof.xml (its meshes/ beside it)')
    parser.add_argument('--out', type=pathlib.Path, default=g1_sdf.DATA_PATH)
    args = parser.parse_args(argv)
    if not args.official.is_file():
        print(f'{args.official}: no such file', file=sys.stderr)
        return 1
    jax.config.update('jax_enable_x64', True)
    verts = meshes.link_vertices(args.official, g1_sdf.PARTS)
    pieces: Dict[str, List[Tuple[np.ndarray, np.ndarray]]] = {}
    t0 = time.time()
    for b in g1.BODIES:
        if b.name.startswith('right_'):
            left = pieces[b.name.replace('right_', 'left_', 1)]
            pieces[b.name] = [(mirror(n), d) for n, d in left]
            continue
        pieces[b.name] = []
        for (link, part), pts in sorted(verts.items()):
            if link != b.name:
                continue
            k = PIECES.get(link, 1) if not part else 1
            labels = _kmeans(pts, k) if k > 1 else np.zeros(len(pts), int)
            for j in range(k):
                rng = np.random.default_rng(len(pieces[b.name]))
                pieces[b.name].append(fit_piece(pts[labels == j], rng))
        print(f'# {b.name}: {len(pieces[b.name])} piece(s), {time.time() - t0:.0f} s',
              file=sys.stderr)
    g1_sdf.save(args.out, pieces)
    print(g1_sdf.error_table(g1_sdf.fit_errors(g1_sdf.load(args.out), verts)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
