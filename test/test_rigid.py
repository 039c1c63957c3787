"""The vectorised rigid-body tree against MJX: every field, its derivative, its traced size."""

import re

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from bcg_ros.core import rigid as kin
from bcg_ros.robot import model as g1_model
from sim_models import HOPPER_XML, TUMBLER_XML

FIELDS = ('qpos', 'xanchor', 'xaxis', 'xpos', 'xquat', 'xmat', 'xipos', 'ximat',
          'geom_xpos', 'geom_xmat', 'site_xpos', 'site_xmat')

MIXED_XML = """
<mujoco model="mixed">
  <worldbody>
    <body name="a" pos="0.1 0.2 0.3" quat="0.9 0.1 0.3 -0.2">
      <freejoint/>
      <geom type="box" size="0.1 0.1 0.1" pos="0.01 0 0.02" quat="1 0.2 0 0"/>
      <body name="slider" pos="0 0.1 0" euler="0.3 0.1 0">
        <joint type="slide" axis="0.6 0 0.8" pos="0.02 0.01 0"/>
        <geom type="sphere" size="0.03"/>
        <body name="fixed" pos="0.05 0 0" euler="0 0 0.4">
          <geom type="capsule" fromto="0 0 0 0.1 0 0" size="0.01"/>
          <site name="tip" pos="0.1 0 0" euler="0.1 0 0"/>
          <body name="hinged" pos="0.1 0 0">
            <joint type="hinge" axis="0 0.6 0.8" pos="0.01 0.02 0.03"/>
            <geom type="sphere" size="0.02" pos="0 0 -0.05"/>
          </body>
        </body>
      </body>
      <body name="sibling" pos="0 -0.1 0">
        <joint type="hinge" axis="1 0 0"/>
        <geom type="sphere" size="0.02"/>
      </body>
    </body>
    <body name="b" pos="1 0 0">
      <freejoint/>
      <geom type="sphere" size="0.05"/>
    </body>
    <body name="static" pos="0 1 0" euler="0.2 0 0">
      <geom type="box" size="0.1 0.1 0.01"/>
    </body>
  </worldbody>
</mujoco>
"""
"""Two free roots, a slide, a body without a joint between hinges, a static body, a site."""


def _models():
    return {'g1': g1_model.load().model,
            'tumbler': mujoco.MjModel.from_xml_string(TUMBLER_XML),
            'mixed': mujoco.MjModel.from_xml_string(MIXED_XML)}


def _random_qpos(m: mujoco.MjModel, rng: np.random.Generator) -> np.ndarray:
    """qpos0 moved by up to a radian per joint, with free quaternions off the unit sphere."""
    q = np.array(m.qpos0, float) + rng.uniform(-1.0, 1.0, m.nq)
    for j in np.flatnonzero(m.jnt_type == mujoco.mjtJoint.mjJNT_FREE):
        a = m.jnt_qposadr[j]
        q[a + 3:a + 7] = rng.normal(size=4) * 1.7
    return q


@pytest.mark.parametrize('name', ['g1', 'tumbler', 'mixed'])
def test_every_field_matches_mjx(name):
    m = _models()[name]
    mm = mjx.put_model(m, impl='jax')
    assert kin.supported(mm)
    rng = np.random.default_rng(3)
    qpos = jnp.asarray(np.stack([_random_qpos(m, rng) for _ in range(4)]), jnp.float32)
    data = jax.vmap(lambda q: mjx.make_data(mm, impl='jax').replace(qpos=q))(qpos)
    ours = jax.jit(jax.vmap(kin.kinematics, in_axes=(None, 0)))(mm, data)
    theirs = jax.jit(jax.vmap(mjx.kinematics, in_axes=(None, 0)))(mm, data)
    for f in FIELDS:
        a, b = np.asarray(getattr(ours, f)), np.asarray(getattr(theirs, f))
        assert a.shape == b.shape, f
        np.testing.assert_allclose(a, b, atol=2e-6, err_msg=f'{name}: {f}')


def _smooth(m, mm, qpos, qvel, ours: bool):
    """Kinematics to bias forces and the dense mass matrix, by ``rigid`` or by MJX."""
    d = mjx.make_data(mm, impl='jax').replace(qpos=qpos, qvel=qvel)
    if ours:
        return kin.dynamics(mm, kin.com_pos(mm, kin.kinematics(mm, d)))
    d = mjx.com_pos(mm, mjx.kinematics(mm, d))
    d = mjx.rne(mm, mjx.com_vel(mm, mjx.crb(mm, d)))
    return d, mjx.full_m(mm, d)


@pytest.mark.parametrize('name', ['g1', 'mixed'])
def test_derivatives_match_mjx(name):
    """What training differentiates: frames, bias forces and M, in qpos and qvel."""
    m = _models()[name]
    mm = mjx.put_model(m, impl='jax')
    rng = np.random.default_rng(5)
    x0 = jnp.asarray(np.concatenate([_random_qpos(m, rng), rng.normal(size=m.nv)]),
                     jnp.float32)

    def outputs(x, ours):
        d, mass = _smooth(m, mm, x[:m.nq], x[m.nq:], ours)
        return jnp.concatenate([d.xpos.ravel(), d.xmat.ravel(), d.xanchor.ravel(),
                                d.qfrc_bias, mass.ravel()])

    ours, theirs = (np.asarray(jax.jit(jax.jacfwd(lambda x, o=o: outputs(x, o)))(x0))
                    for o in (True, False))
    scale = np.maximum(1.0, np.max(np.abs(theirs), axis=1, keepdims=True))
    np.testing.assert_allclose(ours / scale, theirs / scale, atol=1e-5)


@pytest.mark.parametrize('name', ['g1', 'tumbler', 'mixed'])
def test_mass_matrix_and_bias_forces_match_mjx(name):
    m = _models()[name]
    mm = mjx.put_model(m, impl='jax')
    rng = np.random.default_rng(7)
    qpos = jnp.asarray(_random_qpos(m, rng), jnp.float32)
    qvel = jnp.asarray(rng.normal(size=m.nv) * 2.0, jnp.float32)
    (a, ma), (b, mb) = (jax.jit(lambda q, v, o=o: _smooth(m, mm, q, v, o))(qpos, qvel)
                        for o in (True, False))
    scale = float(np.max(np.abs(np.asarray(mb))))
    np.testing.assert_allclose(np.asarray(ma), np.asarray(mb), atol=1e-6 * scale)
    np.testing.assert_allclose(np.asarray(ma), np.asarray(ma).T, atol=1e-6 * scale)
    for f in ('subtree_com', 'cdof', 'cvel', 'cdof_dot', 'qfrc_bias'):
        x, y = np.asarray(getattr(a, f)), np.asarray(getattr(b, f))
        np.testing.assert_allclose(x, y, atol=2e-6 * max(1.0, float(np.max(np.abs(y)))),
                                   err_msg=f'{name}: {f}')
    cinert = np.asarray(b._impl.cinert)
    np.testing.assert_allclose(np.asarray(a._impl.cinert), cinert,
                               atol=2e-6 * max(1.0, float(np.max(np.abs(cinert)))))


def test_two_joints_on_one_body_go_to_mjx():
    mm = mjx.put_model(mujoco.MjModel.from_xml_string(HOPPER_XML), impl='jax')
    assert not kin.supported(mm)
    d = mjx.make_data(mm, impl='jax').replace(qpos=jnp.asarray([0.1, -0.2, 0.03]))
    np.testing.assert_array_equal(np.asarray(kin.kinematics(mm, d).xpos),
                                  np.asarray(mjx.kinematics(mm, d).xpos))


def test_g1_traces_to_a_fraction_of_mjx():
    """The point of the module: what JAX traces (and XLA compiles) per call."""
    m = g1_model.load().model
    mm = mjx.put_model(m, impl='jax')
    q, v = jnp.zeros(m.nq), jnp.zeros(m.nv)
    ours, theirs = (len(jax.make_jaxpr(lambda q, v, o=o: _smooth(m, mm, q, v, o))(q, v).eqns)
                    for o in (True, False))
    assert ours * 20 < theirs, (ours, theirs)
    # The kinematics by pointer doubling: a few rounds, not one block per body or level.
    d = mjx.make_data(mm, impl='jax')
    ours, theirs = (len(jax.make_jaxpr(lambda q, f=f: f(mm, d.replace(qpos=q)))(q).eqns)
                    for f in (kin.kinematics, mjx.kinematics))
    assert ours * 20 < theirs, (ours, theirs)


def test_static_take_and_put_are_indexing_and_their_gradients_do_not_scatter():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(7, 3)).astype(np.float32)
    v = rng.normal(size=(4, 3)).astype(np.float32)
    for idx in ([2, 3, 4, 5], [5, 0, 3, 3], [6, 1, 4, 2]):
        np.testing.assert_array_equal(kin.take(jnp.asarray(x), idx), x[idx])
        added = x.copy()
        np.add.at(added, idx, v)
        np.testing.assert_allclose(kin.put(jnp.asarray(x), idx, jnp.asarray(v), add=True),
                                   added, rtol=1e-6)
    put = x.copy()
    put[[6, 1, 4, 2]] = v
    np.testing.assert_array_equal(kin.put(jnp.asarray(x), [6, 1, 4, 2], jnp.asarray(v)), put)
    with pytest.raises(ValueError, match='repeated'):
        kin.put(jnp.asarray(x), [1, 1, 2, 3], jnp.asarray(v))

    def loss(x, v):
        return jnp.sum(kin.take(kin.put(x, [6, 1, 4, 2], v, add=True), [5, 0, 3, 3]) ** 2)

    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    hlo = grad.lower(x, v).compile().as_text()
    assert not re.search(r'= \S+ (scatter|while)\(', hlo)
    ref = jax.grad(lambda x, v: jnp.sum(x.at[jnp.array([6, 1, 4, 2])].add(v)[
        jnp.array([5, 0, 3, 3])] ** 2), argnums=(0, 1))(x, v)
    for a, b in zip(grad(x, v), ref):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
