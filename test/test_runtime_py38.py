"""
The robot-side runtime (policy_node, state_bridge_node, what they load) runs on the G1.

That computer has Ubuntu 20.04/22.04, ROS 2 Foxy/Humble and Python 3.8/3.10, and no
training stack: policy_node, with a policy and its reference clip loaded, and
state_bridge_node's estimator, stepped on a LowState's worth of data, must import
neither JAX nor MuJoCo, and every module they load must hold to Python 3.8 (vermin).
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
POLICIES = sorted((REPO / 'bcg_ros' / 'policies').glob('*.onnx'))

_PROBE = '''
import json, sys
import numpy as np
import bcg_ros.nodes.policy_node
import bcg_ros.nodes.state_bridge_node
from bcg_ros.runtime import estimator
from bcg_ros.runtime.runner import PolicyRunner
from bcg_ros.robot import g1
runner = PolicyRunner(sys.argv[1])
bridge = estimator.StateEstimator()
sample = estimator.Sample(quat=np.array([1.0, 0.0, 0.0, 0.0]), gyro=np.zeros(3),
                          acc=np.array([0.0, 0.0, 9.81]), q=np.array(g1.DEFAULT_POSE),
                          dq=np.zeros(g1.NUM_JOINTS), tau=np.zeros(g1.NUM_JOINTS))
state, estimate = bridge.step(bridge.initial_state(sample), sample, 0.002)
assert np.isfinite(estimate.position).all() and np.isfinite(estimate.foot_wrench).all()
print(json.dumps({"heavy": sorted(m for m in ("jax", "jaxlib", "mujoco", "optax")
                                  if m in sys.modules),
                  "modules": sorted(m.__file__ for n, m in sys.modules.items()
                                    if n.startswith("bcg_ros") and getattr(m, "__file__", None)),
                  "motion": runner.motion.name if runner.motion is not None else None}))
'''


@pytest.fixture(scope='module')
def loaded():
    if not POLICIES:
        pytest.skip('no shipped policy to load')
    out = subprocess.run([sys.executable, '-c', _PROBE, str(POLICIES[0])], capture_output=True,
                         text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_runtime_nodes_load_no_training_stack(loaded):
    assert loaded['heavy'] == [], f'policy_node or state_bridge_node pulled in {loaded["heavy"]}'
    assert loaded['motion'] == POLICIES[0].stem


def test_runtime_modules_hold_to_python_38(loaded):
    vermin = shutil.which('vermin') or str(pathlib.Path(sys.executable).with_name('vermin'))
    if not pathlib.Path(vermin).exists():
        pytest.skip('vermin is not installed (requirements-test.txt)')
    files = [f for f in loaded['modules'] if f.endswith('.py')]
    assert any(f.endswith('modes.py') for f in files)
    assert any(f.endswith('legs.py') for f in files)
    assert any(f.endswith('rotation.py') for f in files)
    out = subprocess.run([vermin, '-t=3.8-', '--no-tips', '--violations', '--eval-annotations',
                          *files], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]


_OFFLINE = ('Could not fetch URL', 'NewConnectionError', 'Network is unreachable',
            'Temporary failure in name resolution', 'Max retries exceeded')


@pytest.mark.parametrize('python', ['3.8', '3.10'])
def test_runtime_requirements_resolve_to_aarch64_wheels(python, tmp_path):
    # The G1's computer is a Jetson Orin (aarch64, glibc 2.31 on Ubuntu 20.04): pip must find
    # a binary wheel of every runtime requirement, and of what they pull in, for it.
    report = tmp_path / 'report.json'
    platforms = [f'--platform={p}' for p in ('manylinux2014_aarch64', 'manylinux_2_27_aarch64',
                                             'manylinux_2_28_aarch64', 'manylinux_2_31_aarch64')]
    out = subprocess.run(
        [sys.executable, '-m', 'pip', 'install', '--dry-run', '--ignore-installed', '--quiet',
         '--only-binary=:all:', f'--python-version={python}', '--implementation=cp',
         *platforms, f'--target={tmp_path / "target"}', f'--report={report}',
         '-r', str(REPO / 'requirements-runtime.txt')],
        capture_output=True, text=True, timeout=300)
    if out.returncode != 0 and any(s in out.stderr for s in _OFFLINE):
        pytest.skip('the package index is not reachable')
    assert out.returncode == 0, out.stderr[-3000:]
    wheels = {i['metadata']['name'].lower(): i['download_info']['url'].rsplit('/', 1)[-1]
              for i in json.loads(report.read_text())['install']}
    assert {'numpy', 'pyyaml', 'onnxruntime'} <= set(wheels), wheels
    assert not {'jax', 'jaxlib', 'mujoco'} & set(wheels), wheels
    tag = 'cp' + python.replace('.', '')
    for name in ('numpy', 'onnxruntime'):
        assert tag in wheels[name] and 'aarch64' in wheels[name], wheels[name]


_BLOCKER = '''
import sys


class _NotInstalled:
    """Import hook: the training stack is not installed in this environment."""

    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {blocked!r}:
            raise ModuleNotFoundError(f'No module named {{name!r}} (runtime environment)')
        return None


sys.meta_path.insert(0, _NotInstalled())
'''
TRAINING_STACK = ('jax', 'jaxlib', 'mujoco', 'optax', 'flax', 'mujoco_mjx')
GANTRY_MOTION = 'dance'
"""The shipped policy run here: the robot stays on the gantry (the elastic band holds the
pelvis and damps its travel), where a policy that keeps its feet near the ground moves its
joints as it would standing, and one that runs would flail against the band."""


@pytest.mark.ros
def test_runtime_nodes_run_a_policy_where_the_training_stack_cannot_be_imported(tmp_path):
    """policy_node and state_bridge_node with jax and mujoco uninstallable, on g1_sim_node."""
    pytest.importorskip('rclpy')
    pytest.importorskip('unitree_hg.msg', reason='unitree_hg is not built')
    if not (REPO / 'bcg_ros' / 'policies' / f'{GANTRY_MOTION}.onnx').is_file():
        pytest.skip(f'no shipped {GANTRY_MOTION} policy to run')
    import random
    import time

    import numpy as np
    import rclpy
    from dds_harness import Observer, spawn
    from nav_msgs.msg import Odometry

    from bcg_ros import policies, testing

    blocker = tmp_path / 'runtime_env'
    blocker.mkdir()
    (blocker / 'sitecustomize.py').write_text(_BLOCKER.format(blocked=set(TRAINING_STACK)))
    probe = subprocess.run([sys.executable, '-c', 'import mujoco'], capture_output=True,
                           text=True, env=dict(os.environ, PYTHONPATH=str(blocker)))
    assert probe.returncode != 0 and 'runtime environment' in probe.stderr, probe.stderr
    domain = random.randint(1, 29)
    rclpy.init(domain_id=domain)
    procs = {'sim': spawn('bcg_ros.nodes.g1_sim_node', domain, '--params-file',
                          str(REPO / 'config' / 'g1_sim_node.yaml'))}
    procs['policy'] = spawn('bcg_ros.nodes.policy_node', domain, '--params-file',
                            str(REPO / 'config' / 'policy_node.yaml'),
                            '-p', f'policy_path:={policies.path(GANTRY_MOTION)}',
                            '-p', 'stand_duration:=1.0', '-p', 'stale_timeout:=0.1',
                            path=str(blocker))
    procs['bridge'] = spawn('bcg_ros.nodes.state_bridge_node', domain, '--params-file',
                            str(REPO / 'config' / 'state_bridge_node.yaml'), path=str(blocker))
    obs = Observer()
    obs.watch_mode('policy_node')
    odom = []
    obs.node.create_subscription(Odometry, '/odom', lambda m: odom.append(time.monotonic()), 10)
    logs = {}
    try:
        obs.activate_and_stand()
        time.sleep(1.5)
        response = obs.trigger('/policy_node/start')
        assert response.success, response.message
        t0 = time.monotonic()
        time.sleep(3.0)
        assert obs.mode('policy_node') == 'policy', obs.modes['policy_node']
        cmds = obs.cmds_since(t0)
        assert len(cmds) > 0.3 * 3.0 * 500 and not any(c[1] for c in cmds)
        moved = np.ptp(np.array([c[3] for c in cmds]), axis=0).max()
        assert moved > 0.05, 'the policy does not move the joints'
        assert sum(1 for t in odom if t > t0) > 10, 'state_bridge_node publishes no /odom'
    finally:
        obs.close()
        for name, proc in procs.items():
            logs[name] = testing.stop_process(proc)
        rclpy.shutdown()
    for name in ('policy', 'bridge'):
        assert 'Traceback' not in logs[name] and 'runtime environment' not in logs[name], \
            logs[name][-3000:]
