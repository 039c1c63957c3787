"""
monitor.launch.py for real: the README's command, and what it says where rviz2 is missing.

robot_state_publisher and rviz2 are C++ nodes with no PyPI wheel. Where one is missing,
the README's command must stop before starting anything, naming the package to install
(bcg_ros.launching.require); with both turned off the launch starts nothing and ends.
What the monitor shows is checked against the sim2sim node set in test_launch_sim2sim
(every display of the rviz config has a publisher there).
"""

import pytest

from bcg_ros.launching import missing_package_message
from launch_harness import Domain, Launch, NO_RSP_RVIZ, readme_commands, require_ros2

pytestmark = [pytest.mark.launch, pytest.mark.ros]
END_S = 60.0


def _installed(package):
    from ament_index_python.packages import get_package_prefix, PackageNotFoundError
    try:
        get_package_prefix(package)
    except (PackageNotFoundError, EnvironmentError):
        return False
    return True


@pytest.fixture
def domain(tmp_path):
    require_ros2()
    yield Domain(tmp_path)


@pytest.mark.parametrize('marker', ['monitor-command', 'sim2sim-commands'])
def test_readme_command_names_the_missing_package(domain, marker):
    # sim2sim.launch.py's too: failing there after its three nodes started would leave
    # them half started.
    command = readme_commands(marker)[0]
    missing = [(p, arg) for p, arg in (('robot_state_publisher', 'robot_state_publisher'),
                                       ('rviz2', 'use_rviz')) if not _installed(p)]
    if not missing:
        pytest.skip('robot_state_publisher and rviz2 are installed: the monitor opens a window')
    launch = Launch(domain, command)
    try:
        launch.proc.wait(timeout=END_S)
    finally:
        launch.stop()
    log = launch.log()
    assert launch.proc.returncode != 0, log
    assert missing_package_message(*missing[0]) in log, log
    assert not launch.pids(), f'started {launch.pids()} before failing:\n{log}'


def test_with_both_off_it_starts_nothing_and_ends(domain):
    (command,) = readme_commands('monitor-command')
    launch = Launch(domain, command, *NO_RSP_RVIZ)
    try:
        launch.proc.wait(timeout=END_S)
    finally:
        launch.stop()
    assert launch.proc.returncode == 0, launch.log()
    assert not launch.pids(), launch.log()
