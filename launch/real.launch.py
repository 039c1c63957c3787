"""
On the G1: the policy executor, the state bridge and the robot model; no simulator.

Run on the robot's computer (or a PC on its network) with the G1 in debug mode:

    ros2 launch bcg_ros real.launch.py policy:=/path/to/policy.onnx
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node

from bcg_ros.launching import config, view


def generate_launch_description():
    use_sim_time = LaunchConfiguration('use_sim_time')
    return LaunchDescription([
        DeclareLaunchArgument('policy', description='ONNX policy file'),
        DeclareLaunchArgument('policy_config', default_value=config('policy_node.yaml'),
                              description='policy_node parameters file'),
        DeclareLaunchArgument('bridge_config', default_value=config('state_bridge_node.yaml'),
                              description='state_bridge_node parameters file'),
        DeclareLaunchArgument('use_rviz', default_value='false',
                              description='start rviz2 here (usually on a laptop instead)'),
        DeclareLaunchArgument('robot_state_publisher', default_value='true',
                              description='start robot_state_publisher (the URDF on /tf for '
                                          'rviz; C++, from a ROS 2 install)'),
        DeclareLaunchArgument('use_sim_time', default_value='false',
                              description='must stay false on the robot (true only against '
                                          'g1_sim_node publishing /clock)'),
        view(),
        LifecycleNode(package='bcg_ros', executable='policy_node', name='policy_node',
                      namespace='', output='screen',
                      parameters=[LaunchConfiguration('policy_config'),
                                  {'policy_path': LaunchConfiguration('policy'),
                                   'use_sim_time': use_sim_time}]),
        Node(package='bcg_ros', executable='state_bridge_node', name='state_bridge_node',
             output='screen',
             parameters=[LaunchConfiguration('bridge_config'), {'use_sim_time': use_sim_time}]),
    ])
