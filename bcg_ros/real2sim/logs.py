"""
Robot logs: rosbag2 files of the G1's LowState and LowCmd as numpy arrays, and back.

A log is what a G1 user already records, ``ros2 bag record /lowstate /lowcmd`` on
the robot: a directory with ``metadata.yaml`` and its storage files (sqlite3, the
default on Humble, or MCAP). :func:`read_log` turns one into a :class:`RobotLog`,
one row per message in the order the recorder received them; :func:`write_log`
writes a log back as a bag, so that simulated runs give the same kind of file;
:class:`BagWriter` is the writer underneath both, and ``bag_recorder_node``'s.

Files go through rosbags (pure Python, no ROS install needed). Its type store
knows the standard ROS 2 messages and learns unitree_hg's from their ``.msg``
files (:func:`typestore`). A bag holds each message as the CDR bytes DDS carried:
a 4-byte encapsulation header, then the fields, each aligned to its own size.
LowState and LowCmd have no variable-length field, so every message has the same
size and every field the same offset (:data:`bcg_ros.robot.lowlevel.LOWSTATE_CDR`,
:data:`~bcg_ros.robot.lowlevel.LOWCMD_CDR`): a stream is read as one ``[N, size]``
byte array and sliced by column, instead of building 35 motor objects a message.
The padding bytes between fields hold whatever the sender's buffer held (DDS
does not clear them), so they are never read, and written as zeros.

Time: a bag stores, for every message, when the recorder received it (its
clock, in ns). A log's ``t`` is that time in seconds after
:attr:`RobotLog.start_ns`, the first message of the log; LowState's ``tick`` is
the robot's own millisecond clock, and Odometry's ``stamp_ns`` its header stamp.

Every problem with a file is a :class:`LogError` that names the file and the
topic or field: a missing topic, a topic of another type or definition, an
empty bag, a damaged file.
"""

import dataclasses
import functools
import os
import pathlib
from dataclasses import dataclass
from typing import Collection, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np
from rosbags.rosbag2 import Reader, StoragePlugin, Writer, WriterError
from rosbags.typesys import get_types_from_msg, Stores, get_typestore
from rosbags.typesys.store import Typestore

from bcg_ros.robot import crc, g1, lowlevel

PathLike = Union[str, os.PathLike]

LOWSTATE_TYPE = 'unitree_hg/msg/LowState'
LOWCMD_TYPE = 'unitree_hg/msg/LowCmd'
ODOMETRY_TYPE = 'nav_msgs/msg/Odometry'
STORAGES = ('mcap', 'sqlite3')
"""Storage formats a bag is written in (both are read)."""

NUM_JOINTS = g1.NUM_JOINTS
"""Motors a log keeps: slots 0..28 of the 35 (the 29-DoF G1 leaves the rest unused)."""

_REPO = pathlib.Path(__file__).resolve().parents[2]
_CDR_LE = np.frombuffer(b'\x00\x01', np.uint8)
"""First two bytes of the encapsulation header of little-endian CDR (XCDR1); the
other two are options that a sender may set."""


class LogError(ValueError):
    """A log that cannot be read or written: says which file and which topic or field."""


@dataclass(frozen=True)
class LogTopics:
    """Where a log's streams are, as the project's nodes name them; empty: not read."""

    lowstate: str = '/lowstate'
    """unitree_hg/msg/LowState (the robot, g1_sim_node)."""
    lowcmd: str = '/lowcmd'
    """unitree_hg/msg/LowCmd (policy_node)."""
    odom: str = '/g1_sim_node/odom'
    """nav_msgs/msg/Odometry ground truth (g1_sim_node's ``~/odom``; a robot has none)."""


# --- the streams -----------------------------------------------------------

def _check_rows(obj, trailing: Mapping[str, Tuple[int, ...]]) -> None:
    """Raise naming the field when an array of ``obj`` is not ``[len(obj.t), *trailing]``."""
    n = np.shape(obj.t)
    if len(n) != 1:
        raise LogError(f'{type(obj).__name__}.t: expected a 1-D array, got shape {n}')
    for name, shape in trailing.items():
        want = n + shape
        got = np.shape(getattr(obj, name))
        if got != want:
            raise LogError(f'{type(obj).__name__}.{name}: shape {got}, expected {want}')


@dataclass(frozen=True)
class StateLog:
    """The LowState stream: one row per message, motors in motor order (29 joints)."""

    t: np.ndarray
    """[N] receive time [s] after the log's start."""
    tick: np.ndarray
    """[N] int64, the robot's clock [ms] (uint32 on the wire: it wraps after 49 days)."""
    mode_pr: np.ndarray
    """[N] uint8, 0: pitch/roll ankle mode."""
    mode_machine: np.ndarray
    """[N] uint8, the robot type (5: 29-DoF G1)."""
    q: np.ndarray
    """[N, 29] joint positions [rad]."""
    dq: np.ndarray
    """[N, 29] joint velocities [rad/s]."""
    tau_est: np.ndarray
    """[N, 29] estimated joint torques [N m]."""
    quat: np.ndarray
    """[N, 4] pelvis IMU orientation (w, x, y, z)."""
    gyro: np.ndarray
    """[N, 3] pelvis angular velocity, IMU frame [rad/s]."""
    acc: np.ndarray
    """[N, 3] pelvis specific force, IMU frame [m/s^2]."""

    def __post_init__(self):
        """Check every array against ``t``, naming the field."""
        _check_rows(self, {'tick': (), 'mode_pr': (), 'mode_machine': (), 'q': (NUM_JOINTS,),
                           'dq': (NUM_JOINTS,), 'tau_est': (NUM_JOINTS,), 'quat': (4,),
                           'gyro': (3,), 'acc': (3,)})


@dataclass(frozen=True)
class CommandLog:
    """
    The LowCmd stream: one row per message, motors in motor order (29 joints).

    Each motor's torque is ``tau + kp (q - q_now) + kd (dq - dq_now)`` while its
    ``mode`` is 1; the robot ignores a whole message whose ``crc_ok`` is false.
    """

    t: np.ndarray
    """[N] receive time [s] after the log's start."""
    mode_pr: np.ndarray
    """[N] uint8."""
    mode_machine: np.ndarray
    """[N] uint8."""
    mode: np.ndarray
    """[N, 29] uint8, 1: motor driven, 0: unpowered."""
    q: np.ndarray
    """[N, 29] position targets [rad]."""
    dq: np.ndarray
    """[N, 29] velocity targets [rad/s]."""
    kp: np.ndarray
    """[N, 29] stiffness [N m/rad]."""
    kd: np.ndarray
    """[N, 29] damping [N m s/rad]."""
    tau: np.ndarray
    """[N, 29] feed-forward torque [N m]."""
    crc_ok: np.ndarray
    """[N] bool, the message carries the crc the robot checks (:mod:`bcg_ros.robot.crc`)."""

    def __post_init__(self):
        """Check every array against ``t``, naming the field."""
        joints = (NUM_JOINTS,)
        _check_rows(self, {'mode_pr': (), 'mode_machine': (), 'mode': joints, 'q': joints,
                           'dq': joints, 'kp': joints, 'kd': joints, 'tau': joints,
                           'crc_ok': ()})


@dataclass(frozen=True)
class OdometryLog:
    """A nav_msgs/Odometry stream (g1_sim_node's ground truth): the pelvis in the world."""

    t: np.ndarray
    """[N] receive time [s] after the log's start."""
    stamp_ns: np.ndarray
    """[N] int64 header stamps [ns] (the publisher's clock: simulated time on /clock)."""
    pos: np.ndarray
    """[N, 3] position in ``frame_id`` [m]."""
    quat: np.ndarray
    """[N, 4] orientation (w, x, y, z; the message's order is x, y, z, w)."""
    lin_vel: np.ndarray
    """[N, 3] linear velocity [m/s] in ``child_frame_id``, as the message gives it."""
    ang_vel: np.ndarray
    """[N, 3] angular velocity [rad/s] in ``child_frame_id``."""
    frame_id: str = 'world'
    child_frame_id: str = 'pelvis'

    def __post_init__(self):
        """Check every array against ``t``, naming the field."""
        _check_rows(self, {'stamp_ns': (), 'pos': (3,), 'quat': (4,), 'lin_vel': (3,),
                           'ang_vel': (3,)})


@dataclass(frozen=True)
class RobotLog:
    """One recorded session: the robot's state, the commands it got, ground truth if any."""

    lowstate: StateLog
    lowcmd: Optional[CommandLog] = None
    """None: the commands were not read (``LogTopics.lowcmd`` empty)."""
    odom: Optional[OdometryLog] = None
    """None: no ground truth in the file, or not read."""
    start_ns: int = 0
    """Receive time [ns] of ``t = 0``: the log's first message."""
    source: str = ''
    """The file it was read from ('' for a log made in memory)."""

    @property
    def joint_names(self) -> Tuple[str, ...]:
        """Names of the 29 motor columns, in motor order."""
        return g1.JOINT_NAMES


# --- the type store --------------------------------------------------------

def _unitree_hg_msg_dir() -> pathlib.Path:
    """The unitree_hg .msg files: the checkout's interfaces/, else an installed unitree_hg."""
    prefixes = [p for p in os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep) if p]
    candidates = [_REPO / 'interfaces' / 'unitree_hg' / 'msg'] + [
        pathlib.Path(p) / 'share' / 'unitree_hg' / 'msg' for p in prefixes]
    for folder in candidates:
        if (folder / 'LowState.msg').is_file():
            return folder
    raise LogError('no unitree_hg message definitions (LowState.msg): looked in '
                   f'{[str(c) for c in candidates]}; run from a bcg_ros checkout or source '
                   'a workspace with unitree_hg')


@functools.lru_cache(maxsize=None)
def typestore() -> Typestore:
    """
    rosbags' ROS 2 Kilted types with unitree_hg's added (every .msg of the package).

    The robot's Humble and this machine's Kilted define the standard messages the
    logs use identically; the type hashes (RIHS01) it computes are the ones rclpy
    reports, so a bag written with it plays back on Jazzy and later without
    warnings.
    """
    store = get_typestore(Stores.ROS2_KILTED)
    types = {}
    for path in sorted(_unitree_hg_msg_dir().glob('*.msg')):
        types.update(get_types_from_msg(path.read_text(), f'unitree_hg/msg/{path.stem}'))
    store.register(types)
    return store


# --- raw messages in -------------------------------------------------------

@dataclass(frozen=True)
class RawTopic:
    """One topic of a bag as stored: receive times and CDR bytes, in time order."""

    msgtype: str
    stamps: np.ndarray
    """[N] int64 receive times [ns]."""
    data: List[bytes]
    """N serialized messages, encapsulation header first."""


def _storage_files(path: pathlib.Path) -> List[pathlib.Path]:
    """What rosbags opens for ``path``: the bag, or the storage files of an unclosed one."""
    if not path.exists():
        raise LogError(f'{path}: no such bag (a rosbag2 directory, .db3 or .mcap file)')
    if path.is_dir() and not (path / 'metadata.yaml').is_file():
        # A recorder killed before it closed leaves no metadata.yaml; its storage
        # files still hold what it had committed (ros2 bag commits sqlite3 as it goes).
        files = sorted(p for p in path.iterdir() if p.suffix in ('.db3', '.mcap'))
        if not files:
            raise LogError(f'{path}: not a rosbag2 directory (no metadata.yaml, no .db3 or '
                           '.mcap file)')
        return files
    if path.is_file() and path.suffix not in ('.db3', '.mcap'):
        raise LogError(f'{path}: not a rosbag2 (a directory with metadata.yaml, a .db3 or '
                       'an .mcap file)')
    return [path]


def _read_file(path: pathlib.Path, types: Mapping[str, str], found: Dict[str, str],
               stamps: Dict[str, list], data: Dict[str, list]) -> int:
    """Append the messages of ``types``' topics in one bag or storage file; return its count."""
    store = typestore()
    try:
        with Reader(path) as reader:
            conns = []
            for conn in reader.connections:
                found[conn.topic] = conn.msgtype
                want = types.get(conn.topic)
                if want is None:
                    continue
                if conn.msgtype != want:
                    raise LogError(f'{path}: topic {conn.topic} is {conn.msgtype}, '
                                   f'expected {want}')
                ours = store.hash_rihs01(want)
                if conn.digest.startswith('RIHS01_') and conn.digest != ours:
                    raise LogError(f'{path}: topic {conn.topic} was recorded with another '
                                   f'definition of {want} (type hash {conn.digest}, '
                                   f'expected {ours})')
                conns.append(conn)
            # An empty filter would mean every topic.
            for conn, stamp, raw in reader.messages(conns) if conns else ():
                stamps.setdefault(conn.topic, []).append(stamp)
                data.setdefault(conn.topic, []).append(bytes(raw))
            return reader.message_count
    except LogError:
        raise
    except Exception as exc:
        # rosbags and its sqlite3 (apsw) and MCAP back ends raise many kinds of
        # errors on a truncated or damaged file; the user needs the file's name.
        raise LogError(f'{path}: cannot read it as a rosbag2 '
                       f'({type(exc).__name__}: {exc})') from exc


def read_raw(path: PathLike, types: Mapping[str, str],
             optional: Collection[str] = ()) -> Dict[str, RawTopic]:
    """
    The messages of the topics ``types`` names (topic -> message type) in a bag.

    Every topic must be in the bag with that type and hold messages, but those in
    ``optional``, which are left out of the result when absent or empty. ``path``
    is a bag directory, a .db3 or .mcap file, or the directory of a bag whose
    recorder was killed before writing metadata.yaml.
    """
    path = pathlib.Path(path)
    found: Dict[str, str] = {}
    stamps: Dict[str, list] = {}
    data: Dict[str, list] = {}
    total = sum(_read_file(f, types, found, stamps, data) for f in _storage_files(path))
    if total == 0:
        raise LogError(f'{path}: the bag holds no messages (topics: {sorted(found) or "none"})')
    out = {}
    for topic, msgtype in types.items():
        if topic not in found:
            if topic in optional:
                continue
            raise LogError(f'{path}: no topic {topic} ({msgtype}); the bag has '
                           f'{sorted(found)}')
        if not stamps.get(topic):
            if topic in optional:
                continue
            raise LogError(f'{path}: topic {topic} ({msgtype}) has no messages')
        times = np.asarray(stamps[topic], np.int64)
        order = np.argsort(times, kind='stable')
        out[topic] = RawTopic(msgtype, times[order], [data[topic][i] for i in order])
    return out


# --- CDR columns -----------------------------------------------------------

def _stack(raw: RawTopic, size: int, where: str) -> np.ndarray:
    """[N, size - 4] payload bytes of fixed-size messages, each checked for size and header."""
    for i, msg in enumerate(raw.data):
        if len(msg) != size:
            raise LogError(f'{where}: message {i} has {len(msg)} bytes, expected {size} for '
                           f'{raw.msgtype} (another definition of the message?)')
    rows = np.frombuffer(b''.join(raw.data), np.uint8).reshape(len(raw.data), size)
    bad = np.nonzero(np.any(rows[:, :2] != _CDR_LE, axis=1))[0]
    if bad.size:
        head = rows[bad[0], :lowlevel.CDR_HEADER].tobytes().hex()
        raise LogError(f'{where}: message {bad[0]} is not little-endian CDR (encapsulation '
                       f'header {head}, expected 0001....)')
    return rows[:, lowlevel.CDR_HEADER:]


def _take(payload: np.ndarray, offsets: np.ndarray, dtype: str) -> np.ndarray:
    """[N, len(offsets)] values of one field, from payload bytes [N, size]."""
    dt = np.dtype(dtype)
    cols = np.ascontiguousarray(payload[:, offsets[:, None] + np.arange(dt.itemsize)])
    return cols.view(dt)[..., 0]


def _put(payload: np.ndarray, offsets: np.ndarray, dtype: str, values) -> None:
    """Write ``values`` [N, len(offsets)] of one field into payload bytes [N, size]."""
    dt = np.dtype(dtype)
    cells = np.ascontiguousarray(
        np.broadcast_to(np.asarray(values, dt), (len(payload), len(offsets))))
    payload[:, offsets[:, None] + np.arange(dt.itemsize)] = cells[..., None].view(np.uint8)


def _messages(payload: np.ndarray) -> List[bytes]:
    """Payload rows -> serialized messages, little-endian CDR header first."""
    head = np.zeros((len(payload), lowlevel.CDR_HEADER), np.uint8)
    head[:, :2] = _CDR_LE
    rows = np.concatenate([head, payload], axis=1)
    return [row.tobytes() for row in rows]


_CMD_FLOATS = ('q', 'dq', 'tau', 'kp', 'kd')


def _image_crcs(images: np.ndarray) -> np.ndarray:
    """[N] robot crc of each C struct image (LOWCMD_DTYPE, LOWSTATE_DTYPE) but its crc word."""
    size = images.dtype.itemsize
    flat = images.tobytes()
    return np.array([crc.crc32_core(flat[i * size:(i + 1) * size - 4])
                     for i in range(len(images))], np.uint32)


def _lowcmd_crcs(fields: Mapping[str, np.ndarray]) -> np.ndarray:
    """[N] crc of each LowCmd, from its fields (per-motor ones over all 35 slots)."""
    n = len(fields['mode_pr'])
    images = np.zeros(n, crc.LOWCMD_DTYPE)
    images['mode_pr'] = fields['mode_pr']
    images['mode_machine'] = fields['mode_machine']
    images['reserve'] = fields['reserve']
    motors = images['motor_cmd']
    motors['reserve'] = fields['motor_reserve']
    for name in ('mode',) + _CMD_FLOATS:
        motors[name] = fields[name]
    return _image_crcs(images)


def _lowstate_crcs(fields: Mapping[str, np.ndarray]) -> np.ndarray:
    """[N] crc the robot puts in each LowState, from the fields a log keeps (the rest zero)."""
    n = len(fields['tick'])
    images = np.zeros(n, crc.LOWSTATE_DTYPE)
    for name in ('tick', 'mode_pr', 'mode_machine'):
        images[name] = fields[name]
    for name in ('quaternion', 'gyroscope', 'accelerometer'):
        images['imu_state'][name] = fields[name]
    for name in ('mode', 'q', 'dq', 'tau_est'):
        images['motor_state'][name] = fields[name]
    return _image_crcs(images)


def decode_lowstate(raw: RawTopic, t: np.ndarray, where: str) -> StateLog:
    """LowState messages -> a :class:`StateLog` (``where`` names file and topic in errors)."""
    c = lowlevel.LOWSTATE_CDR
    p = _stack(raw, lowlevel.CDR_HEADER + lowlevel.LOWSTATE_CDR_SIZE, where)
    j = slice(0, NUM_JOINTS)

    def motors(name):
        return _take(p, c[name][j], '<f4').astype(np.float64)

    def floats(name):
        return _take(p, c[name], '<f4').astype(np.float64)

    return StateLog(
        t=t, tick=_take(p, c['tick'], '<u4')[:, 0].astype(np.int64),
        mode_pr=_take(p, c['mode_pr'], 'u1')[:, 0],
        mode_machine=_take(p, c['mode_machine'], 'u1')[:, 0],
        q=motors('q'), dq=motors('dq'), tau_est=motors('tau_est'), quat=floats('quaternion'),
        gyro=floats('gyroscope'), acc=floats('accelerometer'))


def encode_lowstate(log: StateLog) -> List[bytes]:
    """
    A :class:`StateLog` -> serialized LowStates, crc stamped; fields it lacks are zero.

    The 29 joints' motor mode is 1 (enabled), as g1_sim_node reports it.
    """
    c = lowlevel.LOWSTATE_CDR
    j = slice(0, NUM_JOINTS)
    n = len(log.t)
    fields = {'tick': log.tick, 'mode_pr': log.mode_pr, 'mode_machine': log.mode_machine,
              'quaternion': log.quat, 'gyroscope': log.gyro, 'accelerometer': log.acc}
    for name, values in (('mode', lowlevel.MOTOR_ENABLE), ('q', log.q), ('dq', log.dq),
                         ('tau_est', log.tau_est)):
        full = np.zeros((n, lowlevel.NUM_SLOTS))
        full[:, j] = values
        fields[name] = full
    p = np.zeros((n, lowlevel.LOWSTATE_CDR_SIZE), np.uint8)
    for name in ('tick', 'mode_pr', 'mode_machine'):
        _put(p, c[name], '<u4' if name == 'tick' else 'u1', np.asarray(fields[name])[:, None])
    for name in ('quaternion', 'gyroscope', 'accelerometer', 'q', 'dq', 'tau_est'):
        _put(p, c[name], '<f4', fields[name])
    _put(p, c['mode'], 'u1', fields['mode'])
    _put(p, c['crc'], '<u4', _lowstate_crcs(fields)[:, None])
    return _messages(p)


def decode_lowcmd(raw: RawTopic, t: np.ndarray, where: str) -> CommandLog:
    """LowCmd messages -> a :class:`CommandLog`, with each one's crc checked."""
    c = lowlevel.LOWCMD_CDR
    p = _stack(raw, lowlevel.CDR_HEADER + lowlevel.LOWCMD_CDR_SIZE, where)
    fields = {name: _take(p, c[name], 'u1') for name in ('mode_pr', 'mode_machine', 'mode')}
    fields.update({name: _take(p, c[name], '<f4') for name in _CMD_FLOATS})
    fields.update({name: _take(p, c[name], '<u4') for name in ('motor_reserve', 'reserve')})
    for name in ('mode_pr', 'mode_machine'):
        fields[name] = fields[name][:, 0]
    crc_ok = _lowcmd_crcs(fields) == _take(p, c['crc'], '<u4')[:, 0]
    j = slice(0, NUM_JOINTS)
    return CommandLog(t=t, mode_pr=fields['mode_pr'], mode_machine=fields['mode_machine'],
                      mode=fields['mode'][:, j].copy(), crc_ok=crc_ok,
                      **{k: fields[k][:, j].astype(np.float64) for k in _CMD_FLOATS})


def encode_lowcmd(log: CommandLog) -> List[bytes]:
    """
    A :class:`CommandLog` -> serialized LowCmds, crc stamped, slots 29..34 zero.

    Every message gets the crc the robot checks, whatever ``crc_ok`` says.
    """
    c = lowlevel.LOWCMD_CDR
    n = len(log.t)
    fields = {'mode_pr': log.mode_pr, 'mode_machine': log.mode_machine,
              'reserve': np.zeros((n, 4), np.uint32),
              'motor_reserve': np.zeros((n, lowlevel.NUM_SLOTS), np.uint32)}
    for name in ('mode',) + _CMD_FLOATS:
        full = np.zeros((n, lowlevel.NUM_SLOTS), np.float32 if name != 'mode' else np.uint8)
        full[:, :NUM_JOINTS] = getattr(log, name)
        fields[name] = full
    p = np.zeros((n, lowlevel.LOWCMD_CDR_SIZE), np.uint8)
    _put(p, c['mode_pr'], 'u1', np.asarray(log.mode_pr)[:, None])
    _put(p, c['mode_machine'], 'u1', np.asarray(log.mode_machine)[:, None])
    _put(p, c['mode'], 'u1', fields['mode'])
    for name in _CMD_FLOATS:
        _put(p, c[name], '<f4', fields[name])
    _put(p, c['crc'], '<u4', _lowcmd_crcs(fields)[:, None])
    return _messages(p)


def decode_odometry(raw: RawTopic, t: np.ndarray, where: str) -> OdometryLog:
    """nav_msgs/Odometry messages -> an :class:`OdometryLog` (frames of the first message)."""
    store = typestore()
    stamp, pos, quat, lin, ang = [], [], [], [], []
    msg = None
    for i, data in enumerate(raw.data):
        try:
            msg = store.deserialize_cdr(data, ODOMETRY_TYPE)
        except Exception as exc:  # rosbags' deserializer: struct, index or value errors
            raise LogError(f'{where}: message {i} is not a valid {ODOMETRY_TYPE} '
                           f'({type(exc).__name__}: {exc})') from exc
        p, o = msg.pose.pose.position, msg.pose.pose.orientation
        v, w = msg.twist.twist.linear, msg.twist.twist.angular
        stamp.append(msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec)
        pos.append((p.x, p.y, p.z))
        quat.append((o.w, o.x, o.y, o.z))
        lin.append((v.x, v.y, v.z))
        ang.append((w.x, w.y, w.z))
    return OdometryLog(t=t, stamp_ns=np.asarray(stamp, np.int64), pos=np.asarray(pos),
                       quat=np.asarray(quat), lin_vel=np.asarray(lin), ang_vel=np.asarray(ang),
                       frame_id=msg.header.frame_id, child_frame_id=msg.child_frame_id)


def encode_odometry(log: OdometryLog) -> List[bytes]:
    """An :class:`OdometryLog` -> serialized nav_msgs/Odometry (covariances zero)."""
    store = typestore()
    T = store.types
    out = []
    for i in range(len(log.t)):
        sec, nanosec = divmod(int(log.stamp_ns[i]), 10**9)
        header = T['std_msgs/msg/Header'](
            stamp=T['builtin_interfaces/msg/Time'](sec=sec, nanosec=nanosec),
            frame_id=log.frame_id)
        w, x, y, z = (float(v) for v in log.quat[i])
        pose = T['geometry_msgs/msg/Pose'](
            position=T['geometry_msgs/msg/Point'](*(float(v) for v in log.pos[i])),
            orientation=T['geometry_msgs/msg/Quaternion'](x=x, y=y, z=z, w=w))
        twist = T['geometry_msgs/msg/Twist'](
            linear=T['geometry_msgs/msg/Vector3'](*(float(v) for v in log.lin_vel[i])),
            angular=T['geometry_msgs/msg/Vector3'](*(float(v) for v in log.ang_vel[i])))
        msg = T[ODOMETRY_TYPE](
            header=header, child_frame_id=log.child_frame_id,
            pose=T['geometry_msgs/msg/PoseWithCovariance'](pose=pose,
                                                           covariance=np.zeros(36)),
            twist=T['geometry_msgs/msg/TwistWithCovariance'](twist=twist,
                                                             covariance=np.zeros(36)))
        out.append(bytes(store.serialize_cdr(msg, ODOMETRY_TYPE)))
    return out


# --- logs in and out -------------------------------------------------------

def read_log(path: PathLike, topics: LogTopics = LogTopics(),
             require_odom: bool = False) -> RobotLog:
    """
    Read a bag into a :class:`RobotLog`.

    LowState and LowCmd must be there (unless their topic is empty in ``topics``);
    odometry is read when the bag has it, and must be with ``require_odom``.
    Raises :class:`LogError` naming the file and the topic.
    """
    path = pathlib.Path(path)
    if not topics.lowstate:
        raise LogError('LogTopics.lowstate: empty; a log is read around its LowState stream')
    types = {topic: msgtype for topic, msgtype in ((topics.lowstate, LOWSTATE_TYPE),
                                                   (topics.lowcmd, LOWCMD_TYPE),
                                                   (topics.odom, ODOMETRY_TYPE)) if topic}
    if len(types) != sum(1 for topic in dataclasses.astuple(topics) if topic):
        raise LogError(f'LogTopics: two streams on one topic ({topics})')
    raw = read_raw(path, types, optional=() if require_odom else (topics.odom,))
    start = min(int(r.stamps[0]) for r in raw.values())

    def stream(topic, decode):
        if topic not in raw:
            return None
        return decode(raw[topic], (raw[topic].stamps - start) / 1e9, f'{path}: {topic}')

    return RobotLog(lowstate=stream(topics.lowstate, decode_lowstate),
                    lowcmd=stream(topics.lowcmd, decode_lowcmd),
                    odom=stream(topics.odom, decode_odometry), start_ns=start,
                    source=str(path))


class BagWriter:
    """
    A new rosbag2 of serialized messages, typed by :func:`typestore`.

    Each topic is added once with its message type (its definition and type hash go
    into the file, so ``ros2 bag play`` and rosbags read it back typed); messages
    are written as CDR bytes with their receive time [ns]. Use it as a context
    manager or call :meth:`close`: only a closed bag has its metadata.yaml (and, in
    MCAP, its index).
    """

    def __init__(self, path: PathLike, storage: str = 'mcap'):
        """Create the bag directory ``path`` (it must not exist) in ``storage`` format."""
        self.path = pathlib.Path(path)
        if storage not in STORAGES:
            raise LogError(f'{self.path}: storage {storage!r} is not one of {STORAGES}')
        self.counts: Dict[str, int] = {}
        """Messages written per topic."""
        self._connections = {}
        if self.path.exists():
            raise LogError(f'{self.path}: exists already; a bag is written to a new directory')
        self._writer: Optional[Writer] = Writer(self.path, version=Writer.VERSION_LATEST,
                                                storage_plugin=StoragePlugin[storage.upper()])
        try:
            self._writer.open()
        except (WriterError, OSError) as exc:
            raise LogError(f'{self.path}: cannot create the bag ({exc})') from exc

    def add_topic(self, topic: str, msgtype: str) -> None:
        """Declare ``topic`` as carrying ``msgtype`` (e.g. 'unitree_hg/msg/LowState')."""
        known = self._connections.get(topic)
        if known is not None:
            if known.msgtype != msgtype:
                raise LogError(f'{self.path}: topic {topic} is {known.msgtype} already, '
                               f'not {msgtype}')
            return
        if msgtype not in typestore().fielddefs:
            raise LogError(f'{self.path}: topic {topic}: type {msgtype} is unknown (the '
                           'standard ROS 2 messages and unitree_hg are known)')
        self._connections[topic] = self._writer.add_connection(topic, msgtype,
                                                               typestore=typestore())
        self.counts[topic] = 0

    def write(self, topic: str, stamp_ns: int, data: bytes) -> None:
        """Write one serialized message of an added topic, received at ``stamp_ns``."""
        conn = self._connections.get(topic)
        if conn is None:
            raise LogError(f'{self.path}: topic {topic} was not added (add_topic first)')
        if self._writer is None:
            raise LogError(f'{self.path}: closed; topic {topic} was written after close()')
        self._writer.write(conn, int(stamp_ns), data)
        self.counts[topic] += 1

    def close(self) -> None:
        """Finish the file and write metadata.yaml; later calls do nothing."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    def __enter__(self) -> 'BagWriter':
        """Return the open writer."""
        return self

    def __exit__(self, *exc) -> None:
        """Close the bag, also after an error: what was written stays readable."""
        self.close()


def write_log(log: RobotLog, path: PathLike, storage: str = 'mcap',
              topics: LogTopics = LogTopics()) -> pathlib.Path:
    """
    Write ``log`` as a new bag at ``path``, messages in time order; return the path.

    Receive times are ``log.start_ns + t``; what a stream does not keep (LowState's
    rpy, temperatures, slots 29..34) is written as zero.
    """
    streams = [(topics.lowstate, LOWSTATE_TYPE, log.lowstate, encode_lowstate),
               (topics.lowcmd, LOWCMD_TYPE, log.lowcmd, encode_lowcmd),
               (topics.odom, ODOMETRY_TYPE, log.odom, encode_odometry)]
    names, stamps, data = [], [], []  # of every message, stream after stream
    with BagWriter(path, storage) as bag:
        for topic, msgtype, stream, encode in streams:
            if stream is None or len(stream.t) == 0:
                continue
            if not topic:
                raise LogError(f'{path}: the log has {msgtype} but LogTopics names no topic')
            bag.add_topic(topic, msgtype)
            names += [topic] * len(stream.t)
            stamps.append(log.start_ns + np.round(np.asarray(stream.t) * 1e9).astype(np.int64))
            data += encode(stream)
        if stamps:
            times = np.concatenate(stamps)
            for i in np.argsort(times, kind='stable'):
                bag.write(names[i], int(times[i]), data[i])
    return bag.path
