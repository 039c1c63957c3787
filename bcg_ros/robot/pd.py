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
"""

from typing import Optional

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
    the actuator force. Gains start at zero: :func:`set_pd` writes them.
    """
    a = np.asarray(actuator_ids)
    if not is_plain_motor(model, a):
        raise ValueError('use_pd_actuators: every joint needs a plain joint motor '
                         '(joint transmission, gear 1, no activation dynamics)')
    model.opt.integrator = INTEGRATOR
    model.actuator_gaintype[a] = mujoco.mjtGain.mjGAIN_FIXED
    model.actuator_gainprm[a, :] = 0.0
    model.actuator_gainprm[a, 0] = 1.0
    model.actuator_biastype[a] = mujoco.mjtBias.mjBIAS_AFFINE
    model.actuator_biasprm[a, :] = 0.0
    model.actuator_ctrllimited[a] = 0
    model.actuator_forcelimited[a] = 1
    model.actuator_forcerange[a, 0] = -np.asarray(tau_limit, float)
    model.actuator_forcerange[a, 1] = np.asarray(tau_limit, float)


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

    The force MuJoCo applies is ``clip(tau_ff + kp (q* - q) + kd (dq* - dq),
    -limit, limit)`` at every physics step until the next call.
    """
    a = np.asarray(actuator_ids)
    kp, kd = np.asarray(kp, float), np.asarray(kd, float)
    model.actuator_biasprm[a, 1] = -kp
    model.actuator_biasprm[a, 2] = -kd
    u = kp * np.asarray(q_target, float)
    if dq_target is not None:
        u = u + kd * np.asarray(dq_target, float)
    if tau_ff is not None:
        u = u + np.asarray(tau_ff, float)
    data.ctrl[a] = u
