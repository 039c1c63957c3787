"""Contact model terms: activation, normal and friction force, terrain (no compile-heavy code)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bcg_ros.core import contact


def params(**kw):
    return contact.ContactParams.from_config(contact.ContactConfig(**kw))


def test_activation_is_half_at_contact_and_monotone():
    d = jnp.linspace(-0.02, 0.02, 101)
    s = contact.activation(d, 300.0)
    assert float(contact.activation(0.0, 300.0)) == pytest.approx(0.5)
    assert bool(jnp.all(jnp.diff(s) > 0))


def test_normal_force_never_pulls_and_vanishes_above_ground():
    p = params(k=300.0)
    d = jnp.linspace(-0.05, 0.05, 201)
    for rate in (-2.0, 0.0, 2.0):
        f = contact.normal_force(d, jnp.full_like(d, rate), p)
        assert bool(jnp.all(f >= 0))
    # 5 cm above the ground at k = 300: exp(-15) of the force scale.
    assert float(contact.normal_force(jnp.array(-0.05), jnp.array(0.0), p)) < 1e-4


@pytest.mark.parametrize('k', [50.0, 100.0, 300.0])
def test_resting_depth_scales_as_one_over_k(k):
    # Static balance f_n(d) = W by bisection; f_n depends on k d only, so k d is the same for
    # every k: the resting depth halves when k doubles.
    weight = 43.0  # the G1's weight over its 8 spheres [N]
    p = params(k=k)
    lo, hi = -0.1, 0.1
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if float(contact.normal_force(jnp.array(mid), jnp.array(0.0), p)) > weight:
            hi = mid
        else:
            lo = mid
    assert k * lo == pytest.approx(0.73, abs=0.02)


def test_friction_opposes_slip_and_stays_within_the_cone():
    p = params(friction=0.8)
    v = jnp.array([[0.3, -0.1, 0.0], [1e-4, 0.0, 0.0], [0.0, 2.0, 0.0]])
    f_n = jnp.array([10.0, 10.0, 5.0])
    f_t = contact.friction_force(f_n, v, p)
    assert bool(jnp.all(jnp.sum(f_t * v, axis=-1) < 0))
    assert bool(jnp.all(jnp.linalg.norm(f_t, axis=-1) <= 0.8 * f_n + 1e-6))
    # Sliding fast: the full Coulomb force.
    assert float(jnp.linalg.norm(f_t[2])) == pytest.approx(4.0, rel=1e-3)


def test_plane_depth_normal_and_point():
    plane = contact.Plane(jnp.asarray(0.1))
    centers = jnp.array([[0.0, 0.0, 0.1], [1.0, 2.0, 0.2]])
    depth, n, point = contact.sphere_depth(centers, 0.01, plane)
    np.testing.assert_allclose(depth, [0.01, -0.09], atol=1e-6)
    np.testing.assert_allclose(n, [[0, 0, 1], [0, 0, 1]])
    np.testing.assert_allclose(point[:, 2], [0.09, 0.19], atol=1e-6)


def test_forces_have_finite_gradients_through_touchdown():
    p = params(k=300.0)

    def total(z):
        centers = jnp.stack([jnp.zeros_like(z), jnp.zeros_like(z), z], -1)
        depth, n, _ = contact.sphere_depth(centers, 0.005, contact.Plane())
        force, _ = contact.sphere_forces(depth, n, jnp.array([[0.1, 0.0, -1.0]] * z.shape[0]), p)
        return jnp.sum(force)

    g = jax.grad(total)(jnp.linspace(-0.02, 0.03, 51))
    assert bool(jnp.all(jnp.isfinite(g)))
