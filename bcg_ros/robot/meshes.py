"""
The official G1's meshes as vertex clouds in each link's frame, for fitting collision shapes.

Unitree's model (``../shared/reference/g1_official`` beside the repository, not part of
it) draws each link with visual mesh geoms (group 1); MuJoCo reads the STL files, and
each geom's pose puts its vertices in the link frame. Used by ``scripts/fit_collision.py``
(the MuJoCo judge's primitives), ``scripts/fit_sdf.py`` (the smooth SDFs) and the tests
that check those fits against the meshes.
"""

import pathlib
from typing import Dict, List, Mapping, Tuple

import numpy as np

OFFICIAL_XML = (pathlib.Path(__file__).resolve().parents[3] / 'shared' / 'reference'
                / 'g1_official' / 'g1_29dof.xml')
"""The official model, where the development checkout keeps it."""


def link_vertices(path: pathlib.Path = OFFICIAL_XML,
                  parts: Mapping[str, str] = None) -> Dict[Tuple[str, str], np.ndarray]:
    """
    Vertices [n, 3] of each link's visual meshes in the link frame, keyed by (link, part).

    ``parts`` maps a mesh name to a part name for meshes that are to be fitted as a shape
    of their own (e.g. the head on the torso link); every other mesh has part ''.
    Duplicate vertices (to 1 micrometre) are merged.
    """
    import mujoco

    m = mujoco.MjSpec.from_file(str(path)).compile()
    parts = parts or {}
    out: Dict[Tuple[str, str], List[np.ndarray]] = {}
    for gid in range(m.ngeom):
        if m.geom_type[gid] != mujoco.mjtGeom.mjGEOM_MESH or m.geom_group[gid] != 1:
            continue
        mid = m.geom_dataid[gid]
        adr, num = m.mesh_vertadr[mid], m.mesh_vertnum[mid]
        rot = np.zeros(9)
        mujoco.mju_quat2Mat(rot, m.geom_quat[gid])
        pts = m.mesh_vert[adr:adr + num] @ rot.reshape(3, 3).T + m.geom_pos[gid]
        link = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, m.geom_bodyid[gid])
        part = parts.get(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_MESH, mid), '')
        out.setdefault((link, part), []).append(pts)
    return {k: np.unique(np.concatenate(v).round(6), axis=0) for k, v in out.items()}
