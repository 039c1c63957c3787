"""
The G1 imitation environment: a reference motion, the differentiable simulator, BCG.

Implements :class:`bcg_ros.core.env.Env` on :mod:`bcg_ros.core.sim` wrapped by
:mod:`bcg_ros.core.bcg`:

- observation: :func:`bcg_ros.contract.observation_frame` with ``xp=jnp`` on
  the contract of :func:`bcg_ros.contract.imitation_contract` (robot state plus
  the reference at t+1..t+3), history per term as the contract says; the very
  code the evaluator and the executor run with ``xp=np``;
- action: the contract's ``action_to_targets`` (default pose + 0.25 a, or with
  ``residual`` the reference's next joint angles + 0.25 a), PD in the simulator;
- reward: the ADD features of :func:`bcg_ros.motion.add_features` of the
  simulated state against the reference's (``info['add_delta']``; the learner
  adds the ADD reward), plus an action-rate penalty, optional alive and
  tracking terms and DeepMimic's dense terms (:class:`ImitationRewardConfig`);
- terminations: root height (over the ground) below ``min_root_height`` or mean key-point error
  above ``max_track_error`` (failures: no bootstrap); the end of the clip or
  ``episode_length`` (truncation: bootstrap);
- episodes start at a random frame of the clip in the reference's state
  (reference state initialisation) and restart inside :meth:`G1Env.step` with
  ``jnp.where`` on the batch;
- domain randomisation per episode: ground friction, pelvis mass, pelvis CoM
  offset, PD gain scale, an action latency (one control step, or part of one); random
  pushes (a horizontal velocity change) at random steps.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np

from bcg_ros import contract as ct
from bcg_ros import motion as motion_mod
from bcg_ros import rotation
from bcg_ros import velocity_errors
from bcg_ros.core import bcg as bcg_mod
from bcg_ros.core import contact
from bcg_ros.core import sim as simulator
from bcg_ros.core import terrain as terrain_mod
from bcg_ros.core.env import StepOut
from bcg_ros.robot import g1


@dataclass(frozen=True)
class DomainRandConfig:
    """Domain randomisation of the G1 environment (per episode unless stated)."""

    enabled: bool = True
    """Randomise; False: nominal robot, no latency, no pushes."""
    friction_range: Tuple[float, float] = (0.5, 1.25)
    """Ground friction coefficient, uniform."""
    base_mass_range: Tuple[float, float] = (-1.0, 3.0)
    """Mass added to the pelvis [kg], uniform."""
    com_offset: float = 0.02
    """Pelvis centre-of-mass offset [m], uniform in +-com_offset per axis."""
    gain_scale_range: Tuple[float, float] = (0.9, 1.1)
    """Factor on every kp and kd, uniform."""
    latency_prob: float = 0.5
    """Probability that the episode's actions reach the motors late."""
    latency_max: float = 0.0
    """Longest delay [s] of a late episode, drawn uniformly in whole physics steps from one
    to this: for that part of each control step the motors still hold the previous action,
    as a real robot's do between its state sample and the command's arrival. 0: one whole
    control step."""
    push_prob: float = 0.01
    """Probability per control step of a push."""
    push_velocity: float = 0.3
    """Largest horizontal velocity change of a push [m/s], uniform per axis."""


PRIVILEGED_SIZE = 9
"""Privileged critic terms: root height, base linear velocity (3), root position error
to the reference in the base frame (3), heading error 1 - <q, q_ref>^2, clip phase."""


@dataclass(frozen=True)
class ImitationRewardConfig:
    """
    Dense, differentiable tracking terms beside ADD: ``w exp(-scale * e^2)`` each.

    DeepMimic's terms, all against the reference frame the state should match:
    joint angles, joint velocities, key points (world), root position and
    orientation, root linear velocity. Weights 0 switch a term off (ADD only).
    """

    pose_weight: float = 0.0
    pose_scale: float = 2.0
    """[1/rad^2] on the sum over joints of the squared angle error."""
    joint_vel_weight: float = 0.0
    joint_vel_scale: float = 0.1
    """[s^2/rad^2] on the sum over joints of the squared velocity error."""
    key_weight: float = 0.0
    key_scale: float = 40.0
    """[1/m^2] on the sum over key points of the squared position error."""
    root_weight: float = 0.0
    root_pos_scale: float = 10.0
    """[1/m^2] on the squared root position error."""
    root_rot_scale: float = 5.0
    """[1/rad^2] on the squared root orientation error (4 (1 - <q, q_ref>^2) ~ angle^2)."""
    root_vel_weight: float = 0.0
    root_vel_scale: float = 2.0
    """[s^2/m^2] on the squared root linear velocity error."""


@dataclass(frozen=True)
class G1EnvConfig:
    """Configuration of the G1 imitation environment."""

    num_envs: int = 64
    """Parallel environments (64 with BCG in the paper, 128 without)."""
    motion: str = 'run'
    """Reference motion: a built-in clip (run, jump, fight, dance) or a motion file."""
    episode_length: int = 0
    """Control steps before truncation; 0: until the end of the clip (and its hold)."""
    hold_end: int = 0
    """Control steps an episode runs on at the clip's last frame before truncation, the
    reference held there as policy_node holds it once its clip is over: a policy that never
    saw the end of its clip has only the critic's guess of what comes after it."""
    sim: simulator.SimConfig = field(default_factory=simulator.SimConfig)
    """Differentiable simulator (contact stiffness ``sim.contact.k``)."""
    bcg: bcg_mod.BCGConfig = field(default_factory=bcg_mod.BCGConfig)
    """Bundled contact gradients (``bcg.enabled=false``: plain SHAC)."""
    dr: DomainRandConfig = field(default_factory=DomainRandConfig)
    """Domain randomisation."""
    action_scale: float = 0.25
    """Joint target = default pose (or, residual, the reference) + action_scale * action."""
    residual: bool = False
    """Actions are corrections around the reference's next joint angles (recorded in the
    contract as ``action_residual``, so every consumer does the same); else around the
    default pose."""
    observe_ref_velocity: bool = False
    """The policy also observes the clip's root velocity at t+1..t+3 in its base frame
    (``ref_root_lin_vel``, recorded in the contract)."""
    observe_base_velocity: bool = False
    """The policy also observes its base's linear velocity in the base frame
    (``base_lin_vel``, recorded in the contract): the state estimator's on the robot and in
    the MuJoCo evaluator, here the simulator's plus ``base_velocity_noise``."""
    base_velocity_noise: float = 0.1
    """Std of the Gaussian noise on the observed base velocity [m/s] per axis and step
    (the estimator's error, ``bcg-bench estimator``, is of this order)."""
    base_velocity_bias: float = 0.0
    """Std of a Gaussian offset of the observed base velocity [m/s] per axis, drawn per
    episode and held through it (with domain randomisation on): the estimator's error
    repeats stride after stride, which white noise of the same size does not teach."""
    base_velocity_errors: str = ''
    """A ``bcg-eval --velocity-errors`` file of this clip (:mod:`bcg_ros.velocity_errors`):
    with domain randomisation on, each episode replays one of its recorded runs' state
    estimator errors on the observed base velocity, at the episode's own clip frames, beside
    the white noise and the offset. Empty: none."""
    imitation: ImitationRewardConfig = field(default_factory=ImitationRewardConfig)
    """Dense tracking reward terms beside ADD."""
    privileged_critic: bool = False
    """The critic also sees what the robot cannot measure: root height, base linear
    velocity, the root's position and heading error to the reference, the clip phase."""
    physics_params: str = ''
    """A PhysicsParams YAML (``bcg-calibrate``'s output, g1_sim_node's and ``bcg-eval
    --physics-params``' input) applied to the simulator; domain randomisation varies
    around it. Empty: the model file as it is."""
    random_start: bool = True
    """Start episodes at a random frame of the clip (else at frame 0)."""
    min_remaining: int = 16
    """A random start leaves at least this many frames of the clip."""
    adaptive_start: float = 0.0
    """Share of random starts drawn where episodes have recently failed (0: all uniform).
    The clip is cut into ``adaptive_bin`` frame bins; a termination adds to its bin's
    count and, less and less (``adaptive_kernel`` per bin), to the bins before it, where
    a fall begins; counts decay by ``adaptive_decay`` per control step. Starts are drawn
    from ``adaptive_start`` x the normalised counts + the rest uniform, so the hard parts
    of a clip are practised more often."""
    adaptive_bin: int = 10
    """Frames per bin of :attr:`adaptive_start` (0.2 s at 50 fps)."""
    adaptive_kernel: Tuple[float, ...] = (1.0, 0.8, 0.6, 0.4, 0.2)
    """Weight of a termination on its own bin and on each of the bins before it."""
    adaptive_decay: float = 0.999
    """Per control step decay of :attr:`adaptive_start`'s failure counts."""
    init_joint_noise: float = 0.02
    """Std of the noise on the initial joint angles [rad]."""
    min_root_height: float = 0.3
    """Terminate (a fall) when the pelvis is lower than this over the ground under it [m]."""
    max_track_error: float = 0.5
    """Terminate when the mean key-point error exceeds this [m]."""
    max_speed: float = 100.0
    """Terminate when any generalised velocity exceeds this [m/s, rad/s] or the state is
    not finite: the simulation diverged (a NaN state would otherwise never trip the
    height and tracking checks, and stay until the episode's time limit)."""
    action_rate_weight: float = 0.01
    """Weight of the action-rate penalty |a_t - a_{t-1}|^2."""
    alive_weight: float = 0.0
    """Reward per step alive."""
    tracking_weight: float = 0.0
    """Weight of exp(-e^2 / tracking_sigma^2), e the mean key-point error (0: ADD only).
    Logged as ``track_reward`` whatever its weight: unlike the ADD reward, whose scale moves
    with the discriminator, it is a fixed measure of imitation."""
    tracking_sigma: float = 0.2
    """Length scale of the tracking term [m]."""


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class DomainParams:
    """One episode's randomised robot (leading env axis when batched)."""

    friction: jax.Array
    base_mass: jax.Array
    com_offset: jax.Array
    gain_scale: jax.Array
    latency: jax.Array
    """Physics steps of each control step that still hold the previous action (0: none;
    the step's substeps: the action is applied one control step late)."""
    velocity_bias: jax.Array
    """``[3]`` offset of the observed base velocity (``base_velocity_bias``)."""
    velocity_trace: jax.Array
    """Which recorded run of ``base_velocity_errors`` the episode replays (int)."""


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class G1State:
    """Batched state of the G1 imitation environments."""

    bcg: bcg_mod.BCGState
    t: jax.Array
    """[B] control steps since the episode started."""
    frame: jax.Array
    """[B] reference frame the state corresponds to."""
    last_action: jax.Array
    """[B, 29] previous raw policy output."""
    history: tuple
    """Per observation term [B, history, size], oldest first."""
    dr: DomainParams
    held: jax.Array
    """[B] control steps spent at the clip's last frame (``hold_end``)."""
    failures: jax.Array
    """[B, bins] recent terminations per clip bin (``adaptive_start``), equal in every row:
    one count shared by the batch, kept per env so the state splits along envs."""


class G1Env:
    """Batched, differentiable G1 imitation of one reference motion (module docstring)."""

    def __init__(self, config: G1EnvConfig = G1EnvConfig(), motion=None):
        """Load the motion and build the simulator (outside jit; takes a few seconds)."""
        from bcg_ros.robot import model as g1_model

        self.config = config
        self.num_envs = config.num_envs
        self.sim = simulator.build_g1(config.sim)
        if config.physics_params:
            from bcg_ros.real2sim.calibrate import on_sim
            from bcg_ros.robot import physics

            self.sim = on_sim(self.sim, physics.load(config.physics_params))
        # On terrain the reference follows the ground under its pelvis.
        self.motion = terrain_mod.lift_motion(
            motion if motion is not None else motion_mod.load_motion(
                config.motion, g1.CONTROL_DT), self.sim.terrain)
        self._contract = ct.imitation_contract(self.motion.name, self.motion.num_frames,
                                               config.action_scale, config.residual,
                                               config.observe_ref_velocity,
                                               config.observe_base_velocity)
        self.robot = g1_model.load()
        self.pelvis = self.robot.root_body
        self.qpos_adr = np.asarray(self.robot.qpos_adr)
        self.qvel_adr = np.asarray(self.robot.qvel_adr)
        m = self.motion
        qpos, qvel = motion_mod.reference_state(m, self.robot)
        dt = self.sim.dtype
        self.ref_qpos = jnp.asarray(qpos, dt)
        self.ref_qvel = jnp.asarray(qvel, dt)
        self.ref_joint_pos = jnp.asarray(m.joint_pos, dt)
        self.ref_root_quat = jnp.asarray(m.root_quat, dt)
        # The observed root height and velocity are the clip's as recorded, as on the robot.
        self.ref_root_height = jnp.asarray(m.observed.root_pos[:, 2], dt)
        self.ref_root_lin_vel = jnp.asarray(m.observed.root_lin_vel, dt)
        self.ref_key = jnp.asarray(m.key_pos, dt)
        self.ref_body = jnp.asarray(motion_mod.body_positions(m, self.robot), dt)
        self.track_ids = np.array([self.robot.model.body(n).id for n in g1.TRACK_BODIES])
        self.ref_features = jnp.asarray(motion_mod.motion_features(m), dt)
        self.num_frames = m.num_frames
        self.velocity_errors = (
            jnp.asarray(velocity_errors.load(config.base_velocity_errors, m.num_frames, m.fps), dt)
            if config.base_velocity_errors else None)
        """[R, F, 3] the recorded estimator errors an episode replays, or None."""
        if self.num_frames <= ct.REF_FUTURE + 2:
            raise ValueError(f'motion {m.name!r}: {self.num_frames} frames, too short to imitate')
        self.episode_length = (config.episode_length or self.num_frames - 1 + config.hold_end)
        self.obs_size = self._contract.obs_size
        self.critic_obs_size = self.obs_size + (PRIVILEGED_SIZE if config.privileged_critic
                                                else 0)
        self.action_size = g1.NUM_JOINTS
        self.add_size = motion_mod.FEATURE_SIZE

    def contract(self) -> ct.Contract:
        """Return the deployment contract of policies of this environment."""
        return self._contract

    # --- small named terms ---

    def _robot_obs(self, qpos, qvel, last_action, vel_noise) -> ct.RobotObs:
        """Return what the robot measures, for one env (``vel_noise``: the velocity's error)."""
        lin_vel = rotation.quat_rotate_inverse(qpos[3:7], qvel[0:3], jnp) + vel_noise
        return ct.RobotObs(quat=qpos[3:7], gyro=qvel[3:6], joint_pos=qpos[self.qpos_adr],
                           joint_vel=qvel[self.qvel_adr], last_action=last_action,
                           command=jnp.zeros(3, qpos.dtype), lin_vel=lin_vel)

    def _ref_obs(self, frame) -> ct.RefObs:
        """Return the reference at frames t+1..t+3 (held at the last frame), for one env."""
        idx = ct.reference_indices(frame, self.num_frames, jnp)
        return ct.RefObs(joint_pos=self.ref_joint_pos[idx], root_quat=self.ref_root_quat[idx],
                         root_height=self.ref_root_height[idx],
                         root_lin_vel=self.ref_root_lin_vel[idx])

    def _frame(self, qpos, qvel, last_action, frame, vel_noise):
        """Return one env's observation frame (per term), by the contract."""
        return ct.observation_frame(self._contract,
                                    self._robot_obs(qpos, qvel, last_action, vel_noise),
                                    self._ref_obs(frame), xp=jnp)

    def _velocity_noise(self, key, dr: DomainParams, frame):
        """Return ``[B, 3]`` errors of the observed base velocity at clip frames ``frame``."""
        dtype = dr.velocity_bias.dtype
        if not self.config.observe_base_velocity:
            return jnp.zeros((self.num_envs, 3), dtype)
        noise = dr.velocity_bias + self.config.base_velocity_noise * jax.random.normal(
            key, (self.num_envs, 3), dtype)
        if self.velocity_errors is not None and self.config.dr.enabled:
            noise = noise + self.velocity_errors[dr.velocity_trace, frame]
        return noise

    def _features(self, qpos, qvel, key_points):
        """Return one env's ADD features of the simulated state."""
        quat = qpos[3:7]
        w = rotation.quat_rotate(quat, qvel[3:6], jnp)
        return motion_mod.add_features(qpos[0:3], quat, qpos[self.qpos_adr],
                                       qvel[self.qvel_adr], qvel[0:3], w, key_points, xp=jnp)

    def _imitation_reward(self, qpos, qvel, keys, frame):
        """[B] the dense tracking terms of ``config.imitation`` (0 when all weights are 0)."""
        w = self.config.imitation
        out = jnp.zeros(qpos.shape[0], qpos.dtype)
        ref_q, ref_v = self.ref_qpos[frame], self.ref_qvel[frame]

        def term(weight, scale, sq):
            return weight * jnp.exp(-scale * sq) if weight else 0.0

        out = out + term(w.pose_weight, w.pose_scale, jnp.sum(
            (qpos[:, self.qpos_adr] - ref_q[:, self.qpos_adr]) ** 2, -1))
        out = out + term(w.joint_vel_weight, w.joint_vel_scale, jnp.sum(
            (qvel[:, self.qvel_adr] - ref_v[:, self.qvel_adr]) ** 2, -1))
        out = out + term(w.key_weight, w.key_scale, jnp.sum(
            jnp.sum((keys - self.ref_key[frame]) ** 2, -1), -1))
        if w.root_weight:
            dot = jnp.sum(qpos[:, 3:7] * ref_q[:, 3:7], -1)
            sq = (w.root_pos_scale * jnp.sum((qpos[:, 0:3] - ref_q[:, 0:3]) ** 2, -1)
                  + w.root_rot_scale * 4.0 * (1.0 - dot ** 2))
            out = out + w.root_weight * jnp.exp(-sq)
        out = out + term(w.root_vel_weight, w.root_vel_scale, jnp.sum(
            (qvel[:, 0:3] - ref_v[:, 0:3]) ** 2, -1))
        return out

    def _env_sim(self, p: DomainParams) -> simulator.Sim:
        """Return the simulator of one randomised robot (called inside vmap)."""
        s = self.sim
        m = s.mjx_model
        m = m.replace(body_mass=m.body_mass.at[self.pelvis].add(p.base_mass),
                      body_ipos=m.body_ipos.at[self.pelvis].add(p.com_offset))
        cparams = dataclasses.replace(s.contact, friction=p.friction * jnp.ones_like(
            s.contact.friction))
        return dataclasses.replace(s, mjx_model=m, kp=s.kp * p.gain_scale,
                                   kd=s.kd * p.gain_scale, contact=cparams)

    def _domain(self, key, n) -> DomainParams:
        """Sample ``n`` randomised robots."""
        c = self.config.dr
        dt = self.sim.dtype
        if not c.enabled:
            return DomainParams(jnp.full((n,), self.config.sim.contact.friction, dt),
                                jnp.zeros((n,), dt), jnp.zeros((n, 3), dt), jnp.ones((n,), dt),
                                jnp.zeros((n,), dt), jnp.zeros((n, 3), dt),
                                jnp.zeros((n,), jnp.int32))
        k = jax.random.split(key, 5)
        traces = 1 if self.velocity_errors is None else self.velocity_errors.shape[0]

        def u(key, rng, shape=(n,)):
            return jax.random.uniform(key, shape, dt, rng[0], rng[1])

        return DomainParams(u(k[0], c.friction_range), u(k[1], c.base_mass_range),
                            u(k[2], (-c.com_offset, c.com_offset), (n, 3)),
                            u(k[3], c.gain_scale_range),
                            self._latency(k[4], n),
                            self.config.base_velocity_bias * jax.random.normal(
                                jax.random.fold_in(key, 5), (n, 3), dt),
                            jax.random.randint(jax.random.fold_in(key, 6), (n,), 0, traces))

    def _latency(self, key, n):
        """[n] delayed physics steps per control step (:attr:`DomainParams.latency`)."""
        c, substeps, dt = self.config.dr, self.sim.config.substeps, self.sim.dtype
        late = jax.random.bernoulli(key, c.latency_prob, (n,))
        longest = min(substeps, max(1, round(c.latency_max / self.sim.config.dt)))
        steps = (jax.random.randint(jax.random.fold_in(key, 1), (n,), 1, longest + 1)
                 if c.latency_max > 0
                 else jnp.full((n,), substeps))
        return jnp.where(late, steps, 0).astype(dt)

    @property
    def last_start(self) -> int:
        """One past the last frame a random start may draw (``min_remaining`` left after it)."""
        return max(self.num_frames - 1 - self.config.min_remaining, 1)

    @property
    def num_bins(self) -> int:
        """Clip bins of :attr:`G1EnvConfig.adaptive_start` (those a random start can reach)."""
        return -(-self.last_start // self.config.adaptive_bin)

    def _start_frames(self, key, failures) -> jax.Array:
        """Draw ``[num_envs]`` start frames: uniform, or partly where episodes fail."""
        c, n, last_start = self.config, self.num_envs, self.last_start
        if not c.random_start:
            return jnp.zeros((n,), jnp.int32)
        uniform = jax.random.randint(key, (n,), 0, last_start)
        if c.adaptive_start <= 0:
            return uniform
        k_pick, k_bin, k_in = jax.random.split(jax.random.fold_in(key, 1), 3)
        counts = failures[0]
        share = c.adaptive_start * (jnp.sum(counts) > 0)     # no failure yet: all uniform
        probs = counts / jnp.maximum(jnp.sum(counts), 1e-12)
        b = jax.random.choice(k_bin, self.num_bins, (n,), p=probs)
        hard = jnp.minimum(b * c.adaptive_bin + jax.random.randint(
            k_in, (n,), 0, c.adaptive_bin), last_start - 1)
        return jnp.where(jax.random.uniform(k_pick, (n,)) < share, hard, uniform)

    def _count_failures(self, failures, terminated, frame) -> jax.Array:
        """Decay the shared failure counts and add this step's terminations (at ``frame``)."""
        c = self.config
        if c.adaptive_start <= 0:
            return failures
        nb = self.num_bins
        bins = jnp.minimum(frame // c.adaptive_bin, nb - 1)
        # Each termination's bin and the bins before it, where the fall began: [B, kernel].
        kernel = jnp.asarray(c.adaptive_kernel, failures.dtype)
        back = jnp.maximum(bins[:, None] - jnp.arange(len(c.adaptive_kernel)), 0)
        hits = jnp.zeros((nb,), failures.dtype).at[back].add(kernel * terminated[:, None])
        counts = c.adaptive_decay * failures[0] + hits / self.num_envs
        return jnp.broadcast_to(counts, failures.shape)

    def _fresh(self, key, failures=None) -> G1State:
        """Return ``num_envs`` new episodes at (random) reference frames."""
        c = self.config
        n = self.num_envs
        k_frame, k_noise, k_dr = jax.random.split(key, 3)
        k_vel = jax.random.fold_in(key, 3)
        if failures is None:
            failures = jnp.zeros((n, self.num_bins), self.sim.dtype)
        frame = self._start_frames(k_frame, failures)
        qpos = self.ref_qpos[frame]
        qvel = self.ref_qvel[frame]
        noise = c.init_joint_noise * jax.random.normal(k_noise, (n, len(self.qpos_adr)),
                                                       qpos.dtype)
        qpos = qpos.at[:, self.qpos_adr].add(noise)
        sim_state = simulator.SimState(qpos, qvel)
        zeros = jnp.zeros((n, self.action_size), qpos.dtype)
        dr = self._domain(k_dr, n)
        frames = jax.vmap(self._frame)(qpos, qvel, zeros, frame,
                                       self._velocity_noise(k_vel, dr, frame))
        history = jax.vmap(lambda f: ct.init_history(self._contract, f, jnp))(frames)
        return G1State(bcg_mod.init_batch(self.sim, c.bcg, sim_state), jnp.zeros((n,), jnp.int32),
                       frame.astype(jnp.int32), zeros, history, dr, jnp.zeros((n,), jnp.int32),
                       failures)

    def reset(self, key) -> G1State:
        """Return the batched state of ``num_envs`` fresh episodes."""
        return self._fresh(key)

    def observe(self, s: G1State):
        """Return the policy input ``[B, obs_size]`` (history flattened, oldest first)."""
        return jax.vmap(lambda h: ct.flatten(h, jnp))(s.history)

    def _root_height(self, qpos):
        """[...] the pelvis height over the ground under it (its z on flat ground)."""
        return qpos[..., 2] - self.sim.terrain.height(qpos[..., 0:2])

    def _privileged(self, qpos, qvel, frame):
        """One env's privileged critic terms (PRIVILEGED_SIZE values)."""
        quat = qpos[3:7]
        v_base = rotation.quat_rotate_inverse(quat, qvel[0:3], jnp)
        ref = self.ref_qpos[frame]
        dpos = rotation.quat_rotate_inverse(quat, ref[0:3] - qpos[0:3], jnp)
        dot = jnp.sum(quat * ref[3:7])
        phase = frame.astype(qpos.dtype) / (self.num_frames - 1)
        return jnp.concatenate([self._root_height(qpos)[None], v_base, dpos,
                                (1.0 - dot ** 2)[None], phase[None]])

    def critic_observe(self, s: G1State):
        """Return the critic's input: the observation, plus privileged terms when enabled."""
        obs = self.observe(s)
        if not self.config.privileged_critic:
            return obs
        b = s.bcg.sim
        return jnp.concatenate([obs, jax.vmap(self._privileged)(b.qpos, b.qvel, s.frame)], -1)

    def _physics(self, s: G1State, targets, key):
        """Advance the (randomised) simulator under BCG; return the BCG state and info."""
        cfg = self.config.bcg
        step_slots = jax.vmap(lambda st, args: simulator.step(self._env_sim(args[0]), st, args[1]))
        if not cfg.enabled:
            return bcg_mod.passthrough(*step_slots(s.bcg.sim, (s.dr, targets)), s.bcg)

        def starts(st, force, args, k):
            return bcg_mod.branch_starts(self._env_sim(args[0]), cfg, st, force, k)

        return bcg_mod.step_envs(self.sim, cfg, step_slots, starts, s.bcg, (s.dr, targets), key)

    def _push(self, b: bcg_mod.BCGState, key, dr_on: bool) -> bcg_mod.BCGState:
        """Add random horizontal velocity kicks to the pelvis of some envs."""
        c = self.config.dr
        if not dr_on or c.push_prob <= 0:
            return b
        k_hit, k_dv = jax.random.split(key)
        hit = jax.random.bernoulli(k_hit, c.push_prob, (self.num_envs,))
        dv = jax.random.uniform(k_dv, (self.num_envs, 2), b.sim.qvel.dtype,
                                -c.push_velocity, c.push_velocity)
        dv = jax.lax.stop_gradient(jnp.where(hit[:, None], dv, 0.0))
        sim = simulator.SimState(b.sim.qpos, b.sim.qvel.at[:, 0:2].add(dv))
        branches = simulator.SimState(b.branches.qpos,
                                      b.branches.qvel.at[:, :, 0:2].add(dv[:, None]))
        return bcg_mod.BCGState(sim, branches, b.left)

    def step(self, s: G1State, action, key):
        """Advance one control step; finished episodes restart from fresh ones."""
        c = self.config
        k_phys, k_push, k_reset = jax.random.split(key, 3)
        k_vel = jax.random.fold_in(key, 3)
        to_targets = jax.vmap(lambda a, f: self._contract.action_to_targets(
            a, jnp, self._ref_obs(f)))
        targets = to_targets(action, s.frame)
        if c.dr.enabled and c.dr.latency_prob > 0:   # else no episode is late
            late = jnp.arange(self.sim.config.substeps) < s.dr.latency[:, None]  # [B, sub]
            targets = jnp.where(late[..., None], to_targets(s.last_action, s.frame)[:, None],
                                targets[:, None])
        b, binfo = self._physics(s, targets, k_phys)
        b = self._push(b, k_push, c.dr.enabled)
        qpos, qvel = b.sim.qpos, b.sim.qvel
        frame = jnp.minimum(s.frame + 1, self.num_frames - 1)
        t = s.t + 1
        keys = binfo.step.key_points
        key_err = jnp.mean(jnp.linalg.norm(keys - self.ref_key[frame], axis=-1), -1)
        sim_feat = jax.vmap(self._features)(qpos, qvel, keys)
        delta = self.ref_features[frame] - sim_feat
        reward = (c.alive_weight
                  - c.action_rate_weight * jnp.sum((action - s.last_action) ** 2, -1)
                  + c.tracking_weight * jnp.exp(-key_err ** 2 / c.tracking_sigma ** 2)
                  + self._imitation_reward(qpos, qvel, keys, frame))
        diverged = ~(jnp.all(jnp.isfinite(qpos), -1)
                     & jnp.all(jnp.abs(qvel) <= c.max_speed, -1))   # NaN fails <=
        root_height = self._root_height(qpos)
        terminated = ((root_height < c.min_root_height) | (key_err > c.max_track_error)
                      | diverged).astype(qpos.dtype)
        held = jnp.where(frame >= self.num_frames - 1, s.held + 1, 0)
        ended = (t >= self.episode_length) | (held > c.hold_end)
        truncated = (1.0 - terminated) * ended.astype(qpos.dtype)
        done = jnp.maximum(terminated, truncated)
        frames = jax.vmap(self._frame)(qpos, qvel, action, frame,
                                       self._velocity_noise(k_vel, s.dr, frame))
        history = jax.vmap(lambda h, f: ct.push_history(h, f, jnp))(s.history, frames)
        failures = self._count_failures(s.failures, terminated, frame)
        nxt = G1State(b, t, frame, action, history, s.dr, held, failures)
        # A diverged env's state is garbage (NaN or 1e12): its reward, ADD features and
        # terminal observations are zeroed, so they cannot poison the critic's targets or
        # the discriminator (NaN x 0 is NaN); it ends as a failure, with no bootstrap.
        bad = diverged[:, None]
        terminal_obs = jnp.where(bad, 0.0, self.observe(nxt))
        terminal_critic_obs = jnp.where(bad, 0.0, self.critic_observe(nxt))
        reward = jnp.where(diverged, 0.0, reward)
        delta = jnp.where(bad, 0.0, delta)
        fresh = self._fresh(k_reset, failures)
        nxt = jax.tree.map(
            lambda a, f: jnp.where(done.reshape((-1,) + (1,) * (a.ndim - 1)) > 0, f, a),
            nxt, fresh)
        pen_mm, pen_n = contact.penetration_totals(jax.lax.stop_gradient(binfo.step.depth))
        # A diverged env's depth is garbage (1e9 mm): it would be the policy's delta-d.
        pen_mm, pen_n = jnp.where(diverged, 0.0, pen_mm), jnp.where(diverged, 0.0, pen_n)
        err = jax.lax.stop_gradient(key_err)
        # E_track as the evaluator defines it: all bodies, not the reward's key points.
        body_err = jax.lax.stop_gradient(motion_mod.tracking_error(
            binfo.step.body_pos[:, self.track_ids], self.ref_body[frame], xp=jnp))
        # A diverged env's error is garbage (1e12 m or NaN) and would swamp the batch mean:
        # it counts at the termination bound, and in diverged_rate.
        e_track = 100.0 * jnp.where(diverged, c.max_track_error, body_err)
        info = {'terminated': terminated, 'truncated': truncated, 'terminal_obs': terminal_obs,
                'terminal_critic_obs': terminal_critic_obs,
                'add_delta': delta, 'e_track': e_track,
                'bundle': binfo.bundled.astype(qpos.dtype),
                'penetration_sum_mm': pen_mm, 'penetration_count': pen_n,
                'root_height': root_height,
                # Per sphere, for studies of the gradient (bcg-bench sensitivity).
                'contact_force': binfo.step.normal_force, 'contact_depth': binfo.step.depth,
                'contact_point': binfo.step.contact_point, 'qpos': qpos,
                'metrics': {
                    'track_reward': jnp.where(diverged, 0.0, jnp.exp(
                        -err ** 2 / c.tracking_sigma ** 2)),
                    'diverged_rate': diverged.astype(qpos.dtype),
                    # A stiff contact that found no free bundle slot ran plain.
                    'bundle_dropped_rate': binfo.dropped.astype(qpos.dtype)}}
        if c.adaptive_start > 0:   # where starts are drawn most (first frame of that bin)
            info['metrics']['adaptive_peak_frame'] = jnp.broadcast_to(
                c.adaptive_bin * jnp.argmax(failures[0]).astype(qpos.dtype), (self.num_envs,))
        return nxt, StepOut(self.observe(nxt), reward, done, info)
