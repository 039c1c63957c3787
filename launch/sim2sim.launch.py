"""
Sim2sim: the G1 simulator node, the policy executor, the state bridge, the robot model.

g1_sim_node speaks the robot's own /lowstate and /lowcmd, so policy_node and
state_bridge_node run exactly as on the real G1.

    ros2 launch bcg_ros sim2sim.launch.py                 # the shipped default (run) policy
    ros2 launch bcg_ros sim2sim.launch.py policy:=/path/to/policy.onnx
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node

from bcg_ros.launching import config, view


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
    return LaunchDescription([
        DeclareLaunchArgument('policy', default_value=_shipped_policy(),
                              description='ONNX policy file (default: the shipped run policy; '
                                          'empty: stand and damping only)'),
        DeclareLaunchArgument('policy_config', default_value=config('policy_node.yaml'),
                              description='policy_node parameters file'),
        DeclareLaunchArgument('sim_config', default_value=config('g1_sim_node.yaml'),
                              description='g1_sim_node parameters file'),
        DeclareLaunchArgument('bridge_config', default_value=config('state_bridge_node.yaml'),
                              description='state_bridge_node parameters file'),
        DeclareLaunchArgument('use_rviz', default_value='true', description='start rviz2'),
        DeclareLaunchArgument('robot_state_publisher', default_value='true',
                              description='start robot_state_publisher (the URDF on /tf for '
                                          'rviz; C++, from a ROS 2 install)'),
        DeclareLaunchArgument('use_sim_time', default_value='false',
                              description='g1_sim_node publishes /clock and every node '
                                          'follows it (policy_node: its timeouts and '
                                          'periods in simulated seconds)'),
        view(),
        Node(package='bcg_ros', executable='g1_sim_node', name='g1_sim_node', output='screen',
             parameters=[LaunchConfiguration('sim_config'),
                         # On sim time the simulator is the clock.
                         {'use_sim_time': use_sim_time, 'publish_clock': use_sim_time}]),
        LifecycleNode(package='bcg_ros', executable='policy_node', name='policy_node',
                      namespace='', output='screen',
                      parameters=[LaunchConfiguration('policy_config'),
                                  {'policy_path': policy, 'use_sim_time': use_sim_time}]),
        Node(package='bcg_ros', executable='state_bridge_node', name='state_bridge_node',
             output='screen',
             parameters=[LaunchConfiguration('bridge_config'), {'use_sim_time': use_sim_time}]),
    ])
