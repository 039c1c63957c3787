"""
The state estimator's base-velocity errors along a clip, recorded to be replayed in training.

A policy that observes its base velocity reads the state estimator's on the robot and in
the MuJoCo evaluator, and the simulator's in training. The estimator's error is not white:
it follows the gait, stride after stride. ``bcg-eval --velocity-errors FILE`` records it
(observed minus true, base frame) at every frame of the clip along each run that stays
up, and ``g1.base_velocity_errors=FILE`` replays one recorded run per training episode,
at the episode's own clip frames, on top of the white ``base_velocity_noise``.

File format (``.npz``): ``errors`` [R, F, 3] float (R runs, F frames of the clip at the
control rate, the last frame repeating the one before: no action is chosen there),
``motion`` (the clip's name), ``fps``.
"""

import pathlib
from typing import Sequence, Union

import numpy as np

PathLike = Union[str, pathlib.Path]


class VelocityErrorsError(ValueError):
    """A velocity-error file that cannot be replayed, naming the file and the field."""


def _check_shape(path: PathLike, errors: np.ndarray) -> None:
    """Refuse an ``errors`` array that is not [runs >= 1, frames, 3], naming ``path``."""
    if errors.ndim != 3 or errors.shape[0] < 1 or errors.shape[2] != 3:
        raise VelocityErrorsError(f'{path}: errors must be [runs >= 1, frames, 3], '
                                  f'got {errors.shape}')


def from_runs(runs: Sequence, num_frames: int) -> np.ndarray:
    """
    ``[R, num_frames, 3]`` errors of the runs that observed a velocity and ran the whole clip.

    ``runs``: :class:`bcg_ros.eval.rollout.Run` objects of one clip (row i holds the error
    observed at frame i, when the policy chose the action that led to row i's state).
    """
    out = []
    for r in runs:
        err = np.asarray(r.lin_vel_error, float)
        if len(err) < num_frames - 1 or not np.all(np.isfinite(err[:num_frames - 1])):
            continue
        err = err[:num_frames - 1]
        out.append(np.concatenate([err, err[-1:]]))
    return np.asarray(out, float).reshape(len(out), num_frames, 3)


def save(path: PathLike, errors: np.ndarray, motion: str, fps: float) -> pathlib.Path:
    """Write ``errors`` [R, F, 3] of clip ``motion`` at ``fps`` frames per second."""
    errors = np.asarray(errors, np.float32)
    _check_shape(path, errors)
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, 'wb') as f:
        np.savez(f, errors=errors, motion=np.array(motion), fps=np.array(float(fps)))
    return path


def load(path: PathLike, num_frames: int, fps: float) -> np.ndarray:
    """Read a file's ``errors`` [R, num_frames, 3] for a clip of that length and rate."""
    path = pathlib.Path(path)
    try:
        with np.load(path) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError) as exc:
        raise VelocityErrorsError(f'{path}: not a readable .npz ({exc})') from exc
    for name in ('errors', 'fps'):
        if name not in data:
            raise VelocityErrorsError(f'{path}: no {name!r} array')
    errors = data['errors']
    _check_shape(path, errors)
    if errors.shape[1] != num_frames:
        raise VelocityErrorsError(f'{path}: errors has {errors.shape[1]} frames, the clip '
                                  f'{num_frames}')
    if abs(float(data['fps']) - fps) > 1e-6:
        raise VelocityErrorsError(f'{path}: fps is {float(data["fps"]):g}, the clip {fps:g}')
    if not np.all(np.isfinite(errors)):
        raise VelocityErrorsError(f'{path}: errors holds non-finite values')
    return errors.astype(np.float32)
