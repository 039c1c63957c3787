"""
The test environment: a planar point mass tracking a circular reference.

It implements :class:`bcg_ros.core.env.Env` exactly as the G1 imitation
environment does (batched, differentiable, resets inside ``step``, failure
terminations and time-limit truncations, ADD feature differences, domain
randomisation of the mass, action-rate penalty), in a few lines of JAX that
compile in seconds. The learners, the training loop, checkpoints, export and
the trainer node are tested on it; it is not a model of anything.

Dynamics (semi-implicit Euler, ``dt`` per control step)::

    v' = v + dt * (force_scale * a / m - damping * v)
    p' = p + dt * v'

Reference: ``r(t) = radius * (cos(w t + phi), sin(w t + phi))`` with a random
phase ``phi`` per episode.
"""

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from bcg_ros import contract as contract_mod
from bcg_ros.core.env import StepOut


@dataclass(frozen=True)
class ToyEnvConfig:
    """Configuration of the point-mass tracking environment."""

    num_envs: int = 32
    """Parallel environments."""
    episode_length: int = 100
    """Control steps per episode before truncation."""
    dt: float = 0.05
    """Control period [s]."""
    radius: float = 0.5
    """Reference circle radius [m]."""
    omega: float = 1.5
    """Reference angular rate [rad/s]."""
    force_scale: float = 4.0
    """Force per unit action [N]."""
    damping: float = 0.5
    """Linear velocity damping [1/s]."""
    mass_range: tuple = (0.8, 1.2)
    """Domain randomisation of the mass [kg], uniform per episode."""
    init_noise: float = 0.05
    """Initial position noise around the reference [m]."""
    fail_distance: float = 0.5
    """Tracking error [m] beyond which an episode terminates (a failure)."""
    tracking_weight: float = 1.0
    """Weight of the environment's own reward exp(-|p - r|^2 / tracking_sigma^2)."""
    tracking_sigma: float = 0.1
    """Length scale of the tracking reward [m]."""
    action_rate_weight: float = 0.01
    """Weight of the action-rate penalty |a - a_prev|^2."""


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class ToyState:
    """Batched state of the point-mass environments."""

    pos: jax.Array
    """[B, 2] position [m]."""
    vel: jax.Array
    """[B, 2] velocity [m/s]."""
    t: jax.Array
    """[B] control steps since the episode started."""
    phase: jax.Array
    """[B] reference phase of the episode [rad]."""
    mass: jax.Array
    """[B] randomised mass [kg]."""
    last_action: jax.Array
    """[B, 2] previous action."""


class ToyEnv:
    """Planar point mass tracking a circle; see the module docstring."""

    action_size = 2
    add_size = 4
    obs_size = 12

    def __init__(self, config: ToyEnvConfig = ToyEnvConfig()):
        """Keep the configuration; nothing is compiled here."""
        self.config = config
        self.num_envs = config.num_envs
        self.episode_length = config.episode_length

    def _ref(self, t, phase):
        """Return reference position and velocity at integer step(s) ``t``."""
        c = self.config
        ang = c.omega * t * c.dt + phase
        p = c.radius * jnp.stack([jnp.cos(ang), jnp.sin(ang)], -1)
        v = c.radius * c.omega * jnp.stack([-jnp.sin(ang), jnp.cos(ang)], -1)
        return p, v

    def _fresh(self, key, n):
        """Return ``n`` new episodes."""
        c = self.config
        k_phase, k_mass, k_noise = jax.random.split(key, 3)
        phase = jax.random.uniform(k_phase, (n,), minval=0.0, maxval=2 * jnp.pi)
        mass = jax.random.uniform(k_mass, (n,), minval=c.mass_range[0], maxval=c.mass_range[1])
        t = jnp.zeros((n,), jnp.int32)
        p, v = self._ref(t, phase)
        p = p + c.init_noise * jax.random.normal(k_noise, (n, 2))
        return ToyState(p, v, t, phase, mass, jnp.zeros((n, 2)))

    def reset(self, key):
        """Return the batched state of ``num_envs`` fresh episodes."""
        return self._fresh(key, self.num_envs)

    def observe(self, s: ToyState):
        """Return errors to the reference now, the reference t+1..t+3, and the last action."""
        p, v = self._ref(s.t, s.phase)
        fut = [self._ref(s.t + i, s.phase)[0] - s.pos for i in (1, 2, 3)]
        return jnp.concatenate([s.pos - p, s.vel - v] + fut + [s.last_action], -1)

    def step(self, s: ToyState, action, key):
        """Advance one control step; finished episodes restart from fresh ones."""
        c = self.config
        acc = c.force_scale * action / s.mass[:, None] - c.damping * s.vel
        vel = s.vel + c.dt * acc
        pos = s.pos + c.dt * vel
        t = s.t + 1
        nxt = ToyState(pos, vel, t, s.phase, s.mass, action)
        ref_p, ref_v = self._ref(t, s.phase)
        err = pos - ref_p
        dist = jnp.sqrt(jnp.sum(err ** 2, -1) + 1e-12)
        reward = (c.tracking_weight * jnp.exp(-jnp.sum(err ** 2, -1) / c.tracking_sigma ** 2)
                  - c.action_rate_weight * jnp.sum((action - s.last_action) ** 2, -1))
        terminated = (dist > c.fail_distance).astype(jnp.float32)
        truncated = (1.0 - terminated) * (t >= c.episode_length).astype(jnp.float32)
        done = jnp.maximum(terminated, truncated)
        terminal_obs = self.observe(nxt)
        fresh = self._fresh(key, self.num_envs)
        nxt = jax.tree.map(
            lambda a, b: jnp.where(done.reshape((-1,) + (1,) * (a.ndim - 1)) > 0, b, a),
            nxt, fresh)
        info = {'terminated': terminated, 'truncated': truncated,
                'terminal_obs': terminal_obs,
                'add_delta': jnp.concatenate([ref_p - pos, ref_v - vel], -1),
                'e_track': 100.0 * dist,
                'bundle': jnp.zeros_like(dist),
                'penetration_sum_mm': jnp.zeros_like(dist),
                'penetration_count': jnp.zeros_like(dist)}
        return nxt, StepOut(self.observe(nxt), reward, done, info)

    def contract(self):
        """Return a contract describing the toy policy's input and output (not a G1)."""
        return contract_mod.Contract(
            joint_names=('force_x', 'force_y'), default_pose=(0.0, 0.0), kp=(0.0, 0.0),
            kd=(0.0, 0.0), action_scale=(self.config.force_scale,) * 2,
            action_offset=(0.0, 0.0), action_clip=None,
            obs_terms=(contract_mod.ObsTerm('toy_tracking', self.obs_size),),
            control_dt=self.config.dt, motion_name='toy_circle',
            motion_frames=self.config.episode_length)
