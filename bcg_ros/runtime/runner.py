"""
The policy runner: an ONNX policy stepped on LowState samples, and its velocity command.

:class:`PolicyRunner` loads a policy with :func:`bcg_ros.runtime.policy.load_policy`,
builds its observation from each LowState (the reference window, the estimated base
velocity, the history) and turns its action into motor targets for
:func:`bcg_ros.runtime.modes.on_tick`. A velocity policy's command comes from the
remote's sticks (:func:`stick_command`) or a Twist (:func:`clip_command`), both held to
the ranges the policy was trained on.
"""

from typing import Dict, Mapping, Optional, Tuple

import numpy as np

from bcg_ros import contract as contract_mod
from bcg_ros.robot import g1, lowlevel
from bcg_ros.robot.lowlevel import LowStateSample
from bcg_ros.runtime import estimator as est
from bcg_ros.runtime.modes import PolicyOutput

DEFAULT_COMMAND_RANGES: Dict[str, Tuple[float, float]] = {
    'lin_vel_x': (-0.5, 1.0), 'lin_vel_y': (-0.5, 0.5), 'ang_vel_z': (-1.0, 1.0)}
"""Velocity command ranges [m/s, m/s, rad/s] for a policy that states none."""
COMMAND_KEYS = ('lin_vel_x', 'lin_vel_y', 'ang_vel_z')


def clip_command(command, ranges: Mapping[str, Tuple[float, float]]) -> np.ndarray:
    """(vx, vy, wz) clipped into ``ranges``; a non-finite value becomes 0."""
    v = np.nan_to_num(np.asarray(command, float).reshape(3), nan=0.0, posinf=0.0, neginf=0.0)
    lo = np.array([ranges[k][0] for k in COMMAND_KEYS])
    hi = np.array([ranges[k][1] for k in COMMAND_KEYS])
    return np.clip(v, lo, hi)


def stick_command(remote: lowlevel.Remote, ranges: Mapping[str, Tuple[float, float]],
                  dead_band: float = 0.1) -> np.ndarray:
    """
    (vx, vy, wz) from the remote's sticks.

    Left stick up is +vx, left stick left is +vy, right stick left is +wz (turn left).
    Each axis in [-1, 1] loses its dead band and is rescaled to [-1, 1]; full deflection
    reaches the end of the range on its side (a range of (-0.5, 1.0) gives 1.0 forward
    and -0.5 back).
    """
    out = []
    for key, axis in zip(COMMAND_KEYS, (remote.ly, -remote.lx, -remote.rx)):
        a = float(np.clip(np.nan_to_num(axis), -1.0, 1.0))
        a = np.sign(a) * max(abs(a) - dead_band, 0.0) / max(1.0 - dead_band, 1e-9)
        lo, hi = ranges[key]
        out.append(a * hi if a > 0 else -a * lo)
    return clip_command(out, ranges)


def _own_clip(c: contract_mod.Contract, path: str):
    """The built-in clip the contract names (its motion_name), checked against its length."""
    from bcg_ros import motion as motion_mod
    if c.motion_name not in motion_mod.BUILTIN:
        raise contract_mod.ContractError(
            f'{path}: field obs_terms: the policy observes a reference motion '
            f'({c.motion_name or "unnamed"}, not a built-in clip); give one (parameter motion)')
    clip = motion_mod.load_motion(c.motion_name, control_dt=c.control_dt)
    if c.motion_frames and clip.num_frames != c.motion_frames:
        raise contract_mod.ContractError(
            f'{path}: field motion_frames: the policy was trained on {c.motion_frames} frames '
            f'of {c.motion_name!r}, the built-in clip has {clip.num_frames}; give the clip it '
            'was trained on (parameter motion)')
    return clip


class PolicyRunner:
    """An ONNX policy with its contract, stepped at the control rate on LowState samples."""

    def __init__(self, path: str, motion=None, threads: int = 1):
        """Load ``path`` and check its contract against the G1 (ContractError names the field)."""
        from bcg_ros.runtime.policy import load_policy
        self.policy = load_policy(path, threads=threads)
        self.session = self.policy.session
        self.path = str(path)
        self.contract = c = self.policy.contract
        # The node runs at the G1's control rate; the evaluator can run other periods.
        c.check_robot(g1.JOINT_NAMES, g1.CONTROL_DT, source=self.path)
        inp = self.session.get_inputs()[0]
        if c.uses_reference:
            if motion is None:
                motion = _own_clip(c, self.path)
            if abs(motion.fps * c.control_dt - 1.0) > 1e-6:
                raise contract_mod.ContractError(
                    f'{path}: field control_dt: motion {motion.name!r} is at {motion.fps} fps, '
                    f'the policy runs at {1.0 / c.control_dt} Hz')
        self.motion = motion
        self._input = self.policy.input_name
        self._input_shape = tuple(1 if not isinstance(d, int) else d for d in inp.shape)
        self.slots = lowlevel.motor_slots(c.joint_names)
        # The state estimator behind base_lin_vel; observe_state feeds it.
        self.velocity = est.BaseVelocity() if c.uses_base_velocity else None
        self.kp = lowlevel.to_motor_order(np.asarray(c.kp), self.slots, g1.DEFAULT_KP)
        self.kd = lowlevel.to_motor_order(np.asarray(c.kd), self.slots, g1.DEFAULT_KD)
        self.reset()

    def reset(self):
        """Start from an empty history (as at an episode start)."""
        self._history = None
        self._ref = None
        self._last_action = np.zeros(self.contract.num_joints, dtype=np.float32)
        self.step_count = 0
        if self.velocity is not None:
            self.velocity.reset()

    def observe_state(self, s: LowStateSample) -> None:
        """
        Feed one LowState to the velocity estimator (nothing when there is none).

        Give it every LowState, not only those the policy steps on: the filter
        integrates the IMU between them. Not thread-safe: call it from the thread
        that calls :meth:`step`.
        """
        if self.velocity is None:
            return
        n = g1.NUM_JOINTS
        self.velocity.update(est.Sample(quat=s.quat, gyro=s.gyro, acc=s.acc, q=s.q[:n],
                                        dq=s.dq[:n], tau=s.tau[:n]), s.stamp)

    @property
    def is_velocity_policy(self) -> bool:
        """Whether the policy observes a velocity command (vx, vy, wz)."""
        return self.policy.is_velocity_policy

    @property
    def command_ranges(self) -> Dict[str, Tuple[float, float]]:
        """The velocity command ranges it was trained on, else DEFAULT_COMMAND_RANGES."""
        return {**DEFAULT_COMMAND_RANGES, **(self.policy.command_ranges or {})}

    def observation(self, s: LowStateSample, command=None) -> np.ndarray:
        """The policy input for one LowState (and velocity command), pushed into the history."""
        c = self.contract
        robot = contract_mod.RobotObs(
            quat=s.quat.astype(np.float32), gyro=s.gyro.astype(np.float32),
            joint_pos=s.q[self.slots].astype(np.float32),
            joint_vel=s.dq[self.slots].astype(np.float32),
            last_action=self._last_action,
            command=np.zeros(3, np.float32) if command is None else
            np.asarray(command, np.float32), lin_vel=self._base_velocity(s))
        ref = (contract_mod.reference_window(self.motion, self.slots, self.step_count)
               if c.uses_reference else None)
        if ref is not None:
            ref = contract_mod.RefObs(*(np.asarray(a, dtype=np.float32) for a in
                                        (ref.joint_pos, ref.root_quat, ref.root_height,
                                         ref.root_lin_vel)))
        self._ref = ref
        frame = contract_mod.observation_frame(c, robot, ref)
        if self._history is None:
            self._history = contract_mod.init_history(c, frame)
        else:
            self._history = contract_mod.push_history(self._history, frame)
        return contract_mod.flatten(self._history).astype(np.float32)

    def _base_velocity(self, s: LowStateSample) -> Optional[np.ndarray]:
        """The estimated base velocity after ``s`` (None when the policy does not observe it)."""
        if self.velocity is None:
            return None
        self.observe_state(s)   # a sample already fed is not stepped twice
        return self.velocity.body_velocity().astype(np.float32)

    def step(self, s: LowStateSample, now: float, command=None) -> PolicyOutput:
        """Run the policy once on ``s`` (``command``: vx, vy, wz); see ``modes.check_action``."""
        obs = self.observation(s, command)
        action = self.session.run(None, {self._input: obs.reshape(self._input_shape)})[0]
        action = np.asarray(action, dtype=np.float64).reshape(-1)
        self._last_action = action.astype(np.float32)
        self.step_count += 1
        targets = self.contract.action_to_targets(action, ref=self._ref)
        q = lowlevel.to_motor_order(targets, self.slots, g1.DEFAULT_POSE)
        return PolicyOutput(stamp=now, q=q, kp=self.kp, kd=self.kd, action=action,
                            state_stamp=s.stamp)
