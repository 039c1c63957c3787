"""Level-by-level kinematics against mjx.kinematics: every field, its derivative, its size."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from bcg_ros.core import kinematics as kin
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


@pytest.mark.parametrize('name', ['g1', 'mixed'])
def test_derivatives_match_mjx(name):
    m = _models()[name]
    mm = mjx.put_model(m, impl='jax')
    q0 = jnp.asarray(_random_qpos(m, np.random.default_rng(5)), jnp.float32)

    def frames(fn, q):
        d = fn(mm, mjx.make_data(mm, impl='jax').replace(qpos=q))
        return jnp.concatenate([d.xpos.ravel(), d.xmat.ravel(), d.xanchor.ravel()])

    ours = jax.jit(jax.jacfwd(lambda q: frames(kin.kinematics, q)))(q0)
    theirs = jax.jit(jax.jacfwd(lambda q: frames(mjx.kinematics, q)))(q0)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), atol=2e-5)


def test_two_joints_on_one_body_go_to_mjx():
    mm = mjx.put_model(mujoco.MjModel.from_xml_string(HOPPER_XML), impl='jax')
    assert not kin.supported(mm)
    d = mjx.make_data(mm, impl='jax').replace(qpos=jnp.asarray([0.1, -0.2, 0.03]))
    np.testing.assert_array_equal(np.asarray(kin.kinematics(mm, d).xpos),
                                  np.asarray(mjx.kinematics(mm, d).xpos))


def test_g1_kinematics_traces_to_a_fraction_of_mjx():
    """The point of the module: what JAX traces (and XLA compiles) per call."""
    mm = mjx.put_model(g1_model.load().model, impl='jax')
    d = mjx.make_data(mm, impl='jax')
    ours = len(jax.make_jaxpr(kin.kinematics)(mm, d).eqns)
    theirs = len(jax.make_jaxpr(mjx.kinematics)(mm, d).eqns)
    assert ours * 5 < theirs, (ours, theirs)
