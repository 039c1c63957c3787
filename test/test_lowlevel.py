"""The G1 low-level interface as arrays: joint order, LowCmd building, CRC, the remote."""

import json
import struct

import numpy as np
import pytest

from bcg_ros.robot import crc, g1, lowlevel

unitree_hg_msg = pytest.importorskip(
    'unitree_hg.msg', reason='unitree_hg is not built; run scripts/build_interfaces.sh')


def test_motor_slots_follow_names_not_positions():
    names = ('right_knee_joint', 'left_hip_pitch_joint', 'waist_pitch_joint')
    slots = lowlevel.motor_slots(names)
    assert slots.tolist() == [9, 0, 14]
    motor = np.arange(29.0)
    policy = lowlevel.to_policy_order(motor, slots)
    assert policy.tolist() == [9.0, 0.0, 14.0]
    back = lowlevel.to_motor_order(policy * 10, slots, fill=g1.DEFAULT_POSE)
    assert back[9] == 90.0 and back[0] == 0.0 and back[14] == 140.0
    assert back[3] == g1.DEFAULT_POSE[3]


def test_motor_slots_name_the_unknown_joint():
    with pytest.raises(lowlevel.CommandError, match='left_toe_joint'):
        lowlevel.motor_slots(('left_hip_pitch_joint', 'left_toe_joint'))
    with pytest.raises(lowlevel.CommandError, match='repeat'):
        lowlevel.motor_slots(('left_knee_joint', 'left_knee_joint'))


def test_damping_command_has_no_stiffness_and_unused_slots_off():
    cmd = lowlevel.damping_command(np.asarray(g1.DEFAULT_KD), mode_machine=5)
    assert cmd.is_damping()
    assert cmd.mode[:29].tolist() == [lowlevel.MOTOR_ENABLE] * 29
    assert cmd.mode[29:].tolist() == [0] * 6
    assert np.all(cmd.kd[29:] == 0) and np.all(cmd.kp == 0)
    stiff = lowlevel.pd_command(np.zeros(29), np.ones(29), np.ones(29), 5)
    assert not stiff.is_damping()


def test_clip_enforces_every_limit():
    limits = lowlevel.CommandLimits.for_g1(kp_scale=1.5, kd_scale=2.0, tau_fraction=0.25)
    rng = np.random.default_rng(0)
    wild = lowlevel.pd_command(q=rng.normal(0, 10, 29), kp=rng.normal(0, 1e4, 29),
                               kd=rng.normal(0, 1e3, 29), dq=rng.normal(0, 1e3, 29),
                               tau=rng.normal(0, 1e3, 29), mode_machine=5)
    assert not limits.contains(wild)
    safe = limits.clip(wild, np.asarray(g1.DEFAULT_KD))
    assert limits.contains(safe)
    assert np.all(safe.q[:29] <= np.asarray(g1.JOINT_UPPER))
    assert np.all(safe.kp[:29] <= 1.5 * np.asarray(g1.DEFAULT_KP))
    assert np.all(np.abs(safe.tau[:29]) <= 0.25 * np.asarray(g1.TORQUE_LIMIT))
    # A target inside every limit passes unchanged.
    ok = lowlevel.pd_command(np.asarray(g1.DEFAULT_POSE), np.asarray(g1.DEFAULT_KP),
                             np.asarray(g1.DEFAULT_KD), 5)
    np.testing.assert_array_equal(limits.clip(ok, np.ones(29)).q, ok.q)


def test_clip_turns_non_finite_into_damping():
    limits = lowlevel.CommandLimits.for_g1()
    q = np.zeros(29)
    q[4] = np.nan
    out = limits.clip(lowlevel.pd_command(q, np.ones(29), np.ones(29), 5), np.ones(29))
    assert out.is_damping() and limits.contains(out)


def test_fill_lowcmd_round_trips_and_carries_the_robot_crc():
    cmd = lowlevel.pd_command(np.asarray(g1.DEFAULT_POSE), np.asarray(g1.DEFAULT_KP),
                              np.asarray(g1.DEFAULT_KD), mode_machine=5, mode_pr=0,
                              tau=np.linspace(-1, 1, 29))
    msg = lowlevel.fill_lowcmd(unitree_hg_msg.LowCmd(), cmd)
    assert msg.crc == crc.lowcmd_crc(msg)
    assert lowlevel.crc_ok(msg)
    back = lowlevel.read_lowcmd(msg)
    np.testing.assert_allclose(back.q, cmd.q, atol=1e-6)
    np.testing.assert_allclose(back.tau, cmd.tau, atol=1e-6)
    assert back.mode.tolist() == cmd.mode.tolist()
    assert msg.mode_machine == 5 and msg.mode_pr == 0
    msg.motor_cmd[3].q += 0.01
    assert not lowlevel.crc_ok(msg)


def test_command_crc_matches_the_robot_vectors(reference_dir):
    vectors = json.loads((reference_dir / 'unitree_hg' / 'lowcmd_crc_vectors.json').read_text())
    vectors = vectors['cases']
    checked = 0
    for v in vectors:
        motors = v['motor_cmd']
        if any(m.get('reserve', 0) for m in motors) or any(v.get('reserve', [0])):
            continue  # the executor always sends zero reserve words
        cmd = lowlevel.MotorCommand(
            mode_pr=v['mode_pr'], mode_machine=v['mode_machine'],
            mode=np.array([m['mode'] for m in motors], np.uint8),
            **{k: np.array([m[k] for m in motors], np.float64)
               for k in ('q', 'dq', 'tau', 'kp', 'kd')})
        assert lowlevel.command_crc(cmd) == v['crc']
        checked += 1
    assert checked > 0


def test_read_lowstate_copies_every_field():
    msg = unitree_hg_msg.LowState()
    msg.tick = 1234
    msg.mode_machine = 5
    for i, m in enumerate(msg.motor_state):
        m.q, m.dq, m.tau_est = 0.01 * i, -0.02 * i, 0.5 * i
    msg.imu_state.quaternion = [0.0, 1.0, 0.0, 0.0]
    msg.imu_state.gyroscope = [1.0, 2.0, 3.0]
    msg.wireless_remote = list(lowlevel.encode_remote(['A'], lx=0.5))
    s = lowlevel.read_lowstate(msg, stamp=7.0)
    assert s.tick == 1234 and s.mode_machine == 5 and s.stamp == 7.0
    np.testing.assert_allclose(s.q[:3], [0.0, 0.01, 0.02], atol=1e-7)
    np.testing.assert_allclose(s.tau[34], 17.0)
    assert s.quat.tolist() == [0.0, 1.0, 0.0, 0.0]
    assert lowlevel.decode_remote(s.remote).held('A')


def test_remote_layout_by_hand():
    # Header 2 bytes, then buttons: start is bit 2 and A bit 8 -> 0x0104; then
    # float32 lx, rx, ry, L2, ly.
    data = bytes([0x55, 0x51]) + struct.pack('<H5f', 0x0104, 0.25, -0.5, 0.75, 0.9, -1.0)
    data += bytes(40 - len(data))
    r = lowlevel.decode_remote(data)
    assert r.buttons == 0x0104
    assert r.held('start') and r.held('A') and not r.held('B') and not r.held('R1')
    assert (r.lx, r.rx, r.ry, r.ly) == (0.25, -0.5, 0.75, -1.0)
    enc = lowlevel.encode_remote(['start', 'A'], lx=0.25, rx=-0.5, ry=0.75, ly=-1.0)
    assert lowlevel.decode_remote(enc) == r


def test_every_button_has_its_own_bit():
    for i, name in enumerate(lowlevel.BUTTONS):
        assert lowlevel.decode_remote(lowlevel.encode_remote([name])).buttons == 1 << i


def test_combos_fire_on_the_press_edge_only():
    mask = lowlevel.parse_combo('L1 + A')
    assert mask == (1 << 1) | (1 << 8)
    l1 = lowlevel.button_mask(['L1'])
    assert not lowlevel.combo_pressed(0, l1, mask)
    assert lowlevel.combo_pressed(l1, mask, mask)
    assert not lowlevel.combo_pressed(mask, mask, mask)
    assert not lowlevel.combo_pressed(0, 0, lowlevel.parse_combo(''))
    with pytest.raises(lowlevel.CommandError, match='L3'):
        lowlevel.parse_combo('L3+A')


def test_malformed_remote_reads_as_no_buttons():
    with pytest.raises(lowlevel.CommandError, match='39 bytes'):
        lowlevel.decode_remote(bytes(39))
    assert lowlevel.remote_buttons(bytes(39)) == 0
    assert lowlevel.remote_buttons(None) == 0


def test_lowstate_from_its_serialized_bytes_matches_the_message():
    from rclpy.serialization import serialize_message
    rng = np.random.default_rng(3)
    for _ in range(5):
        msg = unitree_hg_msg.LowState()
        msg.tick = int(rng.integers(0, 2 ** 32))
        msg.mode_machine, msg.mode_pr = int(rng.integers(0, 256)), int(rng.integers(0, 2))
        msg.version = [1, 2]
        for i, m in enumerate(msg.motor_state):
            m.mode, m.q, m.dq, m.tau_est = i, *rng.normal(size=3).tolist()
            m.temperature, m.vol, m.reserve = [30, 31], 48.0, [9, 9, 9, 9]
        imu = msg.imu_state
        imu.quaternion = rng.normal(size=4).tolist()
        imu.gyroscope = rng.normal(size=3).tolist()
        imu.accelerometer = rng.normal(size=3).tolist()
        imu.temperature = 40
        msg.wireless_remote = rng.integers(0, 256, 40).tolist()
        raw = serialize_message(msg)
        assert len(raw) == lowlevel.CDR_HEADER + lowlevel.LOWSTATE_CDR_SIZE
        a, b = lowlevel.read_lowstate_cdr(raw, 1.0), lowlevel.read_lowstate(msg, 1.0)
        for name in ('q', 'dq', 'tau', 'quat', 'gyro', 'acc'):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        assert (a.tick, a.mode_machine, a.mode_pr, a.remote) == \
            (b.tick, b.mode_machine, b.mode_pr, b.remote)
    with pytest.raises(lowlevel.CommandError, match='bytes'):
        lowlevel.read_lowstate_cdr(raw[:-4], 1.0)


def test_lowcmd_from_its_serialized_bytes_matches_the_message():
    from rclpy.serialization import serialize_message
    cmd = lowlevel.pd_command(np.asarray(g1.DEFAULT_POSE), np.asarray(g1.DEFAULT_KP),
                              np.asarray(g1.DEFAULT_KD), mode_machine=5, mode_pr=1,
                              tau=np.linspace(-2, 2, 29))
    msg = lowlevel.fill_lowcmd(unitree_hg_msg.LowCmd(), cmd)
    raw = serialize_message(msg)
    back, ok = lowlevel.read_lowcmd_cdr(raw)
    assert ok
    ref = lowlevel.read_lowcmd(msg)
    for name in ('mode', 'q', 'dq', 'tau', 'kp', 'kd'):
        np.testing.assert_allclose(getattr(back, name), getattr(ref, name), atol=1e-6)
    assert (back.mode_pr, back.mode_machine) == (1, 5)
    msg.motor_cmd[0].kp += 1.0
    assert not lowlevel.read_lowcmd_cdr(serialize_message(msg))[1]
    msg.motor_cmd[0].kp -= 1.0
    msg.motor_cmd[0].reserve = 1  # covered by the crc too
    assert not lowlevel.read_lowcmd_cdr(serialize_message(msg))[1]


def test_clipped_targets_stay_within_the_limits_after_float32_rounding():
    # The fuzz found this: 2.8798 clipped in float64 becomes 2.87980008 on the wire.
    limits = lowlevel.CommandLimits.for_g1()
    wild = lowlevel.pd_command(np.full(29, 1e30), np.full(29, 1e30), np.full(29, 1e30),
                               mode_machine=5, tau=np.full(29, -1e30), dq=np.full(29, 1e30))
    msg = lowlevel.fill_lowcmd(unitree_hg_msg.LowCmd(), limits.clip(wild, np.ones(29)))
    assert limits.contains(lowlevel.read_lowcmd(msg))
    assert np.all(np.asarray(limits.q_upper) <= np.asarray(g1.JOINT_UPPER))
