"""
policy_node's command path without timing: the scheduling settings fail soft, the LowCmd bytes.

Timing itself is measured by ``bcg-bench executor``, not tested here.
"""

import numpy as np
import pytest

from bcg_ros.runtime import modes
from bcg_ros.robot import g1, lowlevel

rclpy = pytest.importorskip('rclpy', reason='needs rclpy')
unitree_hg_msg = pytest.importorskip(
    'unitree_hg.msg', reason='unitree_hg is not built; run scripts/build_interfaces.sh')
from bcg_ros.nodes import policy_node as pn  # noqa: E402 - needs rclpy


@pytest.mark.parametrize('field,value', [('command_priority', 100), ('command_priority', -1),
                                         ('dds_priority', 100), ('command_cpu', -2),
                                         ('switch_interval', -1e-3), ('spin_margin', 0.002),
                                         ('spin_margin', -1e-4), ('velocity_source', 'joystick'),
                                         ('cmd_vel_timeout', 0.0), ('stick_dead_band', 1.0),
                                         ('motion_joint_order', 'mjlab')])
def test_config_rejects(field, value):
    with pytest.raises(ValueError, match=field):
        pn.PolicyNodeConfig(**{field: value})


def _commands():
    rng = np.random.default_rng(3)
    for mode_pr in (0, 1):
        yield lowlevel.pd_command(np.asarray(g1.DEFAULT_POSE) + rng.normal(0, 0.3, 29),
                                  rng.uniform(0, 300, 29), rng.uniform(0, 10, 29),
                                  g1.MODE_MACHINE_29DOF, mode_pr, dq=rng.normal(0, 3, 29),
                                  tau=rng.normal(0, 20, 29))
    yield lowlevel.damping_command(modes.ExecutorConfig().damping_kd, 3)


@pytest.mark.parametrize('cmd', list(_commands()))
def test_serialize_lowcmd_is_the_serialized_message(cmd):
    from rclpy.serialization import deserialize_message, serialize_message
    raw = lowlevel.serialize_lowcmd(cmd)
    filled = lowlevel.fill_lowcmd(unitree_hg_msg.LowCmd(), cmd)
    # Byte for byte except the alignment padding (which the serializer leaves as it finds it).
    fields = np.zeros(len(raw), bool)
    fields[:lowlevel.CDR_HEADER] = True
    for name, offsets in lowlevel.LOWCMD_CDR.items():
        size = 1 if name in ('mode_pr', 'mode_machine', 'mode') else 4
        for o in offsets:
            fields[lowlevel.CDR_HEADER + o:lowlevel.CDR_HEADER + o + size] = True
    expected = np.frombuffer(serialize_message(filled), np.uint8)
    np.testing.assert_array_equal(np.frombuffer(raw, np.uint8)[fields], expected[fields])
    assert not np.frombuffer(raw, np.uint8)[~fields].any()
    msg = deserialize_message(raw, unitree_hg_msg.LowCmd)
    assert msg == filled
    assert lowlevel.crc_ok(msg)
    back, crc_valid = lowlevel.read_lowcmd_cdr(raw)
    assert crc_valid
    np.testing.assert_array_equal(back.q, cmd.q.astype(np.float32))


def test_executor_config_derived_values_are_cached_and_read_only():
    cfg = modes.ExecutorConfig()
    assert cfg.limits is cfg.limits and cfg.damping_kd is cfg.damping_kd
    with pytest.raises(ValueError):
        cfg.damping_kd[0] = 0.0
    with pytest.raises(ValueError):
        cfg.limits.kp_max[0] = 1e9
    other = modes.ExecutorConfig(damping_kd_scale=0.5)
    np.testing.assert_allclose(other.damping_kd, 0.5 * cfg.damping_kd)


def test_bench_reports_the_cpu_time_the_hypervisor_stole():
    from bcg_ros.bench import executor as bench
    before = np.array([100, 0, 50, 800, 0, 0, 0, 50, 0, 0], float)
    after = before + np.array([60, 0, 20, 100, 0, 0, 0, 20, 5, 0], float)
    assert bench.steal_percent(before, after) == pytest.approx(10.0)
    assert np.isnan(bench.steal_percent(np.zeros(0), after))
    live = bench._cpu_times()
    assert len(live) == 0 or len(live) >= 8
