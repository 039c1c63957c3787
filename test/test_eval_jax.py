"""
The same ONNX policy in the training simulator and in MuJoCo, scored alike.

One G1 simulator step is compiled for the module (about 40 s on a CPU; the
persistent cache keeps it).
"""

import json

import numpy as np
import pytest

from bcg_ros import contract as ct
from bcg_ros.eval import cli, jax_rollout, metrics, report, synthetic
from bcg_ros.eval.evaluator import EvalConfig, evaluate
from bcg_ros.eval.rollout import Baseline, run_once
from bcg_ros.runtime.policy import load_policy

QUIET = synthetic.quiet_rollout()


@pytest.fixture(scope='module')
def stand(g):
    return synthetic.held_pose_motion(g, seconds=1.0)


@pytest.fixture(scope='module')
def policy_path(tmp_path_factory, stand):
    return synthetic.zeros_policy(tmp_path_factory.mktemp('zeros'), stand).path


def test_held_pose_agrees_between_the_simulators(g, stand, policy_path):
    p = load_policy(policy_path)
    j = jax_rollout.run_once(p, 0, stand)
    m = run_once(p, g, 0, QUIET, stand)
    assert not j.diverged and len(j.time) == len(m.time) == stand.num_frames - 1
    assert j.body_pos.shape == m.body_pos.shape
    # Both hold the pose on their own contact models: within 2 cm everywhere.
    assert np.abs(j.root_pos - m.root_pos).max() < 0.02
    jm, mm = metrics.run_metrics(j, stand), metrics.run_metrics(m, stand)
    assert not jm['fell'] and jm['e_track_cm'] < 3.0
    assert abs(jm['e_track_cm'] - mm['e_track_cm']) < 1.0
    assert jm['penetration_mm'] > 0.0


def test_a_falling_policy_falls_in_both(stand, tmp_path):
    c = ct.imitation_contract('stand', stand.num_frames)
    p = load_policy(synthetic.save_policy(tmp_path / 'fall.onnx', c, bias=6.0))
    j = jax_rollout.run_once(p, 0, stand)
    assert metrics.run_metrics(j, stand)['fell'] or j.diverged
    b = jax_rollout.run_once(Baseline.of(p, 'stand'), 0, stand)
    assert not metrics.run_metrics(b, stand)['fell']


def test_report_puts_the_training_simulator_beside_mujoco(g, stand, policy_path, tmp_path):
    ev = evaluate(EvalConfig(runs=2, rollout=QUIET, sims=('mujoco', 'jax'), baselines=()),
                  motion=stand, policy=load_policy(policy_path), g=g)
    assert ev.jax['contact_k'] == 300.0 and ev.jax['summary']['runs'] == 1
    md = report.markdown(ev.to_dict())
    assert '| policy, training simulator (JAX, k = 300, no randomisation) | 0/1 |' in md
    from bcg_ros.motion import save_motion
    motion_file = save_motion(stand, tmp_path / 'stand.npz')
    out = tmp_path / 'rep'
    assert cli.main([str(policy_path), '--motion', str(motion_file), '--runs', '1',
                     '--sim', 'both', '--baselines', '--no-plots', '--quiet',
                     '--out', str(out), '--duration', '0.2']) == 0
    result = json.loads((out / 'result.json').read_text())
    assert result['jax']['summary']['runs'] == 1 and result['baselines'] == {}
    assert result['jax']['runs'][0]['duration'] == pytest.approx(0.2)
    with pytest.raises(ValueError, match='sims'):
        EvalConfig(sims=('isaac',))
