"""
Training: trainer_node, and optionally evaluator_node evaluating each exported policy.

trainer_node trains in its own thread and publishes ~/progress; each export
(~/export_policy, and the one at the end) is announced on
/trainer_node/exported, which evaluator_node (evaluate:=true) evaluates in
MuJoCo, showing the runs on /joint_states, /tf and its contact markers. When
trainer_node ends (training done, ~/stop, Ctrl-C), the launch ends with it.

    ros2 launch bcg_ros train.launch.py config:=/path/to/trainer_node.yaml evaluate:=true
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, RegisterEventHandler, Shutdown
from launch.conditions import IfCondition
from launch.event_handlers import OnProcessExit
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from bcg_ros.launching import config


def generate_launch_description():
    use_sim_time = LaunchConfiguration('use_sim_time')
    trainer = Node(package='bcg_ros', executable='trainer_node', name='trainer_node',
                   output='screen',
                   parameters=[LaunchConfiguration('config'), {'use_sim_time': use_sim_time}])
    return LaunchDescription([
        DeclareLaunchArgument('config', default_value=config('trainer_node.yaml'),
                              description='trainer_node parameters file (preset, overrides, '
                                          'output_dir)'),
        DeclareLaunchArgument('eval_config', default_value=config('evaluator_node.yaml'),
                              description='evaluator_node parameters file'),
        DeclareLaunchArgument('evaluate', default_value='false',
                              description='start evaluator_node and evaluate every export '
                                          '(the final export is also evaluated by the '
                                          'trainer unless run.evaluate=false)'),
        DeclareLaunchArgument('use_sim_time', default_value='false',
                              description='stamp progress and the evaluation topics with /clock'),
        trainer,
        Node(package='bcg_ros', executable='evaluator_node', name='evaluator_node',
             output='screen',
             parameters=[LaunchConfiguration('eval_config'),
                         {'policy_topic': '/trainer_node/exported',
                          'use_sim_time': use_sim_time}],
             condition=IfCondition(LaunchConfiguration('evaluate'))),
        RegisterEventHandler(OnProcessExit(
            target_action=trainer, on_exit=[Shutdown(reason='trainer_node ended')])),
    ])
