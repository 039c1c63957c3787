"""
evaluator_node: the MuJoCo sim2sim evaluation as a ROS 2 service, visible in rviz.

Parameters (config/evaluator_node.yaml) are the fields of
:class:`EvaluatorNodeConfig` and of :class:`bcg_ros.eval.rollout.RolloutConfig`.

Service ``~/evaluate`` (std_srvs/Trigger): evaluate the policy and motion (or
velocity command) the parameters name; set them first with ``ros2 param set``
to evaluate another. The response's ``message`` is the summary as JSON. With
``policy_topic`` set (train.launch.py sets ``/trainer_node/exported``), every
ONNX path published there (std_msgs/String, latched) is evaluated the same way,
so each policy the trainer exports gets its report.

While a run goes it publishes ``/joint_states``, ``/tf`` (tf2_msgs/TFMessage,
odom -> pelvis; see :mod:`bcg_ros.nodes.tf_pub`) and the foot contact
spheres on ``~/foot_contacts`` (visualization_msgs/MarkerArray, green where
touching). The full result goes to ``~/results`` (std_msgs/String, JSON,
latched) and to ``out_dir/<policy name>/`` (result.json, report.md, plots).
"""

import json
import pathlib
import sys
import threading
import time
from dataclasses import dataclass
from typing import Optional, Tuple

from geometry_msgs.msg import TransformStamped
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger
from visualization_msgs.msg import Marker, MarkerArray

from bcg_ros.eval import report
from bcg_ros.eval.evaluator import EvalConfig, evaluate
from bcg_ros.eval.rollout import RolloutConfig, StepView
from bcg_ros.nodes import params, spin
from bcg_ros.nodes.tf_pub import TfPublisher
from bcg_ros.robot import g1


@dataclass(frozen=True)
class EvaluatorNodeConfig:
    """What ``~/evaluate`` evaluates, where it writes, how it shows the run."""

    policy: str = ''
    """Policy ONNX file."""
    deploy_yaml: str = ''
    """IsaacLab/unitree_rl_lab deploy.yaml; empty: the ONNX metadata or one beside it."""
    model: str = ''
    """G1 MJCF; empty: the project's model."""
    physics_params: str = ''
    """How the simulated robot differs from the model file (bcg_ros.robot.physics): a YAML
    file of PhysicsParams or seed:N; empty: the file's robot."""
    motion: str = ''
    """Reference motion, built-in name or file; empty for velocity policies."""
    command: Tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Velocity command (vx, vy, wz) for velocity policies."""
    runs: int = 5
    """Rollouts per evaluation."""
    out_dir: str = 'eval'
    """Reports go to out_dir/<policy file stem>/."""
    viz_every: int = 1
    """Publish joint states, tf and contacts every this many policy steps; 0: never."""
    viz_real_time: bool = False
    """Pace the runs at real time so rviz shows them at speed (else as fast as possible)."""
    plots: bool = True
    """Write the PNG plots with the report."""
    policy_topic: str = ''
    """Evaluate each ONNX path published here (std_msgs/String); empty: only ~/evaluate."""

    def __post_init__(self):
        """Reject values that cannot work, naming the parameter."""
        if self.runs < 1:
            raise ValueError(f'parameter runs must be >= 1, got {self.runs}')
        if self.viz_every < 0:
            raise ValueError(f'parameter viz_every must be >= 0, got {self.viz_every}')
        if len(self.command) != 3:
            raise ValueError(f'parameter command must be [vx, vy, wz], got {self.command}')


def joint_state_msg(view: StepView, stamp) -> JointState:
    """Build /joint_states from one step of a run."""
    msg = JointState()
    msg.header.stamp = stamp
    msg.name = list(g1.JOINT_NAMES)
    msg.position = [float(q) for q in view.joint_pos]
    return msg


def pelvis_transform(view: StepView, stamp) -> TransformStamped:
    """Build the odom -> pelvis transform from one step of a run."""
    t = TransformStamped()
    t.header.stamp = stamp
    t.header.frame_id = 'odom'
    t.child_frame_id = g1.ROOT_BODY
    q = view.qpos
    t.transform.translation.x, t.transform.translation.y, t.transform.translation.z = (
        float(q[0]), float(q[1]), float(q[2]))
    r = t.transform.rotation
    r.w, r.x, r.y, r.z = (float(v) for v in q[3:7])
    return t


def contact_markers(view: StepView, stamp) -> MarkerArray:
    """Build one sphere marker per foot contact sphere, green where it touches the ground."""
    out = MarkerArray()
    for k, (pos, touching) in enumerate(zip(view.foot_pos, view.foot_contacts)):
        m = Marker()
        m.header.stamp = stamp
        m.header.frame_id = 'odom'
        m.ns, m.id, m.type, m.action = 'foot_contacts', k, Marker.SPHERE, Marker.ADD
        m.pose.position.x, m.pose.position.y, m.pose.position.z = (float(v) for v in pos)
        m.pose.orientation.w = 1.0
        m.scale.x = m.scale.y = m.scale.z = 0.03
        m.color.a = 1.0
        m.color.r, m.color.g, m.color.b = (0.1, 0.9, 0.1) if touching else (0.6, 0.6, 0.6)
        out.markers.append(m)
    return out


class Interrupted(Exception):
    """Ctrl-C (or SIGTERM) during an evaluation: it stops at the next simulation step."""


class EvaluatorNode(Node):
    """Serve sim2sim evaluations and show them while they run."""

    def __init__(self, stop: Optional[threading.Event] = None):
        """
        Read parameters into configs, create publishers and the service.

        ``stop``, once set, ends an evaluation in progress at its next simulation step.
        """
        super().__init__('evaluator_node')
        self._stop = stop
        params.declare(self, EvaluatorNodeConfig)
        params.declare(self, RolloutConfig)
        self.cfg = params.read(self, EvaluatorNodeConfig)
        params.read(self, RolloutConfig)  # fail at startup on a bad value
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.joint_pub = self.create_publisher(JointState, '/joint_states', 10)
        self.tf = TfPublisher(self)
        self.marker_pub = self.create_publisher(MarkerArray, '~/foot_contacts', 10)
        self.result_pub = self.create_publisher(String, '~/results', latched)
        self.create_service(Trigger, '~/evaluate', self._evaluate)
        if self.cfg.policy_topic:
            self.create_subscription(String, self.cfg.policy_topic, self._on_policy, latched)
            self.get_logger().info(f'evaluating every policy published on '
                                   f'{self.cfg.policy_topic}')
        self._wall0 = None

    def _show(self, view: StepView):
        if self._stop is not None and self._stop.is_set():
            raise Interrupted('interrupted')
        if not self.cfg.viz_every or view.step % self.cfg.viz_every:
            return
        if self.cfg.viz_real_time:
            if view.step == 0:
                self._wall0 = time.monotonic()
            ahead = view.time - (time.monotonic() - self._wall0)
            if ahead > 0:
                time.sleep(ahead)
        stamp = self.get_clock().now().to_msg()
        self.joint_pub.publish(joint_state_msg(view, stamp))
        self.tf.send([pelvis_transform(view, stamp)])
        self.marker_pub.publish(contact_markers(view, stamp))

    def _evaluate(self, request, response):
        response.success, response.message = self._run()
        return response

    def _on_policy(self, msg: String):
        """Evaluate a policy announced on policy_topic (it becomes the policy parameter)."""
        self.get_logger().info(f'{self.cfg.policy_topic}: evaluating {msg.data}')
        self.set_parameters([Parameter('policy', Parameter.Type.STRING, msg.data)])
        self._run()

    def _run(self) -> Tuple[bool, str]:
        """Evaluate what the parameters name; return (success, summary JSON or the error)."""
        # Parameters are read again per call, so `ros2 param set` picks what to evaluate.
        try:
            self.cfg = params.read(self, EvaluatorNodeConfig)
            rollout = params.read(self, RolloutConfig)
            if not self.cfg.policy:
                raise ValueError('parameter policy is empty: set it to an ONNX file')
            ev = evaluate(EvalConfig(policy=self.cfg.policy, deploy_yaml=self.cfg.deploy_yaml,
                                     model=self.cfg.model,
                                     physics_params=self.cfg.physics_params,
                                     motion=self.cfg.motion,
                                     command=self.cfg.command, runs=self.cfg.runs,
                                     rollout=rollout), on_step=self._show)
            out = pathlib.Path(self.cfg.out_dir) / pathlib.Path(self.cfg.policy).stem
            result = report.write(ev, out, plots=self.cfg.plots)
        except (ValueError, OSError, Interrupted) as exc:
            self.get_logger().error(f'evaluation failed: {exc}')
            return False, str(exc)
        result['report_dir'] = str(out)
        self.result_pub.publish(String(data=json.dumps(result, default=float)))
        s = result['summary']
        self.get_logger().info(f'{self.cfg.policy}: {s["falls"]}/{s["runs"]} falls, '
                               f'written to {out}')
        return True, json.dumps(s)


def main(args=None) -> int:
    """Run evaluator_node until shut down; Ctrl-C ends an evaluation at its next step."""
    return spin.run('evaluator_node', EvaluatorNode, (params.ParameterError,), args)


if __name__ == '__main__':
    sys.exit(main())
