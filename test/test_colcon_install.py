"""colcon build of bcg_ros installs what `ros2 run` and `ros2 launch` look for."""

import ast
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


def console_scripts():
    """Return the names in setup.py's CONSOLE_SCRIPTS, read without running setup()."""
    tree = ast.parse((REPO / 'setup.py').read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == 'CONSOLE_SCRIPTS':
            return [s.split('=')[0].strip() for s in ast.literal_eval(node.value)]
    raise AssertionError('setup.py has no CONSOLE_SCRIPTS list')


@pytest.fixture(scope='module')
def install(tmp_path_factory):
    # The venv's colcon, also when the venv is not activated (.venv/bin/python -m pytest).
    search = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get('PATH', '')])
    colcon = shutil.which('colcon', path=search)
    if colcon is None:
        pytest.skip('colcon is not installed')
    ws = tmp_path_factory.mktemp('colcon_ws')
    cmd = [colcon, '--log-base', str(ws / 'log'), 'build', '--base-paths', str(REPO),
           '--build-base', str(ws / 'build'), '--install-base', str(ws / 'install'),
           '--packages-select', 'bcg_ros']
    res = subprocess.run(cmd, cwd=ws, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    return ws / 'install'


def test_every_executable_is_where_ros2_run_looks(install):
    names = console_scripts()
    assert 'bcg-bench' in names
    for name in names:
        exe = install / 'bcg_ros' / 'lib' / 'bcg_ros' / name
        assert exe.is_file() and os.access(exe, os.X_OK), exe


def test_ament_index_finds_the_share_directory(install):
    code = ('from ament_index_python.packages import get_package_share_directory as g; '
            'print(g("bcg_ros"))')
    env = dict(os.environ, AMENT_PREFIX_PATH=str(install / 'bcg_ros'))
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True,
                         text=True, check=True).stdout.strip()
    share = pathlib.Path(out)
    assert share == install / 'bcg_ros' / 'share' / 'bcg_ros'
    for folder in ('launch', 'config', 'urdf'):
        ours = sorted(p.name for p in (REPO / folder).glob('*') if p.is_file())
        installed = sorted(p.name for p in (share / folder).glob('*'))
        assert installed == ours, folder
    assert (share / 'urdf' / 'g1_29dof.urdf').is_file()
    assert (share / 'package.xml').is_file()


def test_installed_package_carries_its_model_and_runs(install):
    site = next((install / 'bcg_ros' / 'lib').glob('python3*/site-packages'))
    assert (site / 'bcg_ros' / 'models' / 'g1_29dof.xml').is_file()
    env = dict(os.environ, PYTHONPATH=str(site))
    exe = install / 'bcg_ros' / 'lib' / 'bcg_ros' / 'bcg-bench'
    res = subprocess.run([sys.executable, str(exe), '--help'], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert 'bcg-bench' in res.stdout


def test_installed_node_runs_through_its_own_shebang(install):
    # ros2 run executes the script itself: its first line must name a Python that has
    # rclpy and the runtime's packages (the one the workspace was built with).
    site = next((install / 'bcg_ros' / 'lib').glob('python3*/site-packages'))
    exe = install / 'bcg_ros' / 'lib' / 'bcg_ros' / 'policy_node'
    shebang = exe.read_text().splitlines()[0]
    assert shebang.startswith('#!') and 'python' in shebang, shebang
    env = dict(os.environ, PYTHONPATH=str(site), ROS_DOMAIN_ID='77')
    res = subprocess.run([str(exe), '--ros-args', '-p', 'command_priority:=100'], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert 'command_priority' in res.stdout + res.stderr
