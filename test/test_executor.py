"""Executor modes, each safety rule, and the ONNX policy runner (no ROS)."""

import dataclasses

import numpy as np
import pytest

from bcg_ros import contract as contract_mod
from bcg_ros import rotation
from bcg_ros import testing
from bcg_ros.runtime import modes
from bcg_ros.runtime.runner import (DEFAULT_COMMAND_RANGES, PolicyRunner, clip_command,
                                    stick_command)
from bcg_ros.motion import Motion
from bcg_ros.robot import g1, lowlevel

CFG = modes.ExecutorConfig(stand_duration=1.0)
DEFAULT = np.asarray(g1.DEFAULT_POSE)


def sample(stamp, tick, q=None, quat=(1.0, 0.0, 0.0, 0.0), remote=(), **kw):
    """Return a healthy LowState at the default pose unless told otherwise."""
    q35 = np.zeros(35)
    q35[:29] = DEFAULT if q is None else q
    fields = dict(stamp=stamp, tick=tick, mode_machine=5, mode_pr=0, q=q35,
                  dq=np.zeros(35), tau=np.zeros(35), quat=np.asarray(quat, float),
                  gyro=np.zeros(3), acc=np.array([0.0, 0.0, 9.81]),
                  remote=lowlevel.encode_remote(remote))
    fields.update(kw)
    return lowlevel.LowStateSample(**fields)


def feed(st, s, cfg=CFG):
    st, reqs = modes.on_lowstate(cfg, st, s)
    for r in reqs:
        st, _, _ = modes.request(cfg, st, r, s.stamp, source='remote')
    return st


def standing(cfg=CFG, t=0.0):
    """Return an executor that has stood up and finished (now = t + stand_duration)."""
    st = feed(modes.ExecState(), sample(t, 1), cfg)
    st, ok, msg = modes.request(cfg, st, modes.Request.STAND, t)
    assert ok, msg
    return st


def test_no_command_before_the_first_lowstate():
    st, cmd = modes.on_tick(CFG, modes.ExecState(), 0.0)
    assert cmd is None


def test_passive_sends_damping_with_mode_machine_copied():
    st = feed(modes.ExecState(), sample(0.0, 1, mode_machine=7))
    st, cmd = modes.on_tick(CFG, st, 0.001)
    assert st.mode is modes.Mode.PASSIVE and cmd.is_damping()
    assert cmd.mode_machine == 7 and cmd.mode_pr == CFG.mode_pr


def test_stand_interpolates_from_the_measured_pose():
    q0 = DEFAULT + 0.3 * np.sign(np.asarray(g1.JOINT_UPPER))  # inside every range
    q0 = np.clip(q0, g1.JOINT_LOWER, g1.JOINT_UPPER)
    st = feed(modes.ExecState(), sample(0.0, 1, q=q0))
    st, ok, _ = modes.request(CFG, st, modes.Request.STAND, 0.0)
    assert ok and st.mode is modes.Mode.STAND
    half = st
    for k, t in enumerate((0.25, 0.5)):
        half = feed(half, sample(t, 2 + k, q=q0))
    half, cmd = modes.on_tick(CFG, half, 0.5)
    np.testing.assert_allclose(cmd.q[:29], 0.5 * (q0 + DEFAULT), atol=1e-6)
    np.testing.assert_allclose(cmd.kp[:29], g1.DEFAULT_KP)
    done = feed(half, sample(1.2, 10, q=q0))
    done, cmd = modes.on_tick(CFG, done, 1.2)
    np.testing.assert_allclose(cmd.q[:29], DEFAULT, atol=1e-6)


def test_start_needs_a_finished_stand_and_a_policy():
    st = standing()
    _, ok, msg = modes.request(CFG, st, modes.Request.START, 0.5)
    assert not ok and 'not finished' in msg
    st = feed(st, sample(1.0, 2))
    _, ok, msg = modes.request(CFG, st, modes.Request.START, 1.0, policy_ready=False)
    assert not ok and 'no policy' in msg
    st, ok, _ = modes.request(CFG, st, modes.Request.START, 1.0)
    assert ok and st.mode is modes.Mode.POLICY and st.previous is modes.Mode.STAND
    _, ok, _ = modes.request(CFG, modes.ExecState(), modes.Request.START, 0.0)
    assert not ok


def test_estop_latches_until_reset():
    st = standing()
    st, ok, _ = modes.request(CFG, st, modes.Request.STOP, 0.1)
    assert ok and st.mode is modes.Mode.DAMPING and 'e-stop' in st.reason
    _, ok, _ = modes.request(CFG, st, modes.Request.STAND, 0.2)
    assert not ok
    st = feed(st, sample(0.3, 5))
    st, cmd = modes.on_tick(CFG, st, 0.3)
    assert st.mode is modes.Mode.DAMPING and cmd.is_damping()
    st, ok, _ = modes.request(CFG, st, modes.Request.RESET, 0.4)
    assert ok and st.mode is modes.Mode.PASSIVE


def test_remote_combos_drive_the_modes():
    st = feed(modes.ExecState(), sample(0.0, 1))
    st = feed(st, sample(0.01, 2, remote=['start']))
    assert st.mode is modes.Mode.STAND
    st = feed(st, sample(1.5, 3, remote=['start']))  # still held: no new press
    st = feed(st, sample(1.6, 4, remote=['A']))
    assert st.mode is modes.Mode.POLICY
    # e-stop wins when pressed together with start.
    st = feed(st, sample(1.7, 5, remote=['select', 'A', 'start']))
    assert st.mode is modes.Mode.DAMPING and 'remote' in st.reason
    st = feed(st, sample(1.8, 6, remote=['L1', 'R1']))
    assert st.mode is modes.Mode.PASSIVE


def test_stale_lowstate_damps_after_the_timeout():
    st = standing()
    st, cmd = modes.on_tick(CFG, st, CFG.stale_timeout * 0.9)
    assert st.mode is modes.Mode.STAND and not cmd.is_damping()
    st, cmd = modes.on_tick(CFG, st, CFG.stale_timeout + 1e-4)
    assert st.mode is modes.Mode.DAMPING and cmd.is_damping() and 'stale' in st.reason


def test_stale_blocks_stand_in_passive_without_latching():
    st = feed(modes.ExecState(), sample(0.0, 1))
    st, cmd = modes.on_tick(CFG, st, 1.0)
    assert st.mode is modes.Mode.PASSIVE and cmd.is_damping()
    _, ok, msg = modes.request(CFG, st, modes.Request.STAND, 1.0)
    assert not ok and 'stale' in msg


@pytest.mark.parametrize('field,index,value,words', [
    ('q', 3, np.nan, 'q not finite'),
    ('dq', 0, np.inf, 'dq not finite'),
    ('quat', 0, np.nan, 'quat not finite'),
    ('gyro', 2, -np.inf, 'gyro not finite'),
    ('q', 3, 5.0, 'left_knee_joint out of range'),
    ('dq', 15, 500.0, 'left_shoulder_pitch_joint out of range'),
    ('tau', 9, 1e4, 'right_knee_joint out of range'),
    ('gyro', 0, 100.0, 'gyroscope'),
    ('acc', 1, 1e4, 'accelerometer'),
    ('quat', 0, 3.0, 'norm'),
])
def test_bad_state_values_damp(field, index, value, words):
    st = standing()
    good = sample(0.1, 2)
    arr = getattr(good, field).copy()
    arr[index] = value
    st = feed(st, dataclasses.replace(good, **{field: arr}))
    st, cmd = modes.on_tick(CFG, st, 0.1)
    assert st.mode is modes.Mode.DAMPING and cmd.is_damping()
    assert words in st.reason


def test_values_in_unused_slots_are_ignored():
    st = standing()
    s = sample(0.1, 2)
    q = s.q.copy()
    q[30] = np.nan
    st = feed(st, dataclasses.replace(s, q=q))
    assert st.mode is modes.Mode.STAND


def test_tilt_beyond_the_limit_damps():
    st = standing()
    ok_angle, bad_angle = CFG.max_tilt - 0.05, CFG.max_tilt + 0.05
    st = feed(st, sample(0.1, 2, quat=(np.cos(ok_angle / 2), np.sin(ok_angle / 2), 0, 0)))
    assert st.mode is modes.Mode.STAND
    st = feed(st, sample(0.2, 3, quat=(np.cos(bad_angle / 2), 0, np.sin(bad_angle / 2), 0)))
    assert st.mode is modes.Mode.DAMPING and 'tilt' in st.reason
    assert rotation.tilt(np.array([np.cos(0.3), np.sin(0.3), 0.0, 0.0])) == pytest.approx(0.6)


def test_tick_repeats_are_counted_then_damp():
    cfg = dataclasses.replace(CFG, tick_fault_limit=3)
    st = standing(cfg)
    st = feed(st, sample(0.002, 5), cfg)
    st = feed(st, sample(0.004, 5), cfg)   # repeat
    st = feed(st, sample(0.006, 4), cfg)   # backwards
    assert st.tick_repeats == 2 and st.tick_faults == 2 and st.mode is modes.Mode.STAND
    st = feed(st, sample(0.008, 6), cfg)   # forward again: the run ends, the count stays
    assert st.tick_repeats == 0 and st.tick_faults == 2
    for k in range(3):
        st = feed(st, sample(0.01 + 0.002 * k, 6), cfg)
    assert st.mode is modes.Mode.DAMPING and 'tick' in st.reason and st.tick_faults == 5


def test_tick_wraps_forward():
    assert modes.tick_advanced(2 ** 32 - 1, 0)
    assert not modes.tick_advanced(0, 2 ** 32 - 1)
    assert not modes.tick_advanced(7, 7)


def policy_output(t, action, q=None):
    q = DEFAULT if q is None else q
    return modes.PolicyOutput(stamp=t, q=np.asarray(q, float), kp=np.asarray(g1.DEFAULT_KP),
                              kd=np.asarray(g1.DEFAULT_KD), action=np.asarray(action, float))


def running(t=1.0):
    st = feed(standing(), sample(t, 2))
    st, ok, _ = modes.request(CFG, st, modes.Request.START, t)
    assert ok
    return st


def test_policy_targets_are_clipped_to_joint_limits():
    st = running()
    q = DEFAULT + 10.0
    st, cmd = modes.on_tick(CFG, st, 1.001, policy_output(1.0005, np.zeros(29), q=q))
    assert st.mode is modes.Mode.POLICY
    np.testing.assert_allclose(cmd.q[:29], g1.JOINT_UPPER)
    assert CFG.limits.contains(cmd)


def test_policy_gains_are_capped():
    st = running()
    out = dataclasses.replace(policy_output(1.0005, np.zeros(29)),
                              kp=np.full(29, 1e5), kd=np.full(29, 1e3))
    st, cmd = modes.on_tick(CFG, st, 1.001, out)
    np.testing.assert_allclose(cmd.kp[:29], CFG.kp_cap_scale * np.asarray(g1.DEFAULT_KP))
    np.testing.assert_allclose(cmd.kd[:29], CFG.kd_cap_scale * np.asarray(g1.DEFAULT_KD))


@pytest.mark.parametrize('value,words', [(np.nan, 'not finite'), (np.inf, 'not finite'),
                                         (1e6, 'out of range')])
def test_bad_policy_output_damps(value, words):
    st = running()
    action = np.zeros(29)
    action[7] = value
    st, cmd = modes.on_tick(CFG, st, 1.001, policy_output(1.0005, action))
    assert st.mode is modes.Mode.DAMPING and cmd.is_damping() and words in st.reason


def test_stalled_policy_damps():
    st = running()
    st = feed(st, sample(1.0 + CFG.policy_timeout / 2, 3))
    st, cmd = modes.on_tick(CFG, st, 1.0 + CFG.policy_timeout / 2)
    assert st.mode is modes.Mode.POLICY and not cmd.is_damping()
    st = feed(st, sample(1.0 + CFG.policy_timeout, 4))
    st, cmd = modes.on_tick(CFG, st, 1.0 + CFG.policy_timeout + 0.001)
    assert st.mode is modes.Mode.DAMPING and 'stalled' in st.reason


def test_config_errors_name_the_field():
    with pytest.raises(modes.ConfigError, match='stale_timeout'):
        modes.ExecutorConfig(stale_timeout=0.0)
    with pytest.raises(modes.ConfigError, match='stop_combo.*L9'):
        modes.ExecutorConfig(stop_combo='L9')
    with pytest.raises(modes.ConfigError, match='mode_pr'):
        modes.ExecutorConfig(mode_pr=3)


# --- the policy runner -------------------------------------------------------

def test_zero_policy_holds_the_default_pose(tmp_path):
    runner = PolicyRunner(str(testing.constant_policy(tmp_path / 'zero.onnx', 0.0)))
    out = runner.step(sample(0.0, 1), 0.0)
    np.testing.assert_allclose(out.q, DEFAULT, atol=1e-6)
    np.testing.assert_allclose(out.kp, g1.DEFAULT_KP)
    assert modes.check_action(CFG, out) is None
    assert runner.observation(sample(0.0, 2)).shape == (runner.contract.obs_size,)


def test_constant_policy_output_scales_through_the_contract(tmp_path):
    runner = PolicyRunner(str(testing.constant_policy(tmp_path / 'one.onnx', 1.0)))
    out = runner.step(sample(0.0, 1), 0.0)
    # target = offset + scale * action = default + 0.25 * 1
    np.testing.assert_allclose(out.q, DEFAULT + 0.25, atol=1e-6)


def test_nan_policy_is_caught(tmp_path):
    runner = PolicyRunner(str(testing.constant_policy(tmp_path / 'nan.onnx', np.nan)))
    out = runner.step(sample(0.0, 1), 0.0)
    assert 'not finite' in modes.check_action(CFG, out)


def test_policy_order_differs_from_motor_order(tmp_path):
    base = testing.state_contract()
    perm = np.arange(29)[::-1]
    c = dataclasses.replace(
        base, joint_names=tuple(np.asarray(base.joint_names)[perm]),
        default_pose=tuple(np.asarray(base.default_pose)[perm]),
        kp=tuple(np.asarray(base.kp)[perm]), kd=tuple(np.asarray(base.kd)[perm]),
        action_scale=base.action_scale, action_offset=tuple(np.asarray(base.default_pose)[perm]),
        target_clip=tuple(map(tuple, np.asarray(base.target_clip)[perm])))
    runner = PolicyRunner(str(testing.constant_policy(tmp_path / 'rev.onnx', 0.0, c)))
    q = DEFAULT + np.linspace(0.0, 0.1, 29)
    obs = runner.observation(sample(0.0, 1, q=q))
    # joint_pos_rel is the term after base_ang_vel (3) and projected_gravity (3).
    np.testing.assert_allclose(obs[6:35], (q - DEFAULT)[perm], atol=1e-6)
    out = runner.step(sample(0.0, 2, q=q), 0.0)
    np.testing.assert_allclose(out.q, DEFAULT, atol=1e-6)
    np.testing.assert_allclose(out.kp, g1.DEFAULT_KP)


def test_history_is_pushed_oldest_first(tmp_path):
    base = testing.state_contract()
    terms = tuple(dataclasses.replace(t, history=3) if t.name == 'joint_pos_rel' else t
                  for t in base.obs_terms)
    c = dataclasses.replace(base, obs_terms=terms)
    runner = PolicyRunner(str(testing.constant_policy(tmp_path / 'h.onnx', 0.0, c)))
    for k in range(3):
        obs = runner.observation(sample(0.0, k + 1, q=DEFAULT + 0.01 * k))
    hist = obs[6:6 + 3 * 29].reshape(3, 29)
    np.testing.assert_allclose(hist[:, 0], [0.0, 0.01, 0.02], atol=1e-6)


@pytest.mark.parametrize('change,field', [
    (dict(control_dt=0.01), 'control_dt'),
    (dict(joint_names=('left_toe_joint',) + g1.JOINT_NAMES[1:]), 'joint_names'),
])
def test_contract_that_does_not_fit_is_refused(tmp_path, change, field):
    c = dataclasses.replace(testing.state_contract(), **change)
    path = testing.constant_policy(tmp_path / 'bad.onnx', 0.0, c)
    with pytest.raises(contract_mod.ContractError, match=field):
        PolicyRunner(str(path))


def test_observation_size_mismatch_is_refused(tmp_path):
    import onnx
    path = testing.constant_policy(tmp_path / 'p.onnx', 0.0)
    model = onnx.load(str(path))
    meta = testing.state_contract().to_metadata()
    small = dataclasses.replace(testing.state_contract(),
                                obs_terms=testing.state_contract().obs_terms[:2])
    meta[contract_mod.METADATA_KEY] = small.to_metadata()[contract_mod.METADATA_KEY]
    del model.metadata_props[:]
    onnx.helper.set_model_props(model, meta)
    onnx.save(model, str(path))
    with pytest.raises(contract_mod.ContractError, match='obs_size'):
        PolicyRunner(str(path))


def test_missing_contract_and_missing_file_are_named(tmp_path):
    import onnx
    path = testing.constant_policy(tmp_path / 'p.onnx', 0.0)
    model = onnx.load(str(path))
    del model.metadata_props[:]
    onnx.save(model, str(path))
    with pytest.raises(contract_mod.ContractError, match='deploy.yaml'):
        PolicyRunner(str(path))
    with pytest.raises(contract_mod.ContractError, match='no such policy'):
        PolicyRunner(str(tmp_path / 'absent.onnx'))


def test_contract_file_and_isaaclab_deploy_yaml_beside_the_policy_are_read(tmp_path):
    """Two sources, each by its own name: the project's contract.yaml, IsaacLab's deploy.yaml."""
    import json

    import onnx
    import yaml

    from bcg_ros.eval import synthetic
    path = testing.constant_policy(tmp_path / 'p.onnx', 0.0)
    model = onnx.load(str(path))
    del model.metadata_props[:]
    onnx.save(model, str(path))
    d = json.loads(testing.state_contract().to_metadata()[contract_mod.METADATA_KEY])
    (tmp_path / 'contract.yaml').write_text(yaml.safe_dump(d))
    runner = PolicyRunner(str(path))
    assert runner.contract == testing.state_contract()
    assert runner.policy.source.endswith('contract.yaml')
    # The same contract as IsaacLab writes it, in unitree_rl_lab's params/ folder.
    (tmp_path / 'contract.yaml').unlink()
    velocity = synthetic.velocity_contract()
    (tmp_path / 'exported').mkdir()
    vpath = testing.constant_policy(tmp_path / 'exported' / 'policy.onnx', 0.0, velocity)
    model = onnx.load(str(vpath))
    del model.metadata_props[:]
    onnx.save(model, str(vpath))
    synthetic.write_deploy_yaml(tmp_path / 'params' / 'deploy.yaml', velocity)
    runner = PolicyRunner(str(vpath))
    assert runner.policy.source.endswith('params/deploy.yaml')
    assert runner.contract.obs_size == velocity.obs_size


def _motion(frames=10, fps=50.0):
    t = frames
    return Motion(name='still', fps=fps, root_pos=np.tile([0.0, 0.0, 0.75], (t, 1)),
                  root_quat=np.tile([1.0, 0.0, 0.0, 0.0], (t, 1)),
                  joint_pos=np.tile(DEFAULT, (t, 1)) + np.arange(t)[:, None] * 0.01,
                  joint_vel=np.zeros((t, 29)), root_lin_vel=np.zeros((t, 3)),
                  root_ang_vel=np.zeros((t, 3)), key_pos=np.zeros((t, len(g1.KEY_SITES), 3)))


def test_reference_policy_needs_a_motion_at_the_control_rate(tmp_path):
    c = contract_mod.imitation_contract(motion_name='still', motion_frames=10)
    path = str(testing.constant_policy(tmp_path / 'ref.onnx', 0.0, c))
    with pytest.raises(contract_mod.ContractError, match='motion'):
        PolicyRunner(path)
    with pytest.raises(contract_mod.ContractError, match='control_dt'):
        PolicyRunner(path, motion=_motion(fps=30.0))
    runner = PolicyRunner(path, motion=_motion())
    obs = runner.observation(sample(0.0, 1))
    # ref_joint_pos starts after 3 + 3 + 3 * 29 robot terms: frames 1..3, relative to default.
    ref = obs[93:93 + 3 * 29].reshape(3, 29)
    np.testing.assert_allclose(ref[:, 0], [0.01, 0.02, 0.03], atol=1e-6)
    for _ in range(20):
        runner.step(sample(0.0, 1), 0.0)
    ref = runner.observation(sample(0.0, 1))[93:93 + 3 * 29].reshape(3, 29)
    np.testing.assert_allclose(ref[:, 0], [0.09] * 3, atol=1e-6)  # held at the last frame


def test_reference_velocity_is_observed_in_the_base_frame(tmp_path):
    c = contract_mod.imitation_contract(motion_name='still', motion_frames=10,
                                        ref_velocity=True)
    m = dataclasses.replace(_motion(), root_lin_vel=np.tile([1.5, 0.0, 0.2], (10, 1)))
    runner = PolicyRunner(str(testing.constant_policy(tmp_path / 'v.onnx', 0.0, c)),
                          motion=m)
    # The base yawed 90 degrees left: the clip's +x is the base's -y.
    yaw = (np.cos(np.pi / 4), 0.0, 0.0, np.sin(np.pi / 4))
    obs = runner.observation(sample(0.0, 1, quat=yaw))
    term = [t.name for t in c.obs_terms].index('ref_root_lin_vel')
    start = sum(t.size * t.history for t in c.obs_terms[:term])
    v = obs[start:start + 9].reshape(3, 3) / c.obs_terms[term].scale
    np.testing.assert_allclose(v, np.tile([0.0, -1.5, 0.2], (3, 1)), atol=1e-5)


def test_residual_policy_targets_the_next_reference_frame(tmp_path):
    c = contract_mod.imitation_contract(motion_name='still', motion_frames=10, residual=True)
    runner = PolicyRunner(str(testing.constant_policy(tmp_path / 'res.onnx', 1.0, c)),
                          motion=_motion())
    m = _motion()
    for step in range(3):
        out = runner.step(sample(0.0, 1 + step), 0.0)
        # The reference's joint angles of frame step + 1, plus 0.25 * 1, in the joint ranges.
        want = np.clip(m.joint_pos[step + 1] + 0.25, g1.JOINT_LOWER, g1.JOINT_UPPER)
        np.testing.assert_allclose(out.q[:29], want, atol=1e-6)


RANGES = {'lin_vel_x': (-0.5, 1.0), 'lin_vel_y': (-0.3, 0.3), 'ang_vel_z': (-1.0, 1.0)}


def test_sticks_map_into_the_trained_ranges_with_a_dead_band():
    remote = lowlevel.decode_remote(lowlevel.encode_remote(ly=1.0))
    np.testing.assert_allclose(stick_command(remote, RANGES, 0.1), [1.0, 0.0, 0.0])
    back = lowlevel.decode_remote(lowlevel.encode_remote(ly=-1.0, lx=1.0, rx=-1.0))
    # Full back is the range's low end; left stick right is -vy; right stick left is +wz.
    np.testing.assert_allclose(stick_command(back, RANGES, 0.1), [-0.5, -0.3, 1.0])
    half = lowlevel.decode_remote(lowlevel.encode_remote(ly=0.55))
    np.testing.assert_allclose(stick_command(half, RANGES, 0.1), [0.5, 0.0, 0.0], atol=1e-6)
    drift = lowlevel.decode_remote(lowlevel.encode_remote(ly=0.08, lx=-0.09, rx=0.05))
    np.testing.assert_array_equal(stick_command(drift, RANGES, 0.1), [0.0, 0.0, 0.0])
    np.testing.assert_allclose(clip_command([3.0, -2.0, float('nan')], RANGES),
                               [1.0, -0.3, 0.0])


def test_velocity_policy_observes_the_command(tmp_path):
    from bcg_ros.eval import synthetic
    c = synthetic.velocity_contract()
    runner = PolicyRunner(str(testing.constant_policy(tmp_path / 'v.onnx', 0.0, c)))
    assert runner.is_velocity_policy
    assert runner.command_ranges == DEFAULT_COMMAND_RANGES   # the file states none
    start = 3 + 3   # base_ang_vel, projected_gravity, then velocity_commands
    obs = runner.observation(sample(0.0, 1), command=[0.7, -0.1, 0.4])
    np.testing.assert_allclose(obs[start:start + 3], [0.7, -0.1, 0.4], rtol=1e-6)
    runner.reset()
    np.testing.assert_array_equal(runner.observation(sample(0.0, 1))[start:start + 3], 0.0)


def test_base_velocity_is_the_estimators_in_the_base_frame(tmp_path):
    c = contract_mod.imitation_contract(motion_name='still', motion_frames=10,
                                        base_velocity=True)
    runner = PolicyRunner(str(testing.constant_policy(tmp_path / 'bv.onnx', 0.0, c)),
                          motion=_motion())
    assert runner.velocity is not None
    # Yawed 90 degrees left, pushed 2 m/s^2 along the body's x for 0.1 s, feet off the
    # ground (no torques: no contact), LowStates every 2 ms.
    yaw = (np.cos(np.pi / 4), 0.0, 0.0, np.sin(np.pi / 4))
    steps = []
    for i in range(51):
        s = sample(0.002 * i, 1 + i, quat=yaw, acc=np.array([2.0, 0.0, 9.81]))
        runner.observe_state(s)
        steps.append(runner.velocity.last_time)
    # The filter steps every 5 ms at most: every third 2 ms sample.
    assert len(set(steps)) == 1 + 50 // 3
    obs = runner.observation(s)
    term = [t.name for t in c.obs_terms].index('base_lin_vel')
    start = sum(t.size * t.history for t in c.obs_terms[:term])
    v = obs[start:start + 3] / c.obs_terms[term].scale
    np.testing.assert_allclose(v, [0.2, 0.0, 0.0], atol=0.03)
    runner.reset()
    assert runner.velocity.state is None


def test_check_state_passes_exactly_the_states_every_rule_passes():
    # check_state takes a whole LowState at once and goes rule by rule only when one
    # fails: on states near every bound, the two must agree.
    rng = np.random.default_rng(0)
    n = g1.NUM_JOINTS
    lo, hi = np.asarray(g1.JOINT_LOWER), np.asarray(g1.JOINT_UPPER)
    passed = 0
    for i in range(3000):
        q = rng.uniform(lo - 0.3, hi + 0.3)
        dq = rng.uniform(-2.2, 2.2, n) * np.asarray(g1.VELOCITY_LIMIT)
        tau = rng.uniform(-3.3, 3.3, n) * np.asarray(g1.TORQUE_LIMIT)
        angle = rng.uniform(0.0, 1.2)
        quat = np.array([np.cos(angle / 2), np.sin(angle / 2), 0.0, 0.0])
        quat *= rng.uniform(0.85, 1.15)
        gyro, acc = rng.uniform(-22, 22, 3), rng.uniform(-220, 220, 3)
        if i % 7 == 0:
            (q, dq, tau, gyro)[i % 4][rng.integers(3)] = np.nan
        if i % 3:   # most states: every rule but one or none is close to its bound
            q, dq, tau = np.clip(q, lo - 0.19, hi + 0.19), dq / 2.1, tau / 3.1
            gyro, acc = gyro / 1.2, acc / 1.2
        s = sample(0.0, 1, q=q, dq=np.r_[dq, np.zeros(6)], tau=np.r_[tau, np.zeros(6)],
                   quat=quat, gyro=gyro, acc=acc)
        every_rule = (np.isfinite(np.r_[q, dq, tau, gyro, acc, quat]).all()
                      and (q >= lo - CFG.joint_pos_margin).all()
                      and (q <= hi + CFG.joint_pos_margin).all()
                      and (np.abs(dq) <= CFG.joint_vel_factor
                           * np.asarray(g1.VELOCITY_LIMIT)).all()
                      and (np.abs(tau) <= CFG.max_torque_factor
                           * np.asarray(g1.TORQUE_LIMIT)).all()
                      and abs(np.linalg.norm(quat) - 1.0) <= CFG.quat_norm_tolerance
                      and (np.abs(gyro) <= CFG.max_gyro).all()
                      and (np.abs(acc) <= CFG.max_acc).all()
                      and rotation.tilt(quat) <= CFG.max_tilt)
        assert (modes.check_state(CFG, s) is None) == every_rule, (i, modes.check_state(CFG, s))
        passed += every_rule
    assert 300 < passed < 2700, f'{passed} of 3000 pass: too few cases on one side'
