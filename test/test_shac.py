"""SHAC: TD(lambda) targets and the actor loss by hand, and learning on the toy env."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bcg_ros.core import add, shac, toy_env


def test_td_lambda_targets_by_hand():
    # gamma = lam = 0.5, one env, rewards 1, 2, 3, next values 10, 20, 30, no episode end:
    # G2 = 3 + 0.5 * 30 = 18 (last step: lambda 0)
    # G1 = 2 + 0.5 * (0.5 * 20 + 0.5 * 18) = 2 + 0.5 * 19 = 11.5
    # G0 = 1 + 0.5 * (0.5 * 10 + 0.5 * 11.5) = 1 + 0.5 * 10.75 = 6.375
    r = jnp.array([[1.0], [2.0], [3.0]])
    v = jnp.array([[10.0], [20.0], [30.0]])
    g = shac.td_lambda_targets(r, v, jnp.zeros((3, 1)), 0.5, 0.5)
    np.testing.assert_allclose(np.asarray(g)[:, 0], [6.375, 11.5, 18.0], rtol=1e-6)
    # A failure at t = 1 (its next value folded to 0 by the caller) cuts the return there:
    # G2 = 18; G1 = 2 + 0.5 * 0 = 2; G0 = 1 + 0.5 * (0.5 * 10 + 0.5 * 2) = 4
    v_fail = v.at[1, 0].set(0.0)
    g = shac.td_lambda_targets(r, v_fail, jnp.array([[0.0], [1.0], [0.0]]), 0.5, 0.5)
    np.testing.assert_allclose(np.asarray(g)[:, 0], [4.0, 2.0, 18.0], rtol=1e-6)


@pytest.mark.parametrize('boot, done_last, expected', [
    # No episode end, final value 8, gamma 0.5:
    # 1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 8 = 3.75; loss = -3.75 / (3 steps * 1 env)
    (None, False, -3.75 / 3),
    # Truncated at t = 1, V(terminal) = 10: 1 + (0.5 * 2 + 0.5 * 0.5 * 10) + 3 + 0.5 * 8
    # = 1 + 3.5 + 3 + 4 = 11.5 (discount restarts after the episode end)
    (10.0, False, -11.5 / 3),
    # Terminated at t = 1 (a failure: bootstrap 0): 1 + 1 + 3 + 4 = 9
    (0.0, False, -9.0 / 3),
    # Terminated at t = 1 and truncated at the last step (V(terminal) = 6): the step after
    # the failure starts a new episode (discount 1), 1 + 1 + (3 + 0.5 * 6) = 8, and the final
    # value of the new, just-reset episode is not added.
    (0.0, True, -8.0 / 3),
])
def test_actor_objective_bootstrap(boot, done_last, expected):
    r = jnp.array([[1.0], [2.0], [3.0]])
    dones = jnp.array([[0.0], [0.0 if boot is None else 1.0], [1.0 if done_last else 0.0]])
    boots = jnp.array([[0.0], [0.0 if boot is None else boot], [6.0 if done_last else 0.0]])
    loss = shac.actor_objective(r, boots, dones, jnp.array([8.0]), 0.5)
    assert float(loss) == pytest.approx(expected, rel=1e-6)


def test_linear_lr_decay():
    assert float(shac.linear_lr(5e-3, 1e-5, 0, 11)) == pytest.approx(5e-3)
    assert float(shac.linear_lr(5e-3, 1e-5, 5, 11)) == pytest.approx((5e-3 + 1e-5) / 2)
    assert float(shac.linear_lr(5e-3, 1e-5, 10, 11)) == pytest.approx(1e-5, rel=1e-3)


SMALL = shac.SHACConfig(horizon=16, actor_hidden=(32, 32), critic_hidden=(32, 32),
                        critic_iterations=4)
NO_ADD = add.ADDConfig(enabled=False, hidden=(16,), batch_size=32, buffer_size=256)


def test_terminal_bootstrap_is_zero_after_a_failure():
    """In the rollout, a terminated env contributes no value; a truncated one does."""
    env = toy_env.ToyEnv(toy_env.ToyEnvConfig(num_envs=4, episode_length=3, fail_distance=1e-3,
                                              init_noise=0.0))
    st = shac.init(SMALL, NO_ADD, env, jax.random.PRNGKey(0))
    _, (_, data) = shac._rollout(st.actor, st, jax.random.PRNGKey(1), SMALL, NO_ADD, env)
    term = np.asarray(data['terminated'])
    assert term.any(), 'fail_distance 1 mm must terminate episodes'
    assert np.all(np.asarray(data['boot'])[term > 0] == 0.0)
    env2 = toy_env.ToyEnv(toy_env.ToyEnvConfig(num_envs=4, episode_length=3, fail_distance=10.0))
    st2 = shac.init(SMALL, NO_ADD, env2, jax.random.PRNGKey(0))
    _, (_, data2) = shac._rollout(st2.actor, st2, jax.random.PRNGKey(1), SMALL, NO_ADD, env2)
    trunc = np.asarray(data2['done']) > 0
    assert trunc.any() and not np.asarray(data2['terminated']).any()
    assert np.all(np.asarray(data2['boot'])[trunc] != 0.0)


def test_actor_gradient_through_dynamics_is_finite():
    env = toy_env.ToyEnv(toy_env.ToyEnvConfig(num_envs=4))
    st = shac.init(SMALL, NO_ADD, env, jax.random.PRNGKey(0))
    g = jax.grad(lambda a: shac._rollout(a, st, jax.random.PRNGKey(1), SMALL, NO_ADD, env)[0])(
        st.actor)
    leaves = [np.asarray(x) for x in jax.tree.leaves(g)]
    assert all(np.isfinite(x).all() for x in leaves)
    assert sum(float(np.abs(x).sum()) for x in leaves) > 0


def test_per_env_gradients_are_each_envs_own_and_sum_to_the_batch_gradient():
    env = toy_env.ToyEnv(toy_env.ToyEnvConfig(num_envs=4))
    st = shac.init(SMALL, NO_ADD, env, jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(1)
    batch = jax.grad(lambda a: shac._rollout(a, st, key, SMALL, NO_ADD, env)[0])(st.actor)
    copies = jax.tree.map(lambda x: jnp.broadcast_to(x, (4,) + x.shape), st.actor)
    per_env = jax.grad(lambda a: shac._rollout(a, st, key, SMALL, NO_ADD, env,
                                               per_env=True)[0])(copies)
    for b, p in zip(jax.tree.leaves(batch), jax.tree.leaves(per_env)):
        np.testing.assert_allclose(np.asarray(p).sum(0), np.asarray(b), rtol=1e-4, atol=1e-7)
    flat = np.concatenate([np.asarray(p).reshape(4, -1) for p in jax.tree.leaves(per_env)], 1)
    # Envs start apart, so their gradients differ: each row is its own env's.
    assert np.linalg.norm(flat[0] - flat[1]) > 1e-3 * np.linalg.norm(flat[0])


def test_shac_learns_the_toy_env_without_recompiling():
    env = toy_env.ToyEnv(toy_env.ToyEnvConfig(num_envs=32))
    st = shac.init(SMALL, NO_ADD, env, jax.random.PRNGKey(0))
    iterate = jax.jit(shac.make_iterate(SMALL, NO_ADD, env))
    key = jax.random.PRNGKey(1)
    e = []
    for _ in range(80):
        key, k = jax.random.split(key)
        st, m = iterate(st, k, 80)
        e.append(float(m['e_track']))
    assert iterate._cache_size() == 1, 'the state must keep its types across iterations'
    # The run's length is an argument, not a constant: a longer run reuses the executable,
    # and its learning rate is the one the longer decay gives.
    _, m_long = iterate(st, key, 8000)
    _, m_end = iterate(st, key, 81)
    assert iterate._cache_size() == 1
    assert float(m_long['actor_lr']) > float(m_end['actor_lr'])
    first, last = np.mean(e[:5]), np.mean(e[-5:])
    # A policy that ignores the reference drifts off the circle (E_track > 10 cm).
    assert first > 10.0
    assert last < 3.0, f'E_track {first:.1f} -> {last:.1f} cm'
    assert int(st.iteration) == 80


def test_shac_with_add_reward_only_tracks():
    """The ADD reward alone (no tracking term) drives E_track down through the dynamics."""
    env = toy_env.ToyEnv(toy_env.ToyEnvConfig(num_envs=32, tracking_weight=0.0))
    cfg_add = add.ADDConfig(hidden=(32, 32), lr=2e-3, batch_size=64, buffer_size=1024)
    st = shac.init(SMALL, cfg_add, env, jax.random.PRNGKey(0))
    iterate = jax.jit(shac.make_iterate(SMALL, cfg_add, env))
    key = jax.random.PRNGKey(1)
    e = []
    for _ in range(80):
        key, k = jax.random.split(key)
        st, m = iterate(st, k, 80)
        e.append(float(m['e_track']))
    first, last = np.mean(e[:5]), np.mean(e[-5:])
    assert last < 0.5 * first, f'E_track {first:.1f} -> {last:.1f} cm'


class _PrivilegedToy(toy_env.ToyEnv):
    """The toy env with a critic that also sees its observation squared (3 more values)."""

    @property
    def critic_obs_size(self):
        return self.obs_size + 3

    def critic_observe(self, state):
        obs = self.observe(state)
        return jnp.concatenate([obs, obs[:, :3] ** 2], -1)

    def step(self, state, action, key):
        nxt, out = super().step(state, action, key)
        info = dict(out.info, terminal_critic_obs=jnp.concatenate(
            [out.info['terminal_obs'], out.info['terminal_obs'][:, :3] ** 2], -1))
        return nxt, type(out)(out.obs, out.reward, out.done, info)


def test_privileged_critic_reads_its_own_input():
    from bcg_ros.core import ppo
    env = _PrivilegedToy(toy_env.ToyEnvConfig(num_envs=8))
    st = shac.init(SMALL, NO_ADD, env, jax.random.PRNGKey(0))
    assert st.critic[0]['w'].shape[1] == env.obs_size + 3 != env.obs_size   # [ens, in, out]
    assert st.critic_norm.mean.shape == (env.obs_size + 3,)
    _, (_, data) = shac._rollout(st.actor, st, jax.random.PRNGKey(1), SMALL, NO_ADD, env)
    assert data['cobs'].shape == (SMALL.horizon, 8, env.obs_size + 3)
    st2, m = jax.jit(shac.make_iterate(SMALL, NO_ADD, env))(st, jax.random.PRNGKey(2), 10)
    assert np.isfinite(float(m['critic_loss']))
    assert not np.allclose(np.asarray(st2.critic_norm.mean), 0.0)
    pst = ppo.init(ppo.PPOConfig(horizon=8, actor_hidden=(16,), critic_hidden=(16,)), NO_ADD,
                   env, jax.random.PRNGKey(0))
    assert pst.critic[0]['w'].shape[1] == env.obs_size + 3


class _BlowsUp(toy_env.ToyEnv):
    """The toy env with env 0 ending every step in garbage: NaN reward, features, terminal."""

    def step(self, state, action, key):
        nxt, out = super().step(state, action, key)
        nan = jnp.float32(jnp.nan)
        info = dict(out.info, terminated=out.info['terminated'].at[0].set(1.0),
                    terminal_obs=out.info['terminal_obs'].at[0].set(nan),
                    add_delta=out.info['add_delta'].at[0].set(nan))
        return nxt, type(out)(out.obs, out.reward.at[0].set(nan), out.done.at[0].set(1.0),
                              info)


def test_an_env_that_blows_up_skips_the_updates_it_would_poison():
    """Non-finite rewards and features skip the critic and discriminator fits: no NaN spreads."""
    env = _BlowsUp(toy_env.ToyEnvConfig(num_envs=4))
    cfg_add = add.ADDConfig(hidden=(16,), batch_size=32, buffer_size=256)
    st = shac.init(SMALL, cfg_add, env, jax.random.PRNGKey(0))
    st2, m = jax.jit(shac.make_iterate(SMALL, cfg_add, env))(st, jax.random.PRNGKey(1), 10)
    for name in ('actor', 'critic', 'target_critic', 'add'):
        leaves = [np.asarray(x) for x in jax.tree.leaves(getattr(st2, name))]
        assert all(np.all(np.isfinite(x)) for x in leaves if x.dtype.kind == 'f'), name
