"""The LowCmd CRC: known answers from the robot, the standard, and self-consistency."""

import json
import pathlib
import random
import struct
import types

import numpy as np
import pytest

from bcg_ros.robot import crc

REPO = pathlib.Path(__file__).resolve().parents[1]
VECTORS = REPO.parent / 'shared' / 'reference' / 'unitree_hg' / 'lowcmd_crc_vectors.json'

# CRC-32/MPEG-2 (poly 0x04C11DB7, init 0xFFFFFFFF, refin/refout false, xorout 0)
# check value: the CRC of the nine ASCII bytes b'123456789', as published in the
# catalogue of parametrised CRC algorithms.
MPEG2_CHECK = 0x0376E6E7


def mpeg2_bytes(data):
    """CRC-32/MPEG-2 over a byte string, one bit at a time, written from its definition."""
    reg = 0xFFFFFFFF
    for byte in data:
        for bit in range(7, -1, -1):
            feedback = ((reg >> 31) ^ (byte >> bit)) & 1
            reg = (reg << 1) & 0xFFFFFFFF
            if feedback:
                reg ^= 0x04C11DB7
    return reg


def words_msb_first(data):
    """
    Return ``data`` with each 4-byte group reversed.

    Feeding a little-endian word MSB first sends its bytes last to first, so
    the word-fed CRC of this is the byte-fed MPEG-2 CRC of ``data``.
    """
    return b''.join(data[i:i + 4][::-1] for i in range(0, len(data), 4))


def random_fields(rng):
    """Random plain LowCmd values covering every field of the struct."""
    return dict(
        mode_pr=int(rng.integers(0, 256)),
        mode_machine=int(rng.integers(0, 256)),
        mode=rng.integers(0, 256, crc.NUM_MOTORS, dtype=np.uint8),
        q=rng.uniform(-10, 10, crc.NUM_MOTORS).astype(np.float32),
        dq=rng.uniform(-30, 30, crc.NUM_MOTORS).astype(np.float32),
        tau=rng.uniform(-100, 100, crc.NUM_MOTORS).astype(np.float32),
        kp=rng.uniform(0, 500, crc.NUM_MOTORS).astype(np.float32),
        kd=rng.uniform(0, 10, crc.NUM_MOTORS).astype(np.float32),
        motor_reserve=rng.integers(0, 2**32, crc.NUM_MOTORS, dtype=np.uint32),
        reserve=rng.integers(0, 2**32, 4, dtype=np.uint32),
    )


def message_like(fields, factory=None):
    """Build a LowCmd-shaped object (a real message when ``factory`` is given)."""
    if factory is None:
        msg = types.SimpleNamespace(
            motor_cmd=[types.SimpleNamespace() for _ in range(crc.NUM_MOTORS)], crc=0)
    else:
        msg = factory()
    msg.mode_pr = fields['mode_pr']
    msg.mode_machine = fields['mode_machine']
    for i, motor in enumerate(msg.motor_cmd):
        motor.mode = int(fields['mode'][i])
        for name in ('q', 'dq', 'tau', 'kp', 'kd'):
            setattr(motor, name, float(fields[name][i]))
        motor.reserve = int(fields['motor_reserve'][i])
    msg.reserve = [int(w) for w in fields['reserve']]
    if factory is not None:
        msg.reserve = np.asarray(fields['reserve'], np.uint32)
    return msg


def test_mpeg2_reference_matches_the_published_check_value():
    """The byte-fed reference used below is CRC-32/MPEG-2 itself."""
    assert mpeg2_bytes(b'123456789') == MPEG2_CHECK


@pytest.mark.parametrize('impl', [crc.crc32_core, crc.crc32_core_bitwise])
def test_word_fed_crc_is_mpeg2_of_msb_first_bytes(impl):
    """Word-fed CRC of reversed groups equals byte-fed MPEG-2, incl. b'12345678'."""
    assert impl(words_msb_first(b'12345678')) == mpeg2_bytes(b'12345678')
    rng = random.Random(7)
    for n_words in (1, 2, 3, 17, 250):
        data = bytes(rng.randrange(256) for _ in range(4 * n_words))
        assert impl(words_msb_first(data)) == mpeg2_bytes(data)


@pytest.mark.parametrize('impl', [crc.crc32_core, crc.crc32_core_bitwise])
def test_empty_input_is_the_initial_value(impl):
    """With no xorout, no data leaves the register at its initial value."""
    assert impl(b'') == 0xFFFFFFFF


@pytest.mark.parametrize('impl', [crc.crc32_core, crc.crc32_core_bitwise])
def test_appending_the_crc_word_leaves_zero(impl):
    """A non-reflected CRC without xorout has residue 0 over message + crc."""
    data = bytes(range(200, 0, -1))
    assert impl(data + struct.pack('<I', impl(data))) == 0


def test_fast_and_bitwise_agree_on_random_words():
    """The zlib-based path equals the bit-by-bit definition on random input."""
    rng = random.Random(1234)
    for _ in range(60):
        data = bytes(rng.randrange(256) for _ in range(4 * rng.randrange(0, 260)))
        assert crc.crc32_core(data) == crc.crc32_core_bitwise(data)


def test_fast_and_bitwise_agree_on_random_lowcmds():
    """Both implementations agree over real LowCmd struct images."""
    rng = np.random.default_rng(5)
    for _ in range(20):
        image = crc.lowcmd_struct_bytes(**random_fields(rng))
        assert crc.crc32_core(image[:-4]) == crc.crc32_core_bitwise(image[:-4])


def test_crc_accepts_uint32_arrays():
    """A uint32 array is read as its little-endian words."""
    words = np.array([0x31323334, 0xDEADBEEF], np.uint32)
    assert crc.crc32_core(words) == crc.crc32_core(struct.pack('<2I', *words.tolist()))


def test_crc_rejects_partial_words():
    """Input that is not whole 32-bit words is an error, not silently padded."""
    with pytest.raises(ValueError):
        crc.crc32_core(b'123456789')


def test_struct_image_is_1004_bytes_with_c_layout():
    """Every field lands at its natural-alignment offset; padding is zero."""
    assert crc.LOWCMD_STRUCT_SIZE == 1004
    fields = random_fields(np.random.default_rng(3))
    image = crc.lowcmd_struct_bytes(**fields, crc=0xA1B2C3D4)
    assert len(image) == 1004
    assert image[0] == fields['mode_pr'] and image[1] == fields['mode_machine']
    assert image[2:4] == b'\0\0'
    for i in range(crc.NUM_MOTORS):
        base = 4 + 28 * i
        assert image[base] == fields['mode'][i]
        assert image[base + 1:base + 4] == b'\0\0\0'
        floats = struct.unpack_from('<5f', image, base + 4)
        assert list(floats) == [float(fields[n][i]) for n in ('q', 'dq', 'tau', 'kp', 'kd')]
        assert struct.unpack_from('<I', image, base + 24)[0] == fields['motor_reserve'][i]
    assert list(struct.unpack_from('<4I', image, 984)) == list(fields['reserve'])
    assert struct.unpack_from('<I', image, 1000)[0] == 0xA1B2C3D4


def test_default_image_is_all_zero():
    """Omitted plain values are zeros."""
    assert crc.lowcmd_struct_bytes() == bytes(1004)


def test_bad_lengths_are_rejected():
    """Arrays of the wrong length raise instead of being broadcast or truncated."""
    with pytest.raises(ValueError):
        crc.lowcmd_struct_bytes(q=np.zeros(29))
    with pytest.raises(ValueError):
        crc.lowcmd_struct_bytes(reserve=[0, 0, 0])


def test_crc_ignores_the_crc_field():
    """The crc covers everything but its own word."""
    fields = random_fields(np.random.default_rng(11))
    assert crc.lowcmd_crc(dict(fields, crc=0)) == crc.lowcmd_crc(dict(fields, crc=12345))


def test_crc_changes_with_every_field():
    """Flipping one value anywhere in the covered image changes the crc."""
    base = random_fields(np.random.default_rng(12))
    reference = crc.lowcmd_crc(base)
    for name in ('mode', 'q', 'dq', 'tau', 'kp', 'kd', 'motor_reserve'):
        changed = dict(base)
        changed[name] = base[name].copy()
        changed[name][34] += 1
        assert crc.lowcmd_crc(changed) != reference, name
    assert crc.lowcmd_crc(dict(base, mode_pr=base['mode_pr'] ^ 1)) != reference
    assert crc.lowcmd_crc(dict(base, reserve=base['reserve'] ^ 1)) != reference


def test_message_object_packs_like_plain_values():
    """Packing a LowCmd-shaped object equals packing the same plain values."""
    fields = random_fields(np.random.default_rng(21))
    msg = message_like(fields)
    assert crc.lowcmd_struct_bytes(msg) == crc.lowcmd_struct_bytes(**fields)
    assert crc.stamp_crc(msg).crc == crc.lowcmd_crc(fields)


def test_real_lowcmd_packs_like_plain_values():
    """The same for a real unitree_hg LowCmd message."""
    try:
        from unitree_hg.msg import LowCmd
        LowCmd()
    except Exception as exc:
        pytest.skip(f'unitree_hg is not importable ({exc!r}); '
                    'build it with scripts/build_interfaces.sh')
    fields = random_fields(np.random.default_rng(22))
    msg = message_like(fields, LowCmd)
    assert crc.lowcmd_struct_bytes(msg) == crc.lowcmd_struct_bytes(**fields)
    crc.stamp_crc(msg)
    assert msg.crc == crc.crc32_core_bitwise(crc.lowcmd_struct_bytes(**fields)[:-4])


@pytest.fixture(scope='module')
def vectors():
    """Load the robot's known-answer vectors, or skip when ../shared/reference is absent."""
    if not VECTORS.is_file():
        pytest.skip(f'LowCmd CRC vectors not found at {VECTORS} '
                    '(only present next to the project checkout)')
    return json.loads(VECTORS.read_text())


def test_vectors_struct_size(vectors):
    """The reference agrees that the image is 1004 bytes."""
    assert vectors['struct_bytes'] == crc.LOWCMD_STRUCT_SIZE
    assert len(vectors['cases']) > 0


def test_all_vectors(vectors):
    """Every known-answer vector: fast path, bitwise path and a message object."""
    for i, case in enumerate(vectors['cases']):
        assert crc.lowcmd_crc(case) == case['crc'], f'case {i}'
        motors = [types.SimpleNamespace(**m) for m in case['motor_cmd']]
        msg = types.SimpleNamespace(mode_pr=case['mode_pr'], mode_machine=case['mode_machine'],
                                    motor_cmd=motors, reserve=case['reserve'], crc=0)
        image = crc.lowcmd_struct_bytes(msg)
        assert crc.crc32_core_bitwise(image[:-4]) == case['crc'], f'case {i}'
        assert crc.stamp_crc(msg).crc == case['crc'], f'case {i}'


# --- LowState ----------------------------------------------------------------

def random_lowstate(rng, factory=None):
    """A LowState-shaped object (or a real one from ``factory``) with random fields."""
    ns = types.SimpleNamespace
    msg = factory() if factory else ns(imu_state=ns(), motor_state=[ns() for _ in range(35)])
    msg.version = rng.integers(0, 2**32, 2, dtype=np.uint32)
    msg.mode_pr, msg.mode_machine = int(rng.integers(0, 256)), int(rng.integers(0, 256))
    msg.tick = int(rng.integers(0, 2**32))
    imu = msg.imu_state
    for name, n in (('quaternion', 4), ('gyroscope', 3), ('accelerometer', 3), ('rpy', 3)):
        setattr(imu, name, rng.normal(size=n).astype(np.float32))
    imu.temperature = int(rng.integers(-2**15, 2**15))
    for m in msg.motor_state:
        m.mode = int(rng.integers(0, 256))
        m.q, m.dq, m.ddq, m.tau_est, m.vol = (float(np.float32(v)) for v in rng.normal(size=5))
        m.temperature = rng.integers(-2**15, 2**15, 2).astype(np.int16)
        m.sensor = rng.integers(0, 2**32, 2, dtype=np.uint32)
        m.motorstate = int(rng.integers(0, 2**32))
        m.reserve = rng.integers(0, 2**32, 4, dtype=np.uint32)
    msg.wireless_remote = rng.integers(0, 256, 40).astype(np.uint8)
    msg.reserve = rng.integers(0, 2**32, 4, dtype=np.uint32)
    msg.crc = int(rng.integers(0, 2**32))
    return msg


def lowstate_c_image(msg):
    """The LowState C struct image by struct, field by field from the layout in crc.py."""
    out = struct.pack('<2I', *msg.version) + struct.pack('<BB2x', msg.mode_pr, msg.mode_machine)
    out += struct.pack('<I', msg.tick)
    imu = msg.imu_state
    out += struct.pack('<13f', *imu.quaternion, *imu.gyroscope, *imu.accelerometer, *imu.rpy)
    out += struct.pack('<h2x', imu.temperature)
    for m in msg.motor_state:
        out += struct.pack('<B3x4f', m.mode, m.q, m.dq, m.ddq, m.tau_est)
        out += struct.pack('<2hf', *m.temperature, m.vol)
        out += struct.pack('<2II4I', *m.sensor, m.motorstate, *m.reserve)
    out += bytes(bytearray(msg.wireless_remote)) + struct.pack('<4II', *msg.reserve, msg.crc)
    return out


def test_lowstate_image_has_the_c_layout():
    """The numpy image is the struct image: 2092 bytes, the offsets of the layout table."""
    offsets = {k: v[1] for k, v in crc.LOWSTATE_DTYPE.fields.items()}
    assert (offsets['tick'], offsets['imu_state'], offsets['motor_state'],
            offsets['wireless_remote'], offsets['reserve'], offsets['crc']) == \
        (12, 16, 72, 2032, 2072, 2088)
    for seed in range(3):
        msg = random_lowstate(np.random.default_rng(seed))
        image = lowstate_c_image(msg)
        assert len(image) == 2092
        assert crc.lowstate_image(msg).tobytes() == image
        assert crc.lowstate_crc(msg) == crc.crc32_core_bitwise(image[:-4])


def test_lowstate_crc_ignores_its_own_field_and_sees_the_others():
    msg = random_lowstate(np.random.default_rng(7))
    reference = crc.lowstate_crc(msg)
    msg.crc ^= 0xFFFF
    assert crc.lowstate_crc(msg) == reference
    msg.motor_state[34].reserve[3] ^= 1
    assert crc.lowstate_crc(msg) != reference


def test_lowstate_image_filled_from_arrays_gives_the_same_crc():
    """What g1_sim_node does: fill a zero image from arrays, without reading a message."""
    msg = random_lowstate(np.random.default_rng(8))
    image = crc.lowstate_image()
    for name in ('version', 'mode_pr', 'mode_machine', 'tick', 'wireless_remote', 'reserve'):
        image[name] = getattr(msg, name)
    for name in ('quaternion', 'gyroscope', 'accelerometer', 'rpy', 'temperature'):
        image['imu_state'][name] = getattr(msg.imu_state, name)
    for name in ('mode', 'q', 'dq', 'ddq', 'tau_est', 'temperature', 'vol', 'sensor',
                 'motorstate', 'reserve'):
        image['motor_state'][name] = [getattr(m, name) for m in msg.motor_state]
    assert crc.lowstate_crc(image) == crc.lowstate_crc(msg)


def test_real_lowstate_packs_like_its_c_struct():
    try:
        from unitree_hg.msg import LowState
        LowState()
    except Exception as exc:
        pytest.skip(f'unitree_hg is not importable ({exc!r}); '
                    'build it with scripts/build_interfaces.sh')
    msg = random_lowstate(np.random.default_rng(9), LowState)
    assert crc.lowstate_image(msg).tobytes() == lowstate_c_image(msg)
