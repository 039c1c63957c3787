"""
The G1's low-level interface as arrays: LowState in, LowCmd out, the wireless remote.

Pure NumPy, no ROS: the executor, the simulator node and the tests share it.
Everything here is in motor order (LowCmd/LowState slots 0..34); the maps
between a policy's joint order and the motor slots go by joint name.

The unitree_hg message objects are only touched by :func:`read_lowstate`,
:func:`fill_lowcmd` and :func:`read_lowcmd`, which copy between them and the
arrays; any object with the same attributes works, so the tests can use the
real messages or stand-ins.
"""

import struct
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Optional, Sequence, Tuple

import numpy as np

from bcg_ros.robot import crc, g1

NUM_SLOTS = g1.NUM_MOTOR_SLOTS
NUM_JOINTS = g1.NUM_JOINTS
MOTOR_ENABLE = 1
"""MotorCmd.mode of a driven motor (0 leaves it unpowered)."""

# Wireless remote layout in LowState.wireless_remote (40 bytes, little-endian):
# 2 header bytes, a 16-bit button bitfield, then float32 lx, rx, ry, L2 (analog
# trigger, unused here), ly; the rest is reserved.
REMOTE_SIZE = crc.REMOTE_SIZE
BUTTONS = ('R1', 'L1', 'start', 'select', 'R2', 'L2', 'F1', 'F2',
           'A', 'B', 'X', 'Y', 'up', 'right', 'down', 'left')
"""Remote buttons by bit, bit 0 first."""
_REMOTE_STRUCT = struct.Struct('<2xH5f')


class CommandError(ValueError):
    """A joint name, button or array that does not fit the G1's interface."""


# --- joint order -----------------------------------------------------------

def motor_slots(joint_names: Sequence[str]) -> np.ndarray:
    """Motor slot of each named joint, in the given order; raises naming an unknown joint."""
    slots = []
    for name in joint_names:
        if name not in g1.JOINT_NAMES:
            raise CommandError(f'joint {name!r} is not a G1 joint; joints: {list(g1.JOINT_NAMES)}')
        slots.append(g1.JOINT_NAMES.index(name))
    if len(set(slots)) != len(slots):
        raise CommandError(f'joint names repeat: {list(joint_names)}')
    return np.asarray(slots, dtype=np.int64)


def to_policy_order(motor_values: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """Values in motor order (29 or 35 slots) -> the order given by ``slots``."""
    return np.asarray(motor_values)[slots]


def to_motor_order(policy_values: np.ndarray, slots: np.ndarray,
                   fill: Sequence[float]) -> np.ndarray:
    """Values in policy order -> 29 motor-order values, ``fill`` where the policy has none."""
    out = np.array(fill, dtype=np.float64, copy=True)
    out[slots] = policy_values
    return out


# --- LowState --------------------------------------------------------------

@dataclass(frozen=True)
class LowStateSample:
    """One LowState as arrays, with the time it arrived."""

    stamp: float
    """Arrival time [s] on the receiver's monotonic clock."""
    tick: int
    """Robot time [ms], uint32."""
    mode_machine: int
    mode_pr: int
    q: np.ndarray
    """[35] joint positions [rad], motor order."""
    dq: np.ndarray
    """[35] joint velocities [rad/s]."""
    tau: np.ndarray
    """[35] estimated joint torques [N m]."""
    quat: np.ndarray
    """[4] pelvis IMU orientation (w, x, y, z)."""
    gyro: np.ndarray
    """[3] pelvis angular velocity, body frame [rad/s]."""
    acc: np.ndarray
    """[3] pelvis specific force, body frame [m/s^2]."""
    remote: bytes
    """The 40 raw bytes of wireless_remote."""


def _f32(values) -> np.ndarray:
    """float32 as on the wire (a message object holds Python floats unrounded), as float64."""
    return np.asarray(values, dtype=np.float32).astype(np.float64)


def read_lowstate(msg, stamp: float) -> LowStateSample:
    """Copy a unitree_hg LowState into a :class:`LowStateSample`."""
    motors = msg.motor_state
    imu = msg.imu_state
    return LowStateSample(
        stamp=float(stamp), tick=int(msg.tick), mode_machine=int(msg.mode_machine),
        mode_pr=int(msg.mode_pr),
        q=_f32([m.q for m in motors]), dq=_f32([m.dq for m in motors]),
        tau=_f32([m.tau_est for m in motors]), quat=_f32(imu.quaternion),
        gyro=_f32(imu.gyroscope), acc=_f32(imu.accelerometer),
        remote=bytes(bytearray(msg.wireless_remote)))


def _cdr_layout(fields):
    """
    Byte offsets of primitive fields laid out by XCDR1 rules (each aligned to its size).

    ``fields`` is a sequence of (name, numpy dtype, count); a name may repeat
    (the fields of each array element), and its offsets are then collected in
    order. Offsets are relative to the payload, after the 4-byte encapsulation.
    """
    offsets, pos = {}, 0
    for name, dtype, count in fields:
        size = np.dtype(dtype).itemsize
        pos = -(-pos // size) * size
        offsets.setdefault(name, []).extend(range(pos, pos + size * count, size))
        pos += size * count
    return {k: np.asarray(v) for k, v in offsets.items()}, pos


_MOTOR_STATE_CDR = (('mode', 'u1', 1), ('q', '<f4', 1), ('dq', '<f4', 1), ('ddq', '<f4', 1),
                    ('tau_est', '<f4', 1), ('temperature', '<i2', 2), ('vol', '<f4', 1),
                    ('sensor', '<u4', 2), ('motorstate', '<u4', 1), ('motor_reserve', '<u4', 4))
LOWSTATE_CDR, LOWSTATE_CDR_SIZE = _cdr_layout(
    (('version', '<u4', 2), ('mode_pr', 'u1', 1), ('mode_machine', 'u1', 1),
     ('tick', '<u4', 1), ('quaternion', '<f4', 4), ('gyroscope', '<f4', 3),
     ('accelerometer', '<f4', 3), ('rpy', '<f4', 3), ('imu_temperature', '<i2', 1))
    + _MOTOR_STATE_CDR * NUM_SLOTS
    + (('wireless_remote', 'u1', REMOTE_SIZE), ('reserve', '<u4', 4), ('crc', '<u4', 1)))
"""Offsets of every LowState field in its serialized (CDR) form, and the payload size."""
CDR_HEADER = 4


def read_lowstate_cdr(raw: bytes, stamp: float) -> LowStateSample:
    """
    A :class:`LowStateSample` straight from a serialized LowState (a raw subscription).

    Building the message object costs about half a millisecond in Python; this
    reads the few fields the executor needs from the bytes instead.
    """
    if len(raw) != CDR_HEADER + LOWSTATE_CDR_SIZE:
        raise CommandError(f'serialized LowState has {len(raw)} bytes, expected '
                           f'{CDR_HEADER + LOWSTATE_CDR_SIZE}')
    payload = np.frombuffer(raw, np.uint8, offset=CDR_HEADER)
    f4 = payload[:LOWSTATE_CDR_SIZE // 4 * 4].view('<f4')
    c = LOWSTATE_CDR
    # One gather for every float the sample holds, then views of it.
    values = f4[_LOWSTATE_F4].astype(np.float64)
    q, dq, tau, quat, gyro, acc = np.split(values, _LOWSTATE_SPLIT)
    remote = c['wireless_remote']
    return LowStateSample(
        stamp=float(stamp), tick=int(f4.view('<u4')[c['tick'][0] // 4]),
        mode_machine=int(payload[c['mode_machine'][0]]), mode_pr=int(payload[c['mode_pr'][0]]),
        q=q, dq=dq, tau=tau, quat=quat, gyro=gyro, acc=acc,
        remote=payload[remote[0]:remote[-1] + 1].tobytes())


_LOWSTATE_FLOATS = ('q', 'dq', 'tau_est', 'quaternion', 'gyroscope', 'accelerometer')
_LOWSTATE_F4 = np.concatenate([LOWSTATE_CDR[k] // 4 for k in _LOWSTATE_FLOATS])
_LOWSTATE_SPLIT = np.cumsum([len(LOWSTATE_CDR[k]) for k in _LOWSTATE_FLOATS])[:-1]
"""The float32 slots :func:`read_lowstate_cdr` reads, field by field, and where each ends."""


# --- LowCmd ----------------------------------------------------------------

@dataclass(frozen=True)
class MotorCommand:
    """A whole LowCmd as arrays over the 35 motor slots."""

    mode_pr: int
    mode_machine: int
    mode: np.ndarray
    """[35] uint8, MOTOR_ENABLE on slots 0..28, 0 on the unused slots 29..34."""
    q: np.ndarray
    dq: np.ndarray
    tau: np.ndarray
    kp: np.ndarray
    kd: np.ndarray

    def is_damping(self) -> bool:
        """Whether this is a damping command: no stiffness, no feed-forward, zero target speed."""
        j = slice(0, NUM_JOINTS)
        return bool(np.all(self.kp[j] == 0.0) and np.all(self.tau[j] == 0.0)
                    and np.all(self.dq[j] == 0.0) and np.all(self.kd[j] > 0.0))


def _slots(values, fill=0.0) -> np.ndarray:
    """29 joint values -> 35 slot values (unused slots ``fill``)."""
    out = np.full(NUM_SLOTS, fill, dtype=np.float64)
    out[:NUM_JOINTS] = values
    return out


def _enabled_modes() -> np.ndarray:
    mode = np.zeros(NUM_SLOTS, dtype=np.uint8)
    mode[:NUM_JOINTS] = MOTOR_ENABLE
    return mode


def pd_command(q, kp, kd, mode_machine: int, mode_pr: int = 0, dq=None,
               tau=None) -> MotorCommand:
    """A PD command on the 29 joints (motor order); slots 29..34 disabled and zero."""
    zeros = np.zeros(NUM_JOINTS)
    return MotorCommand(mode_pr=int(mode_pr), mode_machine=int(mode_machine),
                        mode=_enabled_modes(), q=_slots(q),
                        dq=_slots(zeros if dq is None else dq),
                        tau=_slots(zeros if tau is None else tau), kp=_slots(kp), kd=_slots(kd))


def damping_command(kd, mode_machine: int, mode_pr: int = 0) -> MotorCommand:
    """Motors powered with no stiffness: each joint only resists its own speed."""
    zeros = np.zeros(NUM_JOINTS)
    return pd_command(zeros, zeros, kd, mode_machine, mode_pr)


def _float32_inward(lower, upper):
    """
    Bounds moved inward to the nearest float32 values.

    The wire carries float32: a value clipped to a float64 bound can round
    just past it (2.8798 becomes 2.87980008). Bounds that are float32 values
    themselves survive the rounding exactly.
    """
    lo, hi = np.asarray(lower, np.float32), np.asarray(upper, np.float32)
    lo = np.where(lo < lower, np.nextafter(lo, np.float32(np.inf)), lo)
    hi = np.where(hi > upper, np.nextafter(hi, np.float32(-np.inf)), hi)
    return lo.astype(np.float64), hi.astype(np.float64)


@dataclass(frozen=True)
class CommandLimits:
    """The last barrier before the wire: what any command may ask of a motor."""

    q_lower: np.ndarray
    """[29] lowest position target [rad]."""
    q_upper: np.ndarray
    """[29] highest position target [rad]."""
    kp_max: np.ndarray
    """[29] stiffness cap [N m / rad]."""
    kd_max: np.ndarray
    """[29] damping cap [N m s / rad]."""
    tau_max: np.ndarray
    """[29] feed-forward torque cap [N m], symmetric."""
    dq_max: np.ndarray
    """[29] target speed cap [rad/s], symmetric."""

    @classmethod
    def for_g1(cls, kp_scale: float = 2.0, kd_scale: float = 2.0,
               tau_fraction: float = 0.5) -> 'CommandLimits':
        """Joint ranges from the G1 description; caps as multiples of its gains and torques."""
        lower, upper = _float32_inward(np.asarray(g1.JOINT_LOWER), np.asarray(g1.JOINT_UPPER))

        def cap(values):
            return _float32_inward(-np.asarray(values), np.asarray(values))[1]
        return cls(q_lower=lower, q_upper=upper,
                   kp_max=cap(kp_scale * np.asarray(g1.DEFAULT_KP)),
                   kd_max=cap(kd_scale * np.asarray(g1.DEFAULT_KD)),
                   tau_max=cap(tau_fraction * np.asarray(g1.TORQUE_LIMIT)),
                   dq_max=cap(np.asarray(g1.VELOCITY_LIMIT)))

    def contains(self, cmd: MotorCommand) -> bool:
        """Whether ``cmd`` is finite, within these limits and has slots 29..34 disabled."""
        j = slice(0, NUM_JOINTS)
        arrays = (cmd.q, cmd.dq, cmd.tau, cmd.kp, cmd.kd)
        if not all(np.all(np.isfinite(a)) for a in arrays):
            return False
        unused_zero = all(np.all(a[NUM_JOINTS:] == 0.0) for a in arrays)
        return bool(unused_zero and np.all(cmd.mode[NUM_JOINTS:] == 0)
                    and np.all(cmd.q[j] >= self.q_lower) and np.all(cmd.q[j] <= self.q_upper)
                    and np.all(cmd.kp[j] >= 0) and np.all(cmd.kp[j] <= self.kp_max)
                    and np.all(cmd.kd[j] >= 0) and np.all(cmd.kd[j] <= self.kd_max)
                    and np.all(np.abs(cmd.tau[j]) <= self.tau_max)
                    and np.all(np.abs(cmd.dq[j]) <= self.dq_max))

    @cached_property
    def bounds(self) -> Tuple[np.ndarray, np.ndarray]:
        """[5, 29] lower and upper bounds of q, dq, tau, kp and kd, row by row."""
        zero = np.zeros(NUM_JOINTS)
        return (np.stack([self.q_lower, -self.dq_max, -self.tau_max, zero, zero]),
                np.stack([self.q_upper, self.dq_max, self.tau_max, self.kp_max, self.kd_max]))

    def clip(self, cmd: MotorCommand, damping_kd) -> MotorCommand:
        """Clip ``cmd`` into these limits; anything non-finite becomes a damping command."""
        j = slice(0, NUM_JOINTS)
        rows = np.stack([cmd.q[j], cmd.dq[j], cmd.tau[j], cmd.kp[j], cmd.kd[j]])
        if not np.isfinite(rows).all():
            return damping_command(np.minimum(damping_kd, self.kd_max), cmd.mode_machine,
                                   cmd.mode_pr)
        lo, hi = self.bounds
        q, dq, tau, kp, kd = np.minimum(np.maximum(rows, lo), hi)
        return pd_command(q=q, kp=kp, kd=kd, dq=dq, tau=tau, mode_machine=cmd.mode_machine,
                          mode_pr=cmd.mode_pr)


def command_crc(cmd: MotorCommand) -> int:
    """The crc the robot expects for ``cmd`` (computed from the arrays, as float32 on the wire)."""
    image = crc.lowcmd_struct_bytes(
        mode_pr=cmd.mode_pr, mode_machine=cmd.mode_machine, mode=cmd.mode,
        q=cmd.q.astype(np.float32), dq=cmd.dq.astype(np.float32),
        tau=cmd.tau.astype(np.float32), kp=cmd.kp.astype(np.float32),
        kd=cmd.kd.astype(np.float32))
    return crc.crc32_core(image[:-4])


def fill_lowcmd(msg, cmd: MotorCommand):
    """Write ``cmd`` into a unitree_hg LowCmd, stamp its crc, and return it."""
    msg.mode_pr = cmd.mode_pr
    msg.mode_machine = cmd.mode_machine
    # float32 first, so the message carries exactly the values the crc covers.
    cols = [a.astype(np.float32).tolist() for a in (cmd.q, cmd.dq, cmd.tau, cmd.kp, cmd.kd)]
    modes = cmd.mode.tolist()
    for i, m in enumerate(msg.motor_cmd):
        m.mode = modes[i]
        m.q, m.dq, m.tau, m.kp, m.kd = cols[0][i], cols[1][i], cols[2][i], cols[3][i], cols[4][i]
        m.reserve = 0
    msg.reserve = [0, 0, 0, 0]
    msg.crc = command_crc(cmd)
    return msg


def read_lowcmd(msg) -> MotorCommand:
    """Copy a unitree_hg LowCmd into a :class:`MotorCommand`."""
    motors = msg.motor_cmd
    return MotorCommand(
        mode_pr=int(msg.mode_pr), mode_machine=int(msg.mode_machine),
        mode=np.array([m.mode for m in motors], dtype=np.uint8),
        q=np.array([m.q for m in motors], dtype=np.float64),
        dq=np.array([m.dq for m in motors], dtype=np.float64),
        tau=np.array([m.tau for m in motors], dtype=np.float64),
        kp=np.array([m.kp for m in motors], dtype=np.float64),
        kd=np.array([m.kd for m in motors], dtype=np.float64))


LOWCMD_CDR, LOWCMD_CDR_SIZE = _cdr_layout(
    (('mode_pr', 'u1', 1), ('mode_machine', 'u1', 1))
    + (('mode', 'u1', 1), ('q', '<f4', 1), ('dq', '<f4', 1), ('tau', '<f4', 1),
       ('kp', '<f4', 1), ('kd', '<f4', 1), ('motor_reserve', '<u4', 1)) * NUM_SLOTS
    + (('reserve', '<u4', 4), ('crc', '<u4', 1)))
"""Offsets of every LowCmd field in its serialized (CDR) form, and the payload size.

Not the C struct image the crc covers: CDR does not pad the first MotorCmd
to a 4-byte boundary, so the two layouts differ from its mode field on.
"""


_CDR_LE = b'\x00\x01\x00\x00'
"""Encapsulation header of a little-endian (XCDR1) serialized message."""


def _lowcmd_plan() -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """
    What :func:`serialize_lowcmd` writes where, worked out once.

    Returns the serialized message with every field zero (the encapsulation header in
    front, one spare zero byte behind), the float32 slots of q, dq, tau, kp and kd
    (field by field, 35 each) in the payload, and for each byte of the C struct image
    the crc covers (all but the crc word) the payload byte it equals, or the spare
    zero byte for the struct's padding.
    """
    template = np.zeros(CDR_HEADER + LOWCMD_CDR_SIZE + 1, np.uint8)
    template[:CDR_HEADER] = np.frombuffer(_CDR_LE, np.uint8)
    c = LOWCMD_CDR
    f4 = np.concatenate([c[k] // 4 for k in ('q', 'dq', 'tau', 'kp', 'kd')])
    gather = np.full(crc.LOWCMD_STRUCT_SIZE - 4, LOWCMD_CDR_SIZE)
    base = crc.LOWCMD_DTYPE.fields['motor_cmd'][1]
    step = crc.MOTOR_CMD_DTYPE.itemsize
    for name in ('mode_pr', 'mode_machine'):
        gather[crc.LOWCMD_DTYPE.fields[name][1]] = c[name][0]
    for name, cdr_name in (('mode', 'mode'), ('q', 'q'), ('dq', 'dq'), ('tau', 'tau'),
                           ('kp', 'kp'), ('kd', 'kd'), ('reserve', 'motor_reserve')):
        dtype, offset = crc.MOTOR_CMD_DTYPE.fields[name][:2]
        for i, cdr in enumerate(c[cdr_name]):
            at = base + i * step + offset
            gather[at:at + dtype.itemsize] = np.arange(cdr, cdr + dtype.itemsize)
    at = crc.LOWCMD_DTYPE.fields['reserve'][1]
    gather[at:at + 16] = np.arange(c['reserve'][0], c['reserve'][0] + 16)
    for a in (template, f4, gather):
        a.setflags(write=False)
    return template, f4, gather


_LOWCMD_TEMPLATE, _LOWCMD_F4, _LOWCMD_GATHER = _lowcmd_plan()


def serialize_lowcmd(cmd: MotorCommand) -> bytes:
    """
    ``cmd`` as a serialized unitree_hg LowCmd, crc stamped: what a raw publisher sends.

    The same fields as serializing the message :func:`fill_lowcmd` makes (reserve
    words and alignment padding zero), written with numpy into a zero template
    instead of through the 35 message objects, and the crc computed over the C
    struct image gathered from those bytes (:func:`_lowcmd_plan`): this runs inside
    the 500 Hz command loop.
    """
    buf = _LOWCMD_TEMPLATE.copy()
    payload = buf[CDR_HEADER:CDR_HEADER + LOWCMD_CDR_SIZE]
    c = LOWCMD_CDR
    payload[c['mode_pr'][0]] = cmd.mode_pr
    payload[c['mode_machine'][0]] = cmd.mode_machine
    payload[c['mode']] = cmd.mode
    f4 = payload.view('<f4')
    f4[_LOWCMD_F4] = np.concatenate([cmd.q, cmd.dq, cmd.tau, cmd.kp, cmd.kd])
    image = buf[CDR_HEADER:][_LOWCMD_GATHER]
    f4.view('<u4')[c['crc'][0] // 4] = crc.crc32_core(image.tobytes())
    return buf[:CDR_HEADER + LOWCMD_CDR_SIZE].tobytes()


def read_lowcmd_cdr(raw: bytes) -> Tuple[MotorCommand, bool]:
    """(command, crc valid) straight from a serialized LowCmd (a raw subscription)."""
    if len(raw) != CDR_HEADER + LOWCMD_CDR_SIZE:
        raise CommandError(f'serialized LowCmd has {len(raw)} bytes, expected '
                           f'{CDR_HEADER + LOWCMD_CDR_SIZE}')
    payload = np.frombuffer(raw, np.uint8, offset=CDR_HEADER)
    f4 = payload.view('<f4')
    u4 = f4.view('<u4')
    c = LOWCMD_CDR
    cmd = MotorCommand(mode_pr=int(payload[c['mode_pr'][0]]),
                       mode_machine=int(payload[c['mode_machine'][0]]),
                       mode=payload[c['mode']].copy(),
                       **{k: f4[c[k] // 4].astype(np.float64)
                          for k in ('q', 'dq', 'tau', 'kp', 'kd')})
    image = crc.lowcmd_struct_bytes(
        mode_pr=cmd.mode_pr, mode_machine=cmd.mode_machine, mode=cmd.mode,
        q=f4[c['q'] // 4], dq=f4[c['dq'] // 4], tau=f4[c['tau'] // 4], kp=f4[c['kp'] // 4],
        kd=f4[c['kd'] // 4], motor_reserve=u4[c['motor_reserve'] // 4],
        reserve=u4[c['reserve'] // 4].tolist())
    return cmd, crc.crc32_core(image[:-4]) == int(u4[c['crc'][0] // 4])


def crc_ok(msg) -> bool:
    """Whether a received LowCmd carries the crc the robot expects."""
    return int(msg.crc) == crc.lowcmd_crc(msg)


# --- wireless remote -------------------------------------------------------

@dataclass(frozen=True)
class Remote:
    """The wireless remote as the G1 reports it."""

    buttons: int
    """16-bit field, bit i set while BUTTONS[i] is held."""
    lx: float
    rx: float
    ry: float
    ly: float

    def held(self, name: str) -> bool:
        """Whether the named button is held."""
        return bool(self.buttons & button_mask([name]))


def decode_remote(data: bytes) -> Remote:
    """Decode LowState.wireless_remote; raises CommandError unless it is 40 bytes."""
    data = bytes(data)
    if len(data) != REMOTE_SIZE:
        raise CommandError(f'wireless_remote has {len(data)} bytes, expected {REMOTE_SIZE}')
    buttons, lx, rx, ry, _l2, ly = _REMOTE_STRUCT.unpack_from(data)
    return Remote(buttons, lx, rx, ry, ly)


def encode_remote(held: Iterable[str] = (), lx: float = 0.0, rx: float = 0.0, ry: float = 0.0,
                  ly: float = 0.0) -> bytes:
    """The 40 wireless_remote bytes with the named buttons held and the given stick axes."""
    out = bytearray(REMOTE_SIZE)
    _REMOTE_STRUCT.pack_into(out, 0, button_mask(held), lx, rx, ry, 0.0, ly)
    return bytes(out)


def button_mask(names: Iterable[str]) -> int:
    """Bitfield of the named buttons; raises naming an unknown button."""
    mask = 0
    for name in names:
        if name not in BUTTONS:
            raise CommandError(f'unknown remote button {name!r}; buttons: {list(BUTTONS)}')
        mask |= 1 << BUTTONS.index(name)
    return mask


def parse_combo(text: str) -> int:
    """``'L1+A'`` -> the bitfield of a button combination (empty text: no combination)."""
    names = [n.strip() for n in text.split('+') if n.strip()]
    return button_mask(names)


def combo_pressed(previous: int, current: int, mask: int) -> bool:
    """Whether the combination ``mask`` became fully held between two button fields."""
    return mask != 0 and (current & mask) == mask and (previous & mask) != mask


def remote_buttons(data: Optional[bytes]) -> int:
    """The button field of raw remote bytes, 0 when they are malformed."""
    try:
        return decode_remote(data).buttons if data is not None else 0
    except CommandError:
        return 0
