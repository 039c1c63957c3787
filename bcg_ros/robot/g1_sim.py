"""
The G1's motor layer in MuJoCo, without ROS: what g1_sim_node and the log generator run.

:class:`G1Sim` behaves like the robot below its LowCmd/LowState interface: the
latest command's PD law ``tau + kp (q - q_now) + kd (dq - dq_now)`` is applied
every physics step (1 kHz by default) for each motor whose mode is enabled,
clipped to the motor's torque limit, inside MuJoCo's actuators with the
implicitfast integrator (:mod:`bcg_ros.robot.pd`), as the evaluator does. The
model collides with the whole body (:func:`bcg_ros.robot.model.load` with
``whole_body``), and gets a floor when its file has none.

The simulated robot may differ from its model file (``physics_params``,
:mod:`bcg_ros.robot.physics`): joint friction, damping and armature, motor
strength, link masses and centres of mass, the ground's friction and softness,
and a control latency, by which a command reaches the motors whole physics
steps after it arrived (:class:`~bcg_ros.robot.pd.CommandDelay`).

What it reports is what LowState carries (:meth:`G1Sim.measurements`, the
estimated torques :attr:`G1Sim.tau`, :attr:`G1Sim.tick`) and the ground truth
g1_sim_node publishes beside it (:meth:`G1Sim.odometry`,
:meth:`G1Sim.foot_forces`). Two forces act on the pelvis besides gravity and
contact: the elastic band, a spring holding it upright at a height as a gantry
would, and :attr:`G1Sim.push`, an external wrench that a caller sets.
"""

import copy
import dataclasses
from dataclasses import dataclass
from typing import Optional, Tuple

import mujoco
import numpy as np

from bcg_ros.robot import g1, lowlevel, model as model_mod, pd, physics, sensors


@dataclass(frozen=True)
class G1SimConfig:
    """The simulated G1: model, physical parameters, rates, sensor noise, band, pacing."""

    model_path: str = ''
    """G1 MJCF (with a floor); empty: the project's model. The official scene_29dof.xml works."""
    physics_params: str = ''
    """How the simulated robot differs from the model file (bcg_ros.robot.physics): a YAML
    file of PhysicsParams, or seed:N to draw one; empty: the file's robot."""
    sim_dt: float = 0.001
    """Physics step [s]; the PD law is applied every step."""
    state_rate_hz: float = g1.LOWCMD_RATE_HZ
    """LowState rate [Hz]; a whole number of physics steps per message."""
    real_time_factor: float = 1.0
    """Simulated seconds per wall second; 0: as fast as possible."""
    publish_clock: bool = False
    """Publish /clock (simulated time)."""
    mode_machine: int = g1.MODE_MACHINE_29DOF
    """LowState.mode_machine reported."""
    gyro_noise: float = 0.0
    """Std of Gaussian noise on the gyroscope [rad/s]."""
    acc_noise: float = 0.0
    """Std of Gaussian noise on the accelerometer [m/s^2]."""
    joint_pos_noise: float = 0.0
    """Std of Gaussian noise on joint positions [rad]."""
    joint_vel_noise: float = 0.0
    """Std of Gaussian noise on joint velocities [rad/s]."""
    seed: int = 0
    """Seed of the sensor noise."""
    elastic_band: bool = False
    """Start with the elastic band holding the pelvis."""
    band_height: float = 0.0
    """Pelvis height the band holds [m]; 0: the standing height."""
    band_kp: float = 10000.0
    """Band stiffness [N/m]."""
    band_kd: float = 1000.0
    """Band damping [N s/m]."""
    band_rot_kp: float = 300.0
    """Band torque keeping the pelvis upright [N m/rad]."""
    band_rot_kd: float = 30.0
    """Band rotational damping [N m s/rad]."""
    ground_truth_rate_hz: float = 100.0
    """Rate of the ground-truth topics [Hz]."""
    lowstate_topic: str = '/lowstate'
    """LowState topic."""
    lowcmd_topic: str = '/lowcmd'
    """LowCmd topic."""

    def __post_init__(self):
        """Reject rates that do not fit the physics step, naming the field."""
        for name in ('sim_dt', 'state_rate_hz', 'ground_truth_rate_hz'):
            if not getattr(self, name) > 0:
                raise ValueError(f'field {name}: must be > 0, got {getattr(self, name)}')
        if self.real_time_factor < 0:
            raise ValueError(f'field real_time_factor: must be >= 0, got {self.real_time_factor}')
        steps = 1.0 / (self.state_rate_hz * self.sim_dt)
        if abs(steps - round(steps)) > 1e-6 or round(steps) < 1:
            raise ValueError(f'field state_rate_hz: {self.state_rate_hz} Hz is not a whole '
                             f'number of physics steps of sim_dt {self.sim_dt} s')


def load_robot(cfg: G1SimConfig) -> model_mod.G1Model:
    """
    The robot ``cfg`` describes: its model file, whole-body collision, its physical parameters.

    Raises :class:`~bcg_ros.robot.model.ModelError` for the model file and
    :class:`~bcg_ros.robot.physics.PhysicsError` for the parameters, naming the file.
    """
    robot = model_mod.load(cfg.model_path or None, whole_body=True)
    params = physics.resolve(cfg.physics_params)
    if params.is_nominal:
        return robot
    return physics.perturb(robot, params, cfg.physics_params)


_NOT_APPLIED = object()
"""Marks that no command (not even "none") is in the actuators yet."""


class G1Sim:
    """The physics and the motor layer of one simulated G1 (g1_sim_node wraps it)."""

    def __init__(self, cfg: G1SimConfig, robot: Optional[model_mod.G1Model] = None):
        """Load the model (or take ``robot``, as :func:`load_robot` makes it), stand it up."""
        self.cfg = cfg
        robot = robot if robot is not None else load_robot(cfg)
        # A private copy: the timestep and the actuators change below.
        self.robot = dataclasses.replace(robot, model=copy.deepcopy(robot.model))
        self.model = self.robot.model
        self.model.opt.timestep = cfg.sim_dt
        self.physics = self.robot.physics or physics.PhysicsParams()
        """The physical parameters the model was perturbed with (nominal: none)."""
        # The motor PD inside MuJoCo's actuators, damping integrated implicitly.
        pd.use_pd_actuators(self.model, self.robot.actuator_ids, np.asarray(g1.TORQUE_LIMIT))
        self.strength = pd.motor_strength(self.model, self.robot.actuator_ids)
        self.data = mujoco.MjData(self.model)
        self.rng = np.random.default_rng(cfg.seed)
        self.noise = sensors.SensorNoise(joint_pos=cfg.joint_pos_noise,
                                         joint_vel=cfg.joint_vel_noise, gyro=cfg.gyro_noise,
                                         acc=cfg.acc_noise)
        self.steps_per_state = int(round(1.0 / (cfg.state_rate_hz * cfg.sim_dt)))
        self.delay = pd.CommandDelay(physics.latency_steps(self.physics.latency, cfg.sim_dt))
        """Commands on their way to the motors (the control latency)."""
        self.sensor = {name: self._sensor(name) for name in ('imu_quat', 'imu_gyro', 'imu_acc')}
        self.foot_geoms = [set(np.flatnonzero(self.model.geom_bodyid == b).tolist())
                           for b in self.robot.foot_bodies]
        self.band = cfg.elastic_band
        self.push = np.zeros(6)
        """External wrench on the pelvis (force [N], torque [N m]; world frame, at its centre
        of mass), applied every physics step until changed."""
        self.command: Optional[lowlevel.MotorCommand] = None
        """The latest valid LowCmd received (None: none yet); the motors get it after the
        latency."""
        self.tau = np.zeros(g1.NUM_JOINTS)
        """Estimated joint torques [N m] of the last physics step, as LowState's tau_est."""
        self.steps = 0
        """Physics steps since the reset."""
        self.reset()
        self.band_height = cfg.band_height or float(self.data.qpos[2])

    def _sensor(self, name):
        sid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SENSOR, name)
        if sid < 0:
            raise model_mod.ModelError(f'{self.robot.path}: sensor {name!r} is missing')
        adr, dim = self.model.sensor_adr[sid], self.model.sensor_dim[sid]
        return slice(adr, adr + dim)

    def reset(self):
        """Standing pose, at rest, no command, nothing on its way to the motors."""
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:] = self.robot.standing_qpos()
        mujoco.mj_forward(self.model, self.data)
        self.command = None
        self.delay.clear()
        self.steps = 0
        self._received = None   # the latest command put into the delay line
        self._active = None     # the latest command out of it
        self._applied = _NOT_APPLIED   # resetData zeroed ctrl: apply "no command" again

    def step(self):
        """One physics step under the command that has reached the motors (none: zero torque)."""
        d, r = self.data, self.robot
        if self.command is not self._received:
            self._received = self.command
            self.delay.push(self.steps, self.command)
        out, c = self.delay.pop(self.steps)
        if out:
            self._active = c
        c = self._active
        if c is not self._applied:
            # The PD's gains and set-point stay in the actuators until the next command.
            zero = np.zeros(g1.NUM_JOINTS)
            if c is None:
                pd.set_pd(self.model, d, r.actuator_ids, zero, zero, zero)
            else:
                j = slice(0, g1.NUM_JOINTS)
                on = (c.mode[j] & lowlevel.MOTOR_ENABLE) != 0
                pd.set_pd(self.model, d, r.actuator_ids, np.where(on, c.kp[j], 0.0),
                          np.where(on, c.kd[j], 0.0), np.where(on, c.q[j], 0.0),
                          np.where(on, c.dq[j], 0.0), np.where(on, c.tau[j], 0.0))
            self._applied = c
        wrench = self._band_wrench() + self.push if self.band else self.push
        d.xfrc_applied[r.root_body] = wrench
        mujoco.mj_step(self.model, d)
        self.steps += 1
        # The driver's estimate: the torque it commands, which a motor of another
        # strength does not deliver.
        self.tau = d.actuator_force[r.actuator_ids] / self.strength

    @property
    def applied(self) -> Optional[lowlevel.MotorCommand]:
        """The command the motors act on now (None: none yet)."""
        return self._active

    def _band_wrench(self):
        d = self.data
        pos, vel = d.qpos[:3], d.qvel[:3]
        force = self.cfg.band_kp * (np.array([pos[0], pos[1], self.band_height]) - pos)
        force -= self.cfg.band_kd * vel
        z_body = d.xmat[self.robot.root_body].reshape(3, 3)[:, 2]
        ang_vel_world = d.xmat[self.robot.root_body].reshape(3, 3) @ d.qvel[3:6]
        torque = self.cfg.band_rot_kp * np.cross(z_body, [0.0, 0.0, 1.0])
        torque -= self.cfg.band_rot_kd * ang_vel_world
        return np.concatenate([force, torque])

    @property
    def tick(self) -> int:
        """Simulated time in ms, as LowState.tick (uint32)."""
        return int(round(self.data.time * 1000.0)) % (1 << 32)

    def measurements(self) -> Tuple[np.ndarray, ...]:
        """(q, dq, quat, gyro, acc) as the robot's sensors would report them."""
        d, r = self.data, self.robot
        q = d.qpos[r.qpos_adr].copy()
        dq = d.qvel[r.qvel_adr].copy()
        quat = d.sensordata[self.sensor['imu_quat']].copy()
        gyro = d.sensordata[self.sensor['imu_gyro']].copy()
        acc = d.sensordata[self.sensor['imu_acc']].copy()
        q, dq, gyro, acc = self.noise.apply(self.rng, q, dq, gyro, acc)
        return q, dq, quat, gyro, acc

    def odometry(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """
        Pelvis ground truth as nav_msgs/Odometry has it.

        (position, quaternion w x y z) in the world, (linear, angular velocity) in
        the pelvis frame.
        """
        qpos, qvel = self.data.qpos, self.data.qvel
        # The free joint's linear velocity is in the world frame, its angular one in the
        # body frame; Odometry wants both in the child frame.
        rot = np.empty(9)
        mujoco.mju_quat2Mat(rot, qpos[3:7])
        return (qpos[:3].copy(), qpos[3:7].copy(), rot.reshape(3, 3).T @ qvel[:3],
                qvel[3:6].copy())

    def foot_forces(self) -> np.ndarray:
        """[2, 3] summed contact force on each foot, world frame [N]."""
        out = np.zeros((2, 3))
        f6 = np.zeros(6)
        for i in range(self.data.ncon):
            con = self.data.contact[i]
            for k, geoms in enumerate(self.foot_geoms):
                # The contact force acts from geom1 on geom2 along the frame's normal.
                sign = 1.0 if con.geom2 in geoms else -1.0 if con.geom1 in geoms else 0.0
                if sign:
                    mujoco.mj_contactForce(self.model, self.data, i, f6)
                    out[k] += sign * (con.frame.reshape(3, 3).T @ f6[:3])
        return out
