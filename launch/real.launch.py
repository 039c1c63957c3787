"""
On the G1: the policy executor, the state bridge and the robot model; no simulator.

Run on the robot's computer (or a PC on its network) with the G1 in debug mode:

    ros2 launch bcg_ros real.launch.py policy:=/path/to/policy.onnx
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

SHARE = get_package_share_directory('bcg_ros')


def _config(name):
    return os.path.join(SHARE, 'config', name)


def generate_launch_description():
    with open(os.path.join(SHARE, 'urdf', 'g1_29dof.urdf')) as f:
        urdf = f.read()
    return LaunchDescription([
        DeclareLaunchArgument('policy', description='ONNX policy file'),
        DeclareLaunchArgument('policy_config', default_value=_config('policy_node.yaml'),
                              description='policy_node parameters file'),
        DeclareLaunchArgument('bridge_config', default_value=_config('state_bridge_node.yaml'),
                              description='state_bridge_node parameters file'),
        DeclareLaunchArgument('use_rviz', default_value='false',
                              description='start rviz2 here (usually on a laptop instead)'),
        DeclareLaunchArgument('use_sim_time', default_value='false',
                              description='must stay false on the robot'),
        Node(package='bcg_ros', executable='policy_node', name='policy_node', output='screen',
             parameters=[LaunchConfiguration('policy_config'),
                         {'policy_path': LaunchConfiguration('policy')}]),
        Node(package='bcg_ros', executable='state_bridge_node', name='state_bridge_node',
             output='screen', parameters=[LaunchConfiguration('bridge_config')]),
        Node(package='robot_state_publisher', executable='robot_state_publisher',
             name='robot_state_publisher', parameters=[{'robot_description': urdf}]),
        Node(package='rviz2', executable='rviz2', name='rviz2',
             arguments=['-d', _config('bcg_ros.rviz')],
             condition=IfCondition(LaunchConfiguration('use_rviz'))),
    ])
