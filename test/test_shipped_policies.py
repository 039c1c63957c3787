"""
The policies shipped in bcg_ros/policies: each loads, says how it was trained, and runs.

``bcg_ros/policies/<motion>.onnx`` is a policy bcg-train exported, with
``<motion>.md``, its MuJoCo report on Unitree's official model, beside it.
"""

import json
import pathlib

import pytest

from bcg_ros import contract as ct
from bcg_ros import motion as motion_mod
from bcg_ros.eval import metrics, synthetic
from bcg_ros.eval.policy import load_policy
from bcg_ros.eval.rollout import run_once
from bcg_ros.robot import g1

POLICIES = sorted((pathlib.Path(motion_mod.__file__).parent / 'policies').glob('*.onnx'))


@pytest.mark.parametrize('path', POLICIES, ids=[p.stem for p in POLICIES])
def test_shipped_policy_loads_runs_and_names_its_recipe(path, g):
    p = load_policy(path)
    assert p.source == 'metadata'
    assert p.contract.motion_name == path.stem and path.stem in motion_mod.BUILTIN
    command = json.loads(p.metadata[ct.TRAIN_COMMAND_KEY])
    cfg = json.loads(p.metadata[ct.TRAIN_CONFIG_KEY])
    assert command[0] == 'bcg-train' and cfg['g1']['motion'] == path.stem
    assert cfg['g1']['sim']['contact']['k'] == float(p.metadata[ct.CONTACT_K_KEY])
    report = path.with_suffix('.md').read_text()
    assert 'scene_29dof.xml' in report and '| policy |' in report
    motion = motion_mod.load_motion(path.stem, g1.CONTROL_DT)
    run = run_once(p, g, 0, synthetic.quiet_rollout(duration=1.0), motion)
    m = metrics.run_metrics(run, motion)
    assert not m['diverged'] and not m['fell'] and len(run.time) == 50
