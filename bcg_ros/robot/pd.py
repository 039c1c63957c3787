"""
The G1's joint PD inside MuJoCo, integrated soundly.

The robot's motor drivers run ``tau = tau_ff + kp (q* - q) + kd (dq* - dq)``
far faster than the policy. In MuJoCo the PD belongs in the actuator: a
``gain`` of 1 on ``ctrl = tau_ff + kp q* + kd dq*`` and an affine ``bias``
``-kp q - kd dq``, clamped to the motor's torque limit. MuJoCo's default Euler
integrator treats that damping explicitly, which is unstable at the G1's
light joints (ankle roll: kd 4 N m s/rad on 0.01 kg m^2 of armature, dt kd / I
= 2 at 5 ms); ``implicitfast`` integrates the actuator damping implicitly and
is stable at any kd. The evaluator and g1_sim_node both set their models up
with :func:`use_pd_actuators` and drive them with :func:`set_pd`.

A motor's strength (:mod:`bcg_ros.robot.physics`) is its actuator's gain: the
PD law's whole output is multiplied by it, the torque limit included, as a
motor whose torque constant differs from the driver's belief. A command that
arrives late reaches the actuators through a :class:`CommandDelay`.
"""

import collections
from typing import Any, Optional, Tuple

import mujoco
import numpy as np

INTEGRATOR = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
"""The integrator every MuJoCo consumer of a PD-driven G1 uses."""
PD_DT = 0.001
"""Physics step [s] when the PD is computed outside MuJoCo (explicit, as torques): the
motor drivers' 1 kHz, inside the explicit stability bound of the G1's joints."""


def use_pd_actuators(model: mujoco.MjModel, actuator_ids: np.ndarray,
                     tau_limit: np.ndarray) -> None:
    """
    Make these joint motors PD actuators and select the implicit integrator.

    ``actuator_ids`` in motor order, each a plain joint motor (transmission
    to its joint, gear 1, no activation dynamics); ``tau_limit`` [N m] clamps
    the commanded torque. Each motor keeps its gain as its strength
    (:func:`motor_strength`). Gains start at zero: :func:`set_pd` writes them.
    """
    a = np.asarray(actuator_ids)
    if not is_plain_motor(model, a):
        raise ValueError('use_pd_actuators: every joint needs a plain joint motor '
                         '(joint transmission, gear 1, no activation dynamics)')
    strength = motor_strength(model, a)
    model.opt.integrator = INTEGRATOR
    model.actuator_gaintype[a] = mujoco.mjtGain.mjGAIN_FIXED
    model.actuator_gainprm[a, :] = 0.0
    model.actuator_gainprm[a, 0] = strength
    model.actuator_biastype[a] = mujoco.mjtBias.mjBIAS_AFFINE
    model.actuator_biasprm[a, :] = 0.0
    model.actuator_ctrllimited[a] = 0
    model.actuator_forcelimited[a] = 1
    model.actuator_forcerange[a, 0] = -strength * np.asarray(tau_limit, float)
    model.actuator_forcerange[a, 1] = strength * np.asarray(tau_limit, float)


def motor_strength(model: mujoco.MjModel, actuator_ids: np.ndarray) -> np.ndarray:
    """Torque each plain joint motor delivers per torque commanded: its gain (1 as loaded)."""
    return model.actuator_gainprm[np.asarray(actuator_ids), 0].copy()


def is_plain_motor(model: mujoco.MjModel, actuator_ids: np.ndarray) -> bool:
    """Whether every joint has a plain joint motor that :func:`use_pd_actuators` accepts."""
    a = np.asarray(actuator_ids)
    return bool(np.all(a >= 0)) and bool(
        np.all(model.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT)
        and np.allclose(model.actuator_gear[a, 0], 1.0)
        and np.all(model.actuator_dyntype[a] == mujoco.mjtDyn.mjDYN_NONE))


def set_pd(model: mujoco.MjModel, data: mujoco.MjData, actuator_ids: np.ndarray,
           kp: np.ndarray, kd: np.ndarray, q_target: np.ndarray,
           dq_target: Optional[np.ndarray] = None,
           tau_ff: Optional[np.ndarray] = None) -> None:
    """
    Command the PD law on each actuator (all arrays in motor order).

    The force MuJoCo applies is ``s clip(tau_ff + kp (q* - q) + kd (dq* - dq),
    -limit, limit)``, s the motor's strength, at every physics step until the
    next call: the gain s multiplies ``ctrl``, and the bias is scaled to match.
    """
    a = np.asarray(actuator_ids)
    kp, kd = np.asarray(kp, float), np.asarray(kd, float)
    strength = model.actuator_gainprm[a, 0]
    model.actuator_biasprm[a, 1] = -strength * kp
    model.actuator_biasprm[a, 2] = -strength * kd
    u = kp * np.asarray(q_target, float)
    if dq_target is not None:
        u = u + kd * np.asarray(dq_target, float)
    if tau_ff is not None:
        u = u + np.asarray(tau_ff, float)
    data.ctrl[a] = u


_NOTHING = object()


class CommandDelay:
    """
    A delay line for commands: what goes in at physics step k comes out at step k + ``steps``.

    The motor layer pushes each command as it arrives and pops before every
    physics step; ``steps`` 0 passes commands straight through.
    """

    def __init__(self, steps: int):
        """An empty line of ``steps`` physics steps (>= 0)."""
        if steps < 0:
            raise ValueError(f'CommandDelay: steps must be >= 0, got {steps}')
        self.steps = int(steps)
        self._queue = collections.deque()

    def push(self, step: int, command: Any) -> None:
        """Put in ``command``, arrived before physics step ``step``."""
        self._queue.append((step + self.steps, command))

    def pop(self, step: int) -> Tuple[bool, Any]:
        """(True, the latest command due by physics step ``step``), or (False, None)."""
        out = _NOTHING
        while self._queue and self._queue[0][0] <= step:
            out = self._queue.popleft()[1]
        return (False, None) if out is _NOTHING else (True, out)

    def next_due(self) -> Optional[int]:
        """Physics step at which the next command comes out; None when the line is empty."""
        return self._queue[0][0] if self._queue else None

    def clear(self) -> None:
        """Drop every command in the line."""
        self._queue.clear()
