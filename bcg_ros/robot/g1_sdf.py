"""
The G1's links as smooth SDFs: unions of smooth convex polytopes fitted to its meshes.

``bcg_ros/models/g1_sdf.npz`` holds, for every body of :data:`bcg_ros.robot.g1.BODIES`
in that order, up to P convex pieces of M planes each in the body frame
(:class:`bcg_ros.core.sdf.PolytopeSet`); ``scripts/fit_sdf.py`` writes it from the
official meshes and prints :func:`fit_errors`. :func:`load` reads it;
``python -m bcg_ros.robot.g1_sdf`` prints the stored set's errors against the meshes.
"""

import pathlib
import sys
from typing import Dict, List, Mapping, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy.spatial import ConvexHull

from bcg_ros.core import sdf
from bcg_ros.robot import g1

DATA_PATH = pathlib.Path(__file__).resolve().parents[1] / 'models' / 'g1_sdf.npz'
"""The fitted set in the package."""
PARTS = {'head_link': 'head'}
"""Meshes fitted as pieces of their own (mesh name -> part), whatever their link."""
EMPTY_OFFSET = -1000.0
"""Plane offset [m] of a padding piece: it lies a kilometre outside, so weighs nothing."""


def save(path: pathlib.Path, pieces: Mapping[str, Sequence[Tuple[np.ndarray, np.ndarray]]],
         beta: float = sdf.BETA, temperature: float = sdf.TEMPERATURE) -> pathlib.Path:
    """Write ``{body: [(normals [M, 3], offsets [M]), ...]}`` (every body of g1.BODIES)."""
    names = [b.name for b in g1.BODIES]
    missing = [n for n in names if not pieces.get(n)]
    if missing:
        raise ValueError(f'{path}: no pieces for bodies {missing}')
    p = max(len(pieces[n]) for n in names)
    m = len(pieces[names[0]][0][1])
    normals = np.zeros((len(names), p, m, 3))
    offsets = np.full((len(names), p, m), EMPTY_OFFSET)
    for i, n in enumerate(names):
        for j, (nrm, off) in enumerate(pieces[n]):
            normals[i, j], offsets[i, j] = nrm, off
    np.savez(path, bodies=np.array(names), normals=normals, offsets=offsets,
             pieces=np.array([len(pieces[n]) for n in names]),
             shift=np.full((len(names), p), sdf.polytope_shift(beta)),
             beta=beta, temperature=temperature)
    return pathlib.Path(path)


def load(path: pathlib.Path = DATA_PATH) -> Tuple[Tuple[str, ...], sdf.PolytopeSet]:
    """Body names [B] and their SDFs, as float32 arrays (cast points to choose)."""
    with np.load(path) as f:
        names = tuple(str(n) for n in f['bodies'])
        expected = tuple(b.name for b in g1.BODIES)
        if names != expected:
            raise ValueError(f'{path}: bodies {names} are not g1.BODIES {expected}; rerun '
                             'scripts/fit_sdf.py')
        shapes = sdf.PolytopeSet(jnp.asarray(f['normals'], jnp.float32),
                                 jnp.asarray(f['offsets'], jnp.float32),
                                 jnp.asarray(f['shift'], jnp.float32),
                                 float(f['beta']), float(f['temperature']))
    return names, shapes


def fit_errors(loaded: Tuple[Tuple[str, ...], sdf.PolytopeSet],
               verts: Mapping[Tuple[str, str], np.ndarray]) -> Dict[str, Dict[str, float]]:
    """
    Fit of each body's SDF to its mesh vertices ``verts`` [(link, part)] (link frame), mm.

    ``skin_max``, ``skin_rms``: |SDF| at the vertices of the link's convex hull, the
    outer skin that touches the ground or another body; ``out_max``: how far any mesh
    vertex lies outside the SDF's zero level; ``all_rms``: RMS |SDF| over all vertices,
    which adds the concave and inner parts of the mesh that convex pieces fill.
    """
    names, shapes = loaded
    body = jax.jit(jax.vmap(shapes.body, (None, 0)))

    def phi(i: int, pts: np.ndarray) -> np.ndarray:
        # Fixed-size chunks with the body index traced: one compile for all bodies.
        chunk = 4096
        padded = np.zeros((-(-len(pts) // chunk) * chunk, 3))
        padded[:len(pts)] = pts
        vals = [np.asarray(body(jnp.int32(i), jnp.asarray(c, shapes.normals.dtype)))
                for c in padded.reshape(-1, chunk, 3)]
        return 1e3 * np.concatenate(vals)[:len(pts)].astype(np.float64)

    out: Dict[str, Dict[str, float]] = {}
    for i, name in enumerate(names):
        pts = np.concatenate([v for (link, _), v in verts.items() if link == name])
        phi_all, phi_skin = phi(i, pts), phi(i, pts[ConvexHull(pts).vertices])
        out[name] = dict(skin_max=float(np.abs(phi_skin).max()),
                         skin_rms=float(np.sqrt(np.mean(phi_skin ** 2))),
                         out_max=float(max(phi_all.max(), 0.0)),
                         all_rms=float(np.sqrt(np.mean(phi_all ** 2))))
    return out


def error_table(errors: Mapping[str, Mapping[str, float]]) -> str:
    """The errors as a Markdown table, one row per body."""
    rows: List[str] = ['| body | skin max [mm] | skin RMS [mm] | outside max [mm] | '
                       'all-vertex RMS [mm] |', '|---|---|---|---|---|']
    for name, e in errors.items():
        rows.append(f"| {name} | {e['skin_max']:.2f} | {e['skin_rms']:.2f} | "
                    f"{e['out_max']:.2f} | {e['all_rms']:.2f} |")
    return '\n'.join(rows)


def main(argv=None) -> int:
    """Print the stored set's fit errors against the official meshes (a Markdown table)."""
    from bcg_ros.robot import meshes

    if not meshes.OFFICIAL_XML.is_file():
        print(f'{meshes.OFFICIAL_XML}: no such file (the official G1 model)', file=sys.stderr)
        return 1
    print(error_table(fit_errors(load(), meshes.link_vertices(parts=PARTS))))
    return 0


if __name__ == '__main__':
    sys.exit(main())
