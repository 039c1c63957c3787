"""
state_bridge_node over DDS: LowState in, joint states, IMU, odometry, TF, contacts out.

The node runs as its own process with the package's parameters file, as a
launch file starts it; the test publishes a standing G1's LowState at 500 Hz
and listens.
"""

import os
import pathlib
import subprocess
import sys
import time

import mujoco
import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy', reason='rclpy not installed')
unitree_hg_msg = pytest.importorskip(
    'unitree_hg.msg', reason='unitree_hg not built (bash scripts/build_interfaces.sh)')

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus  # noqa: E402
from geometry_msgs.msg import WrenchStamped  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import Imu, JointState  # noqa: E402
from visualization_msgs.msg import MarkerArray  # noqa: E402

from bcg_ros.robot import g1  # noqa: E402
from bcg_ros.robot import model as g1_model  # noqa: E402

pytestmark = pytest.mark.ros
REPO = pathlib.Path(__file__).resolve().parents[1]
PARAMS = REPO / 'config' / 'state_bridge_node.yaml'
LISTEN_S = 3.0

try:
    from tf2_msgs.msg import TFMessage
except ImportError:
    TFMessage = None


def _standing_lowstate():
    """Make a LowState of the G1 at rest under PD, from MuJoCo."""
    robot = g1_model.load()
    m, d = robot.model, mujoco.MjData(robot.model)
    d.qpos[:] = robot.standing_qpos()
    kp, kd, q0 = (np.array(v) for v in (g1.DEFAULT_KP, g1.DEFAULT_KD, g1.DEFAULT_POSE))
    for _ in range(400):
        d.ctrl[robot.actuator_ids] = kp * (q0 - d.qpos[robot.qpos_adr]) \
            - kd * d.qvel[robot.qvel_adr]
        mujoco.mj_step(m, d)
    mujoco.mj_forward(m, d)
    msg = unitree_hg_msg.LowState()
    msg.mode_machine = g1.MODE_MACHINE_29DOF
    msg.imu_state.quaternion = d.sensor('imu_quat').data.astype(np.float32)
    msg.imu_state.gyroscope = d.sensor('imu_gyro').data.astype(np.float32)
    msg.imu_state.accelerometer = d.sensor('imu_acc').data.astype(np.float32)
    for i in range(g1.NUM_JOINTS):
        ms = msg.motor_state[i]
        ms.q = float(d.qpos[robot.qpos_adr[i]])
        ms.dq = float(d.qvel[robot.qvel_adr[i]])
        ms.tau_est = float(d.actuator_force[robot.actuator_ids[i]])
    return msg, float(d.qpos[2]), float(m.body_subtreemass[robot.root_body] * 9.81)


@pytest.fixture(scope='module')
def bridge_run():
    """Start the node, stream LowState for a while, return what came out."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    proc = subprocess.Popen(
        [sys.executable, '-c', 'import sys; from bcg_ros.nodes.state_bridge_node import main; '
         'sys.exit(main())', '--ros-args', '--params-file', str(PARAMS)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rclpy.init()
    node = rclpy.create_node('state_bridge_probe')
    got = {k: [] for k in ('joint_states', 'imu', 'odom', 'tf', 'markers', 'left', 'right',
                           'diagnostics')}

    def keep(key):
        return lambda msg: got[key].append((time.monotonic(), msg))

    node.create_subscription(JointState, '/joint_states', keep('joint_states'), 10)
    node.create_subscription(Imu, '/imu', keep('imu'), qos_profile_sensor_data)
    node.create_subscription(Odometry, '/odom', keep('odom'), 10)
    node.create_subscription(DiagnosticArray, '/diagnostics', keep('diagnostics'), 10)
    node.create_subscription(MarkerArray, '/contact_markers', keep('markers'), 10)
    node.create_subscription(WrenchStamped, '/left_foot/wrench', keep('left'), 10)
    node.create_subscription(WrenchStamped, '/right_foot/wrench', keep('right'), 10)
    if TFMessage is not None:
        node.create_subscription(TFMessage, '/tf', keep('tf'), 100)
    pub = node.create_publisher(unitree_hg_msg.LowState, '/lowstate', 10)
    msg, height, weight = _standing_lowstate()
    try:
        # Wait for the node to come up and hear us (it answers with /joint_states).
        deadline = time.monotonic() + 60.0
        tick = 0
        while not got['joint_states'] and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read()
            msg.tick = tick
            tick += 2
            pub.publish(msg)
            rclpy.spin_once(node, timeout_sec=0.01)
        assert got['joint_states'], 'no /joint_states within 60 s'
        for v in got.values():
            v.clear()
        # Stream at 500 Hz on a fixed schedule; count what arrives in a window.
        period, start = 0.002, time.monotonic()
        n = 0
        while time.monotonic() - start < LISTEN_S:
            msg.tick = tick
            tick += 2
            pub.publish(msg)
            n += 1
            while True:
                rclpy.spin_once(node, timeout_sec=0.0)
                if time.monotonic() >= start + n * period:
                    break
                time.sleep(0.0002)
        sent = n
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    return {'got': got, 'sent': sent, 'height': height, 'weight': weight, 'log': out}


def _rate(items):
    if len(items) < 2:
        return 0.0
    return (len(items) - 1) / (items[-1][0] - items[0][0])


def _check_rate(run, key, hz):
    # LowState went out at `sent / LISTEN_S` Hz; outputs are decimated from it, so
    # their rate scales with it on this shared machine.
    lowstate_hz = run['sent'] / LISTEN_S
    expected = hz * min(1.0, lowstate_hz / 500.0)
    rate = _rate(run['got'][key])
    assert 0.6 * expected <= rate <= 1.3 * hz, \
        f'{key}: {rate:.1f} Hz, expected about {expected:.1f} Hz\n{run["log"]}'


def test_outputs_flow_at_their_rates(bridge_run):
    assert bridge_run['sent'] / LISTEN_S > 300, 'the probe could not publish near 500 Hz'
    for key, hz in (('joint_states', 100.0), ('imu', 100.0), ('odom', 100.0),
                    ('left', 50.0), ('right', 50.0), ('markers', 20.0)):
        _check_rate(bridge_run, key, hz)


def test_tf_odom_to_pelvis(bridge_run):
    if TFMessage is None:
        pytest.skip('tf2_msgs is not importable here (no wheel); the node then publishes no '
                    '/tf and says so in its log')
    _check_rate(bridge_run, 'tf', 100.0)
    t = bridge_run['got']['tf'][-1][1].transforms[0]
    assert (t.header.frame_id, t.child_frame_id) == ('odom', 'pelvis')


def test_tf_fallback_is_reported(bridge_run):
    if TFMessage is not None:
        pytest.skip('tf2_msgs is importable: /tf is published')
    assert 'tf2_msgs' in bridge_run['log'] and '/tf off' in bridge_run['log']


def test_joint_states_match_lowstate(bridge_run):
    msg = bridge_run['got']['joint_states'][-1][1]
    assert tuple(msg.name) == g1.JOINT_NAMES
    assert len(msg.position) == len(msg.velocity) == len(msg.effort) == g1.NUM_JOINTS
    np.testing.assert_allclose(msg.position, g1.DEFAULT_POSE, atol=0.05)


def test_odometry_of_a_standing_robot(bridge_run):
    odom = bridge_run['got']['odom'][-1][1]
    assert (odom.header.frame_id, odom.child_frame_id) == ('odom', 'pelvis')
    v = odom.twist.twist.linear
    assert np.linalg.norm([v.x, v.y, v.z]) < 0.02
    assert odom.pose.pose.position.z == pytest.approx(bridge_run['height'], abs=0.01)
    cov = np.array(odom.pose.covariance).reshape(6, 6)
    assert np.all(np.diag(cov) > 0)
    imu = bridge_run['got']['imu'][-1][1]
    assert imu.linear_acceleration.z == pytest.approx(9.81, abs=0.2)
    assert imu.orientation_covariance[0] > 0


def test_contacts_of_a_standing_robot(bridge_run):
    markers = bridge_run['got']['markers'][-1][1].markers
    spheres = [m for m in markers if m.ns == 'foot_spheres']
    arrows = [m for m in markers if m.ns == 'foot_forces']
    assert len(spheres) == 8 and len(arrows) == 2
    assert all(m.color.g > 0.8 for m in spheres), 'a standing foot sphere is not in contact'
    fz = [bridge_run['got'][side][-1][1].wrench.force.z for side in ('left', 'right')]
    # Both feet flat: each carries about half the weight, along its own z.
    np.testing.assert_allclose(sum(fz), bridge_run['weight'], rtol=0.1)
    assert min(fz) > 0.3 * bridge_run['weight']


def test_health_on_diagnostics(bridge_run):
    mine = [s for _, a in bridge_run['got']['diagnostics'] for s in a.status
            if s.name == 'state_bridge_node']
    assert mine, 'no /diagnostics status from state_bridge_node while LowState streamed'
    last = mine[-1]
    assert last.level == DiagnosticStatus.OK and last.message == 'estimating'
    values = {kv.key: kv.value for kv in last.values}
    assert int(values['lowstate_received']) > 100
    assert float(values['height']) == pytest.approx(bridge_run['height'], abs=0.02)


def test_params_yaml_holds_the_code_defaults():
    import dataclasses
    import yaml
    from bcg_ros.runtime.estimator import EstimatorConfig
    from bcg_ros.nodes.state_bridge_node import StateBridgeConfig
    y = yaml.safe_load(PARAMS.read_text())['state_bridge_node']['ros__parameters']
    names = set()
    for cls in (StateBridgeConfig, EstimatorConfig):
        for f in dataclasses.fields(cls):
            names.add(f.name)
            assert f.name in y, f'{PARAMS}: {f.name} missing'
            assert y[f.name] == f.default, \
                f'{PARAMS}: {f.name} = {y[f.name]!r}, code {f.default!r}'
    assert set(y) == names, set(y) ^ names
