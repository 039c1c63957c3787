"""trainer_node over DDS: progress, ~/save_checkpoint, ~/export_policy, ~/stop, Ctrl-C."""

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

rclpy = pytest.importorskip('rclpy')
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from bcg_ros.train import checkpoint  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]


def _start(tmp_path, out):
    params = tmp_path / 'trainer.yaml'
    params.write_text(
        'trainer_node:\n  ros__parameters:\n    preset: toy\n'
        f'    output_dir: {out}\n'
        "    overrides: ['run.iterations=100000', 'run.tensorboard=false',"
        " 'run.checkpoint_every=100000', 'run.curves_every=100000']\n")
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS='cpu')
    # The log goes to a file: a pipe read only at the end could fill and stall the node.
    log = tmp_path / f'{out.name}-{len(list(tmp_path.glob("*.log")))}.log'
    with open(log, 'w') as f:
        proc = subprocess.Popen([sys.executable, '-m', 'bcg_ros.nodes.trainer_node',
                                 '--ros-args', '--params-file', str(params)], env=env,
                                cwd=REPO, stdout=f, stderr=subprocess.STDOUT)
    proc.log = log
    return proc


@pytest.fixture
def client():
    rclpy.init()
    node = rclpy.create_node('trainer_node_test')
    yield node
    node.destroy_node()
    rclpy.shutdown()


def _progress(node, timeout=600.0):
    """The first status of a training iteration (phase 'training', not 'compiling')."""
    got = []

    def on_msg(msg):
        values = {kv.key: kv.value for kv in msg.status[0].values}
        if values.get('phase') == 'training':
            got.append((msg.status[0], values))

    sub = node.create_subscription(DiagnosticArray, '/trainer_node/progress', on_msg, 10)
    # The same status on /diagnostics, where rqt_robot_monitor looks.
    health = []
    sub_d = node.create_subscription(DiagnosticArray, '/diagnostics', lambda m: health.extend(
        s for s in m.status if s.name == 'bcg_ros/trainer'), 10)
    deadline = time.time() + timeout
    while not got and time.time() < deadline:
        rclpy.spin_once(node, timeout_sec=0.2)
    # /diagnostics carries the same status from its own publisher: it may land a little later.
    deadline = time.time() + 30.0
    while got and not health and time.time() < deadline:
        rclpy.spin_once(node, timeout_sec=0.2)
    node.destroy_subscription(sub)
    node.destroy_subscription(sub_d)
    assert got, 'no progress message'
    assert health, 'no bcg_ros/trainer status on /diagnostics'
    return got[-1]


def _call(node, name, timeout=60.0):
    cli = node.create_client(Trigger, f'/trainer_node/{name}')
    assert cli.wait_for_service(timeout_sec=timeout), f'no service {name}'
    fut = cli.call_async(Trigger.Request())
    rclpy.spin_until_future_complete(node, fut, timeout_sec=timeout)
    node.destroy_client(cli)
    assert fut.done(), f'{name} did not answer'
    return fut.result()


def _exported(node, timeout=10.0):
    """The latched path on ~/exported (what evaluator_node's policy_topic listens to)."""
    got = []
    qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)
    sub = node.create_subscription(String, '/trainer_node/exported', got.append, qos)
    deadline = time.time() + timeout
    while not got and time.time() < deadline:
        rclpy.spin_once(node, timeout_sec=0.1)
    node.destroy_subscription(sub)
    return got[-1].data if got else None


def test_services_and_ctrl_c(tmp_path, client):
    out = tmp_path / 'run'
    proc = _start(tmp_path, out)
    try:
        status, values = _progress(client)
        assert status.name == 'bcg_ros/trainer'
        assert status.message.startswith('iteration ')
        for key in ('iteration', 'reward', 'e_track', 'bundle_rate', 'samples', 'wall_s'):
            assert key in values
        res = _call(client, 'save_checkpoint')
        assert res.success, res.message
        assert checkpoint.read_meta(res.message)['iteration'] >= int(values['iteration'])
        res = _call(client, 'export_policy')
        assert res.success and pathlib.Path(res.message).is_file(), res.message
        import onnxruntime as ort
        ort.InferenceSession(res.message, providers=['CPUExecutionProvider'])
        assert _exported(client) == res.message, '~/exported must name the export'
        res = _call(client, 'stop')
        assert res.success
        proc.wait(timeout=120)
        assert proc.returncode == 0, proc.log.read_text()
        stopped_at = checkpoint.read_meta(out / 'checkpoint.npz')['iteration']
        assert stopped_at >= int(values['iteration'])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    # A second start resumes; Ctrl-C (SIGINT) stops it and saves a checkpoint.
    proc = _start(tmp_path, out)
    try:
        _, values = _progress(client)
        assert int(values['iteration']) > stopped_at
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        log = proc.log.read_text()
        assert 'saving a checkpoint' in log, log
        assert checkpoint.read_meta(out / 'checkpoint.npz')['iteration'] >= int(
            values['iteration'])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_bad_override_fails_at_startup_naming_the_field(tmp_path):
    params = tmp_path / 'bad.yaml'
    params.write_text("trainer_node:\n  ros__parameters:\n    preset: toy\n"
                      "    overrides: ['shac.actor_lr=fast']\n")
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS='cpu')
    r = subprocess.run([sys.executable, '-m', 'bcg_ros.nodes.trainer_node', '--ros-args',
                        '--params-file', str(params)], env=env, cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2
    assert 'shac.actor_lr' in r.stdout + r.stderr
