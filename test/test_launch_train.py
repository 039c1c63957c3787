"""
train.launch.py for real: the README's train commands on the toy preset.

The README's block after ``<!-- train-commands -->`` is run as it stands, its
`ros2 launch bcg_ros train.launch.py ... evaluate:=true` with ``config:=`` pointing at
the toy preset (a point mass: seconds per iteration instead of minutes of G1
compiling). Once training runs, `ros2 service call /trainer_node/export_policy`
must answer with an ONNX file, announce it on /trainer_node/exported and hand it to
evaluator_node; `ros2 service call /trainer_node/stop` must end training, and with it
the launch (evaluator_node included).
"""

import pathlib
import re
import time

import pytest

from launch_harness import Domain, Launch, Listener, readme_commands, require_ros2, running

pytestmark = [pytest.mark.launch, pytest.mark.ros]
TRAINING_S = 240.0
"""Until the first training iteration: importing JAX and compiling the toy step (25 s on a
loaded 2-core machine with an empty JAX cache)."""
END_S = 60.0


def _toy_config(folder):
    out = folder / 'run'
    path = folder / 'trainer_node.yaml'
    path.write_text(
        'trainer_node:\n  ros__parameters:\n    preset: toy\n'
        f'    output_dir: {out}\n'
        "    overrides: ['run.iterations=100000', 'run.tensorboard=false',"
        " 'run.checkpoint_every=100000', 'run.curves_every=100000']\n")
    return path


@pytest.fixture(scope='module')
def train(tmp_path_factory):
    """Run the README's train block; what each command printed, what was announced."""
    require_ros2()
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String
    commands = readme_commands('train-commands')
    domain = Domain(tmp_path_factory.mktemp('train'))
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
    listener = Listener(domain.id, {
        'progress': (DiagnosticArray, '/trainer_node/progress', 10, False),
        'exported': (String, '/trainer_node/exported', latched, False)})
    launch = Launch(domain, commands[0], f'config:={_toy_config(domain.tmp)}')
    record = {'launch': launch, 'outputs': {}}
    try:
        deadline = time.monotonic() + TRAINING_S
        while time.monotonic() < deadline and launch.proc.poll() is None:
            msg = listener.latest('progress')
            if msg and any(kv.key == 'phase' and kv.value == 'training'
                           for kv in msg.status[0].values):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f'no training iteration in {TRAINING_S} s:\n{launch.log()[-3000:]}')
        record['pids'] = launch.pids()
        for command in commands[1:]:
            record['outputs'][command.split()[3]] = domain.ros2(command).stdout
            if command.split()[3] == '/trainer_node/export_policy':
                listener.wait(['exported'], 10.0)
                record['exported'] = listener.latest('exported')
                launch.wait_for(r'evaluator_node\]: /trainer_node/exported: evaluating', 30.0)
        t0 = time.monotonic()
        launch.proc.wait(timeout=END_S)
        record['end_s'] = time.monotonic() - t0
        yield record
    finally:
        launch.stop()
        listener.close()
        domain.stop_daemon()


def test_export_policy_is_announced_and_evaluated(train):
    out = train['outputs']['/trainer_node/export_policy']
    match = re.search(r"success=True, message='([^']+\.onnx)'", out)
    assert match, out
    path = match.group(1)
    assert pathlib.Path(path).is_file()
    assert train['exported'] is not None and train['exported'].data == path
    log = train['launch'].log()
    assert f'[evaluator_node]: /trainer_node/exported: evaluating {path}' in log, log[-3000:]


def test_stop_ends_training_and_the_launch(train):
    assert 'success=True' in train['outputs']['/trainer_node/stop']
    launch = train['launch']
    log = launch.log()
    assert launch.proc.returncode == 0, log[-3000:]
    print(f'train launch ended {train["end_s"]:.1f} s after ~/stop')
    launch.stop()
    assert not running(train['pids']) and not launch.left_running, \
        (running(train['pids']), launch.left_running)
    assert re.search(r'\[trainer_node-\d+\]: process has finished cleanly', log), log[-3000:]
    assert re.search(r'\[evaluator_node-\d+\]: process has finished cleanly', log), log[-3000:]
