"""Checkpoints: atomic writes, mismatch errors, and kill-and-resume of bcg-train."""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from bcg_ros.train import checkpoint

REPO = pathlib.Path(__file__).resolve().parents[1]
TOY = ['--preset', 'toy', '--set', 'run.iterations=30', '--set', 'run.checkpoint_every=5',
       '--set', 'run.progress_bar=false', '--set', 'run.tensorboard=false',
       '--set', 'run.export=false']


def _env():
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS='cpu')
    env.pop('XLA_FLAGS', None)
    return env


def _train(out, extra=()):
    return subprocess.run([sys.executable, '-m', 'bcg_ros.train', '--out', str(out), *TOY,
                           *extra], env=_env(), cwd=REPO, capture_output=True, text=True,
                          timeout=600)


def test_roundtrip_and_atomic_write(tmp_path, monkeypatch):
    state = {'a': np.arange(3, dtype=np.float32), 'b': [np.ones((2, 2), np.int32)]}
    path = checkpoint.save(tmp_path / 'c.npz', state, {'iteration': 7})
    loaded, meta = checkpoint.load(path, state)
    assert meta['iteration'] == 7
    np.testing.assert_array_equal(loaded['a'], state['a'])
    np.testing.assert_array_equal(loaded['b'][0], state['b'][0])

    def broken(*args, **kwargs):
        raise OSError('disk full')

    monkeypatch.setattr(np, 'savez', broken)
    with pytest.raises(OSError):
        checkpoint.save(path, {'a': np.zeros(3), 'b': [np.zeros((2, 2))]}, {'iteration': 8})
    monkeypatch.undo()
    # The failed write left the previous checkpoint whole and no temporary file.
    assert checkpoint.read_meta(path)['iteration'] == 7
    assert [p.name for p in tmp_path.iterdir()] == ['c.npz']


def test_load_into_another_structure_names_the_file_and_leaf(tmp_path):
    path = checkpoint.save(tmp_path / 'c.npz', {'a': np.zeros(3, np.float32)}, {})
    with pytest.raises(checkpoint.CheckpointError, match=r'c\.npz: leaf_00000'):
        checkpoint.load(path, {'a': np.zeros(4, np.float32)})
    with pytest.raises(checkpoint.CheckpointError, match='arrays'):
        checkpoint.load(path, {'a': np.zeros(3, np.float32), 'b': np.zeros(1)})


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class _Learner:
    net: dict
    env_state: tuple
    iteration: np.ndarray


def _learner(env_leaves: int, fill: float) -> _Learner:
    return _Learner({'w': np.full((2, 3), fill, np.float32)},
                    tuple(np.full(4, fill, np.float32) for _ in range(env_leaves)),
                    np.asarray(fill, np.int32))


def test_transient_field_of_another_layout_starts_from_the_template(tmp_path):
    path = checkpoint.save(tmp_path / 'c.npz', _learner(2, 7.0), {'iteration': 7})
    # An env state with one more array: the rest comes from the file, the env state
    # from the template.
    loaded, meta = checkpoint.load(path, _learner(3, 0.0), transient=('env_state',))
    assert meta['fresh'] == ['env_state']
    np.testing.assert_array_equal(loaded.net['w'], 7.0)
    assert int(loaded.iteration) == 7
    assert len(loaded.env_state) == 3 and all(np.all(x == 0.0) for x in loaded.env_state)
    # The same layout loads whole, the env state included.
    whole, meta = checkpoint.load(path, _learner(2, 0.0), transient=('env_state',))
    assert meta['fresh'] == [] and np.all(whole.env_state[1] == 7.0)
    # Without the field named transient, or with fewer arrays than the rest needs, it fails.
    with pytest.raises(checkpoint.CheckpointError, match='arrays'):
        checkpoint.load(path, _learner(3, 0.0))
    small = checkpoint.save(tmp_path / 's.npz', {'w': np.zeros(1, np.float32)}, {})
    with pytest.raises(checkpoint.CheckpointError, match=r's\.npz: 1 arrays'):
        checkpoint.load(small, _learner(3, 0.0), transient=('env_state',))


def test_kill_and_resume_continues_exactly(tmp_path):
    out = tmp_path / 'killed'
    proc = subprocess.Popen([sys.executable, '-m', 'bcg_ros.train', '--out', str(out), *TOY],
                            env=_env(), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    ck = out / 'checkpoint.npz'
    deadline = time.time() + 400
    try:
        while time.time() < deadline:
            if ck.is_file() and checkpoint.read_meta(ck)['iteration'] >= 10:
                break
            assert proc.poll() is None, 'bcg-train ended before it was killed'
            time.sleep(0.2)
        else:
            pytest.fail('no checkpoint at iteration >= 10 within 400 s')
    finally:
        proc.kill()
        proc.wait()
    killed_at = checkpoint.read_meta(ck)['iteration']
    assert 10 <= killed_at < 30

    resumed = _train(out)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f'resumed from {ck} at iteration {killed_at}' in resumed.stdout
    meta = checkpoint.read_meta(ck)
    assert meta['iteration'] == 30
    assert [h['iteration'] for h in meta['history']] == list(range(1, 31))
    lines = (out / 'history.jsonl').read_text().splitlines()
    assert [json.loads(x)['iteration'] for x in lines] == list(range(1, 31))

    # The resumed run is the run that was never killed: same key, same envs, same state.
    whole = _train(tmp_path / 'whole')
    assert whole.returncode == 0, whole.stdout + whole.stderr
    with np.load(ck) as a, np.load(tmp_path / 'whole' / 'checkpoint.npz') as b:
        leaves = [k for k in a.files if k.startswith('leaf_')]
        assert leaves == [k for k in b.files if k.startswith('leaf_')]
        for k in leaves:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_resume_with_another_configuration_names_the_field(tmp_path):
    out = tmp_path / 'run'
    first = _train(out, ['--set', 'run.iterations=2'])
    assert first.returncode == 0, first.stdout + first.stderr
    other = _train(out, ['--set', 'run.iterations=3', '--set', 'shac.gamma=0.9'])
    assert other.returncode == 2
    assert 'bcg-train: error:' in other.stderr and 'shac.gamma' in other.stderr
    # Lower learning rates may take a run on (gently: a longer schedule restarts higher).
    gentler = _train(out, ['--set', 'run.iterations=4', '--set', 'shac.actor_lr=1e-4',
                           '--set', 'shac.lr_end=1e-5'])
    assert gentler.returncode == 0, gentler.stdout + gentler.stderr
    rows = [json.loads(x) for x in (out / 'history.jsonl').read_text().splitlines()]
    assert rows[0]['actor_lr'] > 1e-4, 'the first part started at its own rate'
    # Iteration 3 of 4 is two thirds down the new schedule, 1e-4 to 1e-5.
    assert rows[2]['actor_lr'] == pytest.approx(4e-5, rel=1e-4)
    # Where BCG's branch work runs is not what the learner learns: it may change.
    slots = _train(out, ['--set', 'run.iterations=5', '--set', 'shac.actor_lr=1e-4',
                         '--set', 'shac.lr_end=1e-5', '--set', 'g1.bcg.max_bundled=4'])
    assert slots.returncode == 0, slots.stdout + slots.stderr
    # Nor is a noisier velocity observation: a policy may be taken on with more noise.
    noisier = _train(out, ['--set', 'run.iterations=6', '--set', 'shac.actor_lr=1e-4',
                           '--set', 'shac.lr_end=1e-5', '--set', 'g1.bcg.max_bundled=4',
                           '--set', 'g1.base_velocity_noise=0.2'])
    assert noisier.returncode == 0, noisier.stdout + noisier.stderr


def test_export_only_writes_the_policy_with_its_provenance(tmp_path):
    from bcg_ros import contract as ct
    from bcg_ros.train import export
    out = tmp_path / 'run'
    missing = _train(out, ['--export-only'])
    assert missing.returncode == 2 and 'no checkpoint to export' in missing.stderr
    first = _train(out, ['--set', 'run.iterations=2'])
    assert first.returncode == 0, first.stdout + first.stderr
    assert not (out / 'policy.onnx').exists()
    # It says what it wrote, and only that.
    assert 'policy.onnx' not in first.stdout and f'wrote {out / "summary.json"}' in first.stdout
    again = _train(out, ['--set', 'run.iterations=2', '--set', 'run.export=true',
                         '--export-only'])
    assert again.returncode == 0, again.stdout + again.stderr
    meta = export.read_metadata(out / 'policy.onnx')
    cfg = json.loads(meta[ct.TRAIN_CONFIG_KEY])
    assert cfg['run']['env'] == 'toy' and cfg['run']['iterations'] == 2
    command = json.loads(meta[ct.TRAIN_COMMAND_KEY])
    # The command that trained it, not the one that exported it.
    assert command[0] == 'bcg-train' and '--export-only' not in command
    assert meta['bcg_ros.iteration'] == '2' and float(meta[ct.CONTACT_K_KEY]) == 300.0
    assert f'wrote {out / "policy.onnx"} and {out / "summary.json"}' in again.stdout


def test_checkpoints_kept_along_the_run(tmp_path):
    out = tmp_path / 'run'
    res = _train(out, ['--set', 'run.iterations=8', '--set', 'run.keep_checkpoints=[0, 0.25, 1]'])
    assert res.returncode == 0, res.stdout + res.stderr
    kept = sorted(p.name for p in out.glob('checkpoint_*.npz'))
    assert kept == ['checkpoint_0.npz', 'checkpoint_2.npz', 'checkpoint_8.npz']
    assert checkpoint.read_meta(out / 'checkpoint_0.npz')['iteration'] == 0
    assert checkpoint.read_meta(out / 'checkpoint_2.npz')['iteration'] == 2
    bad = _train(tmp_path / 'bad', ['--set', 'run.keep_checkpoints=[1.5]'])
    assert bad.returncode == 2 and 'run.keep_checkpoints' in bad.stderr


def test_a_time_budget_stops_the_run_and_a_larger_one_goes_on(tmp_path):
    from bcg_ros import train
    from bcg_ros.train.trainer import Trainer
    cfg = train.make_config('toy', None, train.parse_set(['run.iterations=40',
                                                          'run.max_minutes=1']))
    t = Trainer(cfg, tmp_path / 'run', log=lambda msg: None)

    def a_minute_passes_at_the_third(m):
        if t.iteration == 3:
            t.wall_before += 60.0

    assert t.run(on_iteration=a_minute_passes_at_the_third)
    assert t.iteration == 3 and t.out_of_time()
    more = train.make_config('toy', None, train.parse_set(['run.iterations=40',
                                                           'run.max_minutes=100']))
    t2 = Trainer(more, tmp_path / 'run', log=lambda msg: None)
    assert t2.iteration == 3 and not t2.out_of_time()
    assert t2.run(should_stop=lambda: t2.iteration >= 5) is False
    assert t2.iteration == 5


def test_a_background_run_stopped_by_sigterm_writes_its_checkpoint(tmp_path):
    """``bcg-train ... &`` has SIGINT ignored; ``kill`` (SIGTERM) still saves the run."""
    import signal

    out = tmp_path / 'bg'
    args = [a if a != 'run.iterations=30' else 'run.iterations=100000' for a in TOY]
    args = [a if a != 'run.checkpoint_every=5' else 'run.checkpoint_every=100000' for a in args]
    # As a shell starts a background job: SIGINT ignored. The log goes to a file, as
    # nohup's does: a pipe nobody reads would fill and stall the run.
    log = tmp_path / 'bg.log'
    with open(log, 'w') as f:
        proc = subprocess.Popen(['bash', '-c', 'trap "" INT; exec "$@"', 'bash',
                                 sys.executable, '-m', 'bcg_ros.train', '--out', str(out),
                                 *args], env=_env(), cwd=REPO, stdout=f,
                                stderr=subprocess.STDOUT)
    hist = out / 'history.jsonl'
    deadline = time.time() + 400
    try:
        while time.time() < deadline:
            if hist.is_file() and len(hist.read_text().splitlines()) >= 3:
                break
            assert proc.poll() is None, 'bcg-train ended before it was stopped'
            time.sleep(0.2)
        else:
            pytest.fail('no third iteration within 400 s')
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stdout = log.read_text()
    assert proc.returncode == 130, stdout
    done = len(hist.read_text().splitlines())
    assert checkpoint.read_meta(out / 'checkpoint.npz')['iteration'] == done >= 3
    assert f'interrupted: checkpoint at iteration {done}' in stdout


def test_a_signal_asks_the_run_to_stop_and_a_second_one_interrupts():
    # The first only sets the event (an exception raised from the handler could land in
    # a garbage-collection callback and be dropped); the second raises for a long compile.
    import signal
    import threading

    from bcg_ros.train import cli

    stop = threading.Event()
    old = cli._stop_on_signals(stop)
    try:
        handler = signal.getsignal(signal.SIGTERM)
        assert signal.getsignal(signal.SIGINT) is handler
        handler(signal.SIGTERM, None)
        assert stop.is_set()
        with pytest.raises(KeyboardInterrupt):
            handler(signal.SIGINT, None)
    finally:
        for signum, previous in old.items():
            signal.signal(signum, previous)
