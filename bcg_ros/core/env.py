"""
The environment protocol the learners (SHAC, PPO) train against.

An environment is batched and pure: ``reset(key)`` returns the state of all
``num_envs`` environments, ``step(state, action, key)`` advances every one of
them by one control step and returns the next state and a :class:`StepOut`.
Everything is differentiable with respect to ``state`` and ``action`` (SHAC
backpropagates through ``step``), jit-able, and free of Python loops over
environments.

Episodes end inside ``step``: an environment whose episode is over is reset
there (``jnp.where`` on the batch), so ``StepOut.obs`` is already the first
observation of its next episode. What a learner needs for the bootstrap is in
``info``: ``terminal_obs`` (the observation the finished episode ended in),
``terminated`` (a failure: the value there is zero) and ``truncated`` (a
time limit: the value there is bootstrapped from ``terminal_obs``).

Info keys every environment provides, each ``[B]`` unless stated:

- ``terminated``, ``truncated``: float 0/1, see above; ``done`` is their union.
- ``terminal_obs``: ``[B, obs_size]``.
- ``add_delta``: ``[B, add_size]``, reference minus simulated motion features
  (the ADD discriminator's input before normalisation), differentiable.
- ``e_track``: per-env tracking error [cm] (the paper's E_track).
- ``bundle``: 1 where a BCG bundle was taken this step (0 in envs without).
- ``penetration_mm``: mean foot penetration depth this step [mm] (0 if none).

Optional: ``metrics``, a dict of further per-env diagnostics ``[B]`` (constants
for gradients); the learners log the batch mean of each under its own name.

Optional, a privileged critic: an env with ``critic_obs_size`` and
``critic_observe(state)`` gives its critic more than the policy sees (state a
robot cannot measure, e.g. the base velocity or the error to the reference),
and ``info['terminal_critic_obs']`` for the bootstrap. The learners read both
through :func:`critic_obs_size`, :func:`critic_observe` and
:func:`terminal_critic_obs`, which fall back to the policy's observation.
"""

from dataclasses import dataclass
from typing import Any, Dict, Protocol, runtime_checkable

import jax

INFO_KEYS = ('terminated', 'truncated', 'terminal_obs', 'add_delta', 'e_track', 'bundle',
             'penetration_sum_mm', 'penetration_count')
"""Keys of ``StepOut.info`` that every environment provides."""


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class StepOut:
    """What one batched control step returns besides the next state."""

    obs: jax.Array
    """[B, obs_size] observation after the step (of the next episode where one ended)."""
    reward: jax.Array
    """[B] the environment's own reward terms (ADD is added by the learner)."""
    done: jax.Array
    """[B] float 0/1: the episode ended at this step (terminated or truncated)."""
    info: Dict[str, jax.Array]
    """Diagnostics and bootstrap data, keys :data:`INFO_KEYS` at least."""


@runtime_checkable
class Env(Protocol):
    """A batched, differentiable, pure environment."""

    num_envs: int
    """Batch size B: every array of the state leads with it."""
    obs_size: int
    action_size: int
    add_size: int
    """Length of the ADD feature difference ``info['add_delta']``."""
    episode_length: int
    """Control steps after which an episode is truncated."""

    def reset(self, key: jax.Array) -> Any:
        """Return the batched state of ``num_envs`` fresh episodes."""

    def observe(self, state: Any) -> jax.Array:
        """Return the current observation ``[B, obs_size]`` of a state."""

    def step(self, state: Any, action: jax.Array, key: jax.Array):
        """Advance one control step; return ``(state, StepOut)``."""

    def contract(self):
        """Return the :class:`bcg_ros.contract.Contract` a policy of this env deploys with."""


def check_env(env: Env) -> None:
    """Raise naming the attribute if ``env`` does not implement :class:`Env`."""
    for name in ('num_envs', 'obs_size', 'action_size', 'add_size', 'episode_length',
                 'reset', 'observe', 'step', 'contract'):
        if not hasattr(env, name):
            raise TypeError(f'{type(env).__name__} is not a bcg_ros.core.env.Env: '
                            f'it has no attribute {name!r}')


def critic_obs_size(env) -> int:
    """Length of the critic's input: ``env.critic_obs_size``, else the policy's."""
    return int(getattr(env, 'critic_obs_size', env.obs_size))


def critic_observe(env, state) -> jax.Array:
    """The critic's input ``[B, critic_obs_size]`` of a state (the observation by default)."""
    fn = getattr(env, 'critic_observe', None)
    return fn(state) if fn is not None else env.observe(state)


def terminal_critic_obs(env, info: Dict[str, jax.Array]) -> jax.Array:
    """The critic's input at the states episodes ended in (``terminal_obs`` by default)."""
    return info['terminal_critic_obs'] if 'terminal_critic_obs' in info \
        else info['terminal_obs']
