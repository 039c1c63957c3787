"""
The G1's legs as two serial chains, in NumPy: foot kinematics, Jacobians, inverse dynamics.

The state estimator needs, for each foot, where it is relative to the pelvis,
its 6x6 Jacobian over the leg's six joints, and the torques those joints need
to move the leg as it moves (gravity, Coriolis, inertia). Each leg is a chain
of six hinged links hanging from the pelvis (hip pitch, roll, yaw, knee, ankle
pitch, roll), so all three come from the tables of :mod:`bcg_ros.robot.g1`
by the classic recursions, without MuJoCo: the robot's computer runs
``state_bridge_node`` with NumPy alone.

Every vector is in world axes with the pelvis origin at the world origin (the
pelvis orientation comes from the IMU); the pelvis moves with angular velocity
``w0`` and angular acceleration ``alpha0`` (world axes) and its origin has the
linear acceleration ``a0``, while its linear velocity never enters (the
kinematics do not depend on it, and neither does the leg's dynamics in world
axes). ``inverse_dynamics`` is the Newton-Euler recursion: outwards, each
link's angular velocity and acceleration and the acceleration of its joint
anchor and centre of mass; inwards, the force and moment each joint carries;
the joint torque is the moment about its axis plus the rotor's armature times
its acceleration. On a serial chain both recursions are prefix sums, which
keeps a step to a few dozen array operations.
"""

from dataclasses import dataclass
from typing import Tuple

import numpy as np

from bcg_ros.robot import g1
from bcg_ros.rotation import quat_to_matrix


@dataclass(frozen=True)
class LegChain:
    """One leg, pelvis to foot: per link (hip pitch first) its placement, joint and inertia."""

    bodies: Tuple[str, ...]
    """Link names, the foot body last."""
    slots: np.ndarray
    """[6] motor slots (LowState order) of the links' joints."""
    pos: np.ndarray
    """[6, 3] link origin in its parent's frame (the joint anchor: joints sit at the origin)."""
    rot: np.ndarray
    """[6, 3, 3] link orientation in its parent's frame."""
    axis: np.ndarray
    """[6, 3] joint axis in the link's frame."""
    mass: np.ndarray
    """[6] link masses [kg]."""
    com: np.ndarray
    """[6, 3] centre of mass in the link's frame."""
    inertia: np.ndarray
    """[6, 3, 3] inertia about the centre of mass, link frame [kg m^2]."""
    armature: np.ndarray
    """[6] rotor inertia reflected at each joint [kg m^2]."""
    damping: np.ndarray
    """[6] passive joint damping [N m s / rad]."""


@dataclass(frozen=True)
class LegPose:
    """A chain placed by the pelvis orientation and its joint angles (world axes, pelvis at 0)."""

    origin: np.ndarray
    """[6, 3] link origins (joint anchors)."""
    rot: np.ndarray
    """[6, 3, 3] link orientations."""
    axis: np.ndarray
    """[6, 3] joint axes."""

    @property
    def foot_pos(self) -> np.ndarray:
        """[3] the foot body's origin."""
        return self.origin[-1]

    @property
    def foot_rot(self) -> np.ndarray:
        """[3, 3] the foot body's orientation."""
        return self.rot[-1]

    def jacobian(self) -> np.ndarray:
        """[6, 6] d(foot linear; angular velocity)/d(joint speeds), rows linear first."""
        lin = cross(self.axis, self.foot_pos - self.origin)
        return np.vstack([lin.T, self.axis.T])


def leg_chain(foot: str) -> LegChain:
    """The chain from the pelvis to ``foot`` (a body of :data:`g1.FOOT_BODIES`)."""
    links = []
    name = foot
    while name != g1.ROOT_BODY:
        b = g1.body(name)
        if b.joint is None or b.parent is None:
            raise ValueError(f'leg chain to {foot!r}: body {name!r} has no joint or parent')
        links.append(b)
        name = b.parent
    links.reverse()
    names = tuple(j.name for j in g1.JOINTS)
    inertia = []
    for b in links:
        r = quat_to_matrix(b.iquat)
        inertia.append(r @ np.diag(b.inertia) @ r.T)
    return LegChain(
        bodies=tuple(b.name for b in links),
        slots=np.array([names.index(b.joint.name) for b in links]),
        pos=np.array([b.pos for b in links], dtype=np.float64),
        rot=np.array([quat_to_matrix(b.quat) for b in links]),
        axis=np.array([b.joint.axis for b in links], dtype=np.float64),
        mass=np.array([b.mass for b in links], dtype=np.float64),
        com=np.array([b.ipos for b in links], dtype=np.float64),
        inertia=np.array(inertia),
        armature=np.full(len(links), g1.ARMATURE),
        damping=np.full(len(links), g1.JOINT_DAMPING))


def leg_chains() -> Tuple[LegChain, ...]:
    """Both legs, in the order of :data:`g1.FOOT_BODIES`."""
    return tuple(leg_chain(foot) for foot in g1.FOOT_BODIES)


def place(chain: LegChain, rotation: np.ndarray, q: np.ndarray) -> LegPose:
    """Forward kinematics: the links for pelvis orientation ``rotation`` and joint angles ``q``."""
    n = len(chain.bodies)
    origin = np.empty((n, 3))
    rot = np.empty((n, 3, 3))
    axis = np.empty((n, 3))
    joint = chain.rot @ _axis_rotations(chain.axis, np.asarray(q, dtype=np.float64))
    parent_pos, parent_rot = np.zeros(3), np.asarray(rotation, dtype=np.float64)
    for i in range(n):
        origin[i] = parent_pos + parent_rot @ chain.pos[i]
        axis[i] = parent_rot @ (chain.rot[i] @ chain.axis[i])
        rot[i] = parent_rot @ joint[i]
        parent_pos, parent_rot = origin[i], rot[i]
    return LegPose(origin, rot, axis)


def inverse_dynamics(chain: LegChain, pose: LegPose, w0: np.ndarray, alpha0: np.ndarray,
                     a0: np.ndarray, qd: np.ndarray, qdd: np.ndarray,
                     gravity: float = 9.81) -> np.ndarray:
    """
    [6] joint torques that move the leg with speeds ``qd`` and accelerations ``qdd``.

    The pelvis turns at ``w0`` with ``alpha0`` and its origin accelerates at
    ``a0`` (world axes); gravity is -``gravity`` along z. Passive damping is not
    included (it is ``-chain.damping * qd``). The recursions over the chain are
    prefix sums, so each is one array operation over the six links.
    """
    axis, origin = pose.axis, pose.origin
    spin = axis * np.asarray(qd, dtype=np.float64)[:, None]
    # Outwards: the angular velocity of each link and of its parent.
    w = np.asarray(w0, dtype=np.float64) + np.cumsum(spin, axis=0)
    w_parent = np.vstack([w0, w[:-1]])
    alpha = np.asarray(alpha0, dtype=np.float64) + np.cumsum(
        axis * np.asarray(qdd, dtype=np.float64)[:, None] + cross(w_parent, spin), axis=0)
    alpha_parent = np.vstack([alpha0, alpha[:-1]])
    # Each anchor is fixed in the parent link: its acceleration from the parent's motion.
    step = np.diff(origin, axis=0, prepend=np.zeros((1, 3)))
    acc = (np.asarray(a0, dtype=np.float64) + np.array([0.0, 0.0, gravity])
           + np.cumsum(cross(alpha_parent, step)
                       + cross(w_parent, cross(w_parent, step)), axis=0))
    c = np.einsum('nij,nj->ni', pose.rot, chain.com)
    acc_com = acc + cross(alpha, c) + cross(w, cross(w, c))
    inertia = pose.rot @ chain.inertia @ pose.rot.transpose(0, 2, 1)
    force = chain.mass[:, None] * acc_com
    moment = (np.einsum('nij,nj->ni', inertia, alpha)
              + cross(w, np.einsum('nij,nj->ni', inertia, w)))
    # Inwards: what joint i carries is everything from link i out, its moment about anchor i.
    com = origin + c
    f_out = np.cumsum(force[::-1], axis=0)[::-1]
    n_out = (np.cumsum((moment + cross(com, force))[::-1], axis=0)[::-1]
             - cross(origin, f_out))
    return np.einsum('ni,ni->n', axis, n_out) + chain.armature * qdd


def cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cross product of [..., 3] arrays (np.cross without its axis handling)."""
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    return np.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)


def _axis_rotations(axis: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """[n, 3, 3] rotations by ``angle`` [n] about the unit vectors ``axis`` [n, 3] (Rodrigues)."""
    k = axis / np.linalg.norm(axis, axis=-1, keepdims=True)
    kx = np.zeros((len(k), 3, 3))
    kx[:, 0, 1], kx[:, 0, 2], kx[:, 1, 2] = -k[:, 2], k[:, 1], -k[:, 0]
    kx[:, 1, 0], kx[:, 2, 0], kx[:, 2, 1] = k[:, 2], -k[:, 1], k[:, 0]
    return (np.eye(3) + np.sin(angle)[:, None, None] * kx
            + (1.0 - np.cos(angle))[:, None, None] * (kx @ kx))
