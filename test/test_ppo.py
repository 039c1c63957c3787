"""PPO: GAE by hand, and learning on the toy env."""

import jax
import jax.numpy as jnp
import numpy as np

from bcg_ros.core import add, ppo, toy_env


def test_gae_by_hand():
    # gamma = lam = 0.5, rewards 1, 1, values 2, 2, next values 4, 4 (no end):
    # d = r + 0.5 * 4 - 2 = 1 at both steps; A1 = 1; A0 = 1 + 0.25 * 1 = 1.25
    r = jnp.ones((2, 1))
    adv = ppo.gae(r, 2 * r, 4 * r, jnp.zeros((2, 1)), 0.5, 0.5)
    np.testing.assert_allclose(np.asarray(adv)[:, 0], [1.25, 1.0], rtol=1e-6)
    # The episode ends at t = 0: A0 = d0 = 1, nothing from A1 leaks across.
    adv = ppo.gae(r, 2 * r, 4 * r, jnp.array([[1.0], [0.0]]), 0.5, 0.5)
    np.testing.assert_allclose(np.asarray(adv)[:, 0], [1.0, 1.0], rtol=1e-6)


def test_ppo_learns_the_toy_env():
    env = toy_env.ToyEnv(toy_env.ToyEnvConfig(num_envs=64))
    cfg = ppo.PPOConfig(horizon=16, actor_hidden=(32, 32), critic_hidden=(32, 32), lr=1e-3,
                        lr_end=1e-3)
    no_add = add.ADDConfig(enabled=False, hidden=(8,), batch_size=16, buffer_size=64)
    st = ppo.init(cfg, no_add, env, jax.random.PRNGKey(0))
    iterate = jax.jit(ppo.make_iterate(cfg, no_add, env))
    key = jax.random.PRNGKey(1)
    e = []
    for _ in range(60):
        key, k = jax.random.split(key)
        st, m = iterate(st, k, 60)
        e.append(float(m['e_track']))
        assert np.isfinite(m['value_loss'])
    first, last = np.mean(e[:5]), np.mean(e[-5:])
    assert first > 10.0
    assert last < 0.3 * first, f'E_track {first:.1f} -> {last:.1f} cm'
