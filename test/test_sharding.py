"""Sharding the envs over two (forced host) devices gives the single-device result."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]


def _train(out, devices):
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS='cpu')
    env['XLA_FLAGS'] = f'--xla_force_host_platform_device_count={devices}'
    args = ['--preset', 'toy', '--set', 'run.iterations=4', '--set', 'run.progress_bar=false',
            '--set', 'run.tensorboard=false', '--set', 'run.export=false']
    r = subprocess.run([sys.executable, '-m', 'bcg_ros.train', '--out', str(out), *args],
                       env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads((out / 'summary.json').read_text())


def test_two_devices_match_one(tmp_path):
    one = _train(tmp_path / 'one', 1)
    two = _train(tmp_path / 'two', 2)
    assert one['devices'] == 1 and two['devices'] == 2
    with np.load(tmp_path / 'one' / 'checkpoint.npz') as a, \
            np.load(tmp_path / 'two' / 'checkpoint.npz') as b:
        leaves = [k for k in a.files if k.startswith('leaf_')]
        for k in leaves:
            # Reductions over envs are summed in another order across devices: float32 noise.
            np.testing.assert_allclose(a[k], b[k], rtol=1e-4, atol=1e-5, err_msg=k)
    assert abs(one['last_10_iterations']['e_track'] - two['last_10_iterations']['e_track']) < 1e-3
    # 4 iterations split into 4 non-empty parts: each part's median is that iteration's value.
    hist = [json.loads(line) for line in (tmp_path / 'one' / 'history.jsonl').read_text()
            .splitlines()]
    np.testing.assert_allclose(one['median_by_sixth']['e_track'], [h['e_track'] for h in hist],
                               rtol=1e-6)
