"""
Launch files, checked without launch/launch_ros (no wheels) and with them where present.

Without launch_ros the files are read as Python syntax trees: every Node names an
executable this package installs (or a package declared in package.xml), every
parameters file exists and is keyed by the node it configures, every parameter a
launch file sets inline is one that file declares, and each deployment mode has
the arguments an operator expects.
"""

import ast
import importlib.util
import pathlib
import re
import xml.etree.ElementTree as ET

import pytest
import yaml

from test_colcon_install import console_scripts

REPO = pathlib.Path(__file__).resolve().parents[1]
LAUNCH = sorted((REPO / 'launch').glob('*.launch.py'))
MODES = {'train', 'sim2sim', 'real', 'monitor'}
REQUIRED_ARGS = {
    'train': {'config', 'use_sim_time'},
    'sim2sim': {'policy', 'policy_config', 'use_rviz', 'use_sim_time'},
    'real': {'policy', 'policy_config', 'use_rviz', 'use_sim_time'},
    'monitor': {'rviz_config', 'use_sim_time'},
}


def _call_name(node):
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _kw(call, name):
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def _const(node):
    return node.value if isinstance(node, ast.Constant) else None


def _config_file(node):
    """'x.yaml' when node is config('x.yaml') (bcg_ros.launching), else None."""
    if isinstance(node, ast.Call) and _call_name(node) == 'config' and node.args:
        return _const(node.args[0])
    return None


def parse(path):
    """Return (declared args {name: default node}, [Node call])."""
    tree = ast.parse(path.read_text())
    args, nodes = {}, []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        name = _call_name(call)
        if name == 'DeclareLaunchArgument':
            args[_const(call.args[0])] = _kw(call, 'default_value')
        elif name in ('Node', 'LifecycleNode'):
            nodes.append(call)
    return args, nodes


def exec_depends():
    root = ET.parse(REPO / 'package.xml').getroot()
    return {e.text for e in root.findall('exec_depend')}


def test_one_launch_file_per_deployment_mode():
    assert {p.name[:-len('.launch.py')] for p in LAUNCH} == MODES


@pytest.mark.parametrize('path', LAUNCH, ids=lambda p: p.name)
def test_launch_file(path):
    args, nodes = parse(path)
    mode = path.name[:-len('.launch.py')]
    assert REQUIRED_ARGS[mode] <= set(args), f'{path.name}: missing launch arguments'
    assert nodes, f'{path.name} starts no node'
    scripts = set(console_scripts())
    for call in nodes:
        package = _const(_kw(call, 'package'))
        executable = _const(_kw(call, 'executable'))
        node_name = _const(_kw(call, 'name'))
        assert package and executable and node_name, f'{path.name}: Node needs literals'
        if package == 'bcg_ros':
            assert executable in scripts, f'{path.name}: {executable} not in setup.py'
        else:
            assert package in exec_depends(), f'{path.name}: {package} not in package.xml'
        params = _kw(call, 'parameters')
        files, inline = [], set()
        for item in (params.elts if params is not None else []):
            if isinstance(item, ast.Call) and _call_name(item) == 'LaunchConfiguration':
                files.append(_config_file(args.get(_const(item.args[0]))))
            elif isinstance(item, ast.Dict):
                inline |= {_const(k) for k in item.keys}
            elif _config_file(item):
                files.append(_config_file(item))
        declared = set()
        for f in files:
            assert f, f'{path.name}: {node_name} parameters file has no default'
            cfg = REPO / 'config' / f
            assert cfg.is_file(), f'{path.name}: {cfg} does not exist'
            data = yaml.safe_load(cfg.read_text())
            assert list(data) == [node_name], \
                f'{cfg.name} must configure exactly {node_name!r}, it names {list(data)}'
            declared |= set(data[node_name]['ros__parameters'])
        if files:
            unknown = inline - declared - {'use_sim_time', 'robot_description'}
            assert not unknown, f'{path.name}: {node_name} sets {unknown}, not in its YAML'


VIEW_ARGS = {'use_rviz', 'robot_state_publisher', 'use_sim_time'}
"""What bcg_ros.launching.view() passes on to monitor.launch.py."""


@pytest.mark.parametrize('path', LAUNCH, ids=lambda p: p.name)
def test_every_argument_is_used_and_files_are_found_when_launched(path):
    tree = ast.parse(path.read_text())
    args, _ = parse(path)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    used = {_const(c.args[0]) for c in calls
            if _call_name(c) == 'LaunchConfiguration' and c.args}
    if any(_call_name(c) == 'view' for c in calls):
        used |= VIEW_ARGS
    assert set(args) <= used, f'{path.name}: arguments nothing reads: {set(args) - used}'
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not names & {'__file__', 'get_package_share_directory', 'open'}, \
        f'{path.name}: a path or file read when the launch file is loaded'


def test_robot_state_publisher_and_rviz_start_in_one_place():
    owners = {p.name for p in LAUNCH for call in parse(p)[1]
              if _const(_kw(call, 'package')) in ('robot_state_publisher', 'rviz2')}
    assert owners == {'monitor.launch.py'}
    for mode in ('sim2sim', 'real'):
        tree = ast.parse((REPO / 'launch' / f'{mode}.launch.py').read_text())
        assert any(isinstance(n, ast.Call) and _call_name(n) == 'view' for n in ast.walk(tree))


def published_topics():
    """Every topic a bcg_ros node publishes, '~/' resolved with the node's name."""
    topics = set()
    pattern = re.compile(r"create_publisher\(\s*\w+,\s*(f?)'([^']+)'")
    for src in (REPO / 'bcg_ros' / 'nodes').glob('*_node.py'):
        for is_f, topic in pattern.findall(src.read_text()):
            variants = [topic.replace('{side}', side) for side in ('left', 'right')] \
                if is_f else [topic]
            topics |= {t.replace('~/', f'/{src.stem}/') for t in variants}
    return topics


def test_rviz_config_shows_only_what_is_published():
    cfg = yaml.safe_load((REPO / 'config' / 'bcg_ros.rviz').read_text())
    topics = {d['Topic']['Value'] for d in cfg['Visualization Manager']['Displays']
              if isinstance(d.get('Topic'), dict)}
    published = published_topics()
    assert '/policy_node/mode_marker' in published and '/odom' in published
    assert topics <= published, f'rviz shows topics nobody publishes: {topics - published}'
    assert '/evaluator_node/foot_contacts' in topics, "the evaluator's contact markers"


def test_rviz_config_shows_what_operators_need():
    cfg = yaml.safe_load((REPO / 'config' / 'bcg_ros.rviz').read_text())
    displays = cfg['Visualization Manager']['Displays']
    classes = {d['Class'] for d in displays}
    for c in ('RobotModel', 'TF', 'MarkerArray', 'Wrench', 'Odometry'):
        assert f'rviz_default_plugins/{c}' in classes
    topics = {d.get('Topic', {}).get('Value') for d in displays}
    assert {'/contact_markers', '/odom', '/left_foot/wrench', '/right_foot/wrench'} <= topics


@pytest.mark.skipif(importlib.util.find_spec('launch_ros') is None,
                    reason='launch_ros is not installed (no PyPI wheel); checked by syntax')
@pytest.mark.parametrize('path', LAUNCH, ids=lambda p: p.name)
def test_launch_description_builds(path):
    from launch import LaunchDescription
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert isinstance(module.generate_launch_description(), LaunchDescription)
