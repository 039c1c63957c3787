"""
sim2sim.launch.py for real: the README's sim2sim commands, run as they stand.

The README's block after ``<!-- sim2sim-commands -->`` is run line by line: its
`ros2 launch bcg_ros sim2sim.launch.py` in the background (with rviz2 and
robot_state_publisher off, which have no PyPI wheel, and on simulated time), then
each `ros2 lifecycle set` and `ros2 service call` to its end and `ros2 topic hz` for
a few seconds. Between them this process listens: policy_node goes passive -> stand
-> policy -> damping (the e-stop) on its latched ~/mode, and /lowcmd, /joint_states,
/tf, /odom, /contact_markers and /clock flow while the policy runs, stamped in
simulated time. Then Ctrl-C to the launch must end it and every node it started.
"""

import re
import time

import pytest
import yaml

from launch_harness import Domain, Launch, Listener, NO_RSP_RVIZ, readme_commands, REPO, \
    require_ros2, running

pytestmark = [pytest.mark.launch, pytest.mark.ros]
STARTUP_S = 90.0
"""Three Python nodes importing numpy, onnxruntime and MuJoCo on a loaded 2-core machine."""
HZ_S = 5.0
NODES = ('g1_sim_node', 'policy_node', 'state_bridge_node')
REAL_TIME_FACTOR = 0.25
"""The simulator at a quarter of real time (sim_config:=, the package's file otherwise): on
simulated time every node times its rules in simulated seconds, so the run is the same,
and four Python nodes at 500 Hz fit a loaded 2-core machine. At full speed there, the
command thread misses LowStates for longer than stale_timeout of simulated time and
policy_node rightly drops to damping."""


def _sim_config(folder):
    """config/g1_sim_node.yaml at REAL_TIME_FACTOR."""
    data = yaml.safe_load((REPO / 'config' / 'g1_sim_node.yaml').read_text())
    data['g1_sim_node']['ros__parameters']['real_time_factor'] = REAL_TIME_FACTOR
    path = folder / 'g1_sim_node.yaml'
    path.write_text(yaml.safe_dump(data))
    return path


def _stand_duration():
    data = yaml.safe_load((REPO / 'config' / 'policy_node.yaml').read_text())
    return float(data['policy_node']['ros__parameters']['stand_duration'])


def _sim_seconds(listener):
    """The simulator's newest /clock [s]."""
    from rclpy.serialization import deserialize_message
    from rosgraph_msgs.msg import Clock
    stamp = deserialize_message(listener.latest('clock'), Clock).clock
    return stamp.sec + stamp.nanosec * 1e-9


def _topics():
    from nav_msgs.msg import Odometry
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String
    from tf2_msgs.msg import TFMessage
    from unitree_hg.msg import LowCmd, LowState
    from visualization_msgs.msg import MarkerArray

    from bcg_ros.nodes.policy_node import LATCHED_QOS
    from bcg_ros.nodes.tf_pub import TF_QOS
    # 500 Hz streams only counted (raw), so that this listener does not need a core.
    return {'lowstate': (LowState, '/lowstate', 50, True),
            'lowcmd': (LowCmd, '/lowcmd', 50, True),
            'clock': (Clock, '/clock', 50, True),
            'joint_states': (JointState, '/joint_states', 50, False),
            'tf': (TFMessage, '/tf', TF_QOS, False),
            'odom': (Odometry, '/odom', 50, False),
            'markers': (MarkerArray, '/contact_markers', 50, False),
            'mode': (String, '/policy_node/mode', LATCHED_QOS, False)}


class Modes:
    """policy_node's modes in the order they were published on ~/mode."""

    def __init__(self, listener):
        self.seen = []
        msg_type, topic, qos, _ = _topics()['mode']
        listener.node.create_subscription(msg_type, topic, self._on_mode, qos)

    def _on_mode(self, msg):
        self.seen.append(msg.data)

    def wait(self, mode, timeout=20.0):
        deadline = time.monotonic() + timeout
        while mode not in self.seen and time.monotonic() < deadline:
            time.sleep(0.05)
        return mode in self.seen


@pytest.fixture(scope='module')
def sim2sim(tmp_path_factory):
    """Run the README's sim2sim block; what each command printed and what flowed."""
    require_ros2()
    commands = readme_commands('sim2sim-commands')
    domain = Domain(tmp_path_factory.mktemp('sim2sim'))
    topics = _topics()
    listener = Listener(domain.id, {k: v for k, v in topics.items() if k != 'mode'})
    modes = Modes(listener)
    t_start = time.monotonic()
    launch = Launch(domain, commands[0], *NO_RSP_RVIZ, 'use_sim_time:=true',
                    f'sim_config:={_sim_config(domain.tmp)}')
    record = {'commands': [], 'modes': modes.seen, 'launch': launch}
    try:
        # Up: the simulator and the bridge publish, policy_node answers lifecycle requests.
        missing = listener.wait(['lowstate', 'clock', 'joint_states'], STARTUP_S) \
            + listener.wait_for_services(['/policy_node/change_state'], STARTUP_S)
        assert not missing, f'nothing on {missing} {STARTUP_S} s after `{launch.command}`:\n' \
            + launch.log()[-3000:]
        record['startup_s'] = time.monotonic() - t_start
        for command in commands[1:]:
            t0 = time.monotonic()
            if ' topic hz ' in f' {command} ':
                out = domain.ros2_for(command, HZ_S)
                record['flow'] = listener.counts(since=t0)
                record['flow_s'] = time.monotonic() - t0
                record['latest'] = {k: listener.latest(k) for k in topics if k != 'mode'}
            else:
                out = domain.ros2(command).stdout
            record['commands'].append((command, out, time.monotonic() - t0))
            if command.endswith('/stand std_srvs/srv/Trigger'):
                # An operator starts the policy once the robot stands.
                done = _sim_seconds(listener) + _stand_duration() + 0.2
                deadline = time.monotonic() + 60.0
                while _sim_seconds(listener) < done and time.monotonic() < deadline:
                    time.sleep(0.05)
            if command.endswith('/start std_srvs/srv/Trigger'):
                modes.wait('policy')
        modes.wait('damping')
        record['params'] = {n: domain.ros2(f'ros2 param get /{n} use_sim_time').stdout
                            for n in NODES}
        record['pids'] = launch.pids()
        yield record
    finally:
        launch.stop()
        listener.close()
        domain.stop_daemon()
        print(f'sim2sim launch: up in {record.get("startup_s", 0):.1f} s; '
              + ', '.join(f'`{c}` {s:.1f} s' for c, _, s in record['commands'])
              + f'; Ctrl-C to its end {launch.stop_s:.1f} s')


def _output(record, verb):
    (out,) = [o for c, o, _ in record['commands'] if verb in c]
    return out


def test_lifecycle_and_services_from_the_command_line(sim2sim):
    for transition in ('configure', 'activate'):
        out = _output(sim2sim, f'lifecycle set /policy_node {transition}')
        assert 'Transitioning successful' in out, f'{transition}: {out}\n' \
            + sim2sim['launch'].log()[-3000:]
    for service in ('stand', 'start', 'stop'):
        out = _output(sim2sim, f'/policy_node/{service} ')
        assert 'success=True' in out, f'{service}: {out}'
    modes = sim2sim['modes']
    assert [m for m in ('passive', 'stand', 'policy', 'damping') if m in modes] \
        == ['passive', 'stand', 'policy', 'damping'], modes
    assert modes.index('passive') < modes.index('stand') < modes.index('policy') \
        < modes.index('damping'), modes


def test_topics_flow_while_the_policy_runs(sim2sim):
    flow, seconds = sim2sim['flow'], sim2sim['flow_s']
    rates = {k: round(n / seconds) for k, n in flow.items()}
    assert all(flow.values()), f'silent over {seconds:.1f} s: {rates}'
    hz = re.findall(r'average rate: ([0-9.]+)', _output(sim2sim, 'topic hz /lowcmd'))
    assert hz and float(hz[-1]) > 10.0, _output(sim2sim, 'topic hz /lowcmd')
    markers = sim2sim['latest']['markers'].markers
    assert sum(m.ns == 'foot_spheres' for m in markers) == 8


def test_every_node_follows_the_simulators_clock(sim2sim):
    for node, out in sim2sim['params'].items():
        assert 'Boolean value is: True' in out, f'{node}: {out}'
    # Simulated time starts at 0 with the simulator; wall time is ~1.7e9 s.
    from rclpy.serialization import deserialize_message
    from rosgraph_msgs.msg import Clock
    clock = deserialize_message(sim2sim['latest']['clock'], Clock).clock.sec
    latest = sim2sim['latest']
    for key, stamp in (('joint_states', latest['joint_states'].header.stamp),
                       ('odom', latest['odom'].header.stamp),
                       ('tf', latest['tf'].transforms[0].header.stamp)):
        assert abs(stamp.sec - clock) <= 2, f'{key} stamped {stamp.sec} s, /clock {clock} s'
    assert clock < 10_000


def test_ctrl_c_ends_the_launch_and_every_node(sim2sim):
    pids = sim2sim['pids']
    launch = sim2sim['launch']
    launch.stop()
    assert sorted(name.rsplit('-', 1)[0] for name in pids) == sorted(NODES), pids
    assert not running(pids), f'left running after Ctrl-C: {running(pids)}'
    log = launch.log()
    assert launch.proc.returncode == 0, f'exit {launch.proc.returncode}:\n{log[-3000:]}'
    unclean = re.findall(r'\[ERROR\] \[(\S+)\]: process has died', log)
    assert not unclean, f'{unclean} died instead of finishing on Ctrl-C:\n{log[-3000:]}'
