"""
Nodes as their own processes over DDS, and an observer that watches and drives them.

Shared by the end-to-end tests that run g1_sim_node and policy_node together.
"""

import os
import pathlib
import subprocess
import sys
import threading
import time

import rclpy
import unitree_hg.msg as unitree_hg_msg
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.srv import ChangeState
from nav_msgs.msg import Odometry
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String, UInt8MultiArray
from std_srvs.srv import SetBool, Trigger

from bcg_ros import testing
from bcg_ros.robot import lowlevel

REPO = pathlib.Path(__file__).resolve().parents[1]


def spawn(module: str, domain_id: int, *ros_args: str, path: str = '') -> subprocess.Popen:
    """Run a node module in its own process on ``domain_id`` (``path`` first on its PYTHONPATH)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (path, str(REPO)) if p),
               PYTHONUNBUFFERED='1', ROS_DOMAIN_ID=str(domain_id))
    return subprocess.Popen([sys.executable, '-m', module, '--ros-args', *ros_args],
                            cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


class Observer:
    """Records what goes over the wire and calls the nodes' services."""

    def __init__(self):
        self.node = rclpy.create_node('sim2sim_observer')
        self.lock = threading.Lock()
        self.cmds = []      # (t, damping, crc_ok, q[29], kp[29], mode_machine)
        self.states = []    # (t, q[29])
        self.heights = []   # (t, z)
        self.positions = []  # (t, x, y, z) of the pelvis
        self.modes = {}     # node name -> [(t, mode)]
        self.health = {}    # /diagnostics status name -> last DiagnosticStatus
        n = self.node
        # Raw: building message objects at 2 x 500 Hz would cost this process a core.
        n.create_subscription(unitree_hg_msg.LowCmd, '/lowcmd', self._on_cmd, 50, raw=True)
        n.create_subscription(unitree_hg_msg.LowState, '/lowstate', self._on_state, 50,
                              raw=True)
        n.create_subscription(Odometry, '/g1_sim_node/odom', self._on_odom, 10)
        n.create_subscription(DiagnosticArray, '/diagnostics', self._on_diagnostics, 50)
        self.remote = n.create_publisher(UInt8MultiArray, '/g1_sim_node/wireless_remote', 10)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(n)
        self.spinner = testing.Spinner(self.executor)

    def watch_mode(self, name):
        qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.modes[name] = []
        self.node.create_subscription(
            String, f'/{name}/mode',
            lambda m: self.modes[name].append((time.monotonic(), m.data)), qos)

    def _on_cmd(self, raw):
        t = time.monotonic()
        cmd, crc_ok = lowlevel.read_lowcmd_cdr(raw)
        with self.lock:
            self.cmds.append((t, cmd.is_damping(), crc_ok, cmd.q[:29], cmd.kp[:29],
                              cmd.mode_machine))

    def _on_state(self, raw):
        t = time.monotonic()
        s = lowlevel.read_lowstate_cdr(raw, t)
        with self.lock:
            self.states.append((t, s.q[:29]))

    def _on_diagnostics(self, msg):
        with self.lock:
            self.health.update((s.name, s) for s in msg.status)

    def _on_odom(self, msg):
        with self.lock:
            p = msg.pose.pose.position
            t = time.monotonic()
            self.heights.append((t, p.z))
            self.positions.append((t, p.x, p.y, p.z))

    def call(self, srv_type, name, request, timeout=10.0):
        client = self.node.create_client(srv_type, name)
        assert client.wait_for_service(timeout_sec=timeout), f'{name} not available'
        future = client.call_async(request)
        deadline = time.monotonic() + timeout
        while not future.done() and time.monotonic() < deadline:
            time.sleep(0.01)
        self.node.destroy_client(client)
        assert future.done(), f'{name} did not answer'
        return future.result()

    def trigger(self, name):
        return self.call(Trigger, name, Trigger.Request())

    def transition(self, node, transition_id):
        req = ChangeState.Request()
        req.transition.id = transition_id
        return self.call(ChangeState, f'/{node}/change_state', req).success

    def set_bool(self, name, value):
        return self.call(SetBool, name, SetBool.Request(data=value)).success

    def press(self, *buttons, hold=0.1):
        for held in (buttons, ()):
            self.remote.publish(UInt8MultiArray(data=list(lowlevel.encode_remote(held))))
            time.sleep(hold)

    def sticks(self, **axes):
        """Hold the remote's sticks (lx, ly, rx, ry in [-1, 1]) until the next call."""
        self.remote.publish(UInt8MultiArray(data=list(lowlevel.encode_remote((), **axes))))

    def activate_and_stand(self, node: str = 'policy_node', timeout: float = 20.0) -> None:
        """Configure and activate ``node``, then ask it to stand until its LowState arrives."""
        from lifecycle_msgs.msg import Transition
        assert self.transition(node, Transition.TRANSITION_CONFIGURE)
        assert self.transition(node, Transition.TRANSITION_ACTIVATE)
        deadline = time.monotonic() + timeout
        while not self.trigger(f'/{node}/stand').success:
            assert time.monotonic() < deadline, f'{node} never received LowState'
            time.sleep(0.2)

    def mode(self, name):
        return self.modes[name][-1][1] if self.modes[name] else None

    def wait_mode(self, name, mode, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.mode(name) == mode:
                return True
            time.sleep(0.01)
        return False

    def cmds_since(self, t):
        with self.lock:
            return [c for c in self.cmds if c[0] >= t]

    def close(self):
        self.spinner.stop()
        self.node.destroy_node()
