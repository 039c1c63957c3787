"""
The robot-side runtime (policy_node and what it loads) runs on the G1's computer.

That computer has Ubuntu 20.04/22.04, ROS 2 Foxy/Humble and Python 3.8/3.10, and no
training stack: policy_node, with a policy and its reference clip loaded, must import
neither JAX nor MuJoCo, and every module it loads must hold to Python 3.8 (vermin).
"""

import json
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
POLICIES = sorted((REPO / 'bcg_ros' / 'policies').glob('*.onnx'))

_PROBE = '''
import json, sys
import bcg_ros.nodes.policy_node
from bcg_ros import executor
runner = executor.PolicyRunner(sys.argv[1])
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


def test_policy_node_with_a_reference_policy_loads_no_training_stack(loaded):
    assert loaded['heavy'] == [], f'policy_node pulled in {loaded["heavy"]}'
    assert loaded['motion'] == POLICIES[0].stem


def test_runtime_modules_hold_to_python_38(loaded):
    vermin = shutil.which('vermin') or str(pathlib.Path(sys.executable).with_name('vermin'))
    if not pathlib.Path(vermin).exists():
        pytest.skip('vermin is not installed (requirements-test.txt)')
    files = [f for f in loaded['modules'] if f.endswith('.py')]
    assert any(f.endswith('executor.py') for f in files)
    out = subprocess.run([vermin, '-t=3.8-', '--no-tips', '--violations', '--eval-annotations',
                          *files], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]
