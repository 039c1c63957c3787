"""
Sensor noise of the G1's LowState: what g1_sim_node, the robot logs and the evaluator add.

The robot reports its joint encoders, their differentiated speeds and the pelvis
IMU's gyro and accelerometer every 2 ms; each carries noise. :class:`SensorNoise`
holds one Gaussian standard deviation per sensor (independent per sample), and
its defaults are a G1's order of magnitude, so ``SensorNoise().scaled(k)`` reads
as "k times the robot's noise". The IMU's orientation comes from its own filter
and is left as measured.

    noise = SensorNoise().scaled(2.0)
    q, dq, gyro, acc = noise.apply(rng, q, dq, gyro, acc)
"""

import dataclasses
from dataclasses import dataclass
from typing import Tuple

import numpy as np


@dataclass(frozen=True)
class SensorNoise:
    """Std of Gaussian noise on each LowState sensor, independent per sample."""

    joint_pos: float = 2e-4
    """[rad]: an absolute encoder's resolution, about 2^-15 of a turn."""
    joint_vel: float = 0.02
    """[rad/s]: velocity from differentiated encoder counts."""
    gyro: float = 0.005
    """[rad/s]."""
    acc: float = 0.05
    """[m/s^2]."""

    def __post_init__(self):
        """Reject a negative or non-finite std, naming the field."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not (np.isfinite(value) and value >= 0.0):
                raise ValueError(f'SensorNoise.{f.name}: a std must be finite and >= 0, '
                                 f'got {value!r}')

    def scaled(self, factor: float) -> 'SensorNoise':
        """Every std times ``factor``."""
        return SensorNoise(*(factor * getattr(self, f.name) for f in dataclasses.fields(self)))

    @property
    def silent(self) -> bool:
        """Whether every std is zero (the sensors are exact)."""
        return not any(getattr(self, f.name) for f in dataclasses.fields(self))

    def apply(self, rng: np.random.Generator, q: np.ndarray, dq: np.ndarray,
              gyro: np.ndarray, acc: np.ndarray) -> Tuple[np.ndarray, ...]:
        """Return noisy copies of ``(q, dq, gyro, acc)``; a zero std draws nothing."""
        out = []
        for x, std in ((q, self.joint_pos), (dq, self.joint_vel), (gyro, self.gyro),
                       (acc, self.acc)):
            x = np.array(x, dtype=float)
            if std:
                x += rng.normal(0.0, std, x.shape)
            out.append(x)
        return tuple(out)
