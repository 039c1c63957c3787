"""
real.launch.py for real, against g1_sim_node standing in for the G1 (same topics).

g1_sim_node runs from `ros2 run` at a twentieth of real time, publishing /clock; the README's
`ros2 launch bcg_ros real.launch.py policy:=...` starts policy_node and state_bridge_node
on that clock (robot_state_publisher off: no PyPI wheel). Two of policy_node's safety
rules are driven from the `ros2` command line:

- activate is refused while another node publishes /lowcmd (this test's), and accepted
  once it is gone;
- standing, when the LowState stream stops (g1_sim_node ~/pause_state, as a broken link
  would), policy_node switches to damping after the shipped stale_timeout of simulated
  time without LowState (plus at most a command period and the hops), and damping
  commands go out on /lowcmd.
"""

import re
import threading
import time

import pytest
import yaml

from launch_harness import Domain, Launch, Listener, NO_RSP_RVIZ, readme_commands, REPO, \
    require_ros2, running

pytestmark = [pytest.mark.launch, pytest.mark.ros]
STARTUP_S = 90.0
REAL_TIME_FACTOR = 0.05
"""Slow enough that the shipped 20 ms stale_timeout (400 ms of wall time here) does not
fire before the test stops the stream itself: at a tenth of real time it did (a 22 ms
gap) on the 2-core CPU beside two training runs."""
HOPS_S = 0.05
"""Simulated time allowed past stale_timeout: a command period and the DDS hops."""


def _stale_timeout():
    data = yaml.safe_load((REPO / 'config' / 'policy_node.yaml').read_text())
    return float(data['policy_node']['ros__parameters']['stale_timeout'])


class Commands:
    """Whether each LowCmd on /lowcmd is a damping command, in order of arrival."""

    def __init__(self, listener):
        from unitree_hg.msg import LowCmd

        from bcg_ros.robot import lowlevel
        self.lock = threading.Lock()
        self.damping = []

        def on_cmd(raw):
            cmd, _ = lowlevel.read_lowcmd_cdr(raw)
            with self.lock:
                self.damping.append(cmd.is_damping())

        listener.node.create_subscription(LowCmd, '/lowcmd', on_cmd, 50, raw=True)


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
    record = {'launch': launch, 'sim': sim, 'commands': commands}
    out = {}
    try:
        missing = domain.wait_listed('ros2 node list', ['/g1_sim_node', '/policy_node',
                                                        '/state_bridge_node'], STARTUP_S) \
            + domain.wait_listed('ros2 lifecycle nodes', ['/policy_node'], STARTUP_S)
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
            n_stand = len(commands.damping)
        time.sleep(3.0)   # 0.15 s of simulated time into standing up
        with commands.lock:
            record['standing'] = commands.damping[n_stand:]
            record['n_pause'] = len(commands.damping)
        out['pause'] = domain.ros2('ros2 service call /g1_sim_node/pause_state '
                                   'std_srvs/srv/SetBool "{data: true}"').stdout
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            with commands.lock:
                if any(commands.damping[-5:]):
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
        damping_after = any(commands.damping[real['n_pause']:])
    assert damping_after, 'no damping LowCmd on /lowcmd after the LowState stream stopped'
    # policy_node's own account, on its clock (simulated time): how long the stream had
    # been silent when it switched. This test's listener cannot time it to the
    # millisecond: its /clock lags by its own hops on a loaded machine.
    log = real['launch'].log()
    match = re.search(r'mode stand -> damping: LowState stale: none for ([0-9.]+) ms', log)
    assert match, log[-2000:]
    silent, stale = float(match.group(1)) * 1e-3, _stale_timeout()
    print(f'damping after {silent * 1e3:.1f} ms of simulated time without LowState '
          f'(stale_timeout {stale * 1e3:.0f} ms)')
    assert stale <= silent <= stale + HOPS_S, log[-2000:]


def test_ctrl_c_ends_the_launch_the_simulator_and_every_node(real):
    launch, sim = real['launch'], real['sim']
    launch.stop()
    sim.stop()
    assert launch.proc.returncode == 0, launch.log()[-3000:]
    assert sim.proc.returncode == 0, sim.log()[-3000:]
    assert not running(real['pids']), running(real['pids'])
    assert not launch.left_running and not sim.left_running, \
        (launch.left_running, sim.left_running)
