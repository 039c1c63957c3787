"""ADD: the reward formula, the loss by hand, the replay buffer, and learning to discriminate."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bcg_ros.core import add

CFG = add.ADDConfig(hidden=(32, 32), batch_size=128, buffer_size=300, lr=2e-3)


@pytest.mark.parametrize('logit', [-5.0, -1.0, 0.0, 0.7, 3.0, 9.0, 15.0])
def test_reward_is_the_paper_formula(logit):
    d = 1.0 / (1.0 + math.exp(-logit))
    expected = -2.0 * math.log(max(1.0 - d, 1e-4))
    assert float(add.reward_from_logit(jnp.float32(logit))) == pytest.approx(expected, rel=1e-4)


def test_loss_of_a_blank_discriminator_is_log2():
    # All weights zero: every logit is 0, so BCE(D(0), 1) = BCE(D(x), 0) = log 2 and
    # 0.5 * (log 2 + log 2) = log 2; the input gradient, logit and weight terms are 0.
    st = add.init(CFG, 5, jax.random.PRNGKey(0))
    params = jax.tree.map(jnp.zeros_like, st.params)
    total, terms = add.loss(CFG, params, jax.random.normal(jax.random.PRNGKey(1), (7, 5)))
    assert float(total) == pytest.approx(math.log(2.0), rel=1e-6)
    assert float(terms['disc_grad_penalty']) == 0.0


def test_replay_buffer_wraps():
    st = add.init(CFG, 3, jax.random.PRNGKey(0))
    up = jax.jit(lambda s, d, k: add.update(CFG, s, d, k))
    for i in range(3):
        st, _ = up(st, jnp.full((128, 3), float(i + 1)), jax.random.PRNGKey(i))
    assert int(st.buffer_fill) == 300
    assert int(st.buffer_ptr) == (3 * 128) % 300
    # Batches fill rows 0-127 (1), 128-255 (2), then 256-299 and, wrapping, 0-83 (3).
    col = np.asarray(st.buffer[:, 0])
    assert col[0] == col[83] == col[299] == 3.0 and col[84] == 1.0 and col[200] == 2.0


def test_normaliser_is_the_mean_magnitude():
    st = add.init(CFG, 2, jax.random.PRNGKey(0))
    d = jnp.array([[1.0, -4.0], [-3.0, 2.0]])
    st, _ = add.update(CFG, st, d, jax.random.PRNGKey(1))
    np.testing.assert_allclose(np.asarray(st.mean_abs), [2.0, 3.0], rtol=1e-6)


def test_discriminator_learns_and_reward_gradient_points_to_zero():
    st = add.init(CFG, 4, jax.random.PRNGKey(0))
    up = jax.jit(lambda s, d, k: add.update(CFG, s, d, k))
    for i in range(40):
        d = 0.1 * jax.random.normal(jax.random.PRNGKey(100 + i), (256, 4))
        st, terms = up(st, d, jax.random.PRNGKey(i))
    assert float(terms['disc_logit_pos']) > float(terms['disc_logit_neg'])
    delta = 0.1 * jax.random.normal(jax.random.PRNGKey(7), (64, 4))
    r0 = float(add.reward(CFG, st, jnp.zeros(4)))
    r = add.reward(CFG, st, delta)
    assert r0 > float(jnp.mean(r))
    g = jax.vmap(jax.grad(lambda x: add.reward(CFG, st, x)))(delta)
    assert np.isfinite(np.asarray(g)).all()
    # Ascending the reward moves the simulated features towards the reference.
    assert float(jnp.mean(jnp.sum(g * delta, -1))) < 0.0


def test_total_reward_adds_weighted_add():
    cfg = add.ADDConfig(hidden=(8,), reward_weight=0.5, batch_size=8, buffer_size=16)
    st = add.init(cfg, 2, jax.random.PRNGKey(0))
    env_r = jnp.array([1.0, 2.0])
    delta = jnp.array([[0.1, 0.2], [0.3, -0.1]])
    total, r_add = add.total_reward(cfg, st, env_r, delta)
    np.testing.assert_allclose(np.asarray(total), np.asarray(env_r + 0.5 * r_add), rtol=1e-6)
    off = add.ADDConfig(enabled=False, hidden=(8,), batch_size=8, buffer_size=16)
    total, _ = add.total_reward(off, st, env_r, delta)
    np.testing.assert_array_equal(np.asarray(total), np.asarray(env_r))


def test_gradient_penalty_at_the_negatives():
    # A linear discriminator D(x) = w . x has input gradient w everywhere: the penalty is
    # |w|^2 at zero, and |w|^2 more with the negatives penalised (their mean, also |w|^2).
    import dataclasses
    cfg = add.ADDConfig(hidden=(), batch_size=8, buffer_size=16)
    st = add.init(cfg, 4, jax.random.PRNGKey(0))
    w = jnp.array([[1.0], [2.0], [0.0], [-2.0]])
    params = [dict(st.params[0], w=w, b=jnp.zeros(1))]
    neg = jax.random.normal(jax.random.PRNGKey(1), (6, 4))
    _, at_zero = add.loss(cfg, params, neg)
    _, both = add.loss(dataclasses.replace(cfg, grad_penalty_negatives=True), params, neg)
    assert float(at_zero['disc_grad_penalty']) == pytest.approx(9.0, rel=1e-6)
    assert float(both['disc_grad_penalty']) == pytest.approx(18.0, rel=1e-6)
