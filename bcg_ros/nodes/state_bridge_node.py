"""
state_bridge_node: /lowstate in; joint states, IMU, odometry, TF and foot contacts out.

Each LowState (500 Hz) goes through :class:`bcg_ros.runtime.estimator.StateEstimator`
(IMU + leg kinematics + contact Kalman filter, contact forces from the motor
torques); the outputs are decimated to their own rates:

- ``/joint_states`` (sensor_msgs/JointState): the 29 joints in motor order,
  positions, velocities, efforts (tau_est).
- ``/imu`` (sensor_msgs/Imu, sensor-data QoS): orientation, angular velocity,
  linear acceleration (specific force) in ``imu_frame``, with covariances.
- ``/odom`` (nav_msgs/Odometry): pelvis pose in ``odom_frame``; twist in
  ``base_frame`` (REP 105), covariances from the filter.
- ``/tf`` (tf2_msgs/TFMessage): ``odom_frame`` -> ``base_frame``.
- ``/left_foot/wrench``, ``/right_foot/wrench`` (geometry_msgs/WrenchStamped):
  the estimated ground wrench on each foot, in its ankle-roll link frame.
- ``/contact_markers`` (visualization_msgs/MarkerArray): the eight foot
  spheres, green in contact and grey in swing, and one force arrow per foot.
- ``/diagnostics`` (diagnostic_msgs/DiagnosticArray, 1 Hz): its health, STALE
  before the first LowState and WARN when none came for ``stale_timeout``.

Parameters (config/state_bridge_node.yaml) are the fields of
:class:`StateBridgeConfig` and :class:`bcg_ros.runtime.estimator.EstimatorConfig`.
"""

import sys
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
from geometry_msgs.msg import TransformStamped, WrenchStamped
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Imu, JointState
from visualization_msgs.msg import Marker, MarkerArray

from bcg_ros.runtime import estimator as est
from bcg_ros.nodes import diagnostics, params, spin
from bcg_ros.nodes.tf_pub import TfPublisher
from bcg_ros.robot import g1
from bcg_ros.rotation import quat_to_matrix

FOOT_SIDES = ('left', 'right')


@dataclass(frozen=True)
class StateBridgeConfig:
    """Topics, frames and output rates of state_bridge_node."""

    lowstate_topic: str = '/lowstate'
    """unitree_hg/LowState input."""
    odom_frame: str = 'odom'
    """Fixed frame of /odom, /tf and the markers."""
    base_frame: str = g1.ROOT_BODY
    """Pelvis frame (child of odom_frame on /tf)."""
    imu_frame: str = 'imu_link'
    """Frame of /imu (the URDF's IMU link, at the pelvis origin)."""
    joint_states_rate_hz: float = 100.0
    """Rate of /joint_states [Hz]; at most the LowState rate."""
    imu_rate_hz: float = 100.0
    """Rate of /imu [Hz]."""
    odom_rate_hz: float = 100.0
    """Rate of /odom and /tf [Hz]."""
    wrench_rate_hz: float = 50.0
    """Rate of the foot wrenches [Hz]."""
    markers_rate_hz: float = 20.0
    """Rate of /contact_markers [Hz]."""
    lowstate_rate_hz: float = g1.LOWCMD_RATE_HZ
    """Nominal LowState rate [Hz]; its period is the step when LowState.tick is unusable."""
    force_arrow_scale: float = 0.002
    """Length of a force arrow per newton [m/N]."""
    orientation_std: float = 0.01
    """Std of the IMU orientation reported in /imu [rad]."""
    gyro_std: float = 0.01
    """Std of the gyro reported in /imu [rad/s]."""
    accel_std: float = 0.1
    """Std of the accelerometer reported in /imu [m/s^2]."""
    stale_timeout: float = 0.1
    """/diagnostics says WARN when no LowState came for this long [s]."""

    def __post_init__(self):
        """Reject non-positive rates, naming the field."""
        for name in ('joint_states_rate_hz', 'imu_rate_hz', 'odom_rate_hz', 'wrench_rate_hz',
                     'markers_rate_hz', 'lowstate_rate_hz', 'stale_timeout'):
            if not getattr(self, name) > 0:
                raise ValueError(f'field {name}: must be > 0, got {getattr(self, name)}')


def sample_from_lowstate(msg) -> est.Sample:
    """Build the estimator's inputs from a unitree_hg LowState (motor slots 0..28)."""
    motors = msg.motor_state[:g1.NUM_JOINTS]
    imu = msg.imu_state
    return est.Sample(quat=np.array(imu.quaternion, dtype=np.float64),
                      gyro=np.array(imu.gyroscope, dtype=np.float64),
                      acc=np.array(imu.accelerometer, dtype=np.float64),
                      q=np.array([m.q for m in motors]), dq=np.array([m.dq for m in motors]),
                      tau=np.array([m.tau_est for m in motors]))


def _quat_to_msg(quat, out):
    out.w, out.x, out.y, out.z = (float(v) for v in quat)


def _vec_to_msg(vec, out):
    out.x, out.y, out.z = (float(v) for v in vec)


def _cov6(pos_cov, rot_var):
    """Row-major 6x6 covariance, position block and a diagonal rotation block."""
    cov = np.zeros((6, 6))
    cov[0:3, 0:3] = pos_cov
    cov[3:6, 3:6] = np.eye(3) * rot_var
    return [float(v) for v in cov.ravel()]


def joint_state_msg(sample: est.Sample, stamp) -> JointState:
    """Build /joint_states in motor order."""
    msg = JointState()
    msg.header.stamp = stamp
    msg.name = list(g1.JOINT_NAMES)
    msg.position = [float(v) for v in sample.q]
    msg.velocity = [float(v) for v in sample.dq]
    msg.effort = [float(v) for v in sample.tau]
    return msg


def imu_msg(sample: est.Sample, cfg: StateBridgeConfig, stamp) -> Imu:
    """Build /imu with diagonal covariances from the configured standard deviations."""
    msg = Imu()
    msg.header.stamp = stamp
    msg.header.frame_id = cfg.imu_frame
    _quat_to_msg(sample.quat / np.linalg.norm(sample.quat), msg.orientation)
    _vec_to_msg(sample.gyro, msg.angular_velocity)
    _vec_to_msg(sample.acc, msg.linear_acceleration)
    for field, std in (('orientation_covariance', cfg.orientation_std),
                       ('angular_velocity_covariance', cfg.gyro_std),
                       ('linear_acceleration_covariance', cfg.accel_std)):
        setattr(msg, field, [float(v) for v in (np.eye(3) * std ** 2).ravel()])
    return msg


def odometry_msg(e: est.Estimate, cfg: StateBridgeConfig, stamp) -> Odometry:
    """Build /odom: pose in the odom frame, twist in the base frame (REP 105)."""
    msg = Odometry()
    msg.header.stamp = stamp
    msg.header.frame_id = cfg.odom_frame
    msg.child_frame_id = cfg.base_frame
    _vec_to_msg(e.position, msg.pose.pose.position)
    _quat_to_msg(e.quat, msg.pose.pose.orientation)
    rot = quat_to_matrix(e.quat)
    _vec_to_msg(rot.T @ e.velocity, msg.twist.twist.linear)
    _vec_to_msg(e.angular_velocity, msg.twist.twist.angular)
    msg.pose.covariance = _cov6(e.position_cov, cfg.orientation_std ** 2)
    msg.twist.covariance = _cov6(rot.T @ e.velocity_cov @ rot, cfg.gyro_std ** 2)
    return msg


def transform_msg(e: est.Estimate, cfg: StateBridgeConfig, stamp) -> TransformStamped:
    """Build the odom -> pelvis transform."""
    t = TransformStamped()
    t.header.stamp = stamp
    t.header.frame_id = cfg.odom_frame
    t.child_frame_id = cfg.base_frame
    _vec_to_msg(e.position, t.transform.translation)
    _quat_to_msg(e.quat, t.transform.rotation)
    return t


def wrench_msgs(e: est.Estimate, stamp):
    """Build one WrenchStamped per foot, in its ankle-roll link frame."""
    out = []
    for k, link in enumerate(g1.FOOT_BODIES):
        msg = WrenchStamped()
        msg.header.stamp = stamp
        msg.header.frame_id = link
        rot_t = e.foot_rotation[k].T
        _vec_to_msg(rot_t @ e.foot_wrench[k, :3], msg.wrench.force)
        _vec_to_msg(rot_t @ e.foot_wrench[k, 3:], msg.wrench.torque)
        out.append(msg)
    return out


def contact_markers(e: est.Estimate, cfg: StateBridgeConfig, stamp) -> MarkerArray:
    """Draw the eight foot spheres coloured by contact, and a force arrow per foot."""
    out = MarkerArray()
    for i, (pos, touching) in enumerate(zip(e.sphere_position, e.sphere_contact)):
        m = Marker()
        m.header.stamp = stamp
        m.header.frame_id = cfg.odom_frame
        m.ns, m.id, m.type, m.action = 'foot_spheres', i, Marker.SPHERE, Marker.ADD
        _vec_to_msg(pos, m.pose.position)
        m.pose.orientation.w = 1.0
        # Drawn larger than the 5 mm collision spheres so they can be seen.
        m.scale.x = m.scale.y = m.scale.z = 0.03
        m.color.a = 1.0
        m.color.r, m.color.g, m.color.b = (0.1, 0.9, 0.1) if touching else (0.6, 0.6, 0.6)
        out.markers.append(m)
    for k in range(len(g1.FOOT_BODIES)):
        m = Marker()
        m.header.stamp = stamp
        m.header.frame_id = cfg.odom_frame
        m.ns, m.id, m.type, m.action = 'foot_forces', k, Marker.ARROW, Marker.ADD
        m.pose.orientation.w = 1.0
        start = e.foot_position[k]
        end = start + cfg.force_arrow_scale * e.foot_wrench[k, :3]
        for p in (start, end):
            pt = type(m.pose.position)()
            _vec_to_msg(p, pt)
            m.points.append(pt)
        m.scale.x, m.scale.y, m.scale.z = 0.01, 0.02, 0.03   # shaft, head diameter, head
        m.color.a = 1.0
        m.color.r, m.color.g, m.color.b = (0.9, 0.4, 0.1) if e.foot_contact[k] \
            else (0.5, 0.5, 0.5)
        out.markers.append(m)
    return out


class _Every:
    """True once per period of a rate, on the LowState clock."""

    def __init__(self, rate_hz: float):
        self.period = 1.0 / rate_hz
        self.next = None

    def due(self, t: float) -> bool:
        if self.next is None or t >= self.next - 1e-9:
            # Catch up without bursts after a gap; keep the phase otherwise.
            self.next = t + self.period if self.next is None or t - self.next > self.period \
                else self.next + self.period
            return True
        return False


class StateBridgeNode(Node):
    """Subscribe /lowstate, run the estimator, publish the decimated outputs."""

    def __init__(self, name: str = 'state_bridge_node', **kwargs):
        """Read the parameters into the configs, create the publishers and the subscription."""
        super().__init__(name, **kwargs)
        params.declare(self, StateBridgeConfig)
        params.declare(self, est.EstimatorConfig)
        self.cfg = params.read(self, StateBridgeConfig)
        self.estimator = est.StateEstimator(params.read(self, est.EstimatorConfig))
        from unitree_hg.msg import LowState
        self.state: Optional[est.EstimatorState] = None
        self.last_estimate: Optional[est.Estimate] = None
        self._tick: Optional[int] = None
        self._t = 0.0
        cfg = self.cfg
        self._joint_pub = self.create_publisher(JointState, '/joint_states', 10)
        self._imu_pub = self.create_publisher(Imu, '/imu', qos_profile_sensor_data)
        self._odom_pub = self.create_publisher(Odometry, '/odom', 10)
        self._wrench_pubs = [self.create_publisher(WrenchStamped, f'/{side}_foot/wrench', 10)
                             for side in FOOT_SIDES]
        self._marker_pub = self.create_publisher(MarkerArray, '/contact_markers', 10)
        self._tf = TfPublisher(self)
        self._every = {k: _Every(getattr(cfg, f'{k}_rate_hz'))
                       for k in ('joint_states', 'imu', 'odom', 'wrench', 'markers')}
        self.create_subscription(LowState, cfg.lowstate_topic, self._on_lowstate,
                                 qos_profile_sensor_data)
        self._diagnostics = diagnostics.Publisher(self)
        self._received = 0
        self._last_wall: Optional[float] = None
        self.create_timer(1.0, self._publish_health)
        self.get_logger().info(f'estimating from {cfg.lowstate_topic}; /tf '
                               f'{"on" if self._tf.available else "off"}')

    def _step_dt(self, tick: int) -> float:
        nominal = 1.0 / self.cfg.lowstate_rate_hz
        if self._tick is None:
            self._tick = tick
            return nominal
        delta = (tick - self._tick) & 0xFFFFFFFF   # uint32 milliseconds, wraps
        self._tick = tick
        # A tick that stands still or jumps (a simulator that does not set it, a
        # restart) says nothing about the step: fall back to the nominal period.
        return delta * 1e-3 if 0 < delta <= 100 else nominal

    def _on_lowstate(self, msg):
        sample = sample_from_lowstate(msg)
        if not np.all(np.isfinite(sample.quat)) or np.linalg.norm(sample.quat) < 0.5:
            self.get_logger().warning('LowState with an invalid IMU quaternion; skipped',
                                      throttle_duration_sec=5.0)
            return
        self._received += 1
        self._last_wall = time.monotonic()
        dt = self._step_dt(int(msg.tick))
        if self.state is None:
            self.state = self.estimator.initial_state(sample)
            dt = 0.0
        self.state, e = self.estimator.step(self.state, sample, dt)
        self.last_estimate = e
        self._t += dt
        self._publish(sample, e)

    def _publish(self, sample: est.Sample, e: est.Estimate):
        t, every, cfg = self._t, self._every, self.cfg
        stamp = self.get_clock().now().to_msg()
        if every['joint_states'].due(t):
            self._joint_pub.publish(joint_state_msg(sample, stamp))
        if every['imu'].due(t):
            self._imu_pub.publish(imu_msg(sample, cfg, stamp))
        if every['odom'].due(t):
            self._odom_pub.publish(odometry_msg(e, cfg, stamp))
            self._tf.send([transform_msg(e, cfg, stamp)])
        if every['wrench'].due(t):
            for pub, msg in zip(self._wrench_pubs, wrench_msgs(e, stamp)):
                pub.publish(msg)
        if every['markers'].due(t):
            self._marker_pub.publish(contact_markers(e, cfg, stamp))

    def _publish_health(self):
        """One /diagnostics status: whether LowState arrives and what the filter reports."""
        age = None if self._last_wall is None else time.monotonic() - self._last_wall
        if age is None:
            level, message = diagnostics.STALE, f'no LowState on {self.cfg.lowstate_topic} yet'
        elif age > self.cfg.stale_timeout:
            level, message = diagnostics.WARN, f'no LowState for {age:.2f} s'
        else:
            level, message = diagnostics.OK, 'estimating'
        values = {'lowstate_received': self._received,
                  'lowstate_age_s': float('nan') if age is None else age}
        e = self.last_estimate
        if e is not None:
            values.update(height=float(e.position[2]), foot_contact=str(
                [bool(c) for c in np.asarray(e.foot_contact).reshape(-1)]))
        self._diagnostics.publish(diagnostics.status(self.get_name(), level, message, 'g1',
                                                     values))


def main(args=None) -> int:
    """Run state_bridge_node until shut down."""
    return spin.run('state_bridge_node', lambda stop: StateBridgeNode(),
                    (params.ParameterError, est.EstimatorConfigError), args)


if __name__ == '__main__':
    sys.exit(main())
