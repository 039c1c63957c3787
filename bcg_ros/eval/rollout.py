"""
Policy rollouts in MuJoCo (the C engine): the sim2sim half of the evaluation.

Every physics step the joint PD runs on the policy's latest targets, with the
G1's torque limits, inside MuJoCo's actuators with the implicitfast integrator
(:mod:`bcg_ros.robot.pd`); the policy runs at its own period, and its targets are held
to the joint ranges as policy_node's executor holds them on the robot. A model perturbed
with physical parameters (:func:`bcg_ros.robot.physics.perturb`) runs as
g1_sim_node runs it: targets reach the motors after its control latency, and
each motor delivers its strength times the PD torque. Each run has its
own seed, which draws the initial-state noise, the ground friction and the
pushes. A run whose state stops being finite, or explodes, ends there as a
divergence, which the metrics count as a fall. The ``stand`` and ``replay``
baselines (:class:`Baseline`) run through the same loop.
"""

import copy
import dataclasses
import pathlib
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple, Union

import mujoco
import numpy as np

from bcg_ros import contract as ct
from bcg_ros.runtime import estimator as est
from bcg_ros import motion as motion_mod
from bcg_ros.motion import Motion
from bcg_ros import rotation
from bcg_ros.robot import g1, lowlevel, pd, physics, sensors
from bcg_ros.robot.model import G1Model
from bcg_ros.runtime.policy import Policy

TERRAIN_SIM_DT = 0.001
"""MuJoCo's physics step [s] on a terrain unless a run asks for another
(:func:`physics_step`)."""


@dataclass(frozen=True)
class RolloutConfig:
    """How each run is set up and how long it lasts."""

    duration: float = 0.0
    """Simulated seconds per run; 0: the motion's length, or velocity_duration."""
    velocity_duration: float = 10.0
    """Simulated seconds per run of a velocity policy when duration is 0."""
    hold: float = 0.0
    """Seconds a run goes on past its clip's end, the reference held at the last frame as
    policy_node holds it: does the robot stay up once its motion is over?"""
    sim_dt: float = -1.0
    """Physics step [s]; 0: the model file's own; -1: the training simulator's
    (``g1.SIM_DT``) on flat ground, ``TERRAIN_SIM_DT`` on a terrain."""
    joint_noise: float = 0.02
    """Initial joint angle noise, uniform +- this [rad]."""
    root_vel_noise: float = 0.05
    """Initial horizontal root velocity noise, normal with this std [m/s]."""
    friction_range: Tuple[float, float] = (0.8, 1.2)
    """Sliding friction of every geom is scaled by a factor uniform in this range."""
    push_interval: float = 0.0
    """Seconds between pushes; 0: no pushes."""
    push_velocity: float = 0.5
    """Horizontal velocity change of a push [m/s], random direction."""
    fall_height: float = 0.3
    """A run falls when the root (pelvis) height drops below this [m]."""
    stop_on_fall: bool = False
    """End a run at its fall instead of simulating the rest."""
    seed: int = 0
    """Run i uses seed + i."""
    sensor_noise: float = 0.0
    """Sensor noise on what the policy and its state estimator read, in units of a G1's
    (:class:`bcg_ros.robot.sensors.SensorNoise`: encoders, their speeds, gyro,
    accelerometer; 1: the robot's order); 0: exact sensors."""
    python_pd: bool = False
    """Compute the PD here each physics step and sample contacts every physics step
    (slower) instead of MuJoCo's PD actuators and contacts once per policy step."""

    def __post_init__(self):
        """Reject values that cannot describe a run, naming the field."""
        for name in ('duration', 'velocity_duration', 'hold', 'sim_dt', 'joint_noise',
                     'root_vel_noise', 'push_interval', 'push_velocity', 'sensor_noise'):
            if getattr(self, name) < 0 and not (name == 'sim_dt' and self.sim_dt == -1.0):
                raise ValueError(f'RolloutConfig.{name} must be >= 0, got {getattr(self, name)}')
        lo, hi = self.friction_range
        if not 0 < lo <= hi:
            raise ValueError(f'RolloutConfig.friction_range must be 0 < low <= high, '
                             f'got {self.friction_range}')


@dataclass(frozen=True)
class Run:
    """What one rollout recorded, one row per control step after the policy acted."""

    seed: int
    time: np.ndarray
    """[T] simulated time [s] of each row."""
    frame: np.ndarray
    """[T] reference frame each row is compared with (-1 without a motion)."""
    root_pos: np.ndarray
    """[T, 3] pelvis position, world frame."""
    root_quat: np.ndarray
    """[T, 4] pelvis orientation (w, x, y, z)."""
    root_lin_vel: np.ndarray
    """[T, 3] pelvis linear velocity, world frame."""
    root_ang_vel: np.ndarray
    """[T, 3] pelvis angular velocity, pelvis frame."""
    joint_pos: np.ndarray
    """[T, 29] joint angles, motor order."""
    key_pos: np.ndarray
    """[T, len(g1.KEY_SITES), 3] key points, world frame."""
    body_pos: np.ndarray
    """[T, len(g1.TRACK_BODIES), 3] body origins, world frame (what E_track compares)."""
    command: np.ndarray
    """[T, 3] velocity command (vx, vy, wz) the policy saw."""
    penetration: np.ndarray
    """[N] depth [m] of every penetrating foot-sphere contact, over all physics steps."""
    foot_contacts: np.ndarray
    """[T, 8] whether each foot sphere touches the ground (g1.FOOT_SPHERES order)."""
    lin_vel_error: np.ndarray
    """[T, 3] what the policy observed as its base velocity when it chose the row's action
    (at the row before's state) minus the truth, base frame [m/s]: the state estimator's
    error; zeros where the policy observes the truth, NaN where it observes none."""
    friction_scale: float
    pushes: int
    sim_dt: float
    diverged: str = ''
    """Why the run ended early as a divergence (a non-finite or exploding state, or a
    non-finite action); empty when it did not. The last row is the last finite state."""


@dataclass(frozen=True)
class Baseline:
    """
    An open-loop controller judged beside a policy, on its contract's gains.

    ``stand``: the PD holds the contract's default pose. ``replay``: the
    reference joint angles of the next frame are fed to the PD, open loop.
    """

    name: str
    contract: ct.Contract
    motor_ids: np.ndarray
    path: pathlib.Path

    NAMES = ('stand', 'replay')

    @classmethod
    def of(cls, policy: Policy, name: str) -> 'Baseline':
        """The baseline ``name`` with ``policy``'s contract and joints."""
        if name not in cls.NAMES:
            raise ValueError(f'baseline {name!r}: known {cls.NAMES}')
        return cls(name, policy.contract, policy.motor_ids, pathlib.Path(name))

    def targets(self, step: int, motion: Optional[Motion]) -> np.ndarray:
        """Joint targets (contract order) applied during control step ``step``."""
        if self.name == 'replay' and motion is not None:
            frame = min(step + 1, motion.num_frames - 1)
            return motion.joint_pos[frame][self.motor_ids]
        return np.asarray(self.contract.default_pose, float)


class Controller:
    """
    What acts each control step, a policy or a baseline, with its observation history.

    :meth:`targets` turns one measurement into the joint targets of the
    policy's joints (contract order), or None when the policy's output is not
    finite. MuJoCo's rollout and the training simulator's share it.
    """

    def __init__(self, policy: Union[Policy, Baseline], motion: Optional[Motion],
                 command: Sequence[float] = (0.0, 0.0, 0.0)):
        """Start with no history and a zero last action."""
        self.policy, self.motion = policy, motion
        self.command = np.asarray(command, float)
        self.history = None
        self.last_action = np.zeros(policy.contract.num_joints)

    @property
    def needs_velocity(self) -> bool:
        """Whether :meth:`targets` needs the base velocity (a policy observing it)."""
        return not isinstance(self.policy, Baseline) and self.policy.contract.uses_base_velocity

    def targets(self, step: int, quat: np.ndarray, gyro: np.ndarray, joint_pos: np.ndarray,
                joint_vel: np.ndarray,
                lin_vel: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
        """
        Joint targets for control step ``step`` (joint arrays of the policy's joints).

        ``lin_vel``: the base velocity in the base frame, for a policy that observes it.
        """
        p, c = self.policy, self.policy.contract
        if isinstance(p, Baseline):
            return p.targets(step, self.motion)
        obs = ct.RobotObs(quat=quat, gyro=gyro, joint_pos=joint_pos, joint_vel=joint_vel,
                          last_action=self.last_action, command=self.command, lin_vel=lin_vel)
        ref = (ct.reference_window(self.motion, p.motor_ids, step)
               if self.motion is not None and c.uses_reference else None)
        frame = ct.observation_frame(c, obs, ref)
        self.history = (ct.init_history(c, frame) if self.history is None
                        else ct.push_history(self.history, frame))
        action = p.act(ct.flatten(self.history))
        if not np.all(np.isfinite(action)):
            return None
        self.last_action = action.astype(float)
        return c.action_to_targets(self.last_action, ref=ref)


ROW_SHAPES = {'time': (), 'frame': (), 'root_pos': (3,), 'root_quat': (4,),
              'root_lin_vel': (3,), 'root_ang_vel': (3,), 'joint_pos': (g1.NUM_JOINTS,),
              'key_pos': (len(g1.KEY_SITES), 3), 'body_pos': (len(g1.TRACK_BODIES), 3),
              'command': (3,), 'foot_contacts': (len(g1.FOOT_SPHERES),),
              'lin_vel_error': (3,)}
"""Per-row shape of each recorded array of a :class:`Run`."""


def make_run(rows: dict, depths: List[np.ndarray], **fields) -> Run:
    """A :class:`Run` from per-step rows (lists keyed as ROW_SHAPES; empty lists allowed)."""
    arr = {k: np.asarray(v) if len(v) else np.zeros((0,) + ROW_SHAPES[k])
           for k, v in rows.items()}
    arr['frame'] = arr['frame'].astype(int)
    arr['foot_contacts'] = arr['foot_contacts'].astype(bool)
    return Run(penetration=np.concatenate(depths) if depths else np.zeros(0), **arr, **fields)


MAX_SPEED = 100.0
"""A run whose generalised velocity exceeds this [m/s or rad/s] has diverged."""


@dataclass(frozen=True)
class StepView:
    """What a watcher (the ROS node) sees after each control step of a run."""

    run: int
    step: int
    time: float
    qpos: np.ndarray
    joint_pos: np.ndarray
    """Motor order."""
    foot_contacts: np.ndarray
    foot_pos: np.ndarray
    """[8, 3] foot sphere centres, world frame."""
    model: Optional[mujoco.MjModel] = None
    """The live MuJoCo model and data (contacts and forces of the step's last physics
    step), valid only during the callback: read, never step or keep them."""
    data: Optional[mujoco.MjData] = None
    frame: int = -1
    """Reference frame this step is compared with (-1 without a motion)."""


def physics_step(config: RolloutConfig, g: G1Model, model_dt: float) -> float:
    """
    The physics step a run asks for (before :func:`physics_dt` makes it divide).

    On a terrain the default is ``TERRAIN_SIM_DT``: a G1 landing at 5 ms sinks its 5 mm
    foot spheres a centimetre or two into the ground, harmless on a plane, but deep
    enough on a tiled or heightfield surface to reach past a tile's edge.
    """
    if config.sim_dt < 0:
        return g1.SIM_DT if g.ground == 'flat' else TERRAIN_SIM_DT
    return config.sim_dt if config.sim_dt > 0 else model_dt


def physics_dt(control_dt: float, model_dt: float, sim_dt: float) -> Tuple[float, int]:
    """Physics step and substeps per policy step: ``sim_dt`` (0: ``model_dt``), made to divide."""
    dt = sim_dt if sim_dt > 0 else model_dt
    n = int(round(control_dt / dt))
    if n < 1 or abs(n * dt - control_dt) > 1e-9:
        n = int(np.ceil(control_dt / dt - 1e-9))
        dt = control_dt / n
    return dt, n


class _Robot:
    """Index maps of one compiled G1 model, computed once."""

    def __init__(self, g: G1Model):
        # A private copy: runs change its friction, timestep and actuators.
        m = self.model = copy.deepcopy(g.model)
        self.g = g
        # The joint PD runs inside MuJoCo (every physics step, in C, damping implicit) when
        # each joint has a plain joint motor; otherwise here, as torques, at pd.PD_DT.
        self.native_pd = pd.is_plain_motor(m, g.actuator_ids)
        if self.native_pd:
            pd.use_pd_actuators(m, g.actuator_ids, np.asarray(g1.TORQUE_LIMIT, float))
        self.key_bodies = np.array([mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, b)
                                    for _, b, _ in g1.KEY_POINTS])
        self.key_offsets = np.array([p for _, _, p in g1.KEY_POINTS])
        self.track_bodies = np.array([mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, b)
                                      for b in g1.TRACK_BODIES])
        self.foot_pos_bodies = np.array([mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, b)
                                         for b, _ in g1.FOOT_SPHERES])
        self.foot_pos_offsets = np.array([p for _, p in g1.FOOT_SPHERES])
        # Foot sphere geoms, by body and position (the official model leaves them unnamed).
        self.sphere_geom = np.full(len(g1.FOOT_SPHERES), -1)
        for gid in range(m.ngeom):
            if m.geom_type[gid] != mujoco.mjtGeom.mjGEOM_SPHERE:
                continue
            for k, (b, p) in enumerate(g1.FOOT_SPHERES):
                if m.geom_bodyid[gid] == self.foot_pos_bodies[k] and \
                        np.allclose(m.geom_pos[gid], p, atol=1e-6):
                    self.sphere_geom[k] = gid
        self.imu_acc = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, 'imu_acc')
        self.is_foot = np.zeros(m.ngeom, bool)
        self.is_foot[self.sphere_geom[self.sphere_geom >= 0]] = True
        self.sphere_of_geom = np.full(m.ngeom, -1)
        for k, gid in enumerate(self.sphere_geom):
            if gid >= 0:
                self.sphere_of_geom[gid] = k

    def key_pos(self, d: mujoco.MjData) -> np.ndarray:
        r = d.xmat[self.key_bodies].reshape(-1, 3, 3)
        return d.xpos[self.key_bodies] + np.einsum('kij,kj->ki', r, self.key_offsets)

    def foot_pos(self, d: mujoco.MjData) -> np.ndarray:
        r = d.xmat[self.foot_pos_bodies].reshape(-1, 3, 3)
        return d.xpos[self.foot_pos_bodies] + np.einsum('kij,kj->ki', r, self.foot_pos_offsets)

    def imu_sample(self, d: mujoco.MjData) -> est.Sample:
        """
        What the robot's LowState would carry now, for the state estimator (motor order).

        The specific force is the model's ``imu_acc`` accelerometer (computed in the
        last ``mj_step``), or the pelvis's own where the model has none.
        """
        m, g = self.model, self.g
        if self.imu_acc >= 0:
            adr = m.sensor_adr[self.imu_acc]
            acc = d.sensordata[adr:adr + 3].copy()
        else:
            res = np.zeros(6)
            mujoco.mj_rnePostConstraint(m, d)
            mujoco.mj_objectAcceleration(m, d, mujoco.mjtObj.mjOBJ_BODY, g.root_body, res, 1)
            acc = res[3:6]
        v = g.qvel_adr
        return est.Sample(quat=d.qpos[3:7].copy(), gyro=d.qvel[3:6].copy(), acc=acc,
                          q=d.qpos[g.qpos_adr].copy(), dq=d.qvel[v].copy(),
                          tau=d.qfrc_actuator[v] + d.qfrc_applied[v])

    def foot_contacts(self, d: mujoco.MjData) -> Tuple[np.ndarray, np.ndarray]:
        """Depths of penetrating foot-sphere contacts, and which spheres touch."""
        touching = np.zeros(len(g1.FOOT_SPHERES), bool)
        if d.ncon == 0:
            return np.zeros(0), touching
        geom, dist = d.contact.geom, d.contact.dist
        foot = self.is_foot[geom[:, 0]] | self.is_foot[geom[:, 1]]
        k = np.maximum(self.sphere_of_geom[geom[foot, 0]], self.sphere_of_geom[geom[foot, 1]])
        touching[k] = True
        dfoot = dist[foot]
        return -dfoot[dfoot < 0], touching


def _divergence(m: mujoco.MjModel, d: mujoco.MjData, bad_qacc: int) -> str:
    """Why the state is no longer a simulation ('' when it still is)."""
    if d.warning[mujoco.mjtWarning.mjWARN_BADQACC].number > bad_qacc:
        return f'MuJoCo reset a non-finite acceleration at t = {d.time:.3f} s'
    if not (np.all(np.isfinite(d.qpos)) and np.all(np.isfinite(d.qvel))):
        return f'non-finite state at t = {d.time:.3f} s'
    if np.max(np.abs(d.qvel)) > MAX_SPEED:
        return f'speed {np.max(np.abs(d.qvel)):.3g} above {MAX_SPEED:g} at t = {d.time:.3f} s'
    return ''


def motor_gains(policy: Union[Policy, Baseline]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """
    kp, kd and the initial targets of all 29 motors (motor order).

    The policy's joints take its contract's; the joints it does not drive keep the
    default gains and hold the default pose.
    """
    c, ids = policy.contract, policy.motor_ids
    kp, kd = np.asarray(g1.DEFAULT_KP, float), np.asarray(g1.DEFAULT_KD, float)
    kp[ids], kd[ids] = c.kp, c.kd
    q_target = np.asarray(g1.DEFAULT_POSE, float)
    q_target[ids] = c.default_pose
    return kp, kd, q_target


def num_steps(control_dt: float, config: RolloutConfig, motion: Optional[Motion]) -> int:
    """
    Control steps a run lasts unless it ends early.

    With ``motion`` (at the control rate): its frames less one and ``config.hold``, at most
    ``config.duration``; without: ``config.duration`` or ``velocity_duration``.
    """
    if motion is not None:
        n = motion.num_frames - 1 + int(round(config.hold / control_dt))
        return min(n, int(round(config.duration / control_dt))) if config.duration > 0 else n
    return int(round((config.duration or config.velocity_duration) / control_dt))


def start_state(g: G1Model, motion: Optional[Motion] = None) -> Tuple[np.ndarray, np.ndarray]:
    """(qpos, qvel) a run starts from: ``motion``'s frame 0, or standing at rest without one."""
    qpos, qvel = g.model.qpos0.copy(), np.zeros(g.model.nv)
    if motion is None:
        return g.standing_qpos(), qvel
    qpos[:3], qpos[3:7] = motion.root_pos[0], motion.root_quat[0]
    qpos[g.qpos_adr] = motion.joint_pos[0]
    qvel[:3] = motion.root_lin_vel[0]
    # The free joint's angular velocity is in the body frame; the motion's in world.
    qvel[3:6] = rotation.quat_rotate_inverse(motion.root_quat[0], motion.root_ang_vel[0])
    qvel[g.qvel_adr] = motion.joint_vel[0]
    return qpos, qvel


def run_once(policy: Union[Policy, Baseline], g: G1Model, seed: int,
             config: RolloutConfig = RolloutConfig(), motion: Optional[Motion] = None,
             command: Sequence[float] = (0.0, 0.0, 0.0),
             on_step: Optional[Callable[[StepView], None]] = None, run_index: int = 0,
             robot: Optional[_Robot] = None) -> Run:
    """One rollout of ``policy`` or a baseline on ``g``: from ``motion``'s frame 0, or standing."""
    c = policy.contract
    robot = robot or _Robot(g)
    m = robot.model
    rng = np.random.default_rng(seed)
    base_dt, base_friction = m.opt.timestep, m.geom_friction[:, 0].copy()
    native = robot.native_pd and not config.python_pd
    sim_dt = physics_step(config, g, base_dt)
    dt, n_sub = physics_dt(c.control_dt, base_dt, sim_dt if native else min(sim_dt, pd.PD_DT))
    if motion is not None:
        motion = motion_mod.resample(motion, 1.0 / c.control_dt)
    n_steps = num_steps(c.control_dt, config, motion)
    d = mujoco.MjData(m)
    qadr, vadr, ids = g.qpos_adr, g.qvel_adr, policy.motor_ids
    kp, kd, q_target = motor_gains(policy)
    limits = lowlevel.CommandLimits.for_g1()
    q_lower, q_upper = limits.q_lower, limits.q_upper
    tau_lim = np.asarray(g1.TORQUE_LIMIT, float)
    if robot.native_pd and not native:
        # The PD runs here: the actuators stay at zero force.
        pd.set_pd(m, d, g.actuator_ids, 0.0 * kp, 0.0 * kd, 0.0 * q_target)
    elif native:
        # What the motors hold until the first targets arrive (with a control latency).
        pd.set_pd(m, d, g.actuator_ids, kp, kd, q_target)
    # A perturbed robot's control latency (a delay line of physics steps) and motor
    # strength (in its actuators' gains, which the Python PD multiplies in itself).
    latency = g.physics.latency if g.physics is not None else 0.0
    delay = pd.CommandDelay(physics.latency_steps(latency, dt))
    strength = (pd.motor_strength(m, g.actuator_ids) if robot.native_pd
                else np.ones(g1.NUM_JOINTS))
    held = q_target.copy()
    cmd = np.asarray(command, float)

    friction = float(rng.uniform(*config.friction_range))
    try:
        m.opt.timestep = dt
        m.geom_friction[:, 0] = base_friction * friction
        d.qpos[:], d.qvel[:] = start_state(g, motion)
        d.qpos[qadr] += rng.uniform(-config.joint_noise, config.joint_noise, g1.NUM_JOINTS)
        d.qvel[:2] += rng.normal(0.0, config.root_vel_noise, 2)
        mujoco.mj_forward(m, d)

        push_every = (int(round(config.push_interval / c.control_dt))
                      if config.push_interval > 0 else 0)
        rows = {k: [] for k in ROW_SHAPES}
        depths, pushes, diverged = [], 0, ''
        actor = Controller(policy, motion, cmd)
        # What the robot's LowState would carry (with its sensor noise, when asked): the
        # policy reads the latest, and a policy that observes its velocity gets the state
        # estimator's, fed each physics step as the robot's LowState feeds it.
        noise = sensors.SensorNoise().scaled(config.sensor_noise)
        noise_rng = np.random.default_rng([seed, 1])   # apart: the other draws stay put
        latest: List[est.Sample] = []

        def measure() -> est.Sample:
            s = robot.imu_sample(d)
            if not noise.silent:
                q, dq, gyro, acc = noise.apply(noise_rng, s.q, s.dq, s.gyro, s.acc)
                s = dataclasses.replace(s, q=q, dq=dq, gyro=gyro, acc=acc)
            latest[:] = [s]
            return s

        velocity = est.BaseVelocity() if actor.needs_velocity else None
        if velocity is not None:
            velocity.update(measure(), d.time)
        for step in range(n_steps):
            if noise.silent:
                gyro, q_now, dq_now = d.qvel[3:6].copy(), d.qpos[qadr], d.qvel[vadr]
            else:
                now = latest[0] if velocity is not None else measure()
                gyro, q_now, dq_now = now.gyro, now.q, now.dq
            lin_vel = None if velocity is None else velocity.body_velocity()
            vel_error = (np.full(3, np.nan) if lin_vel is None else
                         lin_vel - rotation.quat_rotate_inverse(d.qpos[3:7], d.qvel[:3]))
            q_pol = actor.targets(step, d.qpos[3:7].copy(), gyro, q_now[ids], dq_now[ids],
                                  lin_vel)
            if q_pol is None:
                diverged = f'non-finite policy output at t = {d.time:.3f} s'
                break
            # The executor's last barrier (policy_node's CommandLimits): targets past a joint's
            # range are sent at its end, as the robot gets them.
            q_target[ids] = np.clip(q_pol, q_lower[ids], q_upper[ids])
            if push_every and step > 0 and step % push_every == 0:
                ang = rng.uniform(0.0, 2.0 * np.pi)
                d.qvel[:2] += config.push_velocity * np.array([np.cos(ang), np.sin(ang)])
                pushes += 1
            bad_qacc = d.warning[mujoco.mjtWarning.mjWARN_BADQACC].number
            first = step * n_sub   # physics steps so far
            delay.push(first, q_target.copy())
            if native:
                done = 0
                while done < n_sub:   # one stretch without latency, two or more with it
                    out, targets = delay.pop(first + done)
                    if out:
                        pd.set_pd(m, d, g.actuator_ids, kp, kd, targets)
                    due = delay.next_due()
                    n = n_sub - done if due is None else min(n_sub - done, due - first - done)
                    if velocity is None:
                        mujoco.mj_step(m, d, n)
                    else:
                        for _ in range(n):
                            mujoco.mj_step(m, d)
                            velocity.update(measure(), d.time)
                    done += n
                # Contacts of the last physics step: the depth is sampled once per policy
                # step, an unbiased sample of its time average.
                depth, touching = robot.foot_contacts(d)
                if depth.size:
                    depths.append(depth)
            else:
                touching = np.zeros(len(g1.FOOT_SPHERES), bool)
                for i in range(n_sub):
                    out, targets = delay.pop(first + i)
                    if out:
                        held = targets
                    d.qfrc_applied[vadr] = strength * np.clip(
                        kp * (held - d.qpos[qadr]) - kd * d.qvel[vadr], -tau_lim, tau_lim)
                    mujoco.mj_step(m, d)
                    if velocity is not None:
                        velocity.update(measure(), d.time)
                    depth, touch = robot.foot_contacts(d)
                    if depth.size:
                        depths.append(depth)
                    touching |= touch
            diverged = _divergence(m, d, bad_qacc)
            if diverged:
                break
            # mj_step leaves xpos at the start of its step: bring kinematics to the final state.
            mujoco.mj_kinematics(m, d)
            key = robot.key_pos(d)
            rows['time'].append((step + 1) * c.control_dt)
            rows['frame'].append(min(step + 1, motion.num_frames - 1)
                                 if motion is not None else -1)
            rows['root_pos'].append(d.qpos[:3].copy())
            rows['root_quat'].append(d.qpos[3:7].copy())
            rows['root_lin_vel'].append(d.qvel[:3].copy())
            rows['root_ang_vel'].append(d.qvel[3:6].copy())
            rows['joint_pos'].append(d.qpos[qadr].copy())
            rows['key_pos'].append(key)
            rows['body_pos'].append(d.xpos[robot.track_bodies].copy())
            rows['command'].append(cmd)
            rows['foot_contacts'].append(touching)
            rows['lin_vel_error'].append(vel_error)
            if on_step is not None:
                on_step(StepView(run_index, step, (step + 1) * c.control_dt, d.qpos.copy(),
                                 d.qpos[qadr].copy(), touching, robot.foot_pos(d), m, d,
                                 rows['frame'][-1]))
            if config.stop_on_fall and d.qpos[2] < config.fall_height:
                break
    finally:
        m.opt.timestep = base_dt
        m.geom_friction[:, 0] = base_friction
    return make_run(rows, depths, seed=seed, friction_scale=friction, pushes=pushes, sim_dt=dt,
                    diverged=diverged)


def run_all(policy: Union[Policy, Baseline], g: G1Model, runs: int = 5,
            config: RolloutConfig = RolloutConfig(), motion: Optional[Motion] = None,
            command: Sequence[float] = (0.0, 0.0, 0.0),
            on_step: Optional[Callable[[StepView], None]] = None,
            progress: bool = False) -> List[Run]:
    """Run ``runs`` rollouts, seeds config.seed, config.seed + 1, ... (progress bar on request)."""
    if policy.contract.uses_reference and motion is None:
        raise ct.ContractError(f'{policy.path}: the policy observes a reference motion '
                               f'({policy.contract.motion_name or "unnamed"}); give one')
    robot = _Robot(g)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=runs, desc=f'sim2sim {policy.path.name}', unit='run')
    out = []
    for i in range(runs):
        out.append(run_once(policy, g, config.seed + i, config, motion, command, on_step, i,
                            robot))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return out


def with_overrides(config: RolloutConfig, **kw) -> RolloutConfig:
    """Return a copy of ``config`` with the given fields replaced (unknown names raise)."""
    return dataclasses.replace(config, **kw)
