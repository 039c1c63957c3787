"""
CRC of a unitree_hg LowCmd, computed exactly as the G1 checks it (and of a LowState).

The robot ignores any LowCmd whose ``crc`` field does not match a CRC-32
(polynomial 0x04C11DB7, initial value 0xFFFFFFFF, no reflection, no final
xor) fed most-significant bit first, one little-endian 32-bit word at a time,
over the C struct image of the message without its last word (the crc itself).

The struct image (1004 bytes, natural C alignment, zero padding) is::

    offset  size  field
    0       1     mode_pr        uint8
    1       1     mode_machine   uint8
    2       2     padding
    4       980   motor_cmd[35]  28 bytes each:
                    mode uint8, 3 bytes padding, q dq tau kp kd float32,
                    reserve uint32
    984     16    reserve[4]     uint32
    1000    4     crc            uint32

This runs once per command inside the 500 Hz command loop, so packing uses
struct (message objects) or a numpy structured array (plain arrays), and the
CRC is computed by zlib at C speed: stamping a message takes about 25 us.
:func:`crc32_core_bitwise` is the same CRC written straight from the
definition, kept as the reference the fast path is tested against.

The G1 stamps its LowState the same way, over the LowState C struct image
(2092 bytes; :data:`LOWSTATE_DTYPE`) without its crc word::

    offset  size  field
    0       8     version[2]     uint32
    8       1     mode_pr        uint8
    9       1     mode_machine   uint8
    10      2     padding
    12      4     tick           uint32
    16      56    imu_state      quaternion[4] gyroscope[3] accelerometer[3]
                                 rpy[3] float32, temperature int16, 2 bytes padding
    72      1960  motor_state[35] 56 bytes each: mode uint8, 3 bytes padding,
                    q dq ddq tau_est float32, temperature[2] int16, vol float32,
                    sensor[2] motorstate reserve[4] uint32
    2032    40    wireless_remote[40] uint8
    2072    16    reserve[4]     uint32
    2088    4     crc            uint32
"""

import array
from collections.abc import Mapping
import operator
import struct
import zlib

import numpy as np

NUM_MOTORS = 35
"""Number of motor slots in a LowCmd (the 29-DoF G1 uses slots 0..28)."""

MOTOR_CMD_DTYPE = np.dtype([
    ('mode', 'u1'),
    ('_pad', 'u1', (3,)),
    ('q', '<f4'),
    ('dq', '<f4'),
    ('tau', '<f4'),
    ('kp', '<f4'),
    ('kd', '<f4'),
    ('reserve', '<u4'),
])
"""C layout of one MotorCmd (28 bytes)."""

LOWCMD_DTYPE = np.dtype([
    ('mode_pr', 'u1'),
    ('mode_machine', 'u1'),
    ('_pad', 'u1', (2,)),
    ('motor_cmd', MOTOR_CMD_DTYPE, (NUM_MOTORS,)),
    ('reserve', '<u4', (4,)),
    ('crc', '<u4'),
])
"""C layout of the whole LowCmd (1004 bytes)."""

LOWCMD_STRUCT_SIZE = LOWCMD_DTYPE.itemsize

MOTOR_STATE_DTYPE = np.dtype([
    ('mode', 'u1'),
    ('_pad', 'u1', (3,)),
    ('q', '<f4'),
    ('dq', '<f4'),
    ('ddq', '<f4'),
    ('tau_est', '<f4'),
    ('temperature', '<i2', (2,)),
    ('vol', '<f4'),
    ('sensor', '<u4', (2,)),
    ('motorstate', '<u4'),
    ('reserve', '<u4', (4,)),
])
"""C layout of one MotorState (56 bytes)."""

IMU_STATE_DTYPE = np.dtype([
    ('quaternion', '<f4', (4,)),
    ('gyroscope', '<f4', (3,)),
    ('accelerometer', '<f4', (3,)),
    ('rpy', '<f4', (3,)),
    ('temperature', '<i2'),
    ('_pad', 'u1', (2,)),
])
"""C layout of the IMUState (56 bytes)."""

REMOTE_SIZE = 40
"""Bytes of LowState.wireless_remote."""

LOWSTATE_DTYPE = np.dtype([
    ('version', '<u4', (2,)),
    ('mode_pr', 'u1'),
    ('mode_machine', 'u1'),
    ('_pad', 'u1', (2,)),
    ('tick', '<u4'),
    ('imu_state', IMU_STATE_DTYPE),
    ('motor_state', MOTOR_STATE_DTYPE, (NUM_MOTORS,)),
    ('wireless_remote', 'u1', (REMOTE_SIZE,)),
    ('reserve', '<u4', (4,)),
    ('crc', '<u4'),
])
"""C layout of the whole LowState (2092 bytes)."""

POLYNOMIAL = 0x04C11DB7
INITIAL_VALUE = 0xFFFFFFFF

_MASK32 = 0xFFFFFFFF
_MOTOR_FLOAT_FIELDS = ('q', 'dq', 'tau', 'kp', 'kd')
# The same layout as LOWCMD_DTYPE for struct, which packs a message's scalars
# faster than assigning them into a structured array.
_LOWCMD_STRUCT = struct.Struct('<BB2x' + 'B3x5fI' * NUM_MOTORS + '4II')
_get_motor_fields = operator.attrgetter('mode', *_MOTOR_FLOAT_FIELDS, 'reserve')
# Bit-reversal of every byte value, for bytes.translate.
_BITREV8 = bytes(int(f'{i:08b}'[::-1], 2) for i in range(256))

assert MOTOR_CMD_DTYPE.itemsize == 28
assert array.array('I').itemsize == 4
assert LOWCMD_STRUCT_SIZE == 1004 == _LOWCMD_STRUCT.size
assert MOTOR_STATE_DTYPE.itemsize == IMU_STATE_DTYPE.itemsize == 56
assert LOWSTATE_DTYPE.itemsize == 2092


def _pack_from_message(msg):
    """Return the struct image of a unitree_hg LowCmd message object."""
    motors = msg.motor_cmd
    if len(motors) != NUM_MOTORS:
        raise ValueError(f'LowCmd.motor_cmd has {len(motors)} entries, expected {NUM_MOTORS}')
    values = [msg.mode_pr, msg.mode_machine]
    # One C-level attrgetter call per motor: attribute access on the message
    # objects is most of the cost of stamping a command.
    for motor in motors:
        values += _get_motor_fields(motor)
    reserve = msg.reserve
    values += reserve.tolist() if hasattr(reserve, 'tolist') else list(reserve)
    values.append(msg.crc)
    return _LOWCMD_STRUCT.pack(*values)


def _motor_array(name, value, dtype):
    """Return a length-35 array for one per-motor field (zeros when None)."""
    if value is None:
        return np.zeros(NUM_MOTORS, dtype)
    arr = np.asarray(value)
    if arr.shape != (NUM_MOTORS,):
        raise ValueError(f'{name} must have shape ({NUM_MOTORS},), got {arr.shape}')
    return arr


def lowcmd_struct_bytes(msg=None, *, mode_pr=0, mode_machine=0, mode=None, q=None,
                        dq=None, tau=None, kp=None, kd=None, motor_reserve=None,
                        reserve=None, crc=0):
    """
    Return the 1004-byte C struct image of a LowCmd.

    Pass either a unitree_hg ``LowCmd`` message object as ``msg`` (any object
    with the same attributes works), or the plain values: ``mode_pr`` and
    ``mode_machine`` (ints); ``mode``, ``q``, ``dq``, ``tau``, ``kp``, ``kd``
    and ``motor_reserve`` (the per-motor ``reserve`` word), each a sequence of
    35 values, zeros where omitted; ``reserve`` (4 ints) and ``crc``.
    Floats are rounded to float32 exactly as the message carries them.
    """
    if msg is not None:
        return _pack_from_message(msg)
    image = np.zeros((), LOWCMD_DTYPE)
    image['mode_pr'] = mode_pr
    image['mode_machine'] = mode_machine
    packed = image['motor_cmd']
    packed['mode'] = _motor_array('mode', mode, np.uint8)
    for name, value in zip(_MOTOR_FLOAT_FIELDS, (q, dq, tau, kp, kd)):
        packed[name] = _motor_array(name, value, np.float32)
    packed['reserve'] = _motor_array('motor_reserve', motor_reserve, np.uint32)
    if reserve is not None:
        if len(reserve) != 4:
            raise ValueError(f'reserve must have 4 words, got {len(reserve)}')
        image['reserve'] = reserve
    image['crc'] = crc
    return image.tobytes()


def _as_bytes(words_bytes):
    """Return ``words_bytes`` as bytes of little-endian 32-bit words."""
    if isinstance(words_bytes, np.ndarray) and words_bytes.dtype.kind in 'ui' \
            and words_bytes.dtype.itemsize == 4:
        words_bytes = words_bytes.astype('<u4', copy=False)
    data = bytes(words_bytes)
    if len(data) % 4:
        raise ValueError(f'CRC input must be whole 32-bit words, got {len(data)} bytes')
    return data


def crc32_core(words_bytes):
    """
    Return the robot's CRC-32 of ``words_bytes`` (little-endian 32-bit words).

    Feeding each word MSB first is CRC-32/MPEG-2 over the word's bytes in
    big-endian order. That non-reflected CRC equals the bit-reversal of the
    reflected CRC (zlib's) over the bit-reversed bytes, with zlib's own
    pre- and post-inversion undone by the final xor. With init 0xFFFFFFFF the
    reflected register starts at zlib's default, so only the result needs
    fixing up. Everything but the last bit-reversal runs in C.
    """
    data = _as_bytes(words_bytes)
    # Reverse the bytes of every word, whatever the host's byte order.
    words = array.array('I', data)
    words.byteswap()
    big_endian = words.tobytes()
    reflected = zlib.crc32(big_endian.translate(_BITREV8)) ^ _MASK32
    return int.from_bytes(reflected.to_bytes(4, 'little').translate(_BITREV8), 'big')


def crc32_core_bitwise(words_bytes):
    """
    Return the same CRC as :func:`crc32_core`, one bit at a time.

    A direct transcription of the definition: for every little-endian 32-bit
    word, for every bit from bit 31 down to bit 0, shift the register left and
    xor in the polynomial when the bit shifted out differs from the data bit.
    Far too slow for the command loop; it is the reference for the tests.
    """
    data = _as_bytes(words_bytes)
    crc = INITIAL_VALUE
    for offset in range(0, len(data), 4):
        word = int.from_bytes(data[offset:offset + 4], 'little')
        for bit in range(31, -1, -1):
            feedback = ((crc >> 31) ^ (word >> bit)) & 1
            crc = (crc << 1) & _MASK32
            if feedback:
                crc ^= POLYNOMIAL
    return crc


def _fields_from_mapping(fields):
    """
    Convert a mapping of LowCmd fields to :func:`lowcmd_struct_bytes` keywords.

    Accepts either the keyword names of :func:`lowcmd_struct_bytes` or a
    message-shaped mapping whose ``motor_cmd`` is a list of 35 per-motor
    mappings (mode, q, dq, tau, kp, kd, reserve).
    """
    kwargs = dict(fields)
    motors = kwargs.pop('motor_cmd', None)
    if motors is not None:
        if len(motors) != NUM_MOTORS:
            raise ValueError(f'motor_cmd has {len(motors)} entries, expected {NUM_MOTORS}')
        for name in ('mode',) + _MOTOR_FLOAT_FIELDS:
            kwargs[name] = [m.get(name, 0) for m in motors]
        kwargs['motor_reserve'] = [m.get('reserve', 0) for m in motors]
    return kwargs


def lowcmd_crc(msg_or_fields):
    """
    Return the crc the robot expects for a LowCmd.

    ``msg_or_fields`` is a unitree_hg ``LowCmd`` message object, or a mapping
    of its fields (see :func:`lowcmd_struct_bytes` and
    :func:`_fields_from_mapping`). The crc field's own value does not matter.
    """
    if isinstance(msg_or_fields, Mapping):
        image = lowcmd_struct_bytes(**_fields_from_mapping(msg_or_fields))
    else:
        image = lowcmd_struct_bytes(msg_or_fields)
    return crc32_core(image[:-4])


def stamp_crc(msg):
    """Set ``msg.crc`` to the crc the robot expects and return ``msg``."""
    msg.crc = lowcmd_crc(msg)
    return msg


# --- LowState --------------------------------------------------------------

_MOTOR_STATE_FIELDS = ('mode', 'q', 'dq', 'ddq', 'tau_est', 'temperature', 'vol', 'sensor',
                       'motorstate', 'reserve')
_IMU_STATE_FIELDS = ('quaternion', 'gyroscope', 'accelerometer', 'rpy', 'temperature')


def lowstate_image(msg=None) -> np.ndarray:
    """
    Return the C struct image of a LowState as a writable LOWSTATE_DTYPE scalar array.

    With ``msg`` (a unitree_hg ``LowState`` or any object with its attributes)
    the image holds its fields; without, it is all zeros, to be filled field by
    field (``image['motor_state']['q'][:29] = q``) by a publisher that has the
    values as arrays already, which is much faster than reading a message back.
    """
    image = np.zeros((), LOWSTATE_DTYPE)
    if msg is None:
        return image
    for name in ('version', 'mode_pr', 'mode_machine', 'tick', 'wireless_remote', 'reserve',
                 'crc'):
        image[name] = np.asarray(getattr(msg, name))
    imu = msg.imu_state
    for name in _IMU_STATE_FIELDS:
        image['imu_state'][name] = np.asarray(getattr(imu, name))
    motors = msg.motor_state
    if len(motors) != NUM_MOTORS:
        raise ValueError(f'LowState.motor_state has {len(motors)} entries, '
                         f'expected {NUM_MOTORS}')
    packed = image['motor_state']
    for name in _MOTOR_STATE_FIELDS:
        packed[name] = np.array([np.asarray(getattr(m, name)) for m in motors])
    return image


def lowstate_crc(msg_or_image) -> int:
    """
    Return the crc the G1 puts in a LowState.

    ``msg_or_image`` is a unitree_hg ``LowState`` message object or its image
    from :func:`lowstate_image`. The crc field's own value does not matter.
    """
    image = msg_or_image
    if not (isinstance(image, np.ndarray) and image.dtype == LOWSTATE_DTYPE):
        image = lowstate_image(msg_or_image)
    return crc32_core(image.tobytes()[:-4])
