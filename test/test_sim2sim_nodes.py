"""
The sim2sim node set together, as sim2sim.launch.py starts it, checked over DDS.

g1_sim_node, policy_node (no policy: autostart into passive, damping commands)
and state_bridge_node run as their installed executables with the package's
parameters files, in a DDS domain of their own; this process listens and
checks that the robot interface (/lowstate, /lowcmd) and what rviz shows
(/joint_states, /tf odom -> pelvis as tf2_msgs/TFMessage, /odom,
/contact_markers) flow at their configured rates.

The simulator is Python stepping MuJoCo at 1 kHz in real time; on a shared
2-core machine the three nodes, this listener and whatever else runs compete
for the cores, so it falls behind real time (measured here: LowState at 224-420
of its 500 Hz, with one to two other CPU-bound jobs on the machine). So the
simulator's own pace is held only to SIM_PACE_FLOOR (30 %) of real time, and
is measured from LowState.tick (simulated milliseconds). Everything else is
held to its configured rate at that pace: the bridge decimates on the
LowState clock, so its outputs must come at RATE_BAND (50-120 %) of the
configured rate times the simulator's pace (measured: 76-100 %; below 100 %
when the loaded bridge itself skips LowStates), and
policy_node answers each LowState with one LowCmd (at least 60 % of the
LowState rate; measured 80-110 %). A wrong rate setting (10 Hz for 100), a
node that drops most of its input, or duplicated messages fail.

robot_state_publisher (sim2sim.launch.py starts it too) is a C++ node with no
PyPI wheel; it runs here only where a ROS 2 install provides it.
"""

import os
import pathlib
import random
import subprocess
import sys
import threading
import time

import pytest
import yaml

rclpy = pytest.importorskip('rclpy')
unitree_hg_msg = pytest.importorskip(
    'unitree_hg.msg', reason='unitree_hg is not built; run scripts/build_interfaces.sh')
tf2_msgs_msg = pytest.importorskip(
    'tf2_msgs.msg', reason='tf2_msgs is not built; run scripts/build_interfaces.sh')

from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile  # noqa: E402
from rclpy.serialization import deserialize_message  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from visualization_msgs.msg import MarkerArray  # noqa: E402

from bcg_ros import testing  # noqa: E402
from bcg_ros.nodes.tf_pub import TF_QOS  # noqa: E402
from bcg_ros.robot import crc, g1, lowlevel  # noqa: E402

pytestmark = pytest.mark.ros
REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIG = REPO / 'config'
DOMAIN_ID = random.randint(30, 99)
"""A domain of this module's own: conftest's session domain is 100-200 and
test_sim2sim_dds takes 201-230, and parallel runs draw different ones."""
STARTUP_S = 60.0
WINDOW_S = 5.0
SIM_PACE_FLOOR = 0.3
RATE_BAND = (0.5, 1.2)
LOWCMD_PER_LOWSTATE = 0.6
NODES = ('g1_sim_node', 'policy_node', 'state_bridge_node')


def _params(node):
    path = CONFIG / f'{node}.yaml'
    return path, yaml.safe_load(path.read_text())[node]['ros__parameters']


def _command(name):
    """The installed executable beside this Python (a venv's bin), else its module."""
    exe = pathlib.Path(sys.executable).parent / name
    if exe.is_file() and os.access(exe, os.X_OK):
        return [str(exe)]
    return [sys.executable, '-c', f'import sys; from bcg_ros.nodes.{name} import main; '
            'sys.exit(main())']


def _spawn(name, *ros_args):
    path, _ = _params(name)
    env = dict(os.environ, ROS_DOMAIN_ID=str(DOMAIN_ID), PYTHONUNBUFFERED='1')
    return subprocess.Popen([*_command(name), '--ros-args', '--params-file', str(path),
                             *ros_args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


class Listener:
    """Time-stamps every message of the watched topics; keeps the newest of each."""

    def __init__(self, context):
        self.node = rclpy.create_node('sim2sim_nodes_listener', context=context)
        self.lock = threading.Lock()
        self.times = {}
        self.last = {}
        self.ticks = []     # (wall time, LowState.tick)
        sub = self.node.create_subscription
        # Raw: only counted; 2 x 500 Hz of message objects would cost this process a core.
        sub(unitree_hg_msg.LowState, '/lowstate', self._keep('lowstate'), 50, raw=True)
        sub(unitree_hg_msg.LowCmd, '/lowcmd', self._keep('lowcmd'), 50, raw=True)
        sub(JointState, '/joint_states', self._keep('joint_states'), 50)
        sub(tf2_msgs_msg.TFMessage, '/tf', self._keep('tf'), TF_QOS)
        sub(Odometry, '/odom', self._keep('odom'), 50)
        sub(MarkerArray, '/contact_markers', self._keep('markers'), 50)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self.spinner = testing.Spinner(self.executor)

    def _keep(self, key):
        self.times[key] = []
        tick_at = lowlevel.CDR_HEADER + int(lowlevel.LOWSTATE_CDR['tick'][0])

        def cb(msg):
            t = time.monotonic()
            with self.lock:
                self.times[key].append(t)
                self.last[key] = msg
                if key == 'lowstate':
                    self.ticks.append((t, int.from_bytes(msg[tick_at:tick_at + 4], 'little')))
        return cb

    def sim_pace(self, t0, t1):
        """Simulated seconds per wall second over [t0, t1), from LowState.tick."""
        with self.lock:
            ticks = [(t, k) for t, k in self.ticks if t0 <= t < t1]
        (wall0, tick0), (wall1, tick1) = ticks[0], ticks[-1]
        return ((tick1 - tick0) & 0xFFFFFFFF) * 1e-3 / (wall1 - wall0)

    def missing(self):
        with self.lock:
            return sorted(k for k, v in self.times.items() if not v)

    def rates(self, t0, t1):
        with self.lock:
            return {k: sum(1 for t in v if t0 <= t < t1) / (t1 - t0)
                    for k, v in self.times.items()}

    def close(self):
        self.spinner.stop()
        self.node.destroy_node()


@pytest.fixture(scope='module')
def sim2sim():
    """Start the node set, wait until everything flows, listen for WINDOW_S."""
    t_start = time.monotonic()
    procs = {'g1_sim_node': _spawn('g1_sim_node'),
             'policy_node': _spawn('policy_node', '-p', 'autostart:=true'),
             'state_bridge_node': _spawn('state_bridge_node')}
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=DOMAIN_ID)
    listener = Listener(context)
    logs = {}
    try:
        deadline = time.monotonic() + STARTUP_S
        while listener.missing() and time.monotonic() < deadline:
            dead = [n for n, p in procs.items() if p.poll() is not None]
            assert not dead, f'{dead} exited: ' + '\n'.join(
                testing.stop_process(procs[n]) for n in dead)
            time.sleep(0.1)
        assert not listener.missing(), f'nothing on {listener.missing()} in {STARTUP_S} s'
        t_flow = time.monotonic()
        time.sleep(1.0)  # past the start-up transients (discovery, the first filter steps)
        t0 = time.monotonic()
        time.sleep(WINDOW_S)
        t1 = time.monotonic()
        rates = listener.rates(t0, t1)
        pace = listener.sim_pace(t0, t1)
        with listener.lock:
            last = dict(listener.last)
        yield {'rates': rates, 'pace': pace, 'last': last, 'logs': logs,
               'startup_s': t_flow - t_start}
    finally:
        listener.close()
        rclpy.shutdown(context=context)
        for name, proc in procs.items():
            logs[name] = testing.stop_process(proc)


def _configured():
    _, sim = _params('g1_sim_node')
    _, policy = _params('policy_node')
    _, bridge = _params('state_bridge_node')
    return {'lowstate': sim['state_rate_hz'], 'lowcmd': policy['command_rate_hz'],
            'joint_states': bridge['joint_states_rate_hz'], 'tf': bridge['odom_rate_hz'],
            'odom': bridge['odom_rate_hz'], 'markers': bridge['markers_rate_hz']}


def test_topics_flow_at_their_configured_rates(sim2sim):
    rates, pace, configured = sim2sim['rates'], sim2sim['pace'], _configured()
    report = ', '.join(f'{k} {rates[k]:.0f}/{configured[k]:.0f} Hz' for k in configured)
    print(f'sim2sim node set up in {sim2sim["startup_s"]:.1f} s; over {WINDOW_S:.0f} s at '
          f'{pace:.2f} x real time: {report}')
    logs = '\n'.join(f'--- {n} ---\n{log[-2000:]}' for n, log in sim2sim['logs'].items())
    assert SIM_PACE_FLOOR <= pace <= 1.05, f'g1_sim_node at {pace:.2f} x real time\n{logs}'
    assert rates['lowstate'] >= SIM_PACE_FLOOR * configured['lowstate'], report
    off = {k: round(rates[k] / (configured[k] * pace), 2)
           for k in ('joint_states', 'tf', 'odom', 'markers')
           if not RATE_BAND[0] <= rates[k] / (configured[k] * pace) <= RATE_BAND[1]}
    assert not off, f'rate / (configured x pace) outside {RATE_BAND}: {off} ({report})\n{logs}'
    assert LOWCMD_PER_LOWSTATE * rates['lowstate'] <= rates['lowcmd'] \
        <= RATE_BAND[1] * configured['lowcmd'], report


def test_tf_is_odom_to_pelvis_upright(sim2sim):
    msg = sim2sim['last']['tf']
    assert isinstance(msg, tf2_msgs_msg.TFMessage)
    (t,) = msg.transforms
    assert (t.header.frame_id, t.child_frame_id) == ('odom', g1.ROOT_BODY)
    # The elastic band of g1_sim_node.yaml holds the pelvis upright. (Not its height: with
    # the feet barely loaded under the band no foot is in stance to anchor the estimate.)
    r = t.transform.rotation
    assert abs(r.w ** 2 + r.x ** 2 + r.y ** 2 + r.z ** 2 - 1.0) < 1e-6
    assert abs(r.x) < 0.05 and abs(r.y) < 0.05, r


def test_odom_joint_states_and_markers(sim2sim):
    last = sim2sim['last']
    odom = last['odom']
    assert (odom.header.frame_id, odom.child_frame_id) == ('odom', g1.ROOT_BODY)
    joints = last['joint_states']
    assert tuple(joints.name) == g1.JOINT_NAMES and len(joints.position) == g1.NUM_JOINTS
    markers = last['markers'].markers
    assert sorted({m.ns for m in markers}) == ['foot_forces', 'foot_spheres']
    assert sum(m.ns == 'foot_spheres' for m in markers) == 8


def test_lowstate_carries_the_robots_crc(sim2sim):
    msg = deserialize_message(sim2sim['last']['lowstate'], unitree_hg_msg.LowState)
    assert msg.crc != 0 and msg.crc == crc.lowstate_crc(msg)
    assert msg.mode_machine == g1.MODE_MACHINE_29DOF and msg.tick > 0


def test_robot_state_publisher():
    try:
        from ament_index_python.packages import get_package_prefix
        prefix = get_package_prefix('robot_state_publisher')
    except Exception:  # ImportError, PackageNotFoundError
        pytest.skip('robot_state_publisher is not installed: it is a C++ node with no PyPI '
                    'wheel (a ROS 2 install has it); sim2sim.launch.py starts it for rviz')
    exe = pathlib.Path(prefix) / 'lib' / 'robot_state_publisher' / 'robot_state_publisher'
    params = {'robot_state_publisher': {'ros__parameters': {
        'robot_description': (REPO / 'urdf' / 'g1_29dof.urdf').read_text()}}}
    tmp = pathlib.Path(os.environ.get('TMPDIR', '/tmp')) / f'rsp_{os.getpid()}.yaml'
    tmp.write_text(yaml.safe_dump(params))
    env = dict(os.environ, ROS_DOMAIN_ID=str(DOMAIN_ID))
    proc = subprocess.Popen([str(exe), '--ros-args', '--params-file', str(tmp)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=DOMAIN_ID)
    try:
        node = rclpy.create_node('rsp_probe', context=context)
        got = []
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        node.create_subscription(tf2_msgs_msg.TFMessage, '/tf_static', got.append, latched)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        deadline = time.monotonic() + 30.0
        while not got and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
        assert got, 'robot_state_publisher published no /tf_static'
        assert all(t.header.frame_id for t in got[0].transforms)
        executor.shutdown()
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
        testing.stop_process(proc)
        tmp.unlink()
