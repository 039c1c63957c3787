"""
On an operator's laptop: the robot model and rviz, watching a robot or a sim2sim run.

    ros2 launch bcg_ros monitor.launch.py

sim2sim.launch.py and real.launch.py include this file for their own
robot_state_publisher and rviz2 (bcg_ros.launching.view).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from bcg_ros.launching import config, require, robot_description


def generate_launch_description():
    use_sim_time = LaunchConfiguration('use_sim_time')
    return LaunchDescription([
        DeclareLaunchArgument('rviz_config', default_value=config('bcg_ros.rviz'),
                              description='rviz2 configuration'),
        DeclareLaunchArgument('use_rviz', default_value='true', description='start rviz2'),
        DeclareLaunchArgument('robot_state_publisher', default_value='true',
                              description='start robot_state_publisher (the URDF on /tf for '
                                          'rviz; C++, from a ROS 2 install)'),
        DeclareLaunchArgument('use_sim_time', default_value='false',
                              description='follow /clock (sim2sim faster than real time)'),
        require('robot_state_publisher', 'robot_state_publisher'),
        require('rviz2', 'use_rviz'),
        Node(package='robot_state_publisher', executable='robot_state_publisher',
             name='robot_state_publisher',
             parameters=[{'robot_description': robot_description(),
                          'use_sim_time': use_sim_time}],
             condition=IfCondition(LaunchConfiguration('robot_state_publisher'))),
        Node(package='rviz2', executable='rviz2', name='rviz2',
             arguments=['-d', LaunchConfiguration('rviz_config')],
             parameters=[{'use_sim_time': use_sim_time}],
             condition=IfCondition(LaunchConfiguration('use_rviz'))),
    ])
