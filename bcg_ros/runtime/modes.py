r"""
The G1 runtime's modes and safety rules, without ROS.

Modes::

    PASSIVE --stand--> STAND --start--> POLICY
       ^                 ^ \______stand_____/|
       |                 |                   |
       +----reset---- DAMPING <--stop/fault--+ (from any mode)

PASSIVE and DAMPING both send the damping command (motors powered, no
stiffness). DAMPING is a latch: it is left only by an explicit reset, which
goes to PASSIVE. STAND interpolates from the pose measured when it began to the
default pose over ``stand_duration``; POLICY sends the policy's targets.

Safety rules (each one drives STAND or POLICY into DAMPING; in PASSIVE they
only block ``stand``): LowState stale for ``stale_timeout``; a non-finite or
out-of-range value in the state; torso tilt beyond ``max_tilt``; the tick not
advancing for ``tick_fault_limit`` messages in a row; a non-finite or
out-of-range policy output, or no policy output for ``policy_timeout``. Every
command then passes :meth:`CommandLimits.clip` (joint ranges, kp/kd and torque
caps), and PASSIVE/DAMPING send nothing but the damping command.

The functions are pure: they take an :class:`ExecState` and return a new one,
so the node only holds the latest state under a lock, and the tests and the
fuzz drive them directly.
"""

import enum
import math
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Optional, Tuple

import numpy as np

from bcg_ros import rotation
from bcg_ros.robot import g1, lowlevel
from bcg_ros.robot.lowlevel import LowStateSample, MotorCommand

TICK_MODULUS = 1 << 32


class ConfigError(ValueError):
    """A configuration value that is out of range; the message names the field."""


class Mode(enum.Enum):
    """Executor modes."""

    PASSIVE = 'passive'
    STAND = 'stand'
    POLICY = 'policy'
    DAMPING = 'damping'


class Request(enum.Enum):
    """What an operator can ask for (services or remote)."""

    STAND = 'stand'
    START = 'start'
    STOP = 'stop'
    RESET = 'reset'


def _read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


_DEFAULT_POSE = _read_only(np.asarray(g1.DEFAULT_POSE, dtype=np.float64))
_DEFAULT_KP = _read_only(np.asarray(g1.DEFAULT_KP, dtype=np.float64))
_DEFAULT_KD = _read_only(np.asarray(g1.DEFAULT_KD, dtype=np.float64))
_JOINT_LOWER = _read_only(np.asarray(g1.JOINT_LOWER, dtype=np.float64))
_JOINT_UPPER = _read_only(np.asarray(g1.JOINT_UPPER, dtype=np.float64))
_VELOCITY_LIMIT = _read_only(np.asarray(g1.VELOCITY_LIMIT, dtype=np.float64))
_TORQUE_LIMIT = _read_only(np.asarray(g1.TORQUE_LIMIT, dtype=np.float64))


@dataclass(frozen=True)
class ExecutorConfig:
    """Timing, safety limits and remote bindings of the executor."""

    stale_timeout: float = 0.02
    """LowState older than this [s] in STAND or POLICY -> DAMPING."""
    stand_duration: float = 2.0
    """Time [s] to move from the measured pose to the default pose in STAND."""
    max_tilt: float = 0.8
    """Largest torso tilt from upright [rad] before DAMPING."""
    joint_pos_margin: float = 0.2
    """How far [rad] a measured joint may lie outside its range before it counts as invalid."""
    joint_vel_factor: float = 2.0
    """Measured joint speed above this multiple of the rated speed counts as invalid."""
    max_gyro: float = 20.0
    """Largest plausible pelvis angular speed [rad/s] per axis."""
    max_acc: float = 200.0
    """Largest plausible pelvis specific force [m/s^2] per axis."""
    max_torque_factor: float = 3.0
    """Estimated joint torque above this multiple of the torque limit counts as invalid."""
    quat_norm_tolerance: float = 0.1
    """Allowed deviation of the IMU quaternion's norm from 1."""
    tick_fault_limit: int = 10
    """Consecutive LowStates whose tick does not advance before DAMPING."""
    max_action: float = 100.0
    """Largest raw policy output magnitude accepted."""
    policy_timeout: float = 0.1
    """No new policy output for this long [s] in POLICY -> DAMPING."""
    damping_kd_scale: float = 1.0
    """Damping command kd as a multiple of the G1's default kd."""
    kp_cap_scale: float = 2.0
    """kp cap per joint as a multiple of the G1's default kp."""
    kd_cap_scale: float = 2.0
    """kd cap per joint as a multiple of the G1's default kd."""
    tau_cap_fraction: float = 0.5
    """Feed-forward torque cap per joint as a fraction of its torque limit."""
    mode_pr: int = 0
    """LowCmd.mode_pr: 0 pitch/roll ankle and waist mode, 1 the A/B parallel mode."""
    stand_combo: str = 'start'
    """Remote buttons (joined by '+') that request STAND."""
    start_combo: str = 'A'
    """Remote buttons that request POLICY."""
    stop_combo: str = 'select'
    """Remote buttons that trigger the e-stop (DAMPING, latched)."""
    reset_combo: str = 'L1+R1'
    """Remote buttons that reset DAMPING to PASSIVE."""

    def __post_init__(self):
        """Reject values that would make the safety rules meaningless, naming the field."""
        positive = ('stale_timeout', 'stand_duration', 'max_tilt', 'joint_vel_factor',
                    'max_gyro', 'max_acc', 'max_torque_factor', 'quat_norm_tolerance',
                    'max_action', 'policy_timeout', 'damping_kd_scale', 'kp_cap_scale',
                    'kd_cap_scale')
        for name in positive:
            if not getattr(self, name) > 0:
                raise ConfigError(f'executor config field {name}: must be > 0, '
                                  f'got {getattr(self, name)!r}')
        if not 0.0 <= self.tau_cap_fraction <= 1.0:
            raise ConfigError(f'executor config field tau_cap_fraction: must be in [0, 1], '
                              f'got {self.tau_cap_fraction!r}')
        if self.joint_pos_margin < 0:
            raise ConfigError('executor config field joint_pos_margin: must be >= 0, '
                              f'got {self.joint_pos_margin!r}')
        if self.tick_fault_limit < 1:
            raise ConfigError('executor config field tick_fault_limit: must be >= 1, '
                              f'got {self.tick_fault_limit!r}')
        if self.mode_pr not in (0, 1):
            raise ConfigError(f'executor config field mode_pr: must be 0 or 1, '
                              f'got {self.mode_pr!r}')
        if self.damping_kd_scale > self.kd_cap_scale:
            raise ConfigError('executor config field damping_kd_scale: above kd_cap_scale '
                              f'({self.damping_kd_scale} > {self.kd_cap_scale})')
        for name in ('stand_combo', 'start_combo', 'stop_combo', 'reset_combo'):
            try:
                lowlevel.parse_combo(getattr(self, name))
            except lowlevel.CommandError as exc:
                raise ConfigError(f'executor config field {name}: {exc}') from None

    # Derived values, computed once per config (each is used at 500 Hz).

    @cached_property
    def damping_kd(self) -> np.ndarray:
        """[29] kd of the damping command (read-only)."""
        return _read_only(self.damping_kd_scale * _DEFAULT_KD)

    @cached_property
    def limits(self) -> lowlevel.CommandLimits:
        """The caps every outgoing command is clipped into (read-only arrays)."""
        limits = lowlevel.CommandLimits.for_g1(self.kp_cap_scale, self.kd_cap_scale,
                                               self.tau_cap_fraction)
        for f in fields(limits):
            _read_only(getattr(limits, f.name))
        return limits

    @cached_property
    def state_bounds(self) -> Tuple[np.ndarray, np.ndarray]:
        """
        Lower and upper bounds of a LowState's q, dq, tau, gyro and acc, concatenated.

        :func:`check_state` compares a whole LowState against them at once and looks
        for the rule it breaks only when one fails (a NaN fails every comparison).
        """
        n = g1.NUM_JOINTS
        dq = self.joint_vel_factor * _VELOCITY_LIMIT
        tau = self.max_torque_factor * _TORQUE_LIMIT
        lo = np.concatenate([_JOINT_LOWER - self.joint_pos_margin, -dq, -tau,
                             np.full(3, -self.max_gyro), np.full(3, -self.max_acc)])
        hi = np.concatenate([_JOINT_UPPER + self.joint_pos_margin, dq, tau,
                             np.full(3, self.max_gyro), np.full(3, self.max_acc)])
        assert lo.shape == (3 * n + 6,)
        return _read_only(lo), _read_only(hi)

    @cached_property
    def combos(self) -> Tuple[Tuple[Request, int], ...]:
        """(request, button mask), the e-stop first so that it wins over the others."""
        return ((Request.STOP, lowlevel.parse_combo(self.stop_combo)),
                (Request.RESET, lowlevel.parse_combo(self.reset_combo)),
                (Request.STAND, lowlevel.parse_combo(self.stand_combo)),
                (Request.START, lowlevel.parse_combo(self.start_combo)))


@dataclass(frozen=True)
class PolicyOutput:
    """Targets from one policy step, motor order."""

    stamp: float
    """When they were computed [s, monotonic]."""
    q: np.ndarray
    """[29] position targets [rad]."""
    kp: np.ndarray
    kd: np.ndarray
    action: np.ndarray
    """The raw policy output (policy order)."""
    state_stamp: float = float('nan')
    """Stamp of the LowState the policy acted on [s, the executor's clock]."""


@dataclass(frozen=True)
class ExecState:
    """Everything the executor remembers between messages."""

    mode: Mode = Mode.PASSIVE
    since: float = 0.0
    """When the current mode began [s, monotonic]."""
    reason: str = 'startup'
    """Why the executor entered the current mode (why it left the previous one)."""
    previous: Optional[Mode] = None
    fault: str = ''
    """The latest safety rule that failed ('' while none does)."""
    sample: Optional[LowStateSample] = None
    """The latest LowState."""
    stand_from: Optional[np.ndarray] = None
    """[29] measured pose when STAND began."""
    tick_repeats: int = 0
    """LowStates in a row whose tick did not advance."""
    tick_faults: int = 0
    """LowStates whose tick did not advance, in total."""
    buttons: int = 0
    """Remote buttons of the latest LowState (for press edges)."""
    transitions: int = field(default=0)
    """Number of mode changes so far."""


def enter(st: ExecState, mode: Mode, reason: str, now: float) -> ExecState:
    """Switch to ``mode`` (a no-op when already there, so the first reason is kept)."""
    if st.mode is mode:
        return st
    return replace(st, mode=mode, since=now, reason=reason, previous=st.mode,
                   transitions=st.transitions + 1,
                   stand_from=st.stand_from if mode is Mode.STAND else None)


def driving(st: ExecState) -> bool:
    """Whether the executor commands stiffness (STAND or POLICY)."""
    return st.mode in (Mode.STAND, Mode.POLICY)


def fault(st: ExecState, reason: str, now: float) -> ExecState:
    """A failed safety rule: DAMPING when driving, otherwise only recorded."""
    st = replace(st, fault=reason)
    return enter(st, Mode.DAMPING, reason, now) if driving(st) else st


def check_state(cfg: ExecutorConfig, s: LowStateSample) -> Optional[str]:
    """The first safety rule a LowState breaks, or None."""
    j = slice(0, g1.NUM_JOINTS)
    lo, hi = cfg.state_bounds
    v = np.concatenate([s.q[j], s.dq[j], s.tau[j], s.gyro, s.acc])
    w, x, y, z = (float(c) for c in s.quat)
    norm2 = w * w + x * x + y * y + z * z
    if ((lo <= v) & (v <= hi)).all() and abs(math.sqrt(norm2) - 1.0) \
            <= cfg.quat_norm_tolerance and 1.0 - 2.0 * (x * x + y * y) / norm2 \
            >= math.cos(cfg.max_tilt):
        return None   # every rule holds; the rules one by one say which does not
    for name in ('q', 'dq', 'tau', 'quat', 'gyro', 'acc'):
        v = getattr(s, name)
        v = v[j] if name in ('q', 'dq', 'tau') else v
        if not np.isfinite(v).all():
            return f'LowState {name} not finite'
    lo = _JOINT_LOWER - cfg.joint_pos_margin
    hi = _JOINT_UPPER + cfg.joint_pos_margin
    q = s.q[j]
    bad = np.flatnonzero((q < lo) | (q > hi))
    if bad.size:
        return f'LowState q of {g1.JOINT_NAMES[bad[0]]} out of range ({s.q[bad[0]]:.3g} rad)'
    bad = np.flatnonzero(np.abs(s.dq[j]) > cfg.joint_vel_factor * _VELOCITY_LIMIT)
    if bad.size:
        return f'LowState dq of {g1.JOINT_NAMES[bad[0]]} out of range ({s.dq[bad[0]]:.3g} rad/s)'
    bad = np.flatnonzero(np.abs(s.tau[j]) > cfg.max_torque_factor * _TORQUE_LIMIT)
    if bad.size:
        return f'LowState tau of {g1.JOINT_NAMES[bad[0]]} out of range ({s.tau[bad[0]]:.3g} N m)'
    if abs(np.linalg.norm(s.quat) - 1.0) > cfg.quat_norm_tolerance:
        return f'LowState quaternion norm {np.linalg.norm(s.quat):.3g} is not 1'
    if np.max(np.abs(s.gyro)) > cfg.max_gyro:
        return f'LowState gyroscope out of range ({np.max(np.abs(s.gyro)):.3g} rad/s)'
    if np.max(np.abs(s.acc)) > cfg.max_acc:
        return f'LowState accelerometer out of range ({np.max(np.abs(s.acc)):.3g} m/s^2)'
    angle = rotation.tilt(s.quat)
    if angle > cfg.max_tilt:
        return f'torso tilt {angle:.2f} rad beyond max_tilt {cfg.max_tilt} rad'
    return None


def tick_advanced(previous: int, current: int) -> bool:
    """Whether a uint32 millisecond tick moved forward (wrapping at 2^32)."""
    step = (int(current) - int(previous)) % TICK_MODULUS
    return 0 < step < TICK_MODULUS // 2


def on_lowstate(cfg: ExecutorConfig, st: ExecState,
                s: LowStateSample) -> Tuple[ExecState, Tuple[Request, ...]]:
    """Take in one LowState: tick and value checks, and the remote's button presses."""
    now = s.stamp
    repeats = st.tick_repeats
    faults = st.tick_faults
    if st.sample is not None and not tick_advanced(st.sample.tick, s.tick):
        repeats, faults = repeats + 1, faults + 1
    else:
        repeats = 0
    buttons = lowlevel.remote_buttons(s.remote)
    requests = tuple(req for req, mask in cfg.combos
                     if lowlevel.combo_pressed(st.buttons, buttons, mask))
    st = replace(st, sample=s, tick_repeats=repeats, tick_faults=faults, buttons=buttons)
    problem = check_state(cfg, s)
    if problem is None and repeats >= cfg.tick_fault_limit:
        problem = f'LowState tick did not advance for {repeats} messages (at {s.tick})'
    if problem is not None:
        st = fault(st, problem, now)
    elif st.fault:
        st = replace(st, fault='')
    return st, requests


def stale(cfg: ExecutorConfig, st: ExecState, now: float) -> bool:
    """Whether the latest LowState is older than ``stale_timeout`` (or there is none)."""
    return st.sample is None or now - st.sample.stamp > cfg.stale_timeout


def request(cfg: ExecutorConfig, st: ExecState, req: Request, now: float,
            policy_ready: bool = True, source: str = 'service') -> Tuple[ExecState, bool, str]:
    """Apply an operator request; returns (state, accepted, message)."""
    if req is Request.STOP:
        st = enter(st, Mode.DAMPING, f'e-stop ({source})', now)
        return st, True, 'damping (latched until reset)'
    if req is Request.RESET:
        if st.mode is not Mode.DAMPING:
            return st, False, f'reset only leaves damping; mode is {st.mode.value}'
        return enter(st, Mode.PASSIVE, f'reset ({source})', now), True, 'passive'
    if req is Request.STAND:
        if st.mode not in (Mode.PASSIVE, Mode.POLICY):
            return st, False, f'stand only from passive or policy; mode is {st.mode.value}'
        problem = 'no LowState' if st.sample is None else check_state(cfg, st.sample)
        if problem is None and stale(cfg, st, now):
            problem = 'LowState stale'
        if problem is not None:
            return st, False, f'stand refused: {problem}'
        st = replace(enter(st, Mode.STAND, f'stand ({source})', now),
                     stand_from=st.sample.q[:g1.NUM_JOINTS].copy())
        return st, True, f'standing up over {cfg.stand_duration} s'
    if req is Request.START:
        if st.mode is not Mode.STAND:
            return st, False, f'start only from stand; mode is {st.mode.value}'
        if now - st.since < cfg.stand_duration:
            return st, False, 'start refused: stand not finished'
        if not policy_ready:
            return st, False, 'start refused: no policy loaded'
        return enter(st, Mode.POLICY, f'start ({source})', now), True, 'policy running'
    raise ValueError(f'unknown request {req!r}')


def check_action(cfg: ExecutorConfig, out: PolicyOutput) -> Optional[str]:
    """The first rule a policy output breaks, or None."""
    if not np.all(np.isfinite(out.action)):
        return 'policy output not finite'
    if np.max(np.abs(out.action), initial=0.0) > cfg.max_action:
        return f'policy output out of range ({np.max(np.abs(out.action)):.3g} > max_action)'
    if not (np.all(np.isfinite(out.q)) and np.all(np.isfinite(out.kp))
            and np.all(np.isfinite(out.kd))):
        return 'policy targets not finite'
    return None


def on_tick(cfg: ExecutorConfig, st: ExecState, now: float,
            policy: Optional[PolicyOutput] = None) -> Tuple[ExecState, Optional[MotorCommand]]:
    """
    One 500 Hz command step: staleness, then the command of the current mode.

    Returns no command before the first LowState: mode_machine is not known yet.
    """
    if st.sample is None:
        return st, None
    if driving(st) and stale(cfg, st, now):
        age = now - st.sample.stamp
        st = fault(st, f'LowState stale: none for {age * 1e3:.1f} ms', now)
    if st.mode is Mode.POLICY and policy is not None and policy.stamp >= st.since:
        problem = check_action(cfg, policy)
        if problem is None and now - policy.stamp > cfg.policy_timeout:
            problem = f'policy stalled: no output for {(now - policy.stamp) * 1e3:.0f} ms'
        if problem is not None:
            st = fault(st, problem, now)
    elif st.mode is Mode.POLICY and now - st.since > cfg.policy_timeout:
        st = fault(st, 'policy stalled: no output since start', now)
    mm, pr = st.sample.mode_machine, cfg.mode_pr
    default, kp, kd = _DEFAULT_POSE, _DEFAULT_KP, _DEFAULT_KD
    if st.mode is Mode.STAND:
        alpha = min(1.0, max(0.0, (now - st.since) / cfg.stand_duration))
        q = st.stand_from + alpha * (default - st.stand_from)
        cmd = lowlevel.pd_command(q, kp, kd, mm, pr)
    elif st.mode is Mode.POLICY and policy is not None and policy.stamp >= st.since:
        cmd = lowlevel.pd_command(policy.q, policy.kp, policy.kd, mm, pr)
    elif st.mode is Mode.POLICY:
        # Between start and the first policy output: hold the stand pose.
        cmd = lowlevel.pd_command(default, kp, kd, mm, pr)
    else:
        return st, lowlevel.damping_command(cfg.damping_kd, mm, pr)
    return st, cfg.limits.clip(cmd, cfg.damping_kd)
