"""The estimator's velocity errors: recorded along MuJoCo runs, saved, checked, loaded."""

from types import SimpleNamespace

import numpy as np
import pytest

from bcg_ros import velocity_errors as ve


def _run(rows: int, fill: float = 0.1):
    err = np.tile([fill, -fill, 2 * fill], (rows, 1)) + np.arange(rows)[:, None] / 1e3
    return SimpleNamespace(lin_vel_error=err)


def test_only_whole_finite_runs_are_kept_and_the_last_frame_repeats():
    nan_run = _run(9)
    nan_run.lin_vel_error[3] = np.nan
    errors = ve.from_runs([_run(9), _run(5), nan_run, _run(12, 0.2)], num_frames=10)
    assert errors.shape == (2, 10, 3)
    np.testing.assert_allclose(errors[0, :9], _run(9).lin_vel_error)
    np.testing.assert_allclose(errors[:, 9], errors[:, 8])
    np.testing.assert_allclose(errors[1, :9], _run(12, 0.2).lin_vel_error[:9])
    assert ve.from_runs([_run(5)], num_frames=10).shape == (0, 10, 3)


def test_a_file_round_trips_and_bad_files_name_themselves_and_the_field(tmp_path):
    errors = ve.from_runs([_run(9), _run(9, 0.3)], num_frames=10)
    path = ve.save(tmp_path / 'e.npz', errors, 'run', 50.0)
    np.testing.assert_allclose(ve.load(path, 10, 50.0), errors, rtol=1e-6)
    with pytest.raises(ve.VelocityErrorsError, match=r'e\.npz.*9 frames, the clip 10'):
        ve.load(ve.save(tmp_path / 'e.npz', errors[:, :9], 'run', 50.0), 10, 50.0)
    with pytest.raises(ve.VelocityErrorsError, match='fps is 30'):
        ve.load(ve.save(tmp_path / 'f.npz', errors, 'run', 30.0), 10, 50.0)
    bad = errors.copy()
    bad[1, 2, 0] = np.inf
    with pytest.raises(ve.VelocityErrorsError, match=r'g\.npz.*non-finite'):
        ve.load(ve.save(tmp_path / 'g.npz', bad, 'run', 50.0), 10, 50.0)
    np.savez(tmp_path / 'h.npz', fps=50.0)
    with pytest.raises(ve.VelocityErrorsError, match=r"h\.npz: no 'errors'"):
        ve.load(tmp_path / 'h.npz', 10, 50.0)
    np.savez(tmp_path / 'i.npz', errors=np.zeros((2, 10)), fps=50.0)
    with pytest.raises(ve.VelocityErrorsError, match=r'i\.npz.*\[runs >= 1, frames, 3\]'):
        ve.load(tmp_path / 'i.npz', 10, 50.0)
    (tmp_path / 'j.npz').write_text('not a zip')
    with pytest.raises(ve.VelocityErrorsError, match=r'j\.npz: not a readable'):
        ve.load(tmp_path / 'j.npz', 10, 50.0)
    with pytest.raises(ve.VelocityErrorsError, match='runs >= 1'):
        ve.save(tmp_path / 'k.npz', np.zeros((0, 10, 3)), 'run', 50.0)
