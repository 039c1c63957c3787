"""
Forward kinematics of a kinematic tree, one vectorised step per tree level.

:func:`kinematics` is a drop-in for ``mjx.kinematics`` (same inputs, same fields of
``mjx.Data`` out: ``qpos`` with unit quaternions, ``xanchor``, ``xaxis``, ``xpos``,
``xquat``, ``xmat``, ``xipos``, ``ximat``, and the geoms' and sites' frames) for trees
whose bodies carry at most one joint each, free, hinge or slide, and no mocap bodies:
the G1 and the project's test models. Other models go to ``mjx.kinematics``.

Why: MJX places each body by tracing its joints' quaternion algebra per body group,
so the G1's kinematics is thousands of scalar operations, traced again for every
place the simulator needs it (the plain step, BCG's branches, the foot Jacobians,
each under ``jax.grad``). Here all bodies of one depth are placed at once, from the
arrays of the level above: a level is a few dozen array operations whatever its
width, and the whole tree about a dozen levels.

A body ``b`` with parent ``p`` and joint ``j``::

    pos, quat = xpos[p] + R(xquat[p]) body_pos[b], xquat[p] * body_quat[b]
    hinge:  anchor = pos + R(quat) jnt_pos[j];  quat <- quat * (axis-angle of q - q0)
            pos = anchor - R(quat) jnt_pos[j]
    slide:  pos <- pos + R(quat) jnt_axis[j] (q - q0)
    free:   pos, quat = qpos[a:a + 3], qpos[a + 3:a + 7] / |.|
"""

from dataclasses import dataclass
from typing import List, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from mujoco import mjx

from bcg_ros import rotation

_FREE, _BALL, _SLIDE, _HINGE = 0, 1, 2, 3


@dataclass(frozen=True)
class _Level:
    """The bodies of one tree depth, grouped by joint type (indices into model arrays)."""

    bodies: np.ndarray
    """Body ids of this level, in the order of this level's arrays."""
    parent_slot: np.ndarray
    """Each body's parent, as a position in the previous level's arrays."""
    hinge: np.ndarray
    """Positions (in this level) of the hinged bodies; ``hinge_jnt`` their joints."""
    hinge_jnt: np.ndarray
    slide: np.ndarray
    slide_jnt: np.ndarray
    free: np.ndarray
    free_jnt: np.ndarray


def supported(m: mjx.Model) -> bool:
    """Whether :func:`kinematics` computes this model itself (else it calls MJX's)."""
    types = np.asarray(m.jnt_type)
    return (int(np.max(m.body_jntnum, initial=0)) <= 1 and not m.nmocap
            and not np.any(types == _BALL))


def _levels(m: mjx.Model) -> Tuple[_Level, ...]:
    """The tree's levels below the world body, from the model's static topology."""
    parent = np.asarray(m.body_parentid)
    depth = np.zeros(m.nbody, int)
    for b in range(1, m.nbody):                     # MuJoCo orders parents first
        depth[b] = depth[parent[b]] + 1
    slots = {0: 0}
    levels: List[_Level] = []
    types = np.asarray(m.jnt_type)
    for d in range(1, int(depth.max(initial=0)) + 1):
        bodies = np.flatnonzero(depth == d)
        jnt = np.where(np.asarray(m.body_jntnum)[bodies] > 0,
                       np.asarray(m.body_jntadr)[bodies], -1)
        jtype = np.where(jnt >= 0, types[np.maximum(jnt, 0)], -1)
        groups = {t: np.flatnonzero(jtype == t) for t in (_HINGE, _SLIDE, _FREE)}
        levels.append(_Level(bodies, np.array([slots[p] for p in parent[bodies]], int),
                             groups[_HINGE], jnt[groups[_HINGE]], groups[_SLIDE],
                             jnt[groups[_SLIDE]], groups[_FREE], jnt[groups[_FREE]]))
        slots = {int(b): i for i, b in enumerate(bodies)}
    return tuple(levels)


def _structure_constants() -> Tuple[np.ndarray, np.ndarray]:
    """
    Tensors T [4, 4, 4] and C [4, 4, 3, 3] with ``a * b = T(a, b)`` and ``R(q) = C(q, q)``.

    Both are read off :mod:`bcg_ros.rotation`'s product on basis quaternions, so there
    is one definition of the algebra; as tensors, a product or a rotation matrix is one
    contraction instead of a few dozen scalar operations.
    """
    e = np.eye(4)
    t = np.array([[rotation.quat_mul(e[i], e[j]) for j in range(4)] for i in range(4)])
    u = np.zeros((4, 4, 3, 3))
    for i in range(4):
        for j in range(4):
            for b in range(3):                     # column b: q (0, e_b) q*, bilinear in q
                v = np.concatenate([[0.0], np.eye(3)[b]])
                u[i, j, :, b] = rotation.quat_mul(rotation.quat_mul(e[i], v),
                                                  rotation.quat_conj(e[j]))[1:]
    return t, 0.5 * (u + u.transpose(1, 0, 2, 3))


_T, _C = _structure_constants()


def _qmul(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.einsum('...i,...j,ijk->...k', a, b, jnp.asarray(_T, a.dtype))


def _qmat(q: jax.Array) -> jax.Array:
    return jnp.einsum('...i,...j,ijab->...ab', q, q, jnp.asarray(_C, q.dtype))


def _take(x: jax.Array, idx: np.ndarray) -> jax.Array:
    """``x[idx]`` for static indices: a slice where they are a contiguous run."""
    idx = np.asarray(idx, int)
    if idx.size and np.array_equal(idx, np.arange(idx[0], idx[0] + idx.size)):
        return x[int(idx[0]):int(idx[0]) + idx.size]
    dims = jax.lax.GatherDimensionNumbers(offset_dims=tuple(range(1, x.ndim)),
                                          collapsed_slice_dims=(0,), start_index_map=(0,))
    return jax.lax.gather(x, jnp.asarray(idx[:, None], jnp.int32), dims, (1,) + x.shape[1:],
                          indices_are_sorted=bool(np.all(np.diff(idx) >= 0)),
                          mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS)


def _apply(mat: jax.Array, v: jax.Array) -> jax.Array:
    return jnp.einsum('...ab,...b->...a', mat, v)


def _local_to_global(pos, quat, local_pos, local_quat):
    """World position and rotation matrix of frames given in their bodies' frames."""
    return pos + _apply(_qmat(quat), local_pos), _qmat(_qmul(quat, local_quat))


def kinematics(m: mjx.Model, d: mjx.Data) -> mjx.Data:
    """``mjx.kinematics(m, d)``, computed level by level (see the module docstring)."""
    if not supported(m):
        return mjx.kinematics(m, d)
    qpos, dtype = d.qpos, d.qpos.dtype
    qadr = np.asarray(m.jnt_qposadr)
    joints, anchors, axes = [], [], []              # per level, assembled at the end
    pos_levels = [jnp.zeros((1, 3), dtype)]
    quat_levels = [jnp.asarray([[1.0, 0.0, 0.0, 0.0]], dtype)]
    mat_levels = [jnp.eye(3, dtype=dtype)[None]]
    levels = _levels(m)
    for lv in levels:
        slot = lv.parent_slot
        pos = _take(pos_levels[-1], slot) + _apply(_take(mat_levels[-1], slot), _take(m.body_pos, lv.bodies))
        quat = _qmul(_take(quat_levels[-1], slot), _take(m.body_quat, lv.bodies))
        if lv.hinge.size:
            h, j = lv.hinge, lv.hinge_jnt
            hq, jpos, jaxis = _take(quat, h), _take(m.jnt_pos, j), _take(m.jnt_axis, j)
            hmat = _qmat(hq)
            anchor = _take(pos, h) + _apply(hmat, jpos)
            joints.append(j)
            anchors.append(anchor)
            axes.append(_apply(hmat, jaxis))
            half = 0.5 * (_take(qpos, qadr[j]) - _take(m.qpos0, qadr[j]))
            local = jnp.concatenate([jnp.cos(half)[:, None], jaxis * jnp.sin(half)[:, None]], -1)
            hq = _qmul(hq, local)
            hpos = anchor - _apply(_qmat(hq), jpos)
            if np.array_equal(h, np.arange(len(lv.bodies))):    # the usual: all hinged
                pos, quat = hpos, hq
            else:
                pos, quat = pos.at[h].set(hpos), quat.at[h].set(hq)
        if lv.slide.size:
            s, j = lv.slide, lv.slide_jnt
            smat = _qmat(_take(quat, s))
            axis = _apply(smat, _take(m.jnt_axis, j))
            joints.append(j)
            anchors.append(_take(pos, s) + _apply(smat, _take(m.jnt_pos, j)))
            axes.append(axis)
            shift = _take(qpos, qadr[j]) - _take(m.qpos0, qadr[j])
            pos = pos.at[s].add(axis * shift[:, None])
        for f, j in zip(lv.free, lv.free_jnt):
            a = int(qadr[j])
            fq = qpos[a + 3:a + 7]
            fq = fq / jnp.linalg.norm(fq)
            qpos = qpos.at[a + 3:a + 7].set(fq)
            pos, quat = pos.at[f].set(qpos[a:a + 3]), quat.at[f].set(fq)
            joints.append(np.array([j]))
            anchors.append(qpos[None, a:a + 3])
            axes.append(jnp.asarray([[0.0, 0.0, 1.0]], dtype))
        pos_levels.append(pos)
        quat_levels.append(quat)
        mat_levels.append(_qmat(quat))
    order = np.argsort(np.concatenate([[0]] + [lv.bodies for lv in levels]))
    xpos = _take(jnp.concatenate(pos_levels), order)
    xquat = _take(jnp.concatenate(quat_levels), order)
    xmat = _take(jnp.concatenate(mat_levels), order)
    if joints:
        jorder = np.argsort(np.concatenate(joints))
        xanchor = _take(jnp.concatenate(anchors), jorder)
        xaxis = _take(jnp.concatenate(axes), jorder)
    else:
        xanchor = xaxis = jnp.zeros((0, 3), dtype)
    xipos, ximat = _local_to_global(xpos, xquat, m.body_ipos, m.body_iquat)
    d = d.replace(qpos=qpos, xanchor=xanchor, xaxis=xaxis, xpos=xpos, xquat=xquat,
                  xmat=xmat, xipos=xipos, ximat=ximat)
    if m.ngeom:
        g = np.asarray(m.geom_bodyid)
        gpos, gmat = _local_to_global(_take(xpos, g), _take(xquat, g), m.geom_pos, m.geom_quat)
        d = d.replace(geom_xpos=gpos, geom_xmat=gmat)
    if m.nsite:
        s = np.asarray(m.site_bodyid)
        spos, smat = _local_to_global(_take(xpos, s), _take(xquat, s), m.site_pos, m.site_quat)
        d = d.replace(site_xpos=spos, site_xmat=smat)
    return d
