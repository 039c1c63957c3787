"""The first iteration compiles the training step: the log says so and the time is kept."""

import json
import re

import pytest

from bcg_ros import train

TOY = {'run.iterations': 2, 'run.checkpoint_every': 1, 'run.curves_every': 1,
       'run.tensorboard': False, 'run.export': False}


def test_compile_is_announced_timed_and_summarised(tmp_path, capsys):
    cfg = train.make_config('toy', None, TOY)
    trainer = train.Trainer(cfg, tmp_path / 'run')
    assert trainer.run()
    out = capsys.readouterr().out
    assert 'compiling the training step' in out
    assert re.search(r'compiled in \d+\.\d s', out), out
    assert out.index('compiling the training step') < out.index('compiled in')
    summary = trainer.finish()
    assert summary['compile_s'] > 0 and summary['compile_s'] == trainer.compile_s
    assert json.loads((tmp_path / 'run' / 'summary.json').read_text())['compile_s'] == \
        summary['compile_s']
    # Every file went through the one atomic write: no temporary file is left.
    assert sorted(p.name for p in (tmp_path / 'run').iterdir()) == \
        ['checkpoint.npz', 'curves.png', 'history.jsonl', 'summary.json']
    # compile() is once per Trainer: later calls return the time, not a new compile.
    assert trainer.compile() == summary['compile_s']
    assert 'compiling' not in capsys.readouterr().out


def test_xla_flags_are_added_and_a_users_setting_stays(monkeypatch):
    from bcg_ros import jax_cache

    monkeypatch.setattr(jax_cache.metadata, 'version', lambda name: '0.9.2')
    monkeypatch.setenv('XLA_FLAGS', '--xla_force_host_platform_device_count=2')
    assert jax_cache.set_xla_flags().split() == ['--xla_force_host_platform_device_count=2',
                                                 *jax_cache.XLA_CPU_FLAGS]
    monkeypatch.setenv('XLA_FLAGS', '--xla_cpu_use_fusion_emitters=true')
    assert jax_cache.set_xla_flags() == '--xla_cpu_use_fusion_emitters=true'
    # Twice is once.
    monkeypatch.delenv('XLA_FLAGS')
    assert jax_cache.set_xla_flags() == jax_cache.set_xla_flags() == \
        ' '.join(jax_cache.XLA_CPU_FLAGS)
    # A jaxlib the flags are not known to gets none: XLA aborts on an unknown flag.
    monkeypatch.setattr(jax_cache.metadata, 'version', lambda name: '0.10.2')
    monkeypatch.setenv('XLA_FLAGS', '')
    assert jax_cache.set_xla_flags() == ''


def test_training_makes_one_cpu_device_per_core_unless_told(monkeypatch):
    from bcg_ros import jax_cache

    monkeypatch.setattr(jax_cache.metadata, 'version', lambda name: '0.9.2')
    monkeypatch.setenv('XLA_FLAGS', '')
    flags = jax_cache.set_xla_flags(host_devices=2).split()
    assert f'{jax_cache.HOST_DEVICES_FLAG}=2' in flags and len(flags) == 1 + len(
        jax_cache.XLA_CPU_FLAGS)
    # A count the user set stays; one device adds no flag.
    monkeypatch.setenv('XLA_FLAGS', f'{jax_cache.HOST_DEVICES_FLAG}=1')
    assert jax_cache.set_xla_flags(host_devices=2).split()[0] == f'{jax_cache.HOST_DEVICES_FLAG}=1'
    monkeypatch.setenv('XLA_FLAGS', '')
    assert jax_cache.HOST_DEVICES_FLAG not in jax_cache.set_xla_flags(host_devices=1)
    monkeypatch.setenv('BCG_ROS_HOST_DEVICES', '3')
    assert jax_cache.cpu_cores() == 3
    monkeypatch.setenv('BCG_ROS_HOST_DEVICES', 'two')
    with pytest.raises(ValueError, match='BCG_ROS_HOST_DEVICES'):
        jax_cache.cpu_cores()
    monkeypatch.delenv('BCG_ROS_HOST_DEVICES')
    assert jax_cache.cpu_cores() >= 1


def test_envs_split_over_the_devices_that_divide_them():
    from bcg_ros.train.config import ConfigError
    from bcg_ros.train.trainer import split_devices

    class Device:
        platform = 'cpu'

    two = [Device(), Device()]
    assert split_devices(two, 16) == two
    assert split_devices(two, 15) == two[:1]
    assert split_devices(two, 16, requested=1) == two[:1]
    with pytest.raises(ConfigError, match='15 envs do not split over 2'):
        split_devices(two, 15, requested=2)
    with pytest.raises(ConfigError, match='3 requested, JAX has 2'):
        split_devices(two, 12, requested=3)
