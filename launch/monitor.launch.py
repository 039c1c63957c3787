"""
On an operator's laptop: the robot model and rviz, watching a robot or a sim2sim run.

    ros2 launch bcg_ros monitor.launch.py
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

SHARE = get_package_share_directory('bcg_ros')


def _config(name):
    return os.path.join(SHARE, 'config', name)


def generate_launch_description():
    use_sim_time = LaunchConfiguration('use_sim_time')
    with open(os.path.join(SHARE, 'urdf', 'g1_29dof.urdf')) as f:
        urdf = f.read()
    return LaunchDescription([
        DeclareLaunchArgument('rviz_config', default_value=_config('bcg_ros.rviz'),
                              description='rviz2 configuration'),
        DeclareLaunchArgument('use_sim_time', default_value='false',
                              description='follow /clock (sim2sim faster than real time)'),
        Node(package='robot_state_publisher', executable='robot_state_publisher',
             name='robot_state_publisher',
             parameters=[{'robot_description': urdf, 'use_sim_time': use_sim_time}]),
        Node(package='rviz2', executable='rviz2', name='rviz2',
             arguments=['-d', LaunchConfiguration('rviz_config')],
             parameters=[{'use_sim_time': use_sim_time}]),
    ])
