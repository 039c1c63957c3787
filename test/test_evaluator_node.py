"""
evaluator_node over DDS: ~/evaluate runs an evaluation, rviz topics flow, results land.

A path published on its policy_topic (as trainer_node announces exports) runs another.
"""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import threading
import time

import pytest
import yaml

from bcg_ros import testing
from bcg_ros.eval import synthetic

rclpy = pytest.importorskip('rclpy')

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402
from visualization_msgs.msg import MarkerArray  # noqa: E402

from bcg_ros.eval.rollout import RolloutConfig  # noqa: E402
from bcg_ros.nodes.evaluator_node import EvaluatorNodeConfig  # noqa: E402
from bcg_ros.nodes.tf_pub import tf_message_type  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIG = REPO / 'config' / 'evaluator_node.yaml'


def test_config_yaml_matches_the_code_defaults():
    y = yaml.safe_load(CONFIG.read_text())['evaluator_node']['ros__parameters']
    for cls in (EvaluatorNodeConfig, RolloutConfig):
        for f in dataclasses.fields(cls):
            code = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            code = list(code) if isinstance(code, tuple) else code
            assert y[f.name] == code, f'{CONFIG}: {f.name} = {y[f.name]!r}, code {code!r}'


def test_evaluate_service_over_dds(tmp_path):
    c = synthetic.velocity_contract(synthetic.isaaclab_joint_order(), history=2)
    policy = synthetic.save_policy(tmp_path / 'run' / 'exported' / 'policy.onnx', None,
                                   obs_size=c.obs_size)
    synthetic.write_deploy_yaml(tmp_path / 'run' / 'params' / 'deploy.yaml', c)
    out = tmp_path / 'eval'
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED='1')
    proc = subprocess.Popen(
        [sys.executable, '-m', 'bcg_ros.nodes.evaluator_node', '--ros-args',
         '--params-file', str(CONFIG), '-p', f'policy:={policy}', '-p', f'out_dir:={out}',
         '-p', 'runs:=2', '-p', 'duration:=1.0', '-p', 'command:=[0.3, 0.0, 0.0]',
         '-p', 'plots:=false', '-p', 'policy_topic:=/evaluator_test/exported'],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rclpy.init()
    node = rclpy.create_node('evaluator_test_client')
    got = {'joints': 0, 'markers': 0, 'tf': 0, 'result': None, 'results': 0}
    lock = threading.Lock()

    def count(key):
        def cb(msg):
            with lock:
                got[key] += 1
        return cb

    def on_result(msg):
        with lock:
            got['result'] = json.loads(msg.data)
            got['results'] += 1

    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
    node.create_subscription(JointState, '/joint_states', count('joints'), 100)
    node.create_subscription(MarkerArray, '/evaluator_node/foot_contacts', count('markers'), 100)
    TFMessage = tf_message_type()
    if TFMessage is not None:
        node.create_subscription(TFMessage, '/tf', count('tf'), 100)
    node.create_subscription(String, '/evaluator_node/results', on_result, latched)
    client = node.create_client(Trigger, '/evaluator_node/evaluate')
    exported = node.create_publisher(String, '/evaluator_test/exported', latched)
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    spinner = testing.Spinner(ex)
    try:
        assert client.wait_for_service(timeout_sec=30.0), 'evaluator_node did not come up'
        fut = client.call_async(Trigger.Request())
        t0 = time.monotonic()
        while not fut.done() and time.monotonic() - t0 < 120.0:
            time.sleep(0.05)
        assert fut.done(), 'no answer from ~/evaluate'
        resp = fut.result()
        assert resp.success, resp.message
        summary = json.loads(resp.message)
        assert summary['runs'] == 2 and summary['falls'] == 0
        assert summary['lin_vel_error'] == pytest.approx(0.3, abs=0.05)
        t0 = time.monotonic()
        while got['result'] is None and time.monotonic() - t0 < 10.0:
            time.sleep(0.05)
        with lock:
            # 2 runs x 50 policy steps published (some may still be in flight).
            assert got['joints'] > 20 and got['markers'] > 20
            assert TFMessage is None or got['tf'] > 20, 'no odom -> pelvis on /tf'
            assert got['result']['summary'] == summary
        report_dir = out / 'policy'
        assert json.loads((report_dir / 'result.json').read_text())['summary'] == summary
        assert (report_dir / 'report.md').is_file()
        # An announced export: evaluated without a service call, the same report dir.
        (report_dir / 'report.md').unlink()
        exported.publish(String(data=str(policy)))
        t0 = time.monotonic()
        while got['results'] < 2 and time.monotonic() - t0 < 120.0:
            time.sleep(0.05)
        assert got['results'] == 2, 'the announced policy was not evaluated'
        assert (report_dir / 'report.md').is_file()
    finally:
        spinner.stop()
        node.destroy_node()
        rclpy.shutdown()
        log = testing.stop_process(proc, timeout=10.0)
    assert 'falls' in log, log
