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


TIMEOUT_SCALE = 5.0
"""policy_node's stale_timeout and policy_timeout x 5 (policy_config:=): under the load of a
CI machine running the test suite, 20 ms of simulated time without a LowState happens
even at a quarter of real time, and the e-stop is what this test drives. The rules
themselves are held by test_executor and test_policy_node_sim_time."""


def _config(folder, node, **changes):
    """config/<node>.yaml with ``changes``, written to ``folder``: its path."""
    data = yaml.safe_load((REPO / 'config' / f'{node}.yaml').read_text())
    params = data[node]['ros__parameters']
    assert set(changes) <= set(params), f'{node}.yaml: no {set(changes) - set(params)}'
    params.update(changes)
    path = folder / f'{node}.yaml'
    path.write_text(yaml.safe_dump(data))
    return path


def _launch_arguments(folder):
    """What the test adds to the README's `ros2 launch` line."""
    policy = yaml.safe_load((REPO / 'config' / 'policy_node.yaml').read_text())
    policy = policy['policy_node']['ros__parameters']
    return [*NO_RSP_RVIZ, 'use_sim_time:=true',
            f'sim_config:={_config(folder, "g1_sim_node", real_time_factor=REAL_TIME_FACTOR)}',
            'policy_config:=' + str(_config(
                folder, 'policy_node',
                stale_timeout=TIMEOUT_SCALE * policy['stale_timeout'],
                policy_timeout=TIMEOUT_SCALE * policy['policy_timeout']))]


def _stand_duration():
    data = yaml.safe_load((REPO / 'config' / 'policy_node.yaml').read_text())
    return float(data['policy_node']['ros__parameters']['stand_duration'])


def _sim_seconds(listener):
    """The simulator's newest /clock [s]."""
    from rclpy.serialization import deserialize_message
    from rosgraph_msgs.msg import Clock
    stamp = deserialize_message(listener.latest('clock'), Clock).clock
    return stamp.sec + stamp.nanosec * 1e-9


FALL_HEIGHT = 0.3
"""m: a pelvis lower than this has fallen (the evaluator's rule)."""
LOADED_N = 150.0
LIFTED_N = 30.0
"""A foot carrying more than LOADED_N is in stance, one under LIFTED_N in the air (the
G1 weighs 344 N, about 170 N per foot standing; the run goes from foot to foot)."""
RVIZ_TYPES = {'rviz_default_plugins/RobotModel': 'std_msgs/msg/String',
              'rviz_default_plugins/TF': 'tf2_msgs/msg/TFMessage',
              'rviz_default_plugins/MarkerArray': 'visualization_msgs/msg/MarkerArray',
              'rviz_default_plugins/Wrench': 'geometry_msgs/msg/WrenchStamped',
              'rviz_default_plugins/Odometry': 'nav_msgs/msg/Odometry'}
"""The message type each rviz display class of the shipped config subscribes to."""
RVIZ_WAIT_S = 5.0
FROM_ROBOT_STATE_PUBLISHER = {'/robot_description'}


def rviz_topics():
    """{topic: message type} of every enabled display in config/bcg_ros.rviz."""
    cfg = yaml.safe_load((REPO / 'config' / 'bcg_ros.rviz').read_text())
    topics = {}
    for d in cfg['Visualization Manager']['Displays']:
        if not d.get('Enabled', False) or d['Class'] == 'rviz_default_plugins/Grid':
            continue
        assert d['Class'] in RVIZ_TYPES, f'bcg_ros.rviz: display {d["Name"]!r} ({d["Class"]})'
        topic = (d.get('Topic') or d.get('Description Topic') or {'Value': '/tf'})['Value']
        topics[topic] = RVIZ_TYPES[d['Class']]
    return topics


def _message_class(type_name):
    import importlib
    package, kind, name = type_name.split('/')
    return getattr(importlib.import_module(f'{package}.{kind}'), name)


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


class Feet:
    """Each foot's vertical force (the bridge's wrenches) and the true pelvis height."""

    def __init__(self, listener):
        from geometry_msgs.msg import WrenchStamped
        from nav_msgs.msg import Odometry
        self.series = {'left': [], 'right': [], 'height': []}
        node = listener.node
        for side in ('left', 'right'):
            node.create_subscription(WrenchStamped, f'/{side}_foot/wrench', self._keep(
                side, lambda m: m.wrench.force.z), 10)
        node.create_subscription(Odometry, '/g1_sim_node/odom', self._keep(
            'height', lambda m: m.pose.pose.position.z), 10)

    def _keep(self, key, value):
        return lambda msg: self.series[key].append((time.monotonic(), value(msg)))

    def since(self, t0):
        """{key: [values after t0]}."""
        return {k: [v for t, v in s if t >= t0] for k, s in list(self.series.items())}


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
    shown = {topic: (_message_class(t), topic, 10, False) for topic, t in rviz_topics().items()
             if topic not in FROM_ROBOT_STATE_PUBLISHER}
    listener = Listener(domain.id, {**{k: v for k, v in topics.items() if k != 'mode'},
                                    **shown})
    modes = Modes(listener)
    feet = Feet(listener)
    t_start = time.monotonic()
    launch = Launch(domain, commands[0], *_launch_arguments(domain.tmp))
    record = {'commands': [], 'modes': modes.seen, 'launch': launch}
    try:
        # Up: the simulator and the bridge publish, policy_node answers lifecycle requests.
        missing = listener.wait(['lowstate', 'clock', 'joint_states'], STARTUP_S) \
            + listener.wait_for_services(['/policy_node/change_state'], STARTUP_S) \
            + domain.wait_listed('ros2 node list', [f'/{n}' for n in NODES], STARTUP_S) \
            + domain.wait_listed('ros2 lifecycle nodes', ['/policy_node'], STARTUP_S)
        assert not missing, f'nothing on {missing} {STARTUP_S} s after `{launch.command}`:\n' \
            + launch.log()[-3000:]
        record['startup_s'] = time.monotonic() - t_start
        for command in commands[1:]:
            t0 = time.monotonic()
            if ' topic hz ' in f' {command} ':
                out = domain.ros2_for(command, HZ_S, until=r'average rate: ')
                record['flow'] = listener.counts(since=t0)
                record['feet'] = feet.since(t0)
                record['flow_s'] = time.monotonic() - t0
                record['latest'] = {k: listener.latest(k) for k in topics if k != 'mode'}
                record['rviz'] = {
                    topic: ([(i.node_name, i.topic_type) for i in
                             listener.node.get_publishers_info_by_topic(topic)],
                            listener.wait([topic], RVIZ_WAIT_S, since=t0) == [])
                    for topic in shown}
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
        assert 'success=True' in out, f'{service}: {out}\n' + sim2sim['launch'].log()[-3000:]
    modes = sim2sim['modes']
    changes = re.findall(r'\[policy_node\]: (mode .*)', sim2sim['launch'].log())
    assert [m for m in ('passive', 'stand', 'policy', 'damping') if m in modes] \
        == ['passive', 'stand', 'policy', 'damping'], changes
    assert modes.index('passive') < modes.index('stand') < modes.index('policy') \
        < modes.index('damping'), changes
    assert changes[-1].endswith('e-stop (service)'), changes


def test_topics_flow_while_the_policy_runs(sim2sim):
    flow, seconds = sim2sim['flow'], sim2sim['flow_s']
    rates = {k: round(n / seconds) for k, n in flow.items()}
    assert all(flow.values()), f'silent over {seconds:.1f} s: {rates}'
    hz = re.findall(r'average rate: ([0-9.]+)', _output(sim2sim, 'topic hz /lowcmd'))
    assert hz and float(hz[-1]) > 10.0, _output(sim2sim, 'topic hz /lowcmd')
    markers = sim2sim['latest']['markers'].markers
    assert sum(m.ns == 'foot_spheres' for m in markers) == 8


def test_off_the_gantry_the_policy_stands_and_the_feet_load_and_lift(sim2sim):
    feet = sim2sim['feet']
    assert 'success=True' in _output(sim2sim, '/g1_sim_node/elastic_band ')
    assert 'damping' not in sim2sim['modes'][:-1], 'the policy fell to damping before the e-stop'
    assert feet['height'] and min(feet['height']) > FALL_HEIGHT, \
        f'pelvis down to {min(feet["height"], default=None)} m'
    for side in ('left', 'right'):
        forces = feet[side]
        # What rviz shows: the wrench of a foot in stance carries weight, one in the air none.
        assert forces and max(forces) > LOADED_N and min(forces) < LIFTED_N, \
            f'{side} foot: {min(forces, default=None)}..{max(forces, default=None)} N'


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


def test_every_rviz_display_has_a_publisher_and_messages(sim2sim):
    types = rviz_topics()
    assert set(sim2sim['rviz']) == set(types) - FROM_ROBOT_STATE_PUBLISHER
    for topic, (publishers, arrived) in sim2sim['rviz'].items():
        assert publishers, f'bcg_ros.rviz shows {topic}, which nothing in sim2sim publishes'
        assert {t for _, t in publishers} == {types[topic]}, (topic, publishers)
        assert arrived, f'{topic}: no message within {RVIZ_WAIT_S} s'


def test_ctrl_c_ends_the_launch_and_every_node(sim2sim):
    pids = sim2sim['pids']
    launch = sim2sim['launch']
    launch.stop()
    assert sorted(name.rsplit('-', 1)[0] for name in pids) == sorted(NODES), pids
    assert not running(pids) and not launch.left_running, \
        f'left running after Ctrl-C: {running(pids)} {launch.left_running}'
    log = launch.log()
    assert launch.proc.returncode == 0, f'exit {launch.proc.returncode}:\n{log[-3000:]}'
    unclean = re.findall(r'\[ERROR\] \[(\S+)\]: process has died', log)
    assert not unclean, f'{unclean} died instead of finishing on Ctrl-C:\n{log[-3000:]}'
