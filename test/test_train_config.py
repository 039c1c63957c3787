"""bcg-train configuration: presets, YAML files, dotted overrides and their errors."""

import json
import pathlib

import pytest

from bcg_ros import train

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_defaults_are_the_papers():
    cfg = train.TrainConfig()
    assert cfg.shac.horizon == 32 and cfg.shac.num_critics == 3
    assert (cfg.shac.gamma, cfg.shac.lam) == (0.99, 0.95)
    assert (cfg.shac.critic_iterations, cfg.shac.critic_minibatches) == (16, 4)
    assert (cfg.shac.actor_grad_clip, cfg.shac.critic_grad_clip) == (1.0, 10.0)
    assert cfg.shac.betas == (0.7, 0.95)
    assert (cfg.shac.actor_lr, cfg.shac.critic_lr, cfg.shac.lr_end) == (5e-3, 2e-3, 1e-5)
    assert cfg.shac.actor_hidden == (512, 256, 128) and cfg.shac.critic_hidden == (256, 256)
    assert cfg.g1.sim.contact.k == 300.0 and cfg.g1.bcg.branches == 10
    paper = train.make_config('paper')
    assert paper.g1.num_envs == 64 and paper.run.iterations == 3000


def test_overrides_by_dotted_name_are_typed():
    cfg = train.make_config('toy', None, train.parse_set(
        ['shac.actor_lr=1e-3', 'shac.actor_hidden=[64, 64]', 'g1.sim.contact.k=100',
         'g1.bcg.enabled=false', 'run.algo=ppo']))
    assert cfg.shac.actor_lr == 1e-3 and cfg.shac.actor_hidden == (64, 64)
    assert cfg.g1.sim.contact.k == 100.0 and isinstance(cfg.g1.sim.contact.k, float)
    assert cfg.g1.bcg.enabled is False and cfg.run.algo == 'ppo'


@pytest.mark.parametrize('item, words', [
    ('shac.actor_lr=fast', ['shac.actor_lr', 'number']),
    ('shac.horizon=3.5', ['shac.horizon', 'integer']),
    ('shac.nope=1', ['shac.nope', 'no field', 'horizon']),
    ('run.algo=sac', ['run.algo']),
    ('run.max_minutes=-1', ['run.max_minutes']),
    ('g1.bcg.branches=0', ['g1.bcg.branches']),
    ('g1.hold_end=-1', ['g1.hold_end', '>= 0']),
    ('g1.adaptive_start=1.5', ['g1.adaptive_start', '[0, 1]']),
    ('g1.adaptive_bin=0', ['g1.adaptive_bin', '>= 1']),
    ('g1.adaptive_decay=0', ['g1.adaptive_decay', '(0, 1]']),
    ('g1.adaptive_kernel=[1, -0.5]', ['g1.adaptive_kernel', '>= 0']),
    ('shac=1', ['shac', 'section']),
])
def test_bad_overrides_name_the_field(item, words):
    with pytest.raises(train.ConfigError) as exc:
        train.make_config('toy', None, train.parse_set([item]))
    for w in words:
        assert w in str(exc.value)


def test_yaml_file_then_overrides(tmp_path):
    f = tmp_path / 'run.yaml'
    f.write_text('preset: toy\nshac:\n  actor_lr: 0.002\n  critic_hidden: [16, 16]\n'
                 'run.iterations: 7\n')
    cfg = train.make_config(None, f, {'shac.actor_lr': 0.003})
    assert cfg.run.env == 'toy' and cfg.run.iterations == 7
    assert cfg.shac.critic_hidden == (16, 16) and cfg.shac.actor_lr == 0.003
    bad = tmp_path / 'bad.yaml'
    bad.write_text('shac:\n  gamma: [1, 2]\n')
    with pytest.raises(train.ConfigError, match=r'bad\.yaml: shac\.gamma'):
        train.make_config('toy', bad)


def test_samples_to_reach_and_compare_table(tmp_path):
    # An easy start (every episode begins on the reference), then a level that falls.
    es = [5.0] * 4 + [30, 25, 20, 12, 9, 8, 7, 6, 5, 4, 4, 4]
    hist = [{'e_track': e, 'samples': 100 * (i + 1)} for i, e in enumerate(es)]
    got = train.samples_to_reach(hist, (20.0, 10.0, 1.0), window=4)
    # The first 4 iterations are left out; trailing means over 4 of the rest: 21.75
    # (iterations 5-8), 16.5, 12.25, 9.0 (ends at iteration 11), ...: at or below 20 first at
    # iteration 9 (900 samples), at or below 10 at iteration 11 (1100). Without the skip the
    # easy start would reach 10 cm at once.
    assert got == {'20': 900, '10': 1100, '1': None}
    assert train.samples_to_reach(hist[:3], (20.0,), window=4) == {'20': None}
    for name, algo in (('a', 'shac'), ('b', 'ppo')):
        (tmp_path / name).mkdir()
        (tmp_path / name / 'summary.json').write_text(json.dumps(
            {'algo': algo, 'samples': 1000, 'samples_to_e_track': got,
             'last_10_iterations': {'e_track': 4.0}}))
    table = train.compare_table([tmp_path / 'a', tmp_path / 'b'])
    assert 'a (shac)' in table and 'b (ppo)' in table and '1100' in table


def test_training_code_imports_no_ros():
    import subprocess
    import sys
    code = ('import sys, bcg_ros.train, bcg_ros.train.export, bcg_ros.train.checkpoint, '
            'bcg_ros.config_types, bcg_ros.core.shac, bcg_ros.core.ppo, bcg_ros.core.add, '
            "bcg_ros.core.g1_env, bcg_ros.core.toy_env; assert 'rclpy' not in sys.modules")
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120,
                       cwd=str(REPO))
    assert r.returncode == 0, r.stderr


def test_motion_flag_sets_the_reference_motion(capsys):
    assert train.main(['--preset', 'cpu', '--motion', 'jump', '--print-config']) == 0
    cfg = json.loads(capsys.readouterr().out)
    assert cfg['g1']['motion'] == 'jump'
    assert cfg['g1']['num_envs'] == train.make_config('cpu').g1.num_envs
    assert train.main(['--preset', 'cpu', '--print-config']) == 0
    assert json.loads(capsys.readouterr().out)['g1']['motion'] == train.TrainConfig().g1.motion


def test_a_checkpoint_written_before_a_field_existed_resumes_at_its_default():
    from bcg_ros.train.config import config_diff, config_to_dict, TrainConfig, with_defaults
    old = config_to_dict(TrainConfig())
    del old['add']['grad_penalty_negatives']
    now = config_to_dict(TrainConfig())
    assert config_diff(old, now) == ['add.grad_penalty_negatives']
    assert config_diff(with_defaults(old, now), now) == []
    changed = config_to_dict(train.make_config(None, None, {'add.grad_penalty_negatives': True}))
    assert config_diff(with_defaults(old, now), changed) == ['add.grad_penalty_negatives']


def test_print_config_is_json_alone_on_stdout():
    import json
    import subprocess
    import sys
    r = subprocess.run([sys.executable, '-m', 'bcg_ros.train', '--preset', 'cpu-long',
                        '--print-config'], capture_output=True, text=True, timeout=120,
                       cwd=pathlib.Path(__file__).resolve().parents[1])
    assert r.returncode == 0, r.stderr
    cfg = json.loads(r.stdout)
    assert cfg['run']['iterations'] == 1200 and cfg['g1']['residual'] is True


def test_training_penetration_ignores_an_iteration_with_a_diverged_env():
    from bcg_ros.train import report
    history = [{'penetration_mm': v} for v in (3.0, 3.2, 2.9, 4e8, 3.1, float('nan'))]
    assert report.train_penetration_mm(history) == pytest.approx(3.1)
    assert report.train_penetration_mm([]) == 0.0
