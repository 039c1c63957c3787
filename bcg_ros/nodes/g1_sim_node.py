"""
g1_sim_node: a MuJoCo G1 on the robot's own topics, /lowcmd in and /lowstate out.

It behaves like the G1's motor layer: a LowCmd with a wrong crc is ignored;
the latest valid command's PD law ``tau + kp (q - q_now) + kd (dq - dq_now)``
is applied every physics step (1 kHz by default) for each motor whose mode is
enabled, clipped to the motor's torque limit, inside MuJoCo's actuators with
the implicitfast integrator (:mod:`bcg_ros.robot.pd`), as the evaluator does.
The model collides with the whole body (:func:`bcg_ros.robot.model.load` with
``whole_body``), and gets a floor when its file has none. LowState goes out at
500 Hz with tick in milliseconds of simulated time, mode_machine 5, the IMU from the
model's imu_quat/imu_gyro/imu_acc sensors (optional Gaussian noise) and
wireless_remote from ``~/wireless_remote`` (std_msgs/UInt8MultiArray, 40
bytes), and crc stamped as the robot stamps it (:func:`bcg_ros.robot.crc.lowstate_crc`).

Ground truth (names relative to the node): ``~/odom`` (nav_msgs/Odometry,
pelvis pose in ``world``, twist in ``pelvis``), ``~/left_foot_wrench`` and
``~/right_foot_wrench`` (geometry_msgs/WrenchStamped, world frame, summed
contact force on each foot), ``~/lowcmd_crc_errors`` (std_msgs/UInt32).

Services: ``~/elastic_band`` (std_srvs/SetBool: a spring holding the pelvis
upright at the standing height, as a gantry would), ``~/pause_state``
(SetBool: stop publishing LowState, as a broken link would), ``~/reset``
(Trigger: back to the standing keyframe).

Pacing: real time by default; ``real_time_factor`` > 1 runs faster, 0 as fast
as possible; ``publish_clock`` publishes /clock for nodes on sim time.
"""

import sys
import threading
import time
from dataclasses import dataclass

import mujoco
import numpy as np
import rclpy
from geometry_msgs.msg import WrenchStamped
from nav_msgs.msg import Odometry
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.logging import get_logger
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions
from rclpy.time import Time
from rosgraph_msgs.msg import Clock
from std_msgs.msg import UInt8MultiArray, UInt32
from std_srvs.srv import SetBool, Trigger

from bcg_ros.nodes import params, spin
from bcg_ros.robot import crc, g1, lowlevel, model as model_mod, pd


@dataclass(frozen=True)
class G1SimConfig:
    """The simulated G1: model, rates, sensor noise, elastic band, pacing."""

    model_path: str = ''
    """G1 MJCF (with a floor); empty: the project's model. The official scene_29dof.xml works."""
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


_NOT_APPLIED = object()
"""Marks that no command (not even "none") is in the actuators yet."""


class G1Sim:
    """The physics and the motor layer, without ROS (the node wraps it)."""

    def __init__(self, cfg: G1SimConfig):
        """Load the model, put the robot in its standing pose."""
        self.cfg = cfg
        self.robot = model_mod.load(cfg.model_path or None, whole_body=True)
        self.model = self.robot.model
        self.model.opt.timestep = cfg.sim_dt
        # The motor PD inside MuJoCo's actuators, damping integrated implicitly.
        pd.use_pd_actuators(self.model, self.robot.actuator_ids, np.asarray(g1.TORQUE_LIMIT))
        self.data = mujoco.MjData(self.model)
        self.rng = np.random.default_rng(cfg.seed)
        self.steps_per_state = int(round(1.0 / (cfg.state_rate_hz * cfg.sim_dt)))
        self.sensor = {name: self._sensor(name) for name in ('imu_quat', 'imu_gyro', 'imu_acc')}
        self.foot_geoms = [set(np.flatnonzero(self.model.geom_bodyid == b).tolist())
                           for b in self.robot.foot_bodies]
        self.band = cfg.elastic_band
        self.command = None
        self.tau = np.zeros(g1.NUM_JOINTS)
        self.reset()
        self.band_height = cfg.band_height or float(self.data.qpos[2])

    def _sensor(self, name):
        sid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SENSOR, name)
        if sid < 0:
            raise model_mod.ModelError(f'{self.robot.path}: sensor {name!r} is missing')
        adr, dim = self.model.sensor_adr[sid], self.model.sensor_dim[sid]
        return slice(adr, adr + dim)

    def reset(self):
        """Standing pose, at rest, no command."""
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:] = self.robot.standing_qpos()
        mujoco.mj_forward(self.model, self.data)
        self.command = None
        self._applied = _NOT_APPLIED   # resetData zeroed ctrl: apply "no command" again

    def step(self):
        """One physics step under the latest command (zero torque before the first)."""
        d, r = self.data, self.robot
        c = self.command
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
        d.xfrc_applied[r.root_body] = self._band_wrench() if self.band else 0.0
        mujoco.mj_step(self.model, d)
        self.tau = d.actuator_force[r.actuator_ids].copy()

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

    def measurements(self):
        """(q, dq, quat, gyro, acc) as the robot's sensors would report them."""
        d, r = self.data, self.robot
        q = d.qpos[r.qpos_adr].copy()
        dq = d.qvel[r.qvel_adr].copy()
        quat = d.sensordata[self.sensor['imu_quat']].copy()
        gyro = d.sensordata[self.sensor['imu_gyro']].copy()
        acc = d.sensordata[self.sensor['imu_acc']].copy()
        c = self.cfg
        if c.joint_pos_noise:
            q += self.rng.normal(0.0, c.joint_pos_noise, q.shape)
        if c.joint_vel_noise:
            dq += self.rng.normal(0.0, c.joint_vel_noise, dq.shape)
        if c.gyro_noise:
            gyro += self.rng.normal(0.0, c.gyro_noise, 3)
        if c.acc_noise:
            acc += self.rng.normal(0.0, c.acc_noise, 3)
        return q, dq, quat, gyro, acc

    def foot_forces(self):
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


def _rpy(quat):
    w, x, y, z = quat
    return [float(np.arctan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))),
            float(np.arcsin(np.clip(2 * (w * y - z * x), -1.0, 1.0))),
            float(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))]


class G1SimNode(Node):
    """ROS shell around :class:`G1Sim`: topics, services and the pacing thread."""

    def __init__(self, name: str = 'g1_sim_node', **kwargs):
        """Read the parameters, load the model, start the physics thread."""
        super().__init__(name, **kwargs)
        params.declare(self, G1SimConfig)
        self.cfg = params.read(self, G1SimConfig)
        from unitree_hg.msg import LowCmd, LowState
        self.sim = G1Sim(self.cfg)
        self.get_logger().info(f'model {self.sim.robot.path}, dt {self.cfg.sim_dt} s, '
                               f'real_time_factor {self.cfg.real_time_factor}')
        self._lock = threading.Lock()
        self._remote = bytes(lowlevel.REMOTE_SIZE)
        self._paused = False
        self.crc_errors = 0
        self._state_msg = LowState()
        self._state_msg.mode_machine = self.cfg.mode_machine
        # The C struct image of the same LowState, for its crc: filled from the arrays
        # the message gets, which costs far less than reading the message back.
        self._state_image = crc.lowstate_image()
        self._state_image['mode_machine'] = self.cfg.mode_machine
        self._state_image['motor_state']['mode'][:g1.NUM_JOINTS] = lowlevel.MOTOR_ENABLE
        self._state_pub = self.create_publisher(LowState, self.cfg.lowstate_topic, 10)
        self.create_subscription(LowCmd, self.cfg.lowcmd_topic, self._on_lowcmd,
                                 QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1,
                                            reliability=ReliabilityPolicy.BEST_EFFORT),
                                 raw=True)
        self.create_subscription(UInt8MultiArray, '~/wireless_remote', self._on_remote, 10)
        self._odom_pub = self.create_publisher(Odometry, '~/odom', 10)
        self._foot_pubs = [self.create_publisher(WrenchStamped, f'~/{side}_foot_wrench', 10)
                           for side in ('left', 'right')]
        self._crc_pub = self.create_publisher(UInt32, '~/lowcmd_crc_errors', 10)
        self._clock_pub = self.create_publisher(Clock, '/clock', 10) \
            if self.cfg.publish_clock else None
        self.create_service(SetBool, '~/elastic_band', self._set_band)
        self.create_service(SetBool, '~/pause_state', self._set_pause)
        self.create_service(Trigger, '~/reset', self._reset)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name='physics', daemon=True)
        self._thread.start()

    def _on_lowcmd(self, raw):
        try:
            cmd, ok = lowlevel.read_lowcmd_cdr(raw)
        except lowlevel.CommandError:
            ok = False
        if not ok:
            self.crc_errors += 1  # the robot drops it silently, and so do we
            return
        with self._lock:
            self.sim.command = cmd

    def _on_remote(self, msg):
        data = bytes(bytearray(msg.data))
        if len(data) != lowlevel.REMOTE_SIZE:
            self.get_logger().warning(f'~/wireless_remote: {len(data)} bytes, expected '
                                      f'{lowlevel.REMOTE_SIZE}; ignored')
            return
        self._remote = data

    def _set_band(self, request, response):
        with self._lock:
            self.sim.band = bool(request.data)
        state = 'on' if request.data else 'off'
        response.success, response.message = True, f'elastic band {state}'
        return response

    def _set_pause(self, request, response):
        self._paused = bool(request.data)
        response.success = True
        response.message = 'LowState paused' if request.data else 'LowState resumed'
        return response

    def _reset(self, request, response):
        with self._lock:
            self.sim.reset()
        response.success, response.message = True, 'reset to the standing pose'
        return response

    def _run(self):
        sim, cfg = self.sim, self.cfg
        gt_every = max(1, int(round(cfg.state_rate_hz / cfg.ground_truth_rate_hz)))
        wall0, sim0, n = time.monotonic(), sim.data.time, 0
        while not self._stop.is_set() and rclpy.ok():
            with self._lock:
                for _ in range(sim.steps_per_state):
                    sim.step()
                meas = sim.measurements()
                tick, t_sim = sim.tick, sim.data.time
                gt = (sim.data.qpos[:7].copy(), sim.data.qvel[:6].copy(), sim.foot_forces()) \
                    if n % gt_every == 0 else None
            if not self._paused:
                self._publish_state(tick, meas)
            stamp = self._stamp(t_sim)
            if gt is not None:
                self._publish_ground_truth(stamp, *gt)
            if self._clock_pub is not None:
                self._clock_pub.publish(Clock(clock=stamp))
            n += 1
            if cfg.real_time_factor > 0:
                target = wall0 + (t_sim - sim0) / cfg.real_time_factor
                delay = target - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                elif delay < -0.1:
                    wall0, sim0 = time.monotonic(), t_sim  # fell behind: do not sprint

    def _stamp(self, t_sim):
        if self._clock_pub is not None:
            sec = int(t_sim)
            return Time(seconds=sec, nanoseconds=int((t_sim - sec) * 1e9)).to_msg()
        return self.get_clock().now().to_msg()

    def _publish_state(self, tick, meas):
        q, dq, quat, gyro, acc = meas
        m = self._state_msg
        m.tick = tick
        tau = self.sim.tau.tolist()
        for i, (qi, dqi) in enumerate(zip(q.tolist(), dq.tolist())):
            ms = m.motor_state[i]
            ms.mode, ms.q, ms.dq, ms.tau_est = lowlevel.MOTOR_ENABLE, qi, dqi, tau[i]
        imu = m.imu_state
        imu.quaternion = quat.tolist()
        imu.gyroscope = gyro.tolist()
        imu.accelerometer = acc.tolist()
        imu.rpy = _rpy(quat)
        m.wireless_remote = list(self._remote)
        image = self._state_image
        image['tick'] = tick
        image_imu = image['imu_state']
        for name in ('quaternion', 'gyroscope', 'accelerometer', 'rpy'):
            image_imu[name] = getattr(imu, name)
        motors = image['motor_state']
        motors['q'][:len(q)], motors['dq'][:len(dq)] = q, dq
        motors['tau_est'][:len(tau)] = tau
        image['wireless_remote'] = np.frombuffer(self._remote, np.uint8)
        m.crc = crc.lowstate_crc(image)
        self._state_pub.publish(m)

    def _publish_ground_truth(self, stamp, qpos, qvel, forces):
        odom = Odometry()
        odom.header.stamp, odom.header.frame_id, odom.child_frame_id = stamp, 'world', 'pelvis'
        p, o = odom.pose.pose.position, odom.pose.pose.orientation
        p.x, p.y, p.z = qpos[:3].tolist()
        o.w, o.x, o.y, o.z = qpos[3:7].tolist()
        # The free joint's linear velocity is in the world frame; Odometry wants the
        # child frame, like its angular velocity (already in the body frame).
        rot = np.empty(9)
        mujoco.mju_quat2Mat(rot, qpos[3:7])
        lin = rot.reshape(3, 3).T @ qvel[:3]
        t = odom.twist.twist
        t.linear.x, t.linear.y, t.linear.z = lin.tolist()
        t.angular.x, t.angular.y, t.angular.z = qvel[3:6].tolist()
        self._odom_pub.publish(odom)
        for pub, f in zip(self._foot_pubs, forces):
            w = WrenchStamped()
            w.header.stamp, w.header.frame_id = stamp, 'world'
            w.wrench.force.x, w.wrench.force.y, w.wrench.force.z = f.tolist()
            pub.publish(w)
        self._crc_pub.publish(UInt32(data=self.crc_errors))

    def destroy_node(self):
        """Stop the physics thread first."""
        self._stop.set()
        self._thread.join(timeout=1.0)
        return super().destroy_node()


def main(args=None) -> int:
    """Run g1_sim_node until shut down."""
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    stop = spin.stop_on_signals()
    try:
        node = G1SimNode()
    except (params.ParameterError, model_mod.ModelError) as exc:
        get_logger('g1_sim_node').error(str(exc))
        rclpy.shutdown()
        return 1
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        spin.until(executor, stop)
    finally:
        node.destroy_node()
        spin.shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
