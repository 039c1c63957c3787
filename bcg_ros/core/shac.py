"""
SHAC: short-horizon actor-critic through a differentiable simulator.

One iteration (Xu et al., ICLR 2022, "Accelerated Policy Learning with
Parallel Differentiable Simulation"):

1. Roll the stochastic policy (reparameterised Gaussian) out for ``horizon``
   control steps from where the environments stand, keeping the graph.
2. Actor loss ``-1/(N B) sum_b [sum_t gamma^t r_t + gamma^N V'(s_N)]``, the
   discount restarting at every episode start; at an episode end the finished
   episode is closed with ``gamma^(t+1) V'(s_terminal)`` if it was truncated
   (time limit) and with nothing if it terminated (a failure). ``V'`` is the
   target critic, the ensemble mean, its parameters constant; its gradient
   with respect to the state still flows into the actions.
3. One Adam step on the actor (clipped gradient), learning rate decaying
   linearly to ``lr_end``.
4. TD(lambda) targets from the rollout's rewards and target values; the
   critic ensemble fits them for ``critic_iterations`` passes of
   ``critic_minibatches`` minibatches; the target critic follows by Polyak
   averaging.
5. The ADD discriminator trains on the rollout's feature differences; the
   running observation normaliser folds in the rollout's observations.

Defaults are the paper's (DESIGN.md, "Learner").
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


@dataclass(frozen=True)
class SHACConfig:
    """Configuration of the SHAC learner."""

    horizon: int = 32
    """Control steps per rollout (the short horizon N)."""
    gamma: float = 0.99
    """Discount."""
    lam: float = 0.95
    """TD(lambda) parameter of the critic targets."""
    num_critics: int = 3
    """Critic ensemble size; the value is the ensemble mean."""
    critic_iterations: int = 16
    """Passes over the rollout per critic fit."""
    critic_minibatches: int = 4
    """Minibatches per pass."""
    actor_grad_clip: float = 1.0
    """Global-norm clip of the actor gradient."""
    critic_grad_clip: float = 10.0
    """Global-norm clip of the critic gradient."""
    betas: Tuple[float, float] = (0.7, 0.95)
    """Adam betas of actor and critic."""
    actor_lr: float = 5e-3
    """Initial actor learning rate."""
    critic_lr: float = 2e-3
    """Initial critic learning rate."""
    lr_end: float = 1e-5
    """Both learning rates decay linearly to this at the last iteration."""
    target_alpha: float = 0.2
    """Polyak factor: target <- alpha * target + (1 - alpha) * critic."""
    actor_hidden: Tuple[int, ...] = (512, 256, 128)
    """Actor MLP hidden layers (ELU + LayerNorm)."""
    critic_hidden: Tuple[int, ...] = (256, 256)
    """Critic MLP hidden layers (ELU + LayerNorm)."""
    init_log_std: float = -1.0
    """Initial log standard deviation of the exploration noise."""
    actor_out_scale: float = 0.1
    """Initial scale of the actor's output layer (start near the mean action)."""
    obs_clip: float = 5.0
    """Normalised observations are clipped to +-obs_clip."""


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class SHACState:
    """Everything one SHAC iteration reads and writes."""

    actor: dict
    actor_opt: optax.OptState
    critic: list
    """Ensemble parameters, leading axis ``num_critics``."""
    critic_opt: optax.OptState
    target_critic: list
    obs_norm: networks.Normalizer
    critic_norm: networks.Normalizer
    """Running normaliser of the critic's input (privileged when the env has one)."""
    add: add_mod.ADDState
    env_state: object
    iteration: jax.Array


def _tx(clip: float, betas):
    """Return clip-then-Adam-direction (the learning rate is applied by the caller)."""
    return optax.chain(optax.clip_by_global_norm(clip),
                       optax.scale_by_adam(b1=betas[0], b2=betas[1]))


def linear_lr(lr0: float, lr_end: float, iteration, total):
    """
    Return the learning rate decayed linearly from ``lr0`` to ``lr_end`` over ``total``.

    ``total`` may be traced: a run taken on to more iterations keeps its compiled step.
    """
    frac = jnp.clip(iteration / jnp.maximum(total - 1, 1), 0.0, 1.0)
    return lr0 + (lr_end - lr0) * frac


def init(cfg: SHACConfig, add_cfg: add_mod.ADDConfig, env, key) -> SHACState:
    """Return the initial learner state, environments reset."""
    k_actor, k_critic, k_add, k_env = jax.random.split(key, 4)
    actor = networks.policy_init(k_actor, env.obs_size, env.action_size, cfg.actor_hidden,
                                 cfg.init_log_std, cfg.actor_out_scale)
    n_critic = env_mod.critic_obs_size(env)
    critic = networks.critic_init(k_critic, n_critic, cfg.critic_hidden, cfg.num_critics)
    return SHACState(actor, _tx(cfg.actor_grad_clip, cfg.betas).init(actor), critic,
                     _tx(cfg.critic_grad_clip, cfg.betas).init(critic), critic,
                     networks.normalizer_init(env.obs_size), networks.normalizer_init(n_critic),
                     add_mod.init(add_cfg, env.add_size, k_add), env.reset(k_env),
                     jnp.asarray(0, jnp.int32))


def td_lambda_targets(rewards, next_values, dones, gamma: float, lam: float):
    """
    Return TD(lambda) targets ``[N, B]`` of a rollout.

    ``G_t = r_t + gamma ((1 - l_t) v_t + l_t G_{t+1})`` with ``l_t = lam`` inside
    an episode and ``l_t = 0`` where the episode ended at ``t`` or at the last
    step, ``v_t`` the value of the state after step ``t`` (zero after a
    failure, already folded into ``next_values`` by the caller).
    """
    last = jnp.zeros_like(dones).at[-1].set(1.0)
    lam_t = lam * (1.0 - jnp.maximum(dones, last))

    def back(g_next, x):
        r, v, lt = x
        g = r + gamma * ((1.0 - lt) * v + lt * g_next)
        return g, g

    _, g = jax.lax.scan(back, jnp.zeros_like(rewards[0]), (rewards, next_values, lam_t),
                        reverse=True)
    return g


def actor_objective(rewards, boot_values, dones, final_values, gamma: float):
    """
    Return the SHAC actor loss from a rollout's per-step arrays ``[N, B]``.

    ``boot_values[t]`` closes an episode that ended at ``t`` (zero after a
    failure); ``final_values [B]`` closes the episodes still running after the
    last step. The discount restarts at each episode start.
    """
    n, b = rewards.shape

    def fwd(disc, x):
        r, v, d = x
        ret = disc * r + d * disc * gamma * v
        return jnp.where(d > 0, 1.0, disc * gamma), ret

    disc, ret = jax.lax.scan(fwd, jnp.ones((b,)), (rewards, boot_values, dones))
    total = jnp.sum(ret) + jnp.sum((1.0 - dones[-1]) * disc * final_values)
    return -total / (n * b)


def _rollout(actor, st: SHACState, key, cfg, add_cfg, env, per_env: bool = False,
             shift=None, offsets=None, probe: Tuple[str, ...] = ()):
    """
    Run the policy ``horizon`` steps with the graph; return the loss and the data.

    ``per_env``: ``actor`` holds one copy of the parameters per env (leading axis
    ``num_envs``), so the gradient of the loss holds every env's own gradient.
    ``shift(env_state, x)`` with ``offsets`` (a pytree, leading axis ``horizon``)
    moves the state before each step: with zero offsets the rollout is unchanged and
    the gradient with respect to ``offsets[t]`` is the loss's sensitivity to the
    state at step t. ``probe``: keys of the env's step info to keep per step in
    ``data['probe']`` (constants of the backward pass).
    """
    tgt = jax.lax.stop_gradient(st.target_critic)

    def value(cobs):
        return networks.critic_value(tgt, st.critic_norm, cobs, cfg.obs_clip)

    def one(env_state, xs):
        k, x = xs
        if shift is not None:
            env_state = shift(env_state, x)
        k_noise, k_env = jax.random.split(k)
        obs = env.observe(env_state)
        cobs = env_mod.critic_observe(env, env_state)
        if per_env:
            mean = jax.vmap(lambda a, o: networks.policy_mean(a, st.obs_norm, o, cfg.obs_clip))(
                actor, obs)
        else:
            mean = networks.policy_mean(actor, st.obs_norm, obs, cfg.obs_clip)
        noise = jax.random.normal(k_noise, mean.shape)
        action = mean + jnp.exp(actor['log_std']) * noise
        env_state, out = env.step(env_state, action, k_env)
        r, r_add = add_mod.total_reward(add_cfg, st.add, out.reward, out.info['add_delta'])
        # where, not a product: a terminal value that is not finite must not leak in.
        boot = jnp.where(out.info['terminated'] > 0, 0.0,
                         value(env_mod.terminal_critic_obs(env, out.info)))
        data = {'obs': jax.lax.stop_gradient(obs), 'cobs': jax.lax.stop_gradient(cobs),
                'reward': r, 'boot': boot,
                'done': out.done, 'terminated': out.info['terminated'],
                'env_reward': out.reward, 'add_reward': r_add,
                'add_delta': jax.lax.stop_gradient(out.info['add_delta']),
                'e_track': out.info['e_track'], 'bundle': out.info['bundle'],
                'penetration_sum_mm': out.info['penetration_sum_mm'],
                'penetration_count': out.info['penetration_count'],
                'metrics': jax.lax.stop_gradient(out.info.get('metrics', {}))}
        if probe:
            data['probe'] = jax.lax.stop_gradient({name: out.info[name] for name in probe})
        return env_state, data

    env_state, data = jax.lax.scan(one, st.env_state,
                                   (jax.random.split(key, cfg.horizon), offsets))
    final_values = value(env_mod.critic_observe(env, env_state))
    loss = actor_objective(data['reward'], data['boot'], data['done'], final_values, cfg.gamma)
    return loss, (env_state, data)


def _fit_critic(cfg: SHACConfig, st: SHACState, obs, targets, lr, key):
    """Fit the critic ensemble to ``targets``; return params, optimiser state, last loss."""
    tx = _tx(cfg.critic_grad_clip, cfg.betas)
    n = targets.shape[0]
    mb = n // cfg.critic_minibatches

    def mse(params, o, t):
        v = networks.critic_values(params, st.critic_norm, o, cfg.obs_clip)
        return jnp.mean((v - t[None]) ** 2)

    def step(carry, idx):
        params, opt_state = carry
        loss, g = jax.value_and_grad(mse)(params, obs[idx], targets[idx])
        upd, opt_state = tx.update(g, opt_state, params)
        params = optax.apply_updates(params, jax.tree.map(lambda u: -lr * u, upd))
        return (params, opt_state), loss

    def epoch(carry, k):
        perm = jax.random.permutation(k, n)[:mb * cfg.critic_minibatches]
        carry, losses = jax.lax.scan(step, carry, perm.reshape(cfg.critic_minibatches, mb))
        return carry, jnp.mean(losses)

    (params, opt_state), losses = jax.lax.scan(
        epoch, (st.critic, st.critic_opt), jax.random.split(key, cfg.critic_iterations))
    return params, opt_state, losses[-1]


def make_iterate(cfg: SHACConfig, add_cfg: add_mod.ADDConfig, env):
    """
    Return ``iterate(state, key, total_iterations) -> (state, metrics)``, one SHAC iteration.

    Pure; ``total_iterations`` (the length of the learning-rate decay) is an argument,
    not a constant of the traced step, so one compiled step serves any run length.
    """
    actor_tx = _tx(cfg.actor_grad_clip, cfg.betas)

    def iterate(st: SHACState, key, total_iterations):
        k_roll, k_critic, k_add = jax.random.split(key, 3)
        (loss, (env_state, data)), grad = jax.value_and_grad(
            _rollout, has_aux=True)(st.actor, st, k_roll, cfg, add_cfg, env)
        grad_norm = optax.global_norm(grad)
        finite = jnp.isfinite(grad_norm)
        # A non-finite gradient (a blown-up contact) skips the actor step, not the run.
        grad = jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grad)
        lr_a = linear_lr(cfg.actor_lr, cfg.lr_end, st.iteration, total_iterations)
        upd, actor_opt = actor_tx.update(grad, st.actor_opt, st.actor)
        actor = optax.apply_updates(st.actor, jax.tree.map(lambda u: -lr_a * u, upd))
        actor = jax.tree.map(lambda new, old: jnp.where(finite, new, old), actor, st.actor)
        actor_opt = jax.tree.map(lambda new, old: jnp.where(finite, new, old),
                                 actor_opt, st.actor_opt)

        data = jax.lax.stop_gradient(data)
        targets = td_lambda_targets(data['reward'], data['boot'], data['done'],
                                    cfg.gamma, cfg.lam)
        lr_c = linear_lr(cfg.critic_lr, cfg.lr_end, st.iteration, total_iterations)
        flat_obs = data['obs'].reshape((-1, env.obs_size))
        flat_cobs = data['cobs'].reshape((-1, env_mod.critic_obs_size(env)))
        critic, critic_opt, critic_loss = _fit_critic(
            cfg, st, flat_cobs, targets.reshape(-1), lr_c, k_critic)
        # Non-finite targets (an env that blew up) skip the critic's fit, not the run.
        fit_ok = jnp.isfinite(critic_loss)
        critic, critic_opt = jax.tree.map(lambda new, old: jnp.where(fit_ok, new, old),
                                          (critic, critic_opt), (st.critic, st.critic_opt))
        a = cfg.target_alpha
        target = jax.tree.map(lambda t, c: a * t + (1.0 - a) * c, st.target_critic, critic)
        if add_cfg.enabled:
            add_state, add_terms = add_mod.update(add_cfg, st.add, data['add_delta'], k_add)
            add_ok = jnp.all(jnp.array([jnp.all(jnp.isfinite(x))
                                        for x in jax.tree.leaves(add_state)]))
            add_state = jax.tree.map(lambda new, old: jnp.where(add_ok, new, old),
                                     add_state, st.add)
        else:
            add_state, add_terms = st.add, {}
        new = SHACState(actor, actor_opt, critic, critic_opt, target,
                        networks.normalizer_update(st.obs_norm, flat_obs),
                        networks.normalizer_update(st.critic_norm, flat_cobs), add_state,
                        jax.lax.stop_gradient(env_state), st.iteration + 1)
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
                   'actor_loss': loss, 'critic_loss': critic_loss,
                   'actor_grad_norm': grad_norm, 'grad_finite': finite.astype(jnp.float32),
                   'value': jnp.mean(targets), 'actor_lr': lr_a,
                   'log_std': jnp.mean(actor['log_std']), **add_terms}
        return new, metrics

    return iterate


def policy(st: SHACState):
    """Return ``(actor params, observation normaliser)`` of the deterministic policy."""
    return st.actor, st.obs_norm
