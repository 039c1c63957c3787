"""
The policies shipped in bcg_ros/policies: each loads, says how it was trained, and runs.

``bcg_ros/policies/<motion>.onnx`` is a policy bcg-train exported, with
``<motion>.md``, its MuJoCo report on Unitree's official model, beside it.
"""

import json
import pathlib

import pytest

from bcg_ros import contract as ct
from bcg_ros import policies
from bcg_ros import motion as motion_mod
from bcg_ros.eval import metrics, synthetic
from bcg_ros.eval.rollout import run_once
from bcg_ros.robot import g1
from bcg_ros.runtime.policy import load_policy

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


def test_shipped_policies_are_named_by_their_motion():
    assert policies.shipped() == tuple(p.stem for p in POLICIES)
    for name in policies.shipped():
        assert policies.path(name) == policies.DIR / f'{name}.onnx'
    missing = next(m for m in ('run', 'jump', 'fight', 'dance', 'x')
                   if m not in policies.shipped())
    with pytest.raises(policies.PolicyNotShipped, match=f"motion '{missing}'.*shipped: "):
        policies.path(missing)


def test_bcg_eval_without_a_policy_runs_the_shipped_one(tmp_path, capsys):
    from bcg_ros.eval import cli
    name = policies.shipped()[0] if policies.shipped() else pytest.skip('no shipped policy')
    rc = cli.main(['--motion', name, '--runs', '1', '--duration', '0.3', '--baselines',
                   '--no-plots', '--no-filmstrip', '--quiet', '--out', str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / 'result.json').read_text())
    assert pathlib.Path(result['policy']).name == f'{name}.onnx'
    missing = next(m for m in ('run', 'jump', 'fight', 'dance') if m not in policies.shipped()) \
        if len(policies.shipped()) < 4 else None
    if missing:
        assert cli.main(['--motion', missing, '--quiet']) == 2
        assert f"no shipped policy for motion '{missing}'" in capsys.readouterr().err


@pytest.mark.parametrize('path', POLICIES, ids=[p.stem for p in POLICIES])
def test_the_runner_takes_the_clip_its_policy_names(path):
    from bcg_ros.runtime.runner import PolicyRunner
    runner = PolicyRunner(str(path))
    assert runner.motion.name == path.stem
    assert runner.motion.num_frames == runner.contract.motion_frames
