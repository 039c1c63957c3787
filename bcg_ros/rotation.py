"""
Quaternions and rotations, (w, x, y, z) with the Hamilton product, as MuJoCo has them.

One definition of each, used by the trainer (JAX), the evaluator, the motion
tools and the robot-side runtime (NumPy). Functions with an ``xp`` argument
take the array module (``numpy`` or ``jax.numpy``) and work on batches
``[..., 4]``; the others are NumPy only. A quaternion ``q`` maps body-frame
vectors to the world frame: ``quat_rotate(q, v)`` is body to world and
``quat_rotate_inverse(q, v)`` world to body.

This module imports NumPy alone and holds to Python 3.8: the robot's computer
loads it through the contract and the safety rules.
"""

import math
from types import ModuleType
from typing import Any, Tuple

import numpy as np

Array = Any
"""A NumPy or jax.numpy array."""


def quat_mul(a: Array, b: Array, xp: ModuleType = np) -> Array:
    """Return the Hamilton product a b of quaternions [..., 4]."""
    aw, ax, ay, az = (a[..., i] for i in range(4))
    bw, bx, by, bz = (b[..., i] for i in range(4))
    return xp.stack([aw * bw - ax * bx - ay * by - az * bz,
                     aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx,
                     aw * bz + ax * by - ay * bx + az * bw], axis=-1)


def quat_conj(q: Array, xp: ModuleType = np) -> Array:
    """Return the conjugate of q [..., 4] (the inverse of a unit quaternion)."""
    return q * xp.asarray([1.0, -1.0, -1.0, -1.0], dtype=q.dtype)


def quat_rotate_inverse(q: Array, v: Array, xp: ModuleType = np) -> Array:
    """Rotate vector(s) v [..., 3] by the inverse of unit quaternion(s) q: world to body."""
    # Written by components: np.cross dominates the 50 Hz observation cost otherwise.
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    vx, vy, vz = v[..., 0], v[..., 1], v[..., 2]
    # t = 2 u x v, result = v - w t + u x t, with u = (x, y, z).
    tx, ty, tz = 2 * (y * vz - z * vy), 2 * (z * vx - x * vz), 2 * (x * vy - y * vx)
    return xp.stack([vx - w * tx + (y * tz - z * ty),
                     vy - w * ty + (z * tx - x * tz),
                     vz - w * tz + (x * ty - y * tx)], axis=-1)


def quat_rotate(q: Array, v: Array, xp: ModuleType = np) -> Array:
    """Rotate vector(s) v [..., 3] by unit quaternion(s) q: body to world."""
    return quat_rotate_inverse(quat_conj(q, xp), v, xp)


def quat_to_6d(q: Array, xp: ModuleType = np) -> Array:
    """Return the first two rotation-matrix columns of q [..., 4]: a continuous 6D rotation."""
    w, x, y, z = (q[..., i] for i in range(4))
    c0 = xp.stack([1 - 2 * (y * y + z * z), 2 * (x * y + w * z), 2 * (x * z - w * y)], -1)
    c1 = xp.stack([2 * (x * y - w * z), 1 - 2 * (x * x + z * z), 2 * (y * z + w * x)], -1)
    return xp.concatenate([c0, c1], axis=-1)


def quat_to_matrix(quat: Array) -> np.ndarray:
    """Return the 3x3 rotation matrix of one quaternion, normalised first (float64)."""
    w, x, y, z = np.asarray(quat, dtype=np.float64) / np.linalg.norm(quat)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def quat_to_rpy(q: Array) -> Tuple[float, float, float]:
    """Return (roll, pitch, yaw) of one quaternion, R = Rz(yaw) Ry(pitch) Rx(roll) (URDF)."""
    r = quat_to_matrix(q)
    pitch = math.asin(max(-1.0, min(1.0, -r[2, 0])))
    roll = math.atan2(r[2, 1], r[2, 2])
    yaw = math.atan2(r[1, 0], r[0, 0])
    return roll, pitch, yaw


def rpy_to_quat(rpy: np.ndarray) -> np.ndarray:
    """Return quaternions [..., 4] of R = Rz(yaw) Ry(pitch) Rx(roll), from rpy [..., 3]."""
    r, p, y = (rpy[..., i] / 2.0 for i in range(3))
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    return np.stack([cr * cp * cy + sr * sp * sy, sr * cp * cy - cr * sp * sy,
                     cr * sp * cy + sr * cp * sy, cr * cp * sy - sr * sp * cy], axis=-1)


def tilt(quat: np.ndarray) -> float:
    """Return the angle [rad] between the body z axis and world z, of one quaternion."""
    q = quat / np.linalg.norm(quat)
    cos = 1.0 - 2.0 * (q[1] * q[1] + q[2] * q[2])
    return float(np.arccos(np.clip(cos, -1.0, 1.0)))


def quat_continuous(q: np.ndarray) -> np.ndarray:
    """Flip signs along axis 0 so consecutive quaternions lie in one hemisphere (a copy)."""
    q = np.array(q, dtype=np.float64)
    for i in range(1, len(q)):
        if np.dot(q[i], q[i - 1]) < 0.0:
            q[i] = -q[i]
    return q


def quat_slerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Interpolate spherically from a to b ([..., 4]) at fractions t ([...]), the short way."""
    t = np.asarray(t, dtype=np.float64)[..., None]
    dot = np.sum(a * b, axis=-1, keepdims=True)
    b = np.where(dot < 0.0, -b, b)
    dot = np.abs(dot)
    theta = np.arccos(np.clip(dot, -1.0, 1.0))
    sin = np.sin(theta)
    small = sin < 1e-8
    # Where a and b (nearly) coincide, slerp's weights tend to the linear ones.
    safe = np.where(small, 1.0, sin)
    wa = np.where(small, 1.0 - t, np.sin((1.0 - t) * theta) / safe)
    wb = np.where(small, t, np.sin(t * theta) / safe)
    q = wa * a + wb * b
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def quat_to_rotvec(q: np.ndarray) -> np.ndarray:
    """Return the rotation vector (axis times angle in [0, pi]) of quaternions [..., 4]."""
    q = np.where(q[..., :1] < 0.0, -q, q)
    vec = q[..., 1:]
    norm = np.linalg.norm(vec, axis=-1, keepdims=True)
    angle = 2.0 * np.arctan2(norm, q[..., :1])
    # angle / norm -> 2 as the rotation vanishes.
    scale = np.where(norm > 1e-12, angle / np.maximum(norm, 1e-300), 2.0)
    return vec * scale
