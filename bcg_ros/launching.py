"""
What the launch files in launch/ share: the package's installed files and the C++ nodes.

Files are found when launched (FindPackageShare), not when a launch file is read.
robot_state_publisher and rviz2 are C++ nodes that every ROS 2 install has and that
have no PyPI wheel. They start in monitor.launch.py only, which the other modes
include (:func:`view`); it declares a boolean argument of the same name for each to
leave it out (robot_state_publisher:=false, use_rviz:=false), and puts
``require(package, argument)`` before its first node, so that a missing one stops the
launch before anything starts, saying which package to install, instead of
launch_ros's bare "package not found" with the other nodes half started.

Imported by the launch files only: it needs the launch packages, which come with a
ROS 2 install (or scripts/install.sh --ros-sources).
"""

import os
from typing import List

from ament_index_python.packages import get_package_share_directory, PackageNotFoundError
from launch.actions import IncludeLaunchDescription, OpaqueFunction
from launch.conditions import IfCondition
from launch.launch_context import LaunchContext
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import Command, LaunchConfiguration, PathJoinSubstitution
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

PACKAGE = 'bcg_ros'


def share(*parts: str) -> PathJoinSubstitution:
    """A file installed under share/bcg_ros (launch/, config/, urdf/), found when launched."""
    return PathJoinSubstitution([FindPackageShare(PACKAGE), *parts])


def config(name: str) -> PathJoinSubstitution:
    """A node parameters file (or the rviz config) installed under share/bcg_ros/config."""
    return share('config', name)


def robot_description() -> ParameterValue:
    """The G1's URDF, read when launched, as robot_state_publisher's ``robot_description``."""
    return ParameterValue(Command(['cat ', share('urdf', 'g1_29dof.urdf')]), value_type=str)


def view() -> IncludeLaunchDescription:
    """
    robot_state_publisher and rviz2 (monitor.launch.py) for a mode that shows the robot.

    The including file declares ``use_rviz``, ``robot_state_publisher`` and
    ``use_sim_time``, and they are passed on. Put it first: its check for the C++
    packages then runs before any other node starts.
    """
    return IncludeLaunchDescription(
        PythonLaunchDescriptionSource(share('launch', 'monitor.launch.py')),
        launch_arguments={name: LaunchConfiguration(name) for name in
                          ('use_rviz', 'robot_state_publisher', 'use_sim_time')}.items())


def missing_package_message(package: str, argument: str) -> str:
    """What to do when ``package`` is switched on by ``argument`` but not installed."""
    distro = os.environ.get('ROS_DISTRO', '<distro>')
    return (f"{package} is not installed (no package '{package}' on AMENT_PREFIX_PATH; it is "
            f"a C++ node with no PyPI wheel): install ros-{distro}-{package.replace('_', '-')} "
            f'and source /opt/ros/{distro}/setup.bash, or launch with {argument}:=false')


def require(package: str, argument: str) -> OpaqueFunction:
    """
    Fail the launch, saying what to install, if ``argument`` is true and ``package`` missing.

    An action for the launch description, before its first node: it runs before any
    process starts, so a missing package leaves nothing half started.
    """
    def check(context: LaunchContext) -> List:
        if IfCondition(LaunchConfiguration(argument)).evaluate(context):
            try:
                get_package_share_directory(package)
            except PackageNotFoundError:
                raise RuntimeError(missing_package_message(package, argument)) from None
        return []
    return OpaqueFunction(function=check)
