"""
real.launch.py for real, against g1_sim_node standing in for the G1 (same topics).

g1_sim_node runs from `ros2 run` at a tenth of real time, publishing /clock; the README's
`ros2 launch bcg_ros real.launch.py policy:=...` starts policy_node and state_bridge_node
on that clock (robot_state_publisher off: no PyPI wheel). Two of policy_node's safety
rules are driven from the `ros2` command line:

- activate is refused while another node publishes /lowcmd (this test's), and accepted
  once it is gone;
- standing, when the LowState stream stops (g1_sim_node ~/pause_state, as a broken link
  would), the first damping LowCmd follows the last LowState by the shipped
  stale_timeout in simulated time (plus a command period and the hops).
"""

import threading
import time

import pytest
import yaml

from launch_harness import Domain, Launch, Listener, NO_RSP_RVIZ, readme_commands, REPO, \
    require_ros2, running

pytestmark = [pytest.mark.launch, pytest.mark.ros]
STARTUP_S = 90.0
REAL_TIME_FACTOR = 0.1
"""Slow enough that the shipped 20 ms stale_timeout (200 ms of wall time here) does not
fire on a loaded machine before the test stops the stream itself."""
HOPS_S = 0.05
"""Simulated time allowed past stale_timeout: a command period and the DDS hops."""


def _stale_timeout():
    data = yaml.safe_load((REPO / 'config' / 'policy_node.yaml').read_text())
    return float(data['policy_node']['ros__parameters']['stale_timeout'])


class Commands:
    """LowCmds on /lowcmd with the simulated time of their arrival, LowState ticks."""

    def __init__(self, listener):
        from rosgraph_msgs.msg import Clock
        from unitree_hg.msg import LowCmd, LowState

        from bcg_ros.robot import lowlevel
        self.lock = threading.Lock()
        self.sim_now = None
        self.states = []   # simulated s of each LowState, from its tick (ms)
        self.cmds = []     # (simulated s at arrival, damping)
        tick_at = lowlevel.CDR_HEADER + int(lowlevel.LOWSTATE_CDR['tick'][0])

        def on_state(raw):
            with self.lock:
                self.states.append(int.from_bytes(raw[tick_at:tick_at + 4], 'little') * 1e-3)

        def on_cmd(raw):
            cmd, _ = lowlevel.read_lowcmd_cdr(raw)
            with self.lock:
                self.cmds.append((self.sim_now, cmd.is_damping()))

        def on_clock(msg):
            with self.lock:
                self.sim_now = msg.clock.sec + msg.clock.nanosec * 1e-9

        node = listener.node
        node.create_subscription(LowState, '/lowstate', on_state, 50, raw=True)
        node.create_subscription(LowCmd, '/lowcmd', on_cmd, 50, raw=True)
        node.create_subscription(Clock, '/clock', on_clock, 50)


@pytest.fixture(scope='module')
def real(tmp_path_factory):
    """Run the README's real-robot launch against g1_sim_node; what happened."""
    require_ros2()
    from std_msgs.msg import String
    from unitree_hg.msg import LowCmd

    from bcg_ros import policies
    from bcg_ros.nodes.policy_node import LATCHED_QOS
    domain = Domain(tmp_path_factory.mktemp('real'))
    listener = Listener(domain.id, {'mode': (String, '/policy_node/mode', LATCHED_QOS, False)})
    commands = Commands(listener)
    second = listener.node.create_publisher(LowCmd, '/lowcmd', 10)
    sim = Launch(domain, 'ros2 run bcg_ros g1_sim_node', '--ros-args', '--params-file',
                 str(REPO / 'config' / 'g1_sim_node.yaml'), '-p', 'publish_clock:=true',
                 '-p', f'real_time_factor:={REAL_TIME_FACTOR}')
    (command,) = readme_commands('real-command')
    command = command.replace('/path/to/policy.onnx', str(policies.path()))
    launch = Launch(domain, command, *NO_RSP_RVIZ, 'use_sim_time:=true')
    record = {'launch': launch, 'commands': commands}
    out = {}
    try:
        missing = domain.wait_for_nodes(['/g1_sim_node', '/policy_node', '/state_bridge_node'],
                                        STARTUP_S)
        assert not missing, f'{missing} not up in {STARTUP_S} s:\n{launch.log()[-3000:]}'
        out['configure'] = domain.ros2('ros2 lifecycle set /policy_node configure').stdout
        out['activate_beside'] = domain.ros2('ros2 lifecycle set /policy_node activate').stdout
        listener.node.destroy_publisher(second)
        deadline = time.monotonic() + 20.0
        while listener.node.get_publishers_info_by_topic('/lowcmd') \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        out['activate'] = domain.ros2('ros2 lifecycle set /policy_node activate').stdout
        out['stand'] = domain.ros2(
            'ros2 service call /policy_node/stand std_srvs/srv/Trigger').stdout
        # Passive sends damping; standing up, PD commands towards the default pose.
        with commands.lock:
            n_stand = len(commands.cmds)
        time.sleep(3.0)   # 0.3 s of simulated time into standing up
        with commands.lock:
            record['standing'] = [d for _, d in commands.cmds[n_stand:]]
            record['n_pause'] = len(commands.cmds)
        out['pause'] = domain.ros2('ros2 service call /g1_sim_node/pause_state '
                                   'std_srvs/srv/SetBool "{data: true}"').stdout
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            with commands.lock:
                if any(d for _, d in commands.cmds[-5:]):
                    break
            time.sleep(0.1)
        time.sleep(1.0)
        record['out'] = out
        record['pids'] = launch.pids()
        yield record
    finally:
        launch.stop()
        sim.stop()
        listener.close()
        domain.stop_daemon()


def test_activate_is_refused_beside_another_lowcmd_publisher(real):
    out, log = real['out'], real['launch'].log()
    assert 'Transitioning successful' in out['configure'], out['configure'] + log[-3000:]
    assert 'Transitioning failed' in out['activate_beside'], out['activate_beside']
    assert "activate refused: /lowcmd already has publisher(s) ['/launch_test_listener']" \
        in log, log[-3000:]
    assert 'Transitioning successful' in out['activate'], out['activate'] + log[-3000:]
    assert 'success=True' in out['stand'], out['stand']


def test_damping_follows_the_last_lowstate_by_stale_timeout(real):
    assert 'success=True' in real['out']['pause'], real['out']['pause']
    standing = real['standing']
    assert standing and not standing[-1], \
        f'not standing when the stream stopped (damping: {standing[-20:]})'
    commands = real['commands']
    with commands.lock:
        last_state = commands.states[-1]
        first = next((t for t, damping in commands.cmds[real['n_pause']:] if damping), None)
    assert first is not None, 'no damping LowCmd after the LowState stream stopped'
    delay, stale = first - last_state, _stale_timeout()
    print(f'last LowState -> first damping LowCmd: {delay * 1e3:.0f} ms simulated '
          f'(stale_timeout {stale * 1e3:.0f} ms)')
    # Below: this listener's /clock lags policy_node's by its own hops; on the wall clock
    # the delay would be a tenth of stale_timeout here.
    assert stale / 2 <= delay <= stale + HOPS_S, real['launch'].log()[-2000:]


def test_ctrl_c_ends_the_launch_and_every_node(real):
    launch = real['launch']
    launch.stop()
    assert launch.proc.returncode == 0, launch.log()[-3000:]
    assert not running(real['pids']), running(real['pids'])
