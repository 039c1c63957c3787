"""Training: the differentiable-simulation trainer, and optionally the MuJoCo evaluator.

    ros2 launch bcg_ros train.launch.py motion:=run
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
    use_sim_time = LaunchConfiguration('use_sim_time')
    return LaunchDescription([
        DeclareLaunchArgument('config', default_value=_config('trainer_node.yaml'),
                              description='trainer_node parameters file'),
        DeclareLaunchArgument('motion', default_value='run',
                              description='built-in clip (run, jump, fight, dance) or a file'),
        DeclareLaunchArgument('use_evaluator', default_value='false',
                              description='evaluate each exported policy in MuJoCo'),
        DeclareLaunchArgument('evaluator_config', default_value=_config('evaluator_node.yaml'),
                              description='evaluator_node parameters file'),
        DeclareLaunchArgument('use_sim_time', default_value='false',
                              description='use /clock'),
        Node(package='bcg_ros', executable='trainer_node', name='trainer_node', output='screen',
             parameters=[LaunchConfiguration('config'),
                         {'motion': LaunchConfiguration('motion'),
                          'use_sim_time': use_sim_time}]),
        Node(package='bcg_ros', executable='evaluator_node', name='evaluator_node',
             output='screen',
             parameters=[LaunchConfiguration('evaluator_config'),
                         {'use_sim_time': use_sim_time}],
             condition=IfCondition(LaunchConfiguration('use_evaluator'))),
    ])
