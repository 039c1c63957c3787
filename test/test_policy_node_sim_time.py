"""
policy_node with use_sim_time follows /clock: its rules time out in simulated seconds.

g1_sim_node runs at half real time and publishes /clock; policy_node, on sim
time, stands the robot up; then the LowState stream stops (/clock goes on) and
the first damping command must come stale_timeout of *simulated* time after
the last LowState. On the wall clock it would come after stale_timeout of wall
time, which is half that in simulated time (less on a loaded machine, where
the simulator falls further behind real time), so the check tells the two
apart whatever the machine's load.
"""

import os
import pathlib
import random
import subprocess
import sys
import threading
import time

import pytest

rclpy = pytest.importorskip('rclpy')
unitree_hg_msg = pytest.importorskip(
    'unitree_hg.msg', reason='unitree_hg is not built; run scripts/build_interfaces.sh')

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import SetBool, Trigger  # noqa: E402

from bcg_ros import testing  # noqa: E402
from bcg_ros.robot import lowlevel  # noqa: E402

pytestmark = pytest.mark.ros
REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIG = REPO / 'config'
DOMAIN_ID = random.randint(30, 99)
"""A domain of this module's own (conftest's session domain is 100-200)."""
STALE_S = 0.2
REAL_TIME_FACTOR = 0.5


def _spawn(name, *ros_args):
    exe = pathlib.Path(sys.executable).parent / name
    cmd = [str(exe)] if exe.is_file() else [
        sys.executable, '-c', f'import sys; from bcg_ros.nodes.{name} import main; '
        'sys.exit(main())']
    env = dict(os.environ, ROS_DOMAIN_ID=str(DOMAIN_ID), PYTHONUNBUFFERED='1')
    return subprocess.Popen([*cmd, '--ros-args', '--params-file', str(CONFIG / f'{name}.yaml'),
                             *ros_args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


class Observer:
    """LowState ticks, LowCmds stamped with the simulated time of their arrival, modes."""

    def __init__(self, context):
        self.node = n = rclpy.create_node('sim_time_observer', context=context)
        self.lock = threading.Lock()
        self.sim_now = None
        self.states = []   # (wall, simulated s from tick)
        self.cmds = []     # (wall, simulated s from /clock, damping)
        self.modes = []
        tick_at = lowlevel.CDR_HEADER + int(lowlevel.LOWSTATE_CDR['tick'][0])

        def on_state(raw):
            tick = int.from_bytes(raw[tick_at:tick_at + 4], 'little')
            with self.lock:
                self.states.append((time.monotonic(), tick * 1e-3))

        def on_cmd(raw):
            cmd, _ = lowlevel.read_lowcmd_cdr(raw)
            with self.lock:
                self.cmds.append((time.monotonic(), self.sim_now, cmd.is_damping()))

        def on_clock(msg):
            with self.lock:
                self.sim_now = msg.clock.sec + msg.clock.nanosec * 1e-9

        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        n.create_subscription(unitree_hg_msg.LowState, '/lowstate', on_state, 50, raw=True)
        n.create_subscription(unitree_hg_msg.LowCmd, '/lowcmd', on_cmd, 50, raw=True)
        n.create_subscription(Clock, '/clock', on_clock, 50)
        n.create_subscription(String, '/policy_node/mode', lambda m: self.modes.append(m.data),
                              latched)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(n)
        self.spinner = testing.Spinner(self.executor)

    def call(self, srv, name, request, timeout=20.0):
        client = self.node.create_client(srv, name)
        assert client.wait_for_service(timeout_sec=timeout), f'{name} not available'
        future = client.call_async(request)
        deadline = time.monotonic() + timeout
        while not future.done() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert future.done(), f'{name} did not answer'
        return future.result()

    def wait_flow(self, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.states) > 20 and len(self.cmds) > 20 and self.sim_now is not None:
                    return True
            time.sleep(0.05)
        return False

    def wait_mode(self, mode, timeout=20.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.modes and self.modes[-1] == mode:
                return True
            time.sleep(0.01)
        return False

    def close(self):
        self.spinner.stop()
        self.node.destroy_node()


def test_stale_timeout_is_simulated_time():
    sim = _spawn('g1_sim_node', '-p', 'publish_clock:=true',
                 '-p', f'real_time_factor:={REAL_TIME_FACTOR}')
    policy = _spawn('policy_node', '-p', 'use_sim_time:=true', '-p', 'autostart:=true',
                    '-p', f'stale_timeout:={STALE_S}', '-p', 'stand_duration:=0.5')
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=DOMAIN_ID)
    obs = Observer(context)
    logs = {}
    try:
        assert obs.wait_mode('passive', timeout=60.0), f'policy_node not passive: {obs.modes}'
        assert obs.wait_flow(), 'this listener hears no LowState, LowCmd or /clock'
        assert obs.call(Trigger, '/policy_node/stand', Trigger.Request()).success
        assert obs.wait_mode('stand')
        time.sleep(0.5)
        t_pause = time.monotonic()
        assert obs.call(SetBool, '/g1_sim_node/pause_state', SetBool.Request(data=True)).success
        assert obs.wait_mode('damping', timeout=10.0), obs.modes
        time.sleep(0.1)
        with obs.lock:
            wall_last, sim_last = obs.states[-1]   # the stream stopped at t_pause
            assert wall_last < t_pause + 1.0
            first = next(c for c in obs.cmds if c[0] > wall_last and c[2])
            sim_span = obs.states[-1][1] - obs.states[0][1]
            pace = sim_span / (obs.states[-1][0] - obs.states[0][0])
        sim_delay, wall_delay = first[1] - sim_last, first[0] - wall_last
        print(f'simulator at {pace:.2f} x real time; last LowState -> damping: '
              f'{sim_delay * 1e3:.0f} ms simulated, {wall_delay * 1e3:.0f} ms wall '
              f'(stale_timeout {STALE_S * 1e3:.0f} ms)')
        # The timeout, plus a command period and the hops, in simulated time. Less on a
        # loaded machine, where the last LowStates before the pause may not reach the
        # node, which then counts from an earlier one; a timeout on the wall clock would
        # give STALE_S * REAL_TIME_FACTOR (100 ms), below the bound.
        assert 0.75 * STALE_S < sim_delay < STALE_S + 0.05, (sim_delay, wall_delay, pace)
    finally:
        obs.close()
        rclpy.shutdown(context=context)
        for name, proc in (('policy_node', policy), ('g1_sim_node', sim)):
            logs[name] = testing.stop_process(proc)
        for name, log in logs.items():
            print(f'--- {name} ---\n{log[-1500:]}')
