"""
Sim2sim: the G1 simulator node, the policy executor, the state bridge, the robot model.

g1_sim_node speaks the robot's own /lowstate and /lowcmd, so policy_node and
state_bridge_node run exactly as on the real G1.

    ros2 launch bcg_ros sim2sim.launch.py                 # the shipped default (dance) policy
    ros2 launch bcg_ros sim2sim.launch.py policy:=/path/to/policy.onnx
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


def _shipped_policy() -> str:
    """The package's shipped default policy, or '' (stand and damping only) if there is none."""
    from bcg_ros import policies
    try:
        return str(policies.path())
    except policies.PolicyNotShipped:
        return ''


def generate_launch_description():
    policy = LaunchConfiguration('policy')
    use_sim_time = LaunchConfiguration('use_sim_time')
    with open(os.path.join(SHARE, 'urdf', 'g1_29dof.urdf')) as f:
        urdf = f.read()
    return LaunchDescription([
        DeclareLaunchArgument('policy', default_value=_shipped_policy(),
                              description='ONNX policy file (default: the shipped dance policy; '
                                          'empty: stand and damping only)'),
        DeclareLaunchArgument('policy_config', default_value=_config('policy_node.yaml'),
                              description='policy_node parameters file'),
        DeclareLaunchArgument('sim_config', default_value=_config('g1_sim_node.yaml'),
                              description='g1_sim_node parameters file'),
        DeclareLaunchArgument('bridge_config', default_value=_config('state_bridge_node.yaml'),
                              description='state_bridge_node parameters file'),
        DeclareLaunchArgument('use_rviz', default_value='true', description='start rviz2'),
        DeclareLaunchArgument('use_sim_time', default_value='false',
                              description='g1_sim_node publishes /clock and every node '
                                          'follows it (policy_node: its timeouts and '
                                          'periods in simulated seconds)'),
        Node(package='bcg_ros', executable='g1_sim_node', name='g1_sim_node', output='screen',
             parameters=[LaunchConfiguration('sim_config'),
                         # On sim time the simulator is the clock.
                         {'use_sim_time': use_sim_time, 'publish_clock': use_sim_time}]),
        Node(package='bcg_ros', executable='policy_node', name='policy_node', output='screen',
             parameters=[LaunchConfiguration('policy_config'),
                         {'policy_path': policy, 'use_sim_time': use_sim_time}]),
        Node(package='bcg_ros', executable='state_bridge_node', name='state_bridge_node',
             output='screen',
             parameters=[LaunchConfiguration('bridge_config'), {'use_sim_time': use_sim_time}]),
        Node(package='robot_state_publisher', executable='robot_state_publisher',
             name='robot_state_publisher',
             parameters=[{'robot_description': urdf, 'use_sim_time': use_sim_time}]),
        Node(package='rviz2', executable='rviz2', name='rviz2',
             arguments=['-d', _config('bcg_ros.rviz')],
             parameters=[{'use_sim_time': use_sim_time}],
             condition=IfCondition(LaunchConfiguration('use_rviz'))),
    ])
