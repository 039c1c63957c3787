"""
g1_sim_node: a MuJoCo G1 on the robot's own topics, /lowcmd in and /lowstate out.

It behaves like the G1's motor layer (:class:`bcg_ros.robot.g1_sim.G1Sim`, the
physics without ROS, which the log generator runs too): a LowCmd with a wrong
crc is ignored; the latest valid command's PD law ``tau + kp (q - q_now) + kd
(dq - dq_now)`` is applied every physics step (1 kHz by default) for each motor
whose mode is enabled, clipped to the motor's torque limit, inside MuJoCo's
actuators with the implicitfast integrator (:mod:`bcg_ros.robot.pd`), as the
evaluator does. The model collides with the whole body
(:func:`bcg_ros.robot.model.load` with ``whole_body``), and gets a floor when its
file has none. ``physics_params`` makes the simulated robot differ from its
model file as a real robot does (:mod:`bcg_ros.robot.physics`: joint friction,
damping and armature, motor strength, masses, centres of mass, ground contact,
control latency). LowState goes out at 500 Hz with tick in milliseconds of
simulated time, mode_machine 5, the IMU from the model's
imu_quat/imu_gyro/imu_acc sensors (optional Gaussian noise) and
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

import numpy as np
import rclpy
from geometry_msgs.msg import WrenchStamped
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.time import Time
from rosgraph_msgs.msg import Clock
from std_msgs.msg import UInt8MultiArray, UInt32
from std_srvs.srv import SetBool, Trigger

from bcg_ros import rotation
from bcg_ros.nodes import params, spin
from bcg_ros.robot import crc, g1, lowlevel, model as model_mod, physics
from bcg_ros.robot.g1_sim import G1Sim, G1SimConfig


class G1SimNode(Node):
    """ROS shell around :class:`G1Sim`: topics, services and the pacing thread."""

    def __init__(self, name: str = 'g1_sim_node', **kwargs):
        """Read the parameters, load the model, start the physics thread."""
        super().__init__(name, **kwargs)
        params.declare(self, G1SimConfig)
        self.cfg = params.read(self, G1SimConfig)
        from unitree_hg.msg import LowCmd, LowState
        self.sim = G1Sim(self.cfg)
        perturbed = f', physics {self.cfg.physics_params}' if self.cfg.physics_params else ''
        self.get_logger().info(f'model {self.sim.robot.path}{perturbed}, dt {self.cfg.sim_dt} '
                               f's, real_time_factor {self.cfg.real_time_factor}')
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
                gt = (sim.odometry(), sim.foot_forces()) if n % gt_every == 0 else None
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
        imu.rpy = list(rotation.quat_to_rpy(quat))
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

    def _publish_ground_truth(self, stamp, odometry, forces):
        pos, quat, lin, ang = odometry
        odom = Odometry()
        odom.header.stamp, odom.header.frame_id, odom.child_frame_id = stamp, 'world', 'pelvis'
        p, o = odom.pose.pose.position, odom.pose.pose.orientation
        p.x, p.y, p.z = pos.tolist()
        o.w, o.x, o.y, o.z = quat.tolist()
        t = odom.twist.twist
        t.linear.x, t.linear.y, t.linear.z = lin.tolist()
        t.angular.x, t.angular.y, t.angular.z = ang.tolist()
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
    return spin.run('g1_sim_node', lambda stop: G1SimNode(),
                    (params.ParameterError, model_mod.ModelError, physics.PhysicsError), args)


if __name__ == '__main__':
    sys.exit(main())
