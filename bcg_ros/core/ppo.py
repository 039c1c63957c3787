"""
PPO: the paper's zeroth-order baseline, on the same environments and rewards.

Clipped-surrogate PPO (Schulman et al. 2017) with GAE; the rollout keeps no
graph (the dynamics' gradient is not used). Episode ends bootstrap as in SHAC:
a time limit from the value of the terminal observation, a failure with zero.
The actor and critic are the same ELU + LayerNorm MLPs as SHAC's, the
observation normaliser the same, the ADD reward the same (a constant here).
"""

from dataclasses import dataclass
from typing import Tuple

import jax
import jax.numpy as jnp
import optax

from bcg_ros.core import add as add_mod
from bcg_ros.core import contact
from bcg_ros.core import env as env_mod
from bcg_ros.core import networks
from bcg_ros.core.shac import linear_lr


@dataclass(frozen=True)
class PPOConfig:
    """Configuration of the PPO learner."""

    horizon: int = 32
    """Control steps per rollout."""
    gamma: float = 0.99
    """Discount."""
    gae_lambda: float = 0.95
    """GAE parameter."""
    epochs: int = 5
    """Passes over each rollout."""
    minibatches: int = 4
    """Minibatches per pass."""
    clip_ratio: float = 0.2
    """Surrogate clip range of the probability ratio."""
    value_coef: float = 0.5
    """Weight of the value loss."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus."""
    lr: float = 3e-4
    """Adam learning rate (actor and critic)."""
    lr_end: float = 3e-4
    """Learning rate at the last iteration (linear decay; equal to lr: constant)."""
    grad_clip: float = 1.0
    """Global-norm gradient clip."""
    actor_hidden: Tuple[int, ...] = (512, 256, 128)
    """Actor MLP hidden layers."""
    critic_hidden: Tuple[int, ...] = (256, 256)
    """Critic MLP hidden layers."""
    init_log_std: float = -1.0
    """Initial log standard deviation of the policy."""
    actor_out_scale: float = 0.1
    """Initial scale of the actor's output layer."""
    obs_clip: float = 5.0
    """Normalised observations are clipped to +-obs_clip."""
    normalize_advantages: bool = True
    """Standardise advantages per minibatch."""


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class PPOState:
    """Everything one PPO iteration reads and writes."""

    actor: dict
    critic: list
    """A single critic, stacked as an ensemble of one (shared helpers with SHAC)."""
    opt_state: optax.OptState
    obs_norm: networks.Normalizer
    critic_norm: networks.Normalizer
    """Running normaliser of the critic's input (privileged when the env has one)."""
    add: add_mod.ADDState
    env_state: object
    iteration: jax.Array


def _tx(cfg: PPOConfig):
    """Return clip-then-Adam-direction (the learning rate is applied by the caller)."""
    return optax.chain(optax.clip_by_global_norm(cfg.grad_clip), optax.scale_by_adam())


def init(cfg: PPOConfig, add_cfg: add_mod.ADDConfig, env, key) -> PPOState:
    """Return the initial learner state, environments reset."""
    k_actor, k_critic, k_add, k_env = jax.random.split(key, 4)
    actor = networks.policy_init(k_actor, env.obs_size, env.action_size, cfg.actor_hidden,
                                 cfg.init_log_std, cfg.actor_out_scale)
    n_critic = env_mod.critic_obs_size(env)
    critic = networks.critic_init(k_critic, n_critic, cfg.critic_hidden, 1)
    return PPOState(actor, critic, _tx(cfg).init((actor, critic)),
                    networks.normalizer_init(env.obs_size), networks.normalizer_init(n_critic),
                    add_mod.init(add_cfg, env.add_size, k_add), env.reset(k_env),
                    jnp.asarray(0, jnp.int32))


def gae(rewards, values, next_values, dones, gamma: float, lam: float):
    """
    Return advantages ``[N, B]``: ``A_t = d_t + gamma lam (1 - done_t) A_{t+1}``.

    ``d_t = r_t + gamma v'_t - v_t``, with ``v'_t`` the value after step ``t``
    (zero after a failure, already folded in by the caller).
    """
    deltas = rewards + gamma * next_values - values

    def back(a_next, x):
        d, done = x
        a = d + gamma * lam * (1.0 - done) * a_next
        return a, a

    _, adv = jax.lax.scan(back, jnp.zeros_like(rewards[0]), (deltas, dones), reverse=True)
    return adv


def make_iterate(cfg: PPOConfig, add_cfg: add_mod.ADDConfig, env):
    """
    Return ``iterate(state, key, total_iterations) -> (state, metrics)``, one PPO iteration.

    Pure; ``total_iterations`` may be traced, as in :func:`bcg_ros.core.shac.make_iterate`.
    """
    tx = _tx(cfg)

    def iterate(st: PPOState, key, total_iterations):
        k_roll, k_upd, k_add = jax.random.split(key, 3)

        def value(cobs):
            return networks.critic_value(st.critic, st.critic_norm, cobs, cfg.obs_clip)

        def one(env_state, k):
            k_noise, k_env = jax.random.split(k)
            obs = env.observe(env_state)
            cobs = env_mod.critic_observe(env, env_state)
            mean = networks.policy_mean(st.actor, st.obs_norm, obs, cfg.obs_clip)
            action = mean + jnp.exp(st.actor['log_std']) * jax.random.normal(k_noise,
                                                                             mean.shape)
            logp = networks.gaussian_log_prob(mean, st.actor['log_std'], action)
            env_state, out = env.step(env_state, action, k_env)
            r, r_add = add_mod.total_reward(add_cfg, st.add, out.reward,
                                            out.info['add_delta'])
            data = {'obs': obs, 'cobs': cobs, 'action': action, 'logp': logp, 'reward': r,
                    'value': value(cobs),
                    'next_value': (1.0 - out.info['terminated'])
                    * value(env_mod.terminal_critic_obs(env, out.info)),
                    'done': out.done, 'terminated': out.info['terminated'],
                    'env_reward': out.reward, 'add_reward': r_add,
                    'add_delta': out.info['add_delta'], 'e_track': out.info['e_track'],
                    'bundle': out.info['bundle'],
                    'penetration_sum_mm': out.info['penetration_sum_mm'],
                    'penetration_count': out.info['penetration_count'],
                    'metrics': jax.lax.stop_gradient(out.info.get('metrics', {}))}
            return env_state, data

        env_state, data = jax.lax.scan(one, st.env_state, jax.random.split(k_roll, cfg.horizon))
        data = jax.lax.stop_gradient(data)
        adv = gae(data['reward'], data['value'], data['next_value'], data['done'],
                  cfg.gamma, cfg.gae_lambda)
        returns = adv + data['value']
        flat = {'obs': data['obs'].reshape((-1, env.obs_size)),
                'cobs': data['cobs'].reshape((-1, env_mod.critic_obs_size(env))),
                'action': data['action'].reshape((-1, env.action_size)),
                'logp': data['logp'].reshape(-1), 'adv': adv.reshape(-1),
                'ret': returns.reshape(-1)}
        n = flat['logp'].shape[0]
        mb = n // cfg.minibatches
        lr = linear_lr(cfg.lr, cfg.lr_end, st.iteration, total_iterations)

        def loss_fn(params, batch):
            actor, critic = params
            mean = networks.policy_mean(actor, st.obs_norm, batch['obs'], cfg.obs_clip)
            logp = networks.gaussian_log_prob(mean, actor['log_std'], batch['action'])
            a = batch['adv']
            if cfg.normalize_advantages:
                a = (a - jnp.mean(a)) / (jnp.std(a) + 1e-8)
            ratio = jnp.exp(logp - batch['logp'])
            surr = jnp.minimum(ratio * a,
                               jnp.clip(ratio, 1 - cfg.clip_ratio, 1 + cfg.clip_ratio) * a)
            v = networks.critic_value(critic, st.critic_norm, batch['cobs'], cfg.obs_clip)
            v_loss = jnp.mean((v - batch['ret']) ** 2)
            entropy = jnp.sum(actor['log_std'] + 0.5 * jnp.log(2 * jnp.pi * jnp.e))
            total = -jnp.mean(surr) + cfg.value_coef * v_loss - cfg.entropy_coef * entropy
            return total, {'policy_loss': -jnp.mean(surr), 'value_loss': v_loss,
                           'approx_kl': jnp.mean(batch['logp'] - logp)}

        def step(carry, idx):
            params, opt_state = carry
            batch = jax.tree.map(lambda x: x[idx], flat)
            (_, terms), g = jax.value_and_grad(loss_fn, has_aux=True)(params, batch)
            upd, opt_state = tx.update(g, opt_state, params)
            params = optax.apply_updates(params, jax.tree.map(lambda u: -lr * u, upd))
            return (params, opt_state), terms

        def epoch(carry, k):
            perm = jax.random.permutation(k, n)[:mb * cfg.minibatches]
            return jax.lax.scan(step, carry, perm.reshape(cfg.minibatches, mb))

        ((actor, critic), opt_state), terms = jax.lax.scan(
            epoch, ((st.actor, st.critic), st.opt_state), jax.random.split(k_upd, cfg.epochs))
        if add_cfg.enabled:
            add_state, add_terms = add_mod.update(add_cfg, st.add, data['add_delta'], k_add)
        else:
            add_state, add_terms = st.add, {}
        new = PPOState(actor, critic, opt_state,
                       networks.normalizer_update(st.obs_norm, flat['obs']),
                       networks.normalizer_update(st.critic_norm, flat['cobs']), add_state,
                       env_state, st.iteration + 1)
        metrics = {'reward': jnp.mean(data['reward']),
                   'env_reward': jnp.mean(data['env_reward']),
                   'add_reward': jnp.mean(data['add_reward']),
                   'e_track': jnp.mean(data['e_track']),
                   'bundle_rate': jnp.mean(data['bundle']),
                   'penetration_mm': contact.mean_penetration(data['penetration_sum_mm'],
                                                              data['penetration_count']),
                   'done_rate': jnp.mean(data['done']),
                   'fall_rate': jnp.mean(data['terminated']),
                   **{k: jnp.mean(v) for k, v in data['metrics'].items()},
                   'value': jnp.mean(returns), 'actor_lr': lr,
                   'log_std': jnp.mean(actor['log_std']),
                   **jax.tree.map(lambda x: x[-1, -1], terms), **add_terms}
        return new, metrics

    return iterate


def policy(st: PPOState):
    """Return ``(actor params, observation normaliser)`` of the deterministic policy."""
    return st.actor, st.obs_norm
