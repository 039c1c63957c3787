"""ament_python package bcg_ros."""

import glob

from setuptools import find_packages, setup

PACKAGE = 'bcg_ros'

# name = module:function. An executable is listed once a module implements it.
CONSOLE_SCRIPTS = [
    'bcg-bench = bcg_ros.bench.cli:main',
    'policy_node = bcg_ros.nodes.policy_node:main',
    'g1_sim_node = bcg_ros.nodes.g1_sim_node:main',
    'bcg-eval = bcg_ros.eval.cli:main',
    'bcg-motion = bcg_ros.motion_cli:main',
    'evaluator_node = bcg_ros.nodes.evaluator_node:main',
    'state_bridge_node = bcg_ros.nodes.state_bridge_node:main',
    'bcg-train = bcg_ros.train:main',
    'trainer_node = bcg_ros.nodes.trainer_node:main',
    'bag_recorder_node = bcg_ros.nodes.bag_recorder_node:main',
    'bcg-real2sim = bcg_ros.real2sim.cli:main',
    'bcg-calibrate = bcg_ros.real2sim.cli:calibrate_main',
]

setup(
    name=PACKAGE,
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    package_data={PACKAGE: ['models/*.xml', 'models/*.npz', 'motions/*.npz', 'motions/*.csv',
                            'policies/*.onnx', 'policies/*.md', 'policies/*.png']},
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + PACKAGE]),
        ('share/' + PACKAGE, ['package.xml']),
        ('share/' + PACKAGE + '/launch', glob.glob('launch/*.launch.py')),
        ('share/' + PACKAGE + '/config', glob.glob('config/*.yaml') + glob.glob('config/*.rviz')),
        ('share/' + PACKAGE + '/urdf', glob.glob('urdf/*.urdf')),
    ],
    install_requires=['setuptools'],
    zip_safe=False,
    maintainer='bcg_ros maintainers',
    maintainer_email='bcg-ros@users.noreply.github.com',
    description='Bundled Contact Gradients for training and deploying Unitree G1 policies.',
    license='Apache-2.0',
    tests_require=['pytest'],
    entry_points={'console_scripts': CONSOLE_SCRIPTS},
)
