"""
Fuzz: hostile LowState messages through the executor's whole safety pipeline.

Each example is a short run of generated LowStates (NaN, Inf, huge values,
ticks that repeat or jump back, random remote bytes, gaps in time) fed to an
executor that starts in a random mode, as the node does: serialized bytes ->
sample -> on_lowstate (and remote requests) -> on_tick -> LowCmd message. Every
LowCmd must be finite, within the command limits, with slots 29..34 off, carry
the crc the robot expects, and be damping wherever the rules say so.
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from bcg_ros.runtime import modes
from bcg_ros.robot import g1, lowlevel

unitree_hg_msg = pytest.importorskip(
    'unitree_hg.msg', reason='unitree_hg is not built; run scripts/build_interfaces.sh')
from rclpy.serialization import serialize_message  # noqa: E402

EXAMPLES = 5_500
"""Examples of 2-3 LowStates each: at least 11,000 hostile LowStates."""
MIN_LOWSTATES = 10_000
CFG = modes.ExecutorConfig(stand_duration=0.05)
LIMITS = CFG.limits
COUNT = {'examples': 0, 'lowstates': 0, 'lowcmds': 0, 'damping_required': 0}

hostile = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.sampled_from([0.0, -0.0, 1e30, -1e30, float('nan'), float('inf'), -float('inf')]),
    st.floats(-4.0, 4.0, width=32))
plausible = st.floats(-0.25, 0.25, width=32)


def values(n, nasty):
    """``n`` float32 values: hostile ones for a field chosen to be nasty, else plausible."""
    return arrays(np.float32, n, elements=hostile if nasty else plausible)


MSG = unitree_hg_msg.LowState()


@st.composite
def lowstate(draw):
    """A serialized LowState and the time gap before it arrives."""
    msg = MSG
    msg.tick = draw(st.integers(0, 2 ** 32 - 1))
    msg.mode_machine = draw(st.integers(0, 255))
    msg.mode_pr = draw(st.integers(0, 255))
    nasty = draw(st.sets(st.sampled_from(['q', 'dq', 'tau', 'quat', 'gyro', 'acc']),
                         max_size=3))
    base = np.asarray(g1.DEFAULT_POSE + (0.0,) * 6, np.float32)
    q = (base + draw(values(35, 'q' in nasty))).tolist()
    dq = draw(values(35, 'dq' in nasty)).tolist()
    tau = draw(values(35, 'tau' in nasty)).tolist()
    for i, m in enumerate(msg.motor_state):
        m.q, m.dq, m.tau_est = q[i], dq[i], tau[i]
    imu = msg.imu_state
    if 'quat' in nasty:
        imu.quaternion = draw(values(4, True)).tolist()
    else:
        angle = draw(st.floats(0.0, 2.0))
        imu.quaternion = [float(np.cos(angle / 2)), float(np.sin(angle / 2)), 0.0, 0.0]
    imu.gyroscope = draw(values(3, 'gyro' in nasty)).tolist()
    imu.accelerometer = draw(values(3, 'acc' in nasty)).tolist()
    if draw(st.booleans()):
        msg.wireless_remote = list(draw(st.binary(min_size=40, max_size=40)))
    else:
        held = draw(st.sets(st.sampled_from(lowlevel.BUTTONS), max_size=3))
        msg.wireless_remote = list(lowlevel.encode_remote(held))
    gap = draw(st.sampled_from([0.0, 0.002, 0.002, 0.002, 0.015, CFG.stale_timeout * 1.5]))
    return serialize_message(msg), gap


def policy_output(draw, t):
    """Hostile targets, gains and actions."""
    q = draw(values(29, True)).astype(float)
    action = draw(values(29, True)).astype(float)
    kp = draw(values(29, True)).astype(float)
    return modes.PolicyOutput(stamp=t, q=q, kp=np.abs(kp), kd=np.asarray(g1.DEFAULT_KD),
                              action=action)


def start_state(mode, t):
    """An executor already in ``mode`` with a healthy sample behind it."""
    q = np.zeros(35)
    q[:29] = g1.DEFAULT_POSE
    s = lowlevel.LowStateSample(t, 0, 5, 0, q, np.zeros(35), np.zeros(35),
                                np.array([1.0, 0, 0, 0]), np.zeros(3), np.zeros(3),
                                bytes(40))
    state = modes.ExecState(sample=s, since=t)
    state = modes.enter(state, mode, 'fuzz', t - 1.0)
    if mode is modes.Mode.STAND:
        state = dataclasses.replace(state, stand_from=q[:29])
    return state


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mode=st.sampled_from(list(modes.Mode)), run=st.lists(lowstate(), min_size=2, max_size=3),
       data=st.data())
def test_hostile_lowstates_never_produce_an_unsafe_lowcmd(mode, run, data):
    COUNT['examples'] += 1
    t = 100.0
    state = start_state(mode, t)
    out_msg = unitree_hg_msg.LowCmd()
    for raw, gap in run:
        t += gap
        sample = lowlevel.read_lowstate_cdr(raw, t)
        before = state.mode
        state, requests = modes.on_lowstate(CFG, state, sample)
        for req in requests:
            state, _, _ = modes.request(CFG, state, req, t, source='remote')
        COUNT['lowstates'] += 1
        t_cmd = t + data.draw(st.sampled_from([0.0, 0.001, CFG.stale_timeout * 1.2]))
        policy = policy_output(data.draw, t_cmd) if data.draw(st.booleans()) else None
        bad_state = modes.check_state(CFG, sample) is not None
        state, cmd = modes.on_tick(CFG, state, t_cmd, policy)
        assert cmd is not None
        wire = lowlevel.fill_lowcmd(out_msg, cmd)
        back, crc_ok = lowlevel.read_lowcmd_cdr(serialize_message(wire))
        COUNT['lowcmds'] += 1
        assert crc_ok, 'LowCmd crc does not match'
        assert LIMITS.contains(back), 'LowCmd outside the limits or not finite'
        assert back.mode_machine == sample.mode_machine, 'mode_machine not copied'
        must_damp = (state.mode in (modes.Mode.PASSIVE, modes.Mode.DAMPING)
                     or (bad_state and modes.driving(modes.ExecState(mode=before)))
                     or (t_cmd - sample.stamp > CFG.stale_timeout
                         and before is not modes.Mode.PASSIVE
                         and modes.driving(modes.ExecState(mode=before))))
        if must_damp:
            COUNT['damping_required'] += 1
            assert back.is_damping(), f'not damping in {state.mode} ({state.reason})'
            assert not modes.driving(state)
        if before is modes.Mode.DAMPING:
            assert state.mode is modes.Mode.DAMPING or requests, 'damping left without a reset'


def test_fuzz_count_is_reported():
    """Runs after the fuzz (file order): it saw at least EXAMPLES examples."""
    print(f"fuzz: {COUNT['examples']} examples, {COUNT['lowstates']} hostile LowStates, "
          f"{COUNT['lowcmds']} LowCmds checked, {COUNT['damping_required']} required damping")
    assert COUNT['examples'] >= EXAMPLES and COUNT['lowstates'] >= MIN_LOWSTATES
