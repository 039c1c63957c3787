"""Reference motions: one in-memory form for every consumer.

A :class:`Motion` is sampled at a fixed rate (the control rate once loaded for
training or evaluation), joints in the G1's motor order, quaternions
(w, x, y, z), positions in the world frame.
"""

from dataclasses import dataclass

import numpy as np

from bcg_ros.robot import g1


@dataclass(frozen=True)
class Motion:
    """A reference motion of the G1."""

    name: str
    fps: float
    """Frames per second."""
    root_pos: np.ndarray
    """[T, 3] pelvis position, world frame [m]."""
    root_quat: np.ndarray
    """[T, 4] pelvis orientation (w, x, y, z), world frame."""
    joint_pos: np.ndarray
    """[T, 29] joint angles in motor order [rad]."""
    joint_vel: np.ndarray
    """[T, 29] joint velocities [rad/s]."""
    root_lin_vel: np.ndarray
    """[T, 3] pelvis linear velocity, world frame [m/s]."""
    root_ang_vel: np.ndarray
    """[T, 3] pelvis angular velocity, world frame [rad/s]."""
    key_pos: np.ndarray
    """[T, len(g1.KEY_SITES), 3] key points (ankles, head, wrists), world frame [m]."""

    @property
    def num_frames(self) -> int:
        """Number of frames."""
        return int(self.root_pos.shape[0])

    @property
    def duration(self) -> float:
        """Length in seconds."""
        return (self.num_frames - 1) / self.fps

    def __post_init__(self):
        """Check shapes against each other and the G1, naming the motion and the field."""
        t = self.root_pos.shape[0]
        expect = {'root_pos': (t, 3), 'root_quat': (t, 4),
                  'joint_pos': (t, g1.NUM_JOINTS), 'joint_vel': (t, g1.NUM_JOINTS),
                  'root_lin_vel': (t, 3), 'root_ang_vel': (t, 3),
                  'key_pos': (t, len(g1.KEY_SITES), 3)}
        for name, shape in expect.items():
            got = np.shape(getattr(self, name))
            if got != shape:
                raise ValueError(f'motion {self.name!r}: field {name} has shape {got}, '
                                 f'expected {shape}')
