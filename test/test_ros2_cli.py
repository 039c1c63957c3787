"""
The `ros2` command line finds bcg_ros and the interface packages it builds.

The ament index is what `ros2 run`, `ros2 launch` and `ros2 interface` look things up
in: bcg_ros (its share directory and executables) and unitree_hg and tf2_msgs (the
interface packages scripts/build_interfaces.sh builds) must be registered where
AMENT_PREFIX_PATH points, in a ROS 2 install or in the venv.
"""

import pathlib

import pytest

from launch_harness import Domain, REPO, require_ros2
from test_colcon_install import console_scripts

pytestmark = [pytest.mark.launch, pytest.mark.ros]


@pytest.fixture(scope='module')
def domain(tmp_path_factory):
    require_ros2()
    yield Domain(tmp_path_factory.mktemp('cli'))


def test_ros2_finds_bcg_ros_its_launch_files_and_executables(domain):
    out = domain.ros2('ros2 pkg prefix --share bcg_ros')
    assert out.returncode == 0, out.stdout
    share = pathlib.Path(out.stdout.strip())
    for folder in ('launch', 'config', 'urdf'):
        ours = sorted(p.name for p in (REPO / folder).iterdir() if p.is_file())
        assert sorted(p.name for p in (share / folder).iterdir()) == ours, folder
    out = domain.ros2('ros2 pkg executables bcg_ros').stdout.split()
    assert sorted(out[1::2]) == sorted(console_scripts()), out


@pytest.mark.parametrize('name, field', [('unitree_hg/msg/LowCmd', 'MotorCmd[35] motor_cmd'),
                                         ('tf2_msgs/msg/TFMessage', 'transforms')])
def test_ros2_interface_show_finds_the_built_interfaces(domain, name, field):
    out = domain.ros2(f'ros2 interface show {name}')
    assert out.returncode == 0 and field in out.stdout, out.stdout
