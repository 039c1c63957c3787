"""
The deployment contract: what a policy sees, what its output means.

Written once here and used by the trainer (in JAX), stored in the ONNX file's
metadata, and read back by the evaluator and the executor (in NumPy). There
is no second copy of it anywhere: the observation terms below take the array
module as an argument so the same code runs in both.

Observation layout: the terms in ``Contract.obs_terms`` order; a term with
``history`` h contributes h frames, oldest first (as IsaacLab stacks history,
per term). Each frame is ``clip(scale * value)``.

Action: ``target = offset + scale * clip(action, -clip, clip)`` per joint, in
the contract's joint order, then PD with the contract's kp and kd. A residual
contract (``action_residual``) puts the reference's joint angles of the next
frame (the first frame of the observed reference window) in place of the
offset, so a zero action replays the motion and the policy learns corrections.
"""

import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from bcg_ros import rotation
from bcg_ros.robot import g1

METADATA_KEY = 'bcg_ros.contract'
"""ONNX metadata_props key under which the contract is stored as JSON."""
TRAIN_PENETRATION_KEY = 'bcg_ros.train_penetration_mm'
"""ONNX metadata key: mean foot penetration depth [mm] the trainer measured in its simulator."""
CONTACT_K_KEY = 'bcg_ros.contact_k'
"""ONNX metadata key: contact stiffness k of the simulator the policy was trained in."""
TRAIN_CONFIG_KEY = 'bcg_ros.train_config'
"""ONNX metadata key: the whole training configuration as JSON (bcg-train --config reads it)."""
TRAIN_COMMAND_KEY = 'bcg_ros.train_command'
"""ONNX metadata key: the command line that trained the policy, as a JSON list."""
CONTRACT_VERSION = 2
"""2: ``action_residual`` (targets around the reference); version 1 files still load."""
REF_FUTURE = 3
"""Reference frames in the observation: t+1 .. t+3."""


class ContractError(ValueError):
    """A contract that is malformed or does not fit the robot it is used with."""


@dataclass(frozen=True)
class RobotObs:
    """What the robot measures at one control step, joints in contract order."""

    quat: np.ndarray
    """Base orientation (w, x, y, z), world frame."""
    gyro: np.ndarray
    """Base angular velocity in the base frame [rad/s]."""
    joint_pos: np.ndarray
    joint_vel: np.ndarray
    last_action: np.ndarray
    command: np.ndarray = field(default_factory=lambda: np.zeros(3))
    """Velocity command (vx, vy, wz) for velocity-tracking policies."""
    lin_vel: Optional[np.ndarray] = None
    """Base linear velocity in the base frame [m/s]: the state estimator's on the robot
    and in MuJoCo (:class:`bcg_ros.runtime.estimator.BaseVelocity`), None where none runs."""


@dataclass(frozen=True)
class RefObs:
    """Reference motion frames t+1 .. t+REF_FUTURE, joints in contract order."""

    joint_pos: np.ndarray
    """[REF_FUTURE, n_joints]"""
    root_quat: np.ndarray
    """[REF_FUTURE, 4] reference root orientation (w, x, y, z), world frame."""
    root_height: np.ndarray
    """[REF_FUTURE] reference root height [m]."""
    root_lin_vel: np.ndarray
    """[REF_FUTURE, 3] reference root linear velocity, world frame [m/s]."""


# Observation terms: each takes (robot, ref, contract, xp) and returns one frame.

def _base_ang_vel(robot, ref, c, xp):
    """Return the angular velocity of the base in its own frame."""
    return robot.gyro


def _base_lin_vel(robot, ref, c, xp):
    """Return the estimated linear velocity of the base in its own frame."""
    if robot.lin_vel is None:
        raise ContractError("observation term 'base_lin_vel' needs the base velocity "
                            '(a state estimator in the loop), and none was given')
    return robot.lin_vel


def _projected_gravity(robot, ref, c, xp):
    """Return the unit gravity direction in the base frame."""
    g = xp.asarray([0.0, 0.0, -1.0], dtype=robot.quat.dtype)
    return rotation.quat_rotate_inverse(robot.quat, g, xp)


def _joint_pos_rel(robot, ref, c, xp):
    """Return joint positions relative to the default pose."""
    return robot.joint_pos - xp.asarray(c.default_pose, dtype=robot.joint_pos.dtype)


def _joint_vel_rel(robot, ref, c, xp):
    """Return joint velocities."""
    return robot.joint_vel


def _last_action(robot, ref, c, xp):
    """Return the previous raw policy output."""
    return robot.last_action


def _velocity_commands(robot, ref, c, xp):
    """Return the commanded base velocity (vx, vy, wz)."""
    return robot.command


def _ref_joint_pos(robot, ref, c, xp):
    """Return reference joint positions at t+1..t+3, relative to the default pose."""
    d = ref.joint_pos - xp.asarray(c.default_pose, dtype=ref.joint_pos.dtype)
    return xp.reshape(d, (-1,))


def _ref_root_rot(robot, ref, c, xp):
    """Return the reference root rotation at t+1..t+3 relative to the base, as 6D."""
    rel = rotation.quat_mul(rotation.quat_conj(robot.quat, xp)[None, :], ref.root_quat, xp)
    return xp.reshape(rotation.quat_to_6d(rel, xp), (-1,))


def _ref_root_height(robot, ref, c, xp):
    """Return the reference root height at t+1..t+3."""
    return ref.root_height


def _ref_root_lin_vel(robot, ref, c, xp):
    """
    Return the reference root velocity at t+1..t+3 in the robot's base frame.

    The speed the clip asks for, where the robot can act on it: without it a policy sees
    the clip's joint angles and heading but not how fast the clip travels.
    """
    q = xp.broadcast_to(robot.quat, ref.root_lin_vel.shape[:-1] + (4,))
    return xp.reshape(rotation.quat_rotate_inverse(q, ref.root_lin_vel, xp), (-1,))


_NJ = g1.NUM_JOINTS
TERMS: Dict[str, Tuple[Callable, Callable[[int], int]]] = {
    'base_ang_vel': (_base_ang_vel, lambda nj: 3),
    'base_lin_vel': (_base_lin_vel, lambda nj: 3),
    'projected_gravity': (_projected_gravity, lambda nj: 3),
    'joint_pos_rel': (_joint_pos_rel, lambda nj: nj),
    'joint_vel_rel': (_joint_vel_rel, lambda nj: nj),
    'last_action': (_last_action, lambda nj: nj),
    'velocity_commands': (_velocity_commands, lambda nj: 3),
    'ref_joint_pos': (_ref_joint_pos, lambda nj: REF_FUTURE * nj),
    'ref_root_rot': (_ref_root_rot, lambda nj: REF_FUTURE * 6),
    'ref_root_height': (_ref_root_height, lambda nj: REF_FUTURE),
    'ref_root_lin_vel': (_ref_root_lin_vel, lambda nj: REF_FUTURE * 3),
}
"""Known observation terms: name -> (function, frame size given the joint count)."""
REFERENCE_TERMS = ('ref_joint_pos', 'ref_root_rot', 'ref_root_height', 'ref_root_lin_vel')


@dataclass(frozen=True)
class ObsTerm:
    """One observation term as it appears in the policy input."""

    name: str
    size: int
    """Size of one frame."""
    history: int = 1
    """Frames stacked, oldest first."""
    scale: Union[float, Tuple[float, ...]] = 1.0
    """One factor, or one per element of a frame (as IsaacLab's deploy.yaml writes it)."""
    clip: Union[None, float, Tuple[float, float]] = None
    """Symmetric bound, or (low, high)."""
    clip_first: bool = False
    """Clip the raw term before scaling it (IsaacLab's order); default scale, then clip."""


IMITATION_TERMS: Tuple[ObsTerm, ...] = (
    ObsTerm('base_ang_vel', 3, scale=0.25),
    ObsTerm('projected_gravity', 3),
    ObsTerm('joint_pos_rel', _NJ),
    ObsTerm('joint_vel_rel', _NJ, scale=0.05),
    ObsTerm('last_action', _NJ),
    ObsTerm('ref_joint_pos', REF_FUTURE * _NJ),
    ObsTerm('ref_root_rot', REF_FUTURE * 6),
    ObsTerm('ref_root_height', REF_FUTURE),
)
"""The observation of the project's imitation policies (robot state + reference t+1..t+3)."""

REF_VELOCITY_TERM = ObsTerm('ref_root_lin_vel', REF_FUTURE * 3, scale=0.5)
"""The clip's root velocity, appended to :data:`IMITATION_TERMS` on request."""

BASE_VELOCITY_TERM = ObsTerm('base_lin_vel', 3, scale=0.5)
"""The robot's own (estimated) base velocity, appended on request: beside the clip's
velocity it tells the policy whether it keeps up."""


@dataclass(frozen=True)
class Contract:
    """Everything a deploying side must know to run a policy."""

    joint_names: Tuple[str, ...]
    """Policy joint order (names as in :mod:`bcg_ros.robot.g1`)."""
    default_pose: Tuple[float, ...]
    kp: Tuple[float, ...]
    kd: Tuple[float, ...]
    action_scale: Tuple[float, ...]
    action_offset: Tuple[float, ...]
    action_clip: Optional[float]
    obs_terms: Tuple[ObsTerm, ...]
    control_dt: float
    motion_name: str = ''
    motion_frames: int = 0
    """Length of the reference motion in control steps (0: no reference)."""
    version: int = CONTRACT_VERSION
    target_clip: Optional[Tuple[Tuple[float, float], ...]] = None
    """Per-joint (low, high) bounds on the joint targets, after scale and offset."""
    action_residual: bool = False
    """Targets are the reference's next joint angles plus scale * action (the offset is
    unused); every consumer passes the reference window to :meth:`action_to_targets`."""

    def __post_init__(self):
        """Check that every per-joint field has one value per joint."""
        n = len(self.joint_names)
        for name in ('default_pose', 'kp', 'kd', 'action_scale', 'action_offset'):
            if len(getattr(self, name)) != n:
                raise ContractError(f'contract field {name!r} has {len(getattr(self, name))} '
                                    f'values, joint_names has {n}')
            bad = [i for i, v in enumerate(getattr(self, name)) if not math.isfinite(v)]
            if bad:
                raise ContractError(f'contract field {name!r}: value {bad[0]} '
                                    f'({self.joint_names[bad[0]]}) is '
                                    f'{getattr(self, name)[bad[0]]}, not a finite number')
        for name in ('kp', 'kd'):
            bad = [i for i, v in enumerate(getattr(self, name)) if v < 0]
            if bad:
                raise ContractError(f'contract field {name!r}: value {bad[0]} '
                                    f'({self.joint_names[bad[0]]}) is negative')
        if self.target_clip is not None and len(self.target_clip) != n:
            raise ContractError(f'contract field target_clip has {len(self.target_clip)} '
                                f'bounds, joint_names has {n}')
        for t in self.obs_terms:
            if t.name in TERMS and TERMS[t.name][1](n) != t.size:
                raise ContractError(f'observation term {t.name!r}: size {t.size}, expected '
                                    f'{TERMS[t.name][1](n)} for {n} joints')
            if not isinstance(t.scale, (int, float)) and len(t.scale) != t.size:
                raise ContractError(f'observation term {t.name!r}: scale has '
                                    f'{len(t.scale)} values, the term has {t.size}')
        if not self.control_dt > 0:
            raise ContractError(f'contract field control_dt must be > 0, got {self.control_dt}')
        if self.action_residual and not self.uses_reference:
            raise ContractError('contract field action_residual: the targets are built on the '
                                'reference, but no observation term is a reference term '
                                f'{REFERENCE_TERMS}')

    @property
    def num_joints(self) -> int:
        """Return the number of joints the policy drives."""
        return len(self.joint_names)

    @property
    def obs_size(self) -> int:
        """Return the length of the policy input vector."""
        return sum(t.size * t.history for t in self.obs_terms)

    @property
    def uses_reference(self) -> bool:
        """Return whether the observation contains reference-motion terms."""
        return any(t.name in REFERENCE_TERMS for t in self.obs_terms)

    @property
    def uses_base_velocity(self) -> bool:
        """Return whether the observation needs an estimated base velocity."""
        return any(t.name == 'base_lin_vel' for t in self.obs_terms)

    def action_to_targets(self, action, xp=np, ref: Optional['RefObs'] = None):
        """
        Map a raw policy output to joint position targets (contract joint order).

        ``ref``: the reference window the policy observed this step; a residual
        contract needs it (its first frame is the base of the targets).
        """
        a = action
        if self.action_clip is not None:
            a = xp.clip(a, -self.action_clip, self.action_clip)
        if self.action_residual:
            if ref is None:
                raise ContractError('a residual contract (action_residual) needs the '
                                    'reference window to map actions to targets')
            base = xp.asarray(ref.joint_pos[0], dtype=a.dtype)
        else:
            base = xp.asarray(self.action_offset, dtype=a.dtype)
        q = base + xp.asarray(self.action_scale, dtype=a.dtype) * a
        if self.target_clip is not None:
            bounds = xp.asarray(self.target_clip, dtype=a.dtype)
            q = xp.clip(q, bounds[:, 0], bounds[:, 1])
        return q

    def to_metadata(self) -> Dict[str, str]:
        """Return the ONNX metadata_props entries carrying this contract."""
        d = asdict(self)
        return {METADATA_KEY: json.dumps(d, sort_keys=True),
                'joint_names': ','.join(self.joint_names),
                'control_dt': repr(self.control_dt),
                'obs_size': str(self.obs_size)}

    @classmethod
    def from_dict(cls, d: Mapping, source: str = '<contract>') -> 'Contract':
        """Build a contract from its JSON form; errors name ``source`` and the field."""
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ContractError(f'{source}: unknown contract field(s) {sorted(unknown)}')
        required = {'joint_names', 'default_pose', 'kp', 'kd', 'action_scale',
                    'action_offset', 'action_clip', 'obs_terms', 'control_dt'}
        missing = required - set(d)
        if missing:
            raise ContractError(f'{source}: contract field(s) {sorted(missing)} missing')
        if d.get('version', CONTRACT_VERSION) > CONTRACT_VERSION:
            raise ContractError(f'{source}: contract version {d["version"]} is newer than '
                                f'this bcg_ros understands ({CONTRACT_VERSION})')
        kw = dict(d)
        try:
            kw['obs_terms'] = tuple(ObsTerm(**_tuples(t)) for t in d['obs_terms'])
        except TypeError as exc:
            raise ContractError(f'{source}: field obs_terms: {exc}') from exc
        for name in ('joint_names', 'default_pose', 'kp', 'kd', 'action_scale',
                     'action_offset'):
            kw[name] = tuple(d[name])
        if d.get('target_clip') is not None:
            kw['target_clip'] = tuple(tuple(b) for b in d['target_clip'])
        try:
            return cls(**kw)
        except ContractError as exc:
            raise ContractError(f'{source}: {exc}') from exc

    @classmethod
    def from_metadata(cls, meta: Mapping[str, str], source: str = '<onnx>') -> 'Contract':
        """Read a contract back from ONNX metadata_props."""
        if METADATA_KEY not in meta:
            raise ContractError(f'{source}: no {METADATA_KEY!r} entry in the ONNX metadata '
                                f'(keys: {sorted(meta)})')
        try:
            d = json.loads(meta[METADATA_KEY])
        except json.JSONDecodeError as exc:
            raise ContractError(f'{source}: {METADATA_KEY!r} is not valid JSON: {exc}') from exc
        return cls.from_dict(d, source)

    def check_robot(self, joint_names: Sequence[str] = g1.JOINT_NAMES,
                    control_dt: float = g1.CONTROL_DT, source: str = '<policy>'):
        """Raise naming the field if this contract does not fit the robot."""
        unknown = [n for n in self.joint_names if n not in joint_names]
        if unknown:
            raise ContractError(f'{source}: field joint_names: {unknown} not joints of the '
                                f'robot ({len(joint_names)} joints)')
        if abs(self.control_dt - control_dt) > 1e-9:
            raise ContractError(f'{source}: field control_dt: policy {self.control_dt} s, '
                                f'robot {control_dt} s')
        for t in self.obs_terms:
            if t.name not in TERMS:
                raise ContractError(f'{source}: field obs_terms: unknown term {t.name!r} '
                                    f'(known: {sorted(TERMS)})')


def _tuples(term: Mapping) -> Dict:
    """JSON lists of an observation term back to tuples (the dataclass is frozen)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in term.items()}


def imitation_contract(motion_name: str = '', motion_frames: int = 0,
                       action_scale: float = 0.25, residual: bool = False,
                       ref_velocity: bool = False, base_velocity: bool = False) -> Contract:
    """
    Return the contract of the project's own imitation policies on the G1.

    ``ref_velocity`` adds :data:`REF_VELOCITY_TERM` to the observation, then
    ``base_velocity`` :data:`BASE_VELOCITY_TERM`. Targets are held to the joint ranges
    (``target_clip``), as policy_node's executor holds them on the robot, so training
    sees the targets the motors get.
    """
    return Contract(joint_names=g1.JOINT_NAMES, default_pose=g1.DEFAULT_POSE,
                    kp=g1.DEFAULT_KP, kd=g1.DEFAULT_KD,
                    action_scale=(action_scale,) * g1.NUM_JOINTS,
                    action_offset=g1.DEFAULT_POSE, action_clip=None,
                    obs_terms=(IMITATION_TERMS + ((REF_VELOCITY_TERM,) if ref_velocity else ())
                               + ((BASE_VELOCITY_TERM,) if base_velocity else ())),
                    control_dt=g1.CONTROL_DT,
                    motion_name=motion_name, motion_frames=motion_frames,
                    action_residual=residual,
                    target_clip=tuple(zip(g1.JOINT_LOWER, g1.JOINT_UPPER)))


def reference_indices(step, num_frames: int, xp=np):
    """
    Return the frames [REF_FUTURE] of the reference window at control step ``step``.

    Frames step+1 .. step+REF_FUTURE of a clip of ``num_frames`` frames, held at its
    last frame past the end. The one definition of the window: the runtime, the
    evaluator (NumPy) and the trainer (``xp=jax.numpy``, ``step`` traced) all use it.
    """
    return xp.clip(step + xp.arange(1, REF_FUTURE + 1), 0, num_frames - 1)


def reference_window(motion, motor_ids: np.ndarray, step: int) -> RefObs:
    """
    Reference frames :func:`reference_indices` of ``motion`` at control step ``step``.

    ``motion`` has ``joint_pos`` [T, 29] in motor order, ``root_quat``, ``root_pos``
    and ``root_lin_vel`` at the control rate; ``motor_ids`` maps contract joints to motors.
    """
    motion = motion.observed    # a clip raised onto a terrain is observed as recorded
    idx = reference_indices(step, motion.num_frames)
    return RefObs(joint_pos=motion.joint_pos[idx][:, motor_ids],
                  root_quat=motion.root_quat[idx], root_height=motion.root_pos[idx, 2],
                  root_lin_vel=motion.root_lin_vel[idx])


def observation_frame(contract: Contract, robot: RobotObs, ref: Optional[RefObs], xp=np):
    """Return per-term frames (scaled and clipped) for one step, in term order."""
    out = []
    for t in contract.obs_terms:
        fn = TERMS[t.name][0]
        if t.name in REFERENCE_TERMS and ref is None:
            raise ContractError(f'observation term {t.name!r} needs a reference motion')
        v = fn(robot, ref, contract, xp)
        scale = t.scale if isinstance(t.scale, (int, float)) else xp.asarray(t.scale)
        if t.clip is not None:
            lo, hi = ((-t.clip, t.clip) if isinstance(t.clip, (int, float)) else t.clip)
            v = xp.clip(v, lo, hi) * scale if t.clip_first else xp.clip(v * scale, lo, hi)
        else:
            v = v * scale
        out.append(v)
    return tuple(out)


def init_history(contract: Contract, frame, xp=np):
    """Return a history buffer filled with copies of ``frame`` (episode start)."""
    return tuple(xp.stack([f] * t.history) for t, f in zip(contract.obs_terms, frame))


def push_history(history, frame, xp=np):
    """Drop the oldest frame of each term and append the new one."""
    return tuple(xp.concatenate([h[1:], f[None]], axis=0) for h, f in zip(history, frame))


def flatten(history, xp=np):
    """Return the policy input vector of a history buffer (oldest frame first)."""
    return xp.concatenate([xp.reshape(h, (-1,)) for h in history])
