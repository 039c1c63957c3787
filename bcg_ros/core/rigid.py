"""
The rigid-body tree, vectorised: kinematics by pointer doubling, dynamics as masked sums.

Drop-ins for MJX's smooth pipeline (same ``mjx.Data`` fields, MuJoCo's conventions:
motion vectors ``[angular, linear]`` in the world frame at the root's subtree centre of
mass) for trees whose bodies carry at most one joint each, free, hinge or slide, with
no mocap bodies: the G1 and the project's test models (:func:`supported`; other models
go to MJX's own functions). Why: MJX walks the tree body group by body group and
traces each joint's algebra per group, so the G1's smooth dynamics is thousands of
small operations, traced again wherever the simulator needs it (the plain step, BCG's
branches, the foot Jacobians, each under ``jax.grad``). Here the traced size does not
grow with the number of bodies.

:func:`kinematics` gives every body its transform in its parent's frame at once
(its offset, then its joint), then composes along the tree by pointer doubling: each
round composes a body's transform with that of its ancestor 2^k levels up, so a tree
of depth D takes ceil(log2 D) rounds (the G1's 12 levels: 4) and no per-level code::

    local:  hinge  quat = body_quat * (axis-angle of q - q0)
                   pos  = body_pos + R(body_quat) (jnt_pos - R(axis-angle) jnt_pos)
            slide  pos  = body_pos + R(body_quat) jnt_axis (q - q0)
            free   pos, quat = qpos[a:a + 3], qpos[a + 3:a + 7] / |.|
    round:  pos, quat <- pos[up] + R(quat[up]) pos, quat[up] * quat;  up <- up[up]

:func:`com_pos` and :func:`dynamics` are MuJoCo's composite-rigid-body and
recursive Newton-Euler algorithms with every recursion written as a sum over a
static 0/1 matrix of the tree (a body's ancestors, its subtree, a dof's
predecessors): a tree of 31 bodies and 35 dofs is a few matrix products.
"""

from dataclasses import dataclass
from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np
from mujoco import mjx

from bcg_ros import rotation

_FREE, _BALL, _SLIDE, _HINGE = 0, 1, 2, 3


def supported(m: mjx.Model) -> bool:
    """Whether :func:`kinematics` computes this model itself (else it calls MJX's)."""
    types = np.asarray(m.jnt_type)
    return (int(np.max(m.body_jntnum, initial=0)) <= 1 and not m.nmocap
            and not np.any(types == _BALL))


def _jumps(m: mjx.Model) -> Tuple[np.ndarray, ...]:
    """
    The ancestor maps of pointer doubling: ``parent``, then ``a[a]`` while it changes.

    Map ``k`` sends each body to its ancestor 2^k levels up (the world body maps to
    itself). Composing each body's transform with that of its map-k ancestor, for
    k = 0, 1, ..., gives every body its world transform in ceil(log2(depth)) rounds.
    """
    jump = np.asarray(m.body_parentid, int).copy()
    jump[0] = 0
    jumps = []
    while np.any(jump != 0):
        jumps.append(jump)
        jump = jump[jump]
    return tuple(jumps)


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


def _run(idx: np.ndarray):
    """(start, stop) when the static indices are one contiguous ascending run, else None."""
    if idx.size and np.array_equal(idx, np.arange(idx[0], idx[0] + idx.size)):
        return int(idx[0]), int(idx[0]) + idx.size
    return None


def take(x: jax.Array, idx) -> jax.Array:
    """
    ``x[idx]`` along the first axis.

    Static indices (a sequence or a NumPy array) give a slice where they are a contiguous
    run, otherwise a product with a constant 0/1 matrix, whose gradient is the transposed
    product: a gather's gradient is a scatter-add, which XLA's CPU backend runs as a loop
    over the indices, several small kernels per index, in every backward pass of every
    simulator step. Traced indices (a JAX array) gather; a NumPy ``x`` with static indices
    stays a NumPy array (a constant).
    """
    if isinstance(idx, jax.Array):
        return jnp.asarray(x)[idx]
    idx = np.asarray(idx, int).reshape(-1)
    if isinstance(x, np.ndarray):
        return x[idx]
    run = _run(idx)
    if run is not None:
        return x[run[0]:run[1]]
    onehot = jnp.asarray(np.eye(x.shape[0])[idx], x.dtype)
    return jnp.tensordot(onehot, x, axes=(1, 0))


def put(x: jax.Array, idx, values: jax.Array, add: bool = False) -> jax.Array:
    """
    ``x.at[idx].set(values)`` (``.add`` with ``add``) along the first axis, static indices.

    The same forms as :func:`take` (a padded slice or a constant 0/1 product), so neither
    the step nor its gradient scatters. With ``add=False`` the indices must be distinct.
    """
    idx = np.asarray(idx, int).reshape(-1)
    n = x.shape[0]
    run = _run(idx)
    if run is not None:
        pad = [(run[0], n - run[1])] + [(0, 0)] * (x.ndim - 1)
        spread = jnp.pad(values.astype(x.dtype), pad)
    else:
        spread = jnp.tensordot(jnp.asarray(np.eye(n)[idx].T, x.dtype), values.astype(x.dtype),
                               axes=(1, 0))
    if add:
        return x + spread
    if len(set(idx.tolist())) != idx.size:
        raise ValueError(f'put: repeated indices {idx.tolist()} with add=False')
    hit = np.zeros(n, bool)
    hit[idx] = True
    return jnp.where(jnp.asarray(hit.reshape((n,) + (1,) * (x.ndim - 1))), spread, x)


def _apply(mat: jax.Array, v: jax.Array) -> jax.Array:
    return jnp.einsum('...ab,...b->...a', mat, v)


def _local_to_global(pos, quat, mat, local_pos, local_quat):
    """World position and rotation matrix of frames given in their bodies' frames."""
    return pos + _apply(mat, local_pos), _qmat(_qmul(quat, local_quat))


def kinematics(m: mjx.Model, d: mjx.Data) -> mjx.Data:
    """``mjx.kinematics(m, d)``, by pointer doubling (see the module docstring)."""
    if not supported(m):
        return mjx.kinematics(m, d)
    qpos, dtype = d.qpos, d.qpos.dtype
    nbody = m.nbody
    jtype = np.asarray(m.jnt_type)
    qadr = np.asarray(m.jnt_qposadr)
    jbody = np.asarray(m.jnt_bodyid)
    hinge = np.flatnonzero(jtype == _HINGE)
    slide = np.flatnonzero(jtype == _SLIDE)
    # Each body's transform in its parent's frame: the body's offset, then its joint.
    joint_quat = jnp.zeros((nbody, 4), dtype).at[:, 0].set(1.0)
    joint_pos = jnp.zeros((nbody, 3), dtype)
    shift = jnp.zeros((m.njnt,), dtype)
    if hinge.size:
        jpos, jaxis = take(m.jnt_pos, hinge), take(m.jnt_axis, hinge)
        half = 0.5 * (take(qpos, qadr[hinge]) - take(m.qpos0, qadr[hinge]))
        turn = jnp.concatenate([jnp.cos(half)[:, None], jaxis * jnp.sin(half)[:, None]], -1)
        joint_quat = put(joint_quat, jbody[hinge], turn)
        # A hinge turns the body about the axis through its anchor.
        joint_pos = put(joint_pos, jbody[hinge], jpos - _apply(_qmat(turn), jpos))
    if slide.size:
        shift = put(shift, slide, take(qpos, qadr[slide]) - take(m.qpos0, qadr[slide]))
        joint_pos = put(joint_pos, jbody[slide],
                        take(m.jnt_axis, slide) * take(shift, slide)[:, None])
    pos = m.body_pos + _apply(_qmat(m.body_quat), joint_pos)
    quat = _qmul(m.body_quat, joint_quat)
    # A free joint's body (a child of the world) is placed by qpos itself.
    for j in np.flatnonzero(jtype == _FREE):
        a, b = int(qadr[j]), int(jbody[j])
        fq = qpos[a + 3:a + 7] / jnp.linalg.norm(qpos[a + 3:a + 7])
        qpos = qpos.at[a + 3:a + 7].set(fq)
        pos, quat = pos.at[b].set(qpos[a:a + 3]), quat.at[b].set(fq)
    pos = pos.at[0].set(0.0)
    quat = quat.at[0].set(jnp.asarray([1.0, 0.0, 0.0, 0.0], dtype))
    # Each round: the transform from a body's map-k ancestor becomes one from twice as far.
    for jump in _jumps(m):
        up_pos, up_quat = take(pos, jump), take(quat, jump)
        pos = up_pos + _apply(_qmat(up_quat), pos)
        quat = _qmul(up_quat, quat)
    xpos, xquat, xmat = pos, quat, _qmat(quat)
    if m.njnt:
        jmat, jxpos = take(xmat, jbody), take(xpos, jbody)
        xaxis = _apply(jmat, m.jnt_axis)
        # MuJoCo's anchor of a slide is where the body was before it slid.
        xanchor = jxpos + _apply(jmat, m.jnt_pos) - xaxis * shift[:, None]
        free = jnp.asarray((jtype == _FREE)[:, None])
        xanchor = jnp.where(free, jxpos, xanchor)
        xaxis = jnp.where(free, jnp.asarray([0.0, 0.0, 1.0], dtype), xaxis)
    else:
        xanchor = xaxis = jnp.zeros((0, 3), dtype)
    xipos, ximat = _local_to_global(xpos, xquat, xmat, m.body_ipos, m.body_iquat)
    d = d.replace(qpos=qpos, xanchor=xanchor, xaxis=xaxis, xpos=xpos, xquat=xquat,
                  xmat=xmat, xipos=xipos, ximat=ximat)
    if m.ngeom:
        g = np.asarray(m.geom_bodyid)
        gpos, gmat = _local_to_global(take(xpos, g), take(xquat, g), take(xmat, g),
                                      m.geom_pos, m.geom_quat)
        d = d.replace(geom_xpos=gpos, geom_xmat=gmat)
    if m.nsite:
        s = np.asarray(m.site_bodyid)
        spos, smat = _local_to_global(take(xpos, s), take(xquat, s), take(xmat, s),
                                      m.site_pos, m.site_quat)
        d = d.replace(site_xpos=spos, site_xmat=smat)
    return d


@dataclass(frozen=True)
class _Tree:
    """Static 0/1 matrices and index maps of a model's dofs and bodies."""

    dof_body: np.ndarray
    """[nv] each dof's body."""
    dof_jnt: np.ndarray
    rot_axis: np.ndarray
    """[nv] 0: the dof rotates about its joint's axis (hinge); 1-3: about the body's
    x, y or z axis (a free joint's rotation); -1: it translates."""
    lin_axis: np.ndarray
    """[nv] 0: along the joint's axis (slide); 1-3: along the world's x, y, z (a free
    joint's translation); -1: it rotates."""
    ancestor: np.ndarray
    """[nbody, nv] dof moves the body (sits on the body or above it)."""
    subtree: np.ndarray
    """[nbody, nbody] [b, c]: body c is b or below it."""
    upper: np.ndarray
    """[nv, nv] [d, e]: dof d is dof e or above it (CRBA's nonzero pattern of M)."""
    before: np.ndarray
    """[nv, nv] [d, e]: dof e moves the frame dof d's motion is measured in (strictly
    above d's body, or an earlier part of its joint that MuJoCo counts first: a free
    joint's translation before its rotation)."""


def _tree(m: mjx.Model) -> _Tree:
    parent = np.asarray(m.body_parentid)
    dof_body, dof_jnt = np.asarray(m.dof_bodyid), np.asarray(m.dof_jntid)
    types = np.asarray(m.jnt_type)[dof_jnt]
    first = np.asarray(m.jnt_dofadr)[dof_jnt]
    k = np.arange(m.nv) - first                              # position within the joint
    rot_axis = np.select([types == _HINGE, (types == _FREE) & (k >= 3)], [0, k - 2], -1)
    lin_axis = np.select([types == _SLIDE, (types == _FREE) & (k < 3)], [0, k + 1], -1)
    subtree = np.zeros((m.nbody, m.nbody), bool)
    for c in range(m.nbody):
        b = c
        while True:
            subtree[b, c] = True
            if b == 0:
                break
            b = parent[b]
    ancestor = subtree[dof_body].T                            # [nbody, nv]
    strict = ancestor[parent[dof_body]].T                     # [nv(e), nv(d)] -> e above d
    same = dof_body[:, None] == dof_body[None, :]
    upper = (strict | (same & (np.arange(m.nv)[:, None] <= np.arange(m.nv)[None, :])))
    free_rot = (types == _FREE) & (k >= 3)
    before = strict.T | (same & free_rot[:, None] & (lin_axis[None, :] > 0))
    return _Tree(dof_body, dof_jnt, rot_axis, lin_axis, ancestor, subtree, upper, before)


def _cross(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.einsum('ijk,...j,...k->...i', jnp.asarray(_EPS, a.dtype), a, b)


def _skew(v: jax.Array) -> jax.Array:
    """[v]x: the matrix of v x (.)."""
    return jnp.einsum('ijk,...j->...ik', jnp.asarray(_EPS, v.dtype), v)


_EPS = np.zeros((3, 3, 3))
for _i, _j, _k in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
    _EPS[_i, _j, _k], _EPS[_i, _k, _j] = 1.0, -1.0


def _motion_cross(u: jax.Array, v: jax.Array) -> jax.Array:
    """u x v of spatial motions [..., 6] ([angular, linear])."""
    return jnp.concatenate([_cross(u[..., :3], v[..., :3]),
                            _cross(u[..., 3:], v[..., :3]) + _cross(u[..., :3], v[..., 3:])], -1)


def _force_cross(u: jax.Array, f: jax.Array) -> jax.Array:
    """u x* f of a spatial motion and a spatial force [..., 6] ([torque, force])."""
    return jnp.concatenate([_cross(u[..., :3], f[..., :3]) + _cross(u[..., 3:], f[..., 3:]),
                            _cross(u[..., :3], f[..., 3:])], -1)


def com_pos(m: mjx.Model, d: mjx.Data) -> mjx.Data:
    """
    Return ``mjx.com_pos(m, d)``, ``d`` after :func:`kinematics`.

    It fills ``subtree_com``, ``cdof`` and the bodies' spatial inertias (``cinert``,
    MuJoCo's 10 numbers per body).
    """
    if not supported(m):
        return mjx.com_pos(m, d)
    t = _tree(m)
    mass = m.body_mass
    weighted = jnp.einsum('bc,c,ci->bi', jnp.asarray(t.subtree, d.xipos.dtype), mass, d.xipos)
    total = jnp.asarray(t.subtree, mass.dtype) @ mass
    subtree_com = jnp.where(total[:, None] < 1e-15, d.xipos,
                            weighted / jnp.maximum(total, 1e-15)[:, None])
    root_com = take(subtree_com, np.asarray(m.body_rootid))
    off = d.xipos - root_com
    inert = jnp.einsum('bij,bj,bkj->bik', d.ximat, m.body_inertia, d.ximat)
    h = _skew(off)
    inert = inert - mass[:, None, None] * (h @ h)
    tri = (np.array([0, 1, 2, 0, 0, 1]), np.array([0, 1, 2, 1, 2, 2]))
    cinert = jnp.concatenate([inert[:, tri[0], tri[1]], off * mass[:, None], mass[:, None]], -1)
    # The dofs' motions: rotation about an axis through the anchor, or a translation.
    dtype = d.xpos.dtype
    xmat = take(d.xmat, t.dof_body)                                    # [nv, 3, 3]
    jaxis = take(d.xaxis, t.dof_jnt)
    onehot = np.eye(4)[np.maximum(t.rot_axis, 0)][:, 1:]                # body axis k
    rot = jnp.where(jnp.asarray((t.rot_axis == 0)[:, None]), jaxis,
                    jnp.einsum('dik,dk->di', xmat, jnp.asarray(onehot, dtype)))
    rot = rot * jnp.asarray((t.rot_axis >= 0)[:, None], dtype)
    lin_world = jnp.asarray(np.eye(4)[np.maximum(t.lin_axis, 0)][:, 1:], dtype)
    lin = jnp.where(jnp.asarray((t.lin_axis == 0)[:, None]), jaxis, lin_world)
    lin = lin * jnp.asarray((t.lin_axis >= 0)[:, None], dtype)
    arm = take(root_com, t.dof_body) - take(d.xanchor, t.dof_jnt)
    cdof = jnp.concatenate([rot, _cross(rot, arm) + lin], -1)
    return d.tree_replace({'subtree_com': subtree_com, 'cdof': cdof, '_impl.cinert': cinert})


def _spatial_inertia(cinert: jax.Array) -> jax.Array:
    """[nbody, 6, 6] matrices of MuJoCo's 10-number inertias (motion -> force)."""
    tri = np.array([[0, 3, 4], [3, 1, 5], [4, 5, 2]])
    rot, pos, mass = cinert[:, tri], cinert[:, 6:9], cinert[:, 9]
    h = _skew(pos)
    eye = jnp.eye(3, dtype=cinert.dtype)
    return jnp.concatenate([jnp.concatenate([rot, h], -1),
                            jnp.concatenate([-h, mass[:, None, None] * eye], -1)], -2)


def dynamics(m: mjx.Model, d: mjx.Data) -> Tuple[mjx.Data, jax.Array]:
    """
    Return the bias forces and the mass matrix of ``d`` after :func:`com_pos`.

    That is ``d`` with ``cvel``, ``cdof_dot`` and ``qfrc_bias`` (what ``mjx.com_vel``
    and ``mjx.rne`` give), and the dense mass matrix [nv, nv] (``mjx.full_m`` after
    ``mjx.crb``, armature included).
    """
    if not supported(m):
        d = mjx.rne(m, mjx.com_vel(m, mjx.crb(m, d)))
        return d, mjx.full_m(m, d)
    t = _tree(m)
    dtype = d.qvel.dtype
    inertia = _spatial_inertia(d._impl.cinert)                          # [nbody, 6, 6]
    # CRBA: M[d, e] = cdof_d . (subtree inertia of e's body) cdof_e, d at or above e.
    crb = jnp.einsum('bc,cij->bij', jnp.asarray(t.subtree, dtype), inertia)
    crb_cdof = jnp.einsum('dij,dj->di', take(crb, t.dof_body), d.cdof)
    upper = jnp.einsum('di,ei->de', d.cdof, crb_cdof) * jnp.asarray(t.upper, dtype)
    mass = upper + upper.T - jnp.diag(jnp.diag(upper)) + jnp.diag(m.dof_armature)
    # RNE without acceleration: velocities, bias accelerations, forces, summed up the tree.
    motion = d.cdof * d.qvel[:, None]
    cvel = jnp.asarray(t.ancestor, dtype) @ motion
    cdof_dot = _motion_cross(jnp.asarray(t.before, dtype) @ motion, d.cdof)
    gravity = jnp.concatenate([jnp.zeros(3, dtype), -m.opt.gravity.astype(dtype)])
    cacc = gravity + jnp.asarray(t.ancestor, dtype) @ (cdof_dot * d.qvel[:, None])
    frc = (jnp.einsum('bij,bj->bi', inertia, cacc)
           + _force_cross(cvel, jnp.einsum('bij,bj->bi', inertia, cvel)))
    cfrc = jnp.asarray(t.subtree, dtype) @ frc
    bias = jnp.einsum('di,di->d', d.cdof, take(cfrc, t.dof_body))
    return d.replace(cvel=cvel, cdof_dot=cdof_dot, qfrc_bias=bias), mass
