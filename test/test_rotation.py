"""bcg_ros.rotation against MuJoCo's own quaternion functions, in NumPy and jax.numpy."""

import math

import mujoco
import numpy as np
import pytest

from bcg_ros import rotation as R

N = 64


def _quats(n=N, seed=0):
    """Random unit quaternions [n, 4] (both signs of w)."""
    q = np.random.default_rng(seed).standard_normal((n, 4))
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def _vecs(n=N, seed=1):
    return np.random.default_rng(seed).standard_normal((n, 3))


def _axis_angle(axis, angle):
    q = np.empty(4)
    mujoco.mju_axisAngle2Quat(q, np.asarray(axis, dtype=np.float64) / np.linalg.norm(axis),
                              angle)
    return q


def _mj(fn, shape, *args):
    """Apply a MuJoCo function row by row: fn(res, *rows)."""
    out = np.empty((len(args[0]),) + shape)
    for i, row in enumerate(zip(*args)):
        res = np.empty(int(np.prod(shape)))
        fn(res, *(np.ascontiguousarray(a, dtype=np.float64) for a in row))
        out[i] = res.reshape(shape)
    return out


def test_quat_mul_is_mujocos():
    a, b = _quats(seed=0), _quats(seed=1)
    np.testing.assert_allclose(R.quat_mul(a, b), _mj(mujoco.mju_mulQuat, (4,), a, b),
                               atol=1e-15)


def test_quat_conj_is_mujocos_neg_quat():
    q = _quats()
    np.testing.assert_array_equal(R.quat_conj(q), _mj(mujoco.mju_negQuat, (4,), q))


def test_quat_rotate_and_its_inverse_are_mujocos():
    q, v = _quats(), _vecs()
    world = _mj(mujoco.mju_rotVecQuat, (3,), v, q)
    np.testing.assert_allclose(R.quat_rotate(q, v), world, atol=1e-14)
    body = _mj(mujoco.mju_rotVecQuat, (3,), v, _mj(mujoco.mju_negQuat, (4,), q))
    np.testing.assert_allclose(R.quat_rotate_inverse(q, v), body, atol=1e-14)
    # One quaternion rotating a batch of vectors, as the observation's gravity term does.
    one = _mj(mujoco.mju_rotVecQuat, (3,), v, np.tile(R.quat_conj(q[0]), (N, 1)))
    np.testing.assert_allclose(R.quat_rotate_inverse(q[0], v), one, atol=1e-14)


def test_quat_to_matrix_and_6d_are_mujocos():
    q = _quats()
    mats = _mj(mujoco.mju_quat2Mat, (3, 3), q)
    for qi, m in zip(q, mats):
        np.testing.assert_allclose(R.quat_to_matrix(qi), m, atol=1e-15)
        # quat_to_matrix normalises its argument first.
        np.testing.assert_allclose(R.quat_to_matrix(2.5 * qi), m, atol=1e-15)
    np.testing.assert_allclose(R.quat_to_6d(q),
                               np.concatenate([mats[:, :, 0], mats[:, :, 1]], -1), atol=1e-15)


def test_jax_numpy_gives_what_numpy_gives():
    jnp = pytest.importorskip('jax.numpy')
    q, v = _quats().astype(np.float32), _vecs().astype(np.float32)
    jq, jv = jnp.asarray(q), jnp.asarray(v)
    for name, np_out, jax_out in (
            ('quat_mul', R.quat_mul(q, q[::-1]), R.quat_mul(jq, jq[::-1], jnp)),
            ('quat_conj', R.quat_conj(q), R.quat_conj(jq, jnp)),
            ('quat_rotate', R.quat_rotate(q, v), R.quat_rotate(jq, jv, jnp)),
            ('quat_rotate_inverse', R.quat_rotate_inverse(q, v),
             R.quat_rotate_inverse(jq, jv, jnp)),
            ('quat_to_6d', R.quat_to_6d(q), R.quat_to_6d(jq, jnp))):
        assert jax_out.shape == np_out.shape, name
        np.testing.assert_allclose(np.asarray(jax_out), np_out, atol=2e-6, err_msg=name)


def test_rpy_round_trip_and_convention():
    rng = np.random.default_rng(2)
    rpy = np.stack([rng.uniform(-3.1, 3.1, N), rng.uniform(-1.5, 1.5, N),
                    rng.uniform(-3.1, 3.1, N)], -1)
    q = R.rpy_to_quat(rpy)
    np.testing.assert_allclose(np.linalg.norm(q, axis=-1), 1.0, atol=1e-15)
    for qi, (roll, pitch, yaw) in zip(q, rpy):
        # R = Rz(yaw) Ry(pitch) Rx(roll).
        z = _axis_angle((0, 0, 1), yaw)
        y = _axis_angle((0, 1, 0), pitch)
        x = _axis_angle((1, 0, 0), roll)
        zy = _mj(mujoco.mju_mulQuat, (4,), [z], [y])
        ref = _mj(mujoco.mju_mulQuat, (4,), zy, [x])[0]
        np.testing.assert_allclose(qi, ref, atol=1e-15)
        np.testing.assert_allclose(R.quat_to_rpy(qi), (roll, pitch, yaw), atol=1e-12)
        # Either sign of the quaternion is the same rotation.
        np.testing.assert_allclose(R.quat_to_rpy(-qi), (roll, pitch, yaw), atol=1e-12)
    assert all(isinstance(a, float) for a in R.quat_to_rpy(q[0]))


def test_slerp_endpoints_and_midpoint():
    a, b = _quats(seed=3), _quats(seed=4)
    np.testing.assert_allclose(R.quat_slerp(a, b, np.zeros(N)), a, atol=1e-14)
    # At t = 1 the short way ends at b or -b: the same rotation.
    end = R.quat_slerp(a, b, np.ones(N))
    np.testing.assert_allclose(np.abs(np.sum(end * b, -1)), 1.0, atol=1e-14)
    # Halfway between two angles about one axis is the mean angle.
    mid = R.quat_slerp(_axis_angle((1, 2, 3), 0.2), _axis_angle((1, 2, 3), 1.0), 0.5)
    np.testing.assert_allclose(mid, _axis_angle((1, 2, 3), 0.6), atol=1e-15)
    # Coinciding ends.
    np.testing.assert_allclose(R.quat_slerp(a, a, np.full(N, 0.3)), a, atol=1e-15)


def test_quat_continuous_flips_into_one_hemisphere():
    q = _quats(seed=5)
    out = R.quat_continuous(q)
    assert np.all(np.sum(out[1:] * out[:-1], -1) >= 0.0)
    np.testing.assert_array_equal(np.abs(out), np.abs(q))
    np.testing.assert_array_equal(out[0], q[0])


def test_rotvec_of_a_known_rotation():
    axis = np.array([0.3, -0.4, 0.5]) / np.linalg.norm([0.3, -0.4, 0.5])
    q = _axis_angle(axis, 1.2)
    np.testing.assert_allclose(R.quat_to_rotvec(q), 1.2 * axis, atol=1e-15)
    np.testing.assert_allclose(R.quat_to_rotvec(-q), 1.2 * axis, atol=1e-15)
    # An angle beyond pi comes back as the shorter rotation the other way.
    np.testing.assert_allclose(R.quat_to_rotvec(_axis_angle(axis, 2 * math.pi - 0.5)),
                               -0.5 * axis, atol=1e-14)
    np.testing.assert_array_equal(R.quat_to_rotvec(np.array([1.0, 0.0, 0.0, 0.0])), 0.0)
    # Batched, against MuJoCo's quaternion to angular velocity over dt = 1.
    q = _quats(seed=6)
    vel = _mj(lambda res, qi: mujoco.mju_quat2Vel(res, qi, 1.0), (3,), q)
    np.testing.assert_allclose(R.quat_to_rotvec(q), vel, atol=1e-12)


def test_tilt_of_a_known_tilt():
    assert R.tilt(np.array([1.0, 0.0, 0.0, 0.0])) == 0.0
    assert R.tilt(_axis_angle((0, 0, 1), 2.0)) == pytest.approx(0.0, abs=1e-12)
    assert R.tilt(_axis_angle((1, 0, 0), 0.3)) == pytest.approx(0.3, abs=1e-12)
    # A yaw before or after the tilt does not change it; the quaternion need not be unit.
    lean = R.quat_mul(_axis_angle((0, 0, 1), 1.1),
                      R.quat_mul(_axis_angle((1, 1, 0), 0.7), _axis_angle((0, 0, 1), -0.4)))
    assert R.tilt(3.0 * lean) == pytest.approx(0.7, abs=1e-12)
    assert R.tilt(_axis_angle((0, 1, 0), math.pi)) == pytest.approx(math.pi, abs=1e-12)
