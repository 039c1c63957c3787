"""MuJoCo rollouts and whole evaluations on the G1, with policies the tests export."""

import dataclasses
import json

import mujoco
import numpy as np
import pytest

from bcg_ros import contract as ct
from bcg_ros import rotation
from bcg_ros.eval import cli, report, synthetic
from bcg_ros.eval.evaluator import EvalConfig, evaluate
from bcg_ros.eval.rollout import physics_dt, RolloutConfig, run_once
from bcg_ros.robot import g1
from bcg_ros.robot import model as g1_model
from bcg_ros.runtime.policy import load_policy

QUIET = synthetic.quiet_rollout()


@pytest.fixture(scope='module')
def stand(g):
    return synthetic.held_pose_motion(g, seconds=2.0)


@pytest.fixture(scope='module')
def zeros_policy(tmp_path_factory, stand):
    c = ct.imitation_contract('stand', stand.num_frames)   # with a training penetration
    path = synthetic.save_policy(tmp_path_factory.mktemp('zeros') / 'policy.onnx', c,
                                 extra_metadata={ct.TRAIN_PENETRATION_KEY: '3.0'})
    return load_policy(path)


def test_physics_step_divides_the_policy_period():
    assert physics_dt(0.02, 0.002, 0.005) == (0.005, 4)
    assert physics_dt(0.02, 0.002, 0.0) == (0.002, 10)
    assert physics_dt(0.02, 0.01, 0.0025) == (0.0025, 8)
    dt, n = physics_dt(0.0217, 0.005, 0.005)
    assert n == 5 and dt == pytest.approx(0.0217 / 5)


def test_free_fall_falls_at_the_hand_computed_time(g, zeros_policy, tmp_path):
    # With the floor 10 m down and the pose held (no noise), the robot falls as one rigid
    # body: z(t) = z0 - g t^2 / 2, below 0.3 m at t* = sqrt(2 (z0 - 0.3) / g).
    spec = mujoco.MjSpec.from_file(str(g1_model.DEFAULT_MJCF))
    spec.geom('floor').pos = [0.0, 0.0, -10.0]
    path = tmp_path / 'g1_no_floor.xml'
    path.write_text(spec.to_xml())
    floating = g1_model.load(path)
    motion = synthetic.held_pose_motion(floating, seconds=1.0)
    run = run_once(zeros_policy, floating, 0, QUIET, motion)
    z0 = motion.root_pos[0, 2]
    t_star = np.sqrt(2.0 * (z0 - 0.3) / 9.81)
    from bcg_ros.eval import metrics
    m = metrics.run_metrics(run, motion)
    assert m['fell']
    # Rows are 0.02 s apart: the first row below 0.3 m is within one row of t*.
    assert t_star <= m['fall_time'] + 1e-9 <= t_star + 0.02 + 1e-9
    assert run.penetration.size == 0


def test_zeros_policy_stands_and_tracks_the_held_pose(g, zeros_policy, stand):
    ev = evaluate(EvalConfig(runs=3), motion=stand, policy=zeros_policy, g=g)
    s = ev.summary
    assert s['falls'] == 0
    assert 0.0 < s['penetration_mm'] < 3.0
    assert s['delta_d_mm'] == pytest.approx(3.0 - s['penetration_mm'])
    assert s['e_track_cm'] < 3.0
    assert s['joint_error_rad'] < 0.05
    # Per-run seeds: the friction draws differ, and so do the runs.
    assert len({r['friction_scale'] for r in ev.per_run}) == 3
    assert ev.runs[0].sim_dt == g1.SIM_DT


def test_known_body_offset(g, zeros_policy, stand):
    # Shift the reference bodies by (3, 4, 0) cm (and its key points, for the anchor-relative
    # error): E_track over all bodies must be 5 cm give or take the untouched run's own error.
    from bcg_ros import motion as motion_mod
    from bcg_ros.eval import metrics
    run = run_once(zeros_policy, g, 0, QUIET, stand)
    ref = motion_mod.body_positions(stand, g)
    assert ref.shape == (stand.num_frames, len(g1.TRACK_BODIES), 3)
    off = np.array([0.03, 0.04, 0.0])
    base = metrics.run_metrics(run, stand, ref_body=ref)
    shifted = type(stand)(**{**stand.__dict__, 'key_pos': stand.key_pos + off})
    moved = metrics.run_metrics(run, shifted, ref_body=ref + off)
    e0, a0 = base['e_track_cm'], base['anchor_error_cm']
    assert e0 < 2.0
    assert 5.0 - e0 - 1e-6 <= moved['e_track_cm'] <= 5.0 + e0 + 1e-6
    assert 5.0 - a0 - 1e-6 <= moved['anchor_error_cm'] <= 5.0 + a0 + 1e-6
    # One body off by 30 cm moves the mean over the 30 bodies by 1 cm, give or take e0.
    one = ref.copy()
    one[:, 0] += [0.3, 0.0, 0.0]
    e1 = metrics.run_metrics(run, stand, ref_body=one)['e_track_cm']
    assert 30.0 / len(g1.TRACK_BODIES) - e0 - 1e-6 <= e1 <= 30.0 / len(g1.TRACK_BODIES) + e0


def test_a_robot_that_trails_its_clip_shows_in_the_velocity_error(g, zeros_policy, stand):
    # The robot stands; a clip that says it moves at 0.5 m/s (and turns at 0.3 rad/s) gives
    # velocity errors of 0.5 and 0.3, give or take what standing itself moves.
    from bcg_ros.eval import metrics
    run = run_once(zeros_policy, g, 0, QUIET, stand)
    base = metrics.run_metrics(run, stand)
    assert base['lin_vel_error'] < 0.05 and base['ang_vel_error'] < 0.05
    moving = type(stand)(**{**stand.__dict__,
                            'root_lin_vel': stand.root_lin_vel + [0.5, 0.0, 0.0],
                            'root_ang_vel': stand.root_ang_vel + [0.0, 0.0, 0.3]})
    m = metrics.run_metrics(run, moving)
    assert abs(m['lin_vel_error'] - 0.5) <= base['lin_vel_error'] + 1e-6
    assert abs(m['ang_vel_error'] - 0.3) <= base['ang_vel_error'] + 1e-6


def test_large_constant_action_falls(g, stand, tmp_path):
    c = ct.imitation_contract('stand', stand.num_frames)
    path = synthetic.save_policy(tmp_path / 'fall.onnx', c, bias=6.0)
    cfg = EvalConfig(runs=2, rollout=RolloutConfig(stop_on_fall=True))
    ev = evaluate(cfg, motion=stand, policy=load_policy(path), g=g)
    assert ev.summary['falls'] == 2
    assert all(0.0 < r['fall_time'] < 2.0 for r in ev.per_run)


def test_pushes_are_applied(g, zeros_policy, stand):
    cfg = RolloutConfig(push_interval=0.5, push_velocity=0.3)
    run = run_once(zeros_policy, g, 3, cfg, stand)
    assert run.pushes == 3


def test_deploy_yaml_policy_runs_with_no_code_change(g, tmp_path):
    """A policy exported elsewhere (IsaacLab order, per-term history) runs from its files."""
    c = synthetic.velocity_contract(synthetic.isaaclab_joint_order(), history=2)
    root = tmp_path / 'unitree_rl_lab_run'
    onnx_path = synthetic.save_policy(root / 'exported' / 'policy.onnx', None,
                                      obs_size=c.obs_size)
    synthetic.write_deploy_yaml(root / 'params' / 'deploy.yaml', c)
    out = tmp_path / 'report'
    rc = cli.main([str(onnx_path), '--command', '0.4', '0.0', '0.0', '--runs', '2',
                   '--duration', '2.0', '--out', str(out), '--quiet'])
    assert rc == 0
    result = json.loads((out / 'result.json').read_text())
    assert result['contract_source'].endswith('deploy.yaml')
    s = result['summary']
    assert s['falls'] == 0
    # The zeros policy stands still, so the whole commanded 0.4 m/s is missed.
    assert s['lin_vel_error'] == pytest.approx(0.4, abs=0.05)
    for name in ('report.md',) + report.PLOTS:
        assert (out / name).stat().st_size > 0
    assert '| 0/2 |' in (out / 'report.md').read_text()


def test_cli_reports_a_contract_error(tmp_path, capsys):
    c = ct.imitation_contract()
    path = synthetic.save_policy(tmp_path / 'p.onnx', c, obs_size=c.obs_size + 1)
    assert cli.main([str(path), '--quiet']) == 2
    assert 'obs_size' in capsys.readouterr().err


@pytest.fixture
def table_contract(stand, monkeypatch):
    """The tables read motions by name; here every name resolves to the held pose."""
    from bcg_ros.eval import evaluator
    monkeypatch.setattr(evaluator, 'resolve_motion', lambda spec, dt, order='': stand)
    return ct.imitation_contract('stand', stand.num_frames)


def test_table1_from_a_runs_directory(g, table_contract, tmp_path):
    c = table_contract
    synthetic.save_policy(tmp_path / 'runs' / 'jump' / 'shac_bcg_k300' / 'policy.onnx', c,
                          extra_metadata={ct.TRAIN_PENETRATION_KEY: '3.0'})
    synthetic.save_policy(tmp_path / 'runs' / 'jump' / 'shac_bcg_k50' / 'policy.onnx', c,
                          bias=6.0)
    rc = cli.main(['table1', '--runs-dir', str(tmp_path / 'runs'), '--motions', 'jump',
                   '--k', '50', '300', '--runs', '2', '--no-plots', '--quiet',
                   '--stop-on-fall'])
    assert rc == 0
    md = (tmp_path / 'runs' / 'table1' / 'table1.md').read_text()
    assert '| 50 | 2/2 / — |' in md
    assert '| 300 | 0/2 / ' in md
    (tmp_path / 'runs' / 'jump' / 'shac_bcg_k300' / 'summary.json').write_text(json.dumps(
        {'iterations': 5000, 'samples': 1280000, 'wall_s': 7832.2}))
    rc = cli.main(['table2', '--runs-dir', str(tmp_path / 'runs'), '--motions', 'jump',
                   '--runs', '1', '--no-plots', '--quiet'])
    md2 = (tmp_path / 'runs' / 'table2' / 'table2.md').read_text()
    assert rc == 0 and 'ppo' in md2 and 'Not found' in md2
    assert '| jump | shac_bcg_k300 | 5000 | 1280000 | 130.5 |' in md2


def test_table1_pools_the_seeds_of_one_k(g, table_contract, tmp_path):
    c = table_contract
    synthetic.save_policy(tmp_path / 'runs' / 'jump' / 'shac_bcg_s0_k300' / 'policy.onnx', c,
                          extra_metadata={ct.TRAIN_PENETRATION_KEY: '3.0'})
    synthetic.save_policy(tmp_path / 'runs' / 'jump' / 'shac_bcg_s1_k300' / 'policy.onnx', c,
                          bias=6.0)
    rc = cli.main(['table1', '--runs-dir', str(tmp_path / 'runs'), '--motions', 'jump',
                   '--k', '300', '--method', 'shac_bcg_s0', 'shac_bcg_s1', 'shac_bcg_s2',
                   '--runs', '2', '--no-plots', '--quiet', '--stop-on-fall'])
    assert rc == 0
    md = (tmp_path / 'runs' / 'table1' / 'table1.md').read_text()
    # The falling seed's two runs add to the standing one's; s2 was never trained.
    assert '| 300 | 2/4 / ' in md and 'shac_bcg_s2_k300' in md
    one = json.loads((tmp_path / 'runs' / 'table1' / 'table1.json').read_text())
    assert one['jump/shac_bcg_s0_k300']['falls'] == 0
    assert one['jump/shac_bcg_s1_k300']['falls'] == 2
    # delta-d: the runs-weighted mean over the seeds that have one.
    a = {'falls': 0, 'runs': 2, 'delta_d_mm': 2.0}
    b = {'falls': 3, 'runs': 6, 'delta_d_mm': 4.0}
    pooled = report.pooled(report.pooled(None, a), b)
    assert pooled == {'falls': 3, 'runs': 8, 'delta_d_mm': 3.5}
    assert report.pooled(a, dict(b, delta_d_mm=None))['delta_d_mm'] == 2.0


def test_motion_defaults_to_the_one_the_policy_was_trained_on(g, tmp_path):
    """EvalConfig.motion empty: an imitation policy runs on the motion its contract names."""
    from bcg_ros.motion import load_motion
    run = load_motion('run', control_dt=g1.CONTROL_DT)
    c = ct.imitation_contract(run.name, run.num_frames)
    policy = load_policy(synthetic.save_policy(tmp_path / 'run.onnx', c))
    short = RolloutConfig(joint_noise=0.0, root_vel_noise=0.0, friction_range=(1.0, 1.0),
                          duration=0.1)
    ev = evaluate(EvalConfig(runs=1, rollout=short), policy=policy, g=g)
    assert ev.motion is not None and ev.motion.name == run.name
    unnamed = load_policy(synthetic.save_policy(tmp_path / 'unnamed.onnx',
                                                ct.imitation_contract()))
    with pytest.raises(ct.ContractError, match='reference motion'):
        evaluate(EvalConfig(runs=1, rollout=short), policy=unnamed, g=g)


class _NanAfter:
    """A policy stand-in whose output turns non-finite after ``steps`` control steps."""

    def __init__(self, policy, steps: int):
        self.contract, self.motor_ids, self.path = policy.contract, policy.motor_ids, policy.path
        self.steps, self.calls = steps, 0

    def act(self, obs):
        self.calls += 1
        out = np.zeros(self.contract.num_joints, np.float32)
        return out * np.nan if self.calls > self.steps else out


class _ElbowTarget:
    """A policy stand-in that sends the left elbow to ``target`` and leaves the rest at 0."""

    def __init__(self, policy, motion, target: float):
        c = policy.contract
        self.contract, self.motor_ids, self.path = c, policy.motor_ids, policy.path
        elbow = g1.JOINT_NAMES.index('left_elbow_joint')
        self.k = int(np.flatnonzero(policy.motor_ids == elbow)[0])
        ref = ct.reference_window(motion, policy.motor_ids, 0) if c.uses_reference else None
        zero = np.zeros(c.num_joints)
        base = c.action_to_targets(zero, ref=ref)[self.k]
        self.action = zero.astype(np.float32)
        scale = np.broadcast_to(np.asarray(c.action_scale, float), (c.num_joints,))
        self.action[self.k] = (target - base) / scale[self.k]
        assert c.action_to_targets(self.action, ref=ref)[self.k] == pytest.approx(target, abs=1e-5)

    def act(self, obs):
        return self.action


def test_targets_past_a_joint_range_reach_the_motor_at_its_end(g, stand, tmp_path):
    # policy_node's executor clips every target into the joint ranges before the wire;
    # the evaluator judges what the robot would get, so a target past the elbow's upper
    # end moves the robot exactly as one at that end, also for a policy whose contract
    # does not clip its targets (as a deploy.yaml's need not).
    c = dataclasses.replace(ct.imitation_contract('stand', stand.num_frames), target_clip=None)
    policy = load_policy(synthetic.save_policy(tmp_path / 'policy.onnx', c))
    elbow = g1.JOINT_NAMES.index('left_elbow_joint')
    upper = g1.JOINT_UPPER[elbow]
    at_end, past = (run_once(_ElbowTarget(policy, stand, t), g, 0, QUIET, stand)
                    for t in (upper, upper + 0.3))
    assert at_end.joint_pos[-1, elbow] > upper - 0.1   # it went there
    np.testing.assert_array_equal(past.joint_pos, at_end.joint_pos)
    np.testing.assert_array_equal(past.root_pos, at_end.root_pos)


def test_non_finite_policy_output_ends_the_run_as_a_fall(g, zeros_policy, stand):
    from bcg_ros.eval import metrics
    run = run_once(_NanAfter(zeros_policy, 10), g, 0, QUIET, stand)
    assert 'non-finite policy output' in run.diverged
    assert len(run.time) == 10 and np.all(np.isfinite(run.root_pos))
    m = metrics.run_metrics(run, stand)
    assert m['fell'] and m['fall_time'] == pytest.approx(0.2) and m['diverged']
    s = metrics.summarize([m, metrics.run_metrics(run_once(zeros_policy, g, 0, QUIET, stand),
                                                  stand)])
    assert s['falls'] == 1 and s['diverged'] == 1


def test_non_finite_state_is_a_divergence_not_a_reset(g, zeros_policy, stand):
    # A NaN velocity makes MuJoCo reset the state to qpos0 with a warning, and a NaN
    # root height never compares below the fall height: both would read as standing.
    from bcg_ros.eval import metrics
    bad = type(stand)(**{**stand.__dict__, 'joint_vel': stand.joint_vel * np.nan})
    run = run_once(zeros_policy, g, 0, QUIET, bad)
    assert run.diverged and len(run.time) == 0
    m = metrics.run_metrics(run, bad)
    assert m['fell'] and m['diverged']


def test_baselines_run_beside_the_policy(g, zeros_policy, stand, tmp_path):
    from bcg_ros.eval.rollout import Baseline
    from bcg_ros.motion import load_motion
    run = load_motion('run', control_dt=g1.CONTROL_DT)
    replay = Baseline.of(zeros_policy, 'replay')
    np.testing.assert_array_equal(replay.targets(4, run), run.joint_pos[5][zeros_policy.motor_ids])
    np.testing.assert_array_equal(Baseline.of(zeros_policy, 'stand').targets(4, run),
                                  zeros_policy.contract.default_pose)
    ev = evaluate(EvalConfig(runs=2, rollout=QUIET), motion=stand, policy=zeros_policy, g=g)
    assert set(ev.baselines) == {'stand', 'replay'}
    for name, b in ev.baselines.items():
        # On the held pose the stand and replay targets are the zeros policy's own.
        assert b['runs'] == 2 and b['falls'] == 0
        assert b['e_track_cm'] == pytest.approx(ev.summary['e_track_cm'], abs=0.5)
    md = report.markdown(ev.to_dict())
    assert '| baseline `stand` | 0/2 |' in md and '| baseline `replay` | 0/2 |' in md
    none = evaluate(EvalConfig(runs=1, rollout=QUIET, baselines=()), motion=stand,
                    policy=zeros_policy, g=g)
    assert none.baselines == {}
    with pytest.raises(ValueError, match='baselines'):
        EvalConfig(baselines=('sit',))


def test_zero_residual_policy_is_the_replay_baseline(g, tmp_path):
    # A residual contract's targets are the reference's next joint angles plus scale * a:
    # a policy that outputs zeros drives the very trajectory the replay baseline drives.
    from bcg_ros.eval.rollout import Baseline
    from bcg_ros.motion import load_motion
    run = load_motion('jump', control_dt=g1.CONTROL_DT)
    c = ct.imitation_contract(run.name, run.num_frames, residual=True)
    p = load_policy(synthetic.save_policy(tmp_path / 'residual.onnx', c))
    assert p.contract.action_residual
    cfg = RolloutConfig(duration=1.0)
    a = run_once(p, g, 3, cfg, run)
    b = run_once(Baseline.of(p, 'replay'), g, 3, cfg, run)
    np.testing.assert_allclose(a.joint_pos, b.joint_pos, atol=1e-9)
    with pytest.raises(ct.ContractError, match='reference window'):
        c.action_to_targets(np.zeros(29))
    with pytest.raises(ct.ContractError, match='action_residual'):
        ct.Contract(**{**c.__dict__, 'obs_terms': c.obs_terms[:5]})


def test_a_robot_only_model_gets_a_floor_and_the_report_says_so(tmp_path, stand, zeros_policy):
    spec = mujoco.MjSpec.from_file(str(g1_model.DEFAULT_MJCF))
    spec.delete(spec.geom('floor'))
    path = tmp_path / 'g1_robot_only.xml'
    path.write_text(spec.to_xml())
    from bcg_ros.eval.render import RenderConfig
    ev = evaluate(EvalConfig(runs=1, model=str(path), rollout=QUIET, baselines=(),
                             render=RenderConfig(filmstrip=False)),
                  motion=stand, policy=zeros_policy)
    assert ev.added_floor and ev.summary['falls'] == 0
    assert 'no ground plane: the evaluator added one' in report.markdown(ev.to_dict())
    ev = evaluate(EvalConfig(runs=1, rollout=QUIET, baselines=(),
                             render=RenderConfig(filmstrip=False)),
                  motion=stand, policy=zeros_policy)
    assert not ev.added_floor
    assert 'ground plane' not in report.markdown(ev.to_dict())


def test_base_velocity_comes_from_the_estimator_in_the_loop(g):
    """imu_sample + BaseVelocity on the official-like MJCF: the running clip replayed."""
    from bcg_ros.runtime import estimator as est
    from bcg_ros.eval.rollout import _Robot, start_state
    from bcg_ros.motion import load_motion, resample
    from bcg_ros.robot import pd
    run = resample(load_motion('run', control_dt=g1.CONTROL_DT), 1.0 / g1.CONTROL_DT)
    robot = _Robot(g)
    m = robot.model
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = start_state(g, run)
    mujoco.mj_forward(m, d)
    sensor = est.BaseVelocity()
    sensor.update(robot.imu_sample(d), d.time)
    kp, kd = np.asarray(g1.DEFAULT_KP), np.asarray(g1.DEFAULT_KD)
    n_sub = int(round(g1.CONTROL_DT / m.opt.timestep))
    err, speed = [], []
    for step in range(int(1.35 / g1.CONTROL_DT)):   # the replay falls soon after
        target = run.joint_pos[min(step + 1, run.num_frames - 1)]
        pd.set_pd(m, d, g.actuator_ids, kp, kd, target)   # the motors' PD, in MuJoCo
        for _ in range(n_sub):
            mujoco.mj_step(m, d)
            sensor.update(robot.imu_sample(d), d.time)
        truth = rotation.quat_rotate_inverse(d.qpos[3:7], d.qvel[0:3])
        err.append(sensor.body_velocity() - truth)
        speed.append(np.linalg.norm(truth[:2]))
    assert max(speed) > 0.5, 'the replayed clip never moved the robot'
    rmse = np.sqrt(np.mean(np.sum(np.square(err)[10:], axis=-1)))
    assert rmse < 0.1, rmse


def test_a_policy_observing_its_velocity_runs_in_mujoco(g, tmp_path):
    # A zero residual policy with the estimator in the loop drives the replay's trajectory
    # (the physics stepped one step at a time for the estimator is the same physics).
    from bcg_ros.eval.rollout import Baseline
    from bcg_ros.motion import load_motion
    run = load_motion('run', control_dt=g1.CONTROL_DT)
    c = ct.imitation_contract(run.name, run.num_frames, residual=True, ref_velocity=True,
                              base_velocity=True)
    assert c.uses_base_velocity and c.obs_terms[-1].name == 'base_lin_vel'
    p = load_policy(synthetic.save_policy(tmp_path / 'vel.onnx', c))
    cfg = RolloutConfig(duration=0.6)
    a = run_once(p, g, 3, cfg, run)
    b = run_once(Baseline.of(p, 'replay'), g, 3, cfg, run)
    np.testing.assert_allclose(a.joint_pos, b.joint_pos, atol=1e-9)
    with pytest.raises(ct.ContractError, match='base_lin_vel'):
        ct.observation_frame(c, ct.RobotObs(quat=np.array([1.0, 0, 0, 0]), gyro=np.zeros(3),
                                            joint_pos=np.zeros(29), joint_vel=np.zeros(29),
                                            last_action=np.zeros(29)),
                             ct.reference_window(run, np.arange(29), 0))


def test_the_estimator_follows_the_shipped_run_policy(g, monkeypatch):
    """
    The velocity the running policy observes stays near the truth through its strides.

    A swing leg's torques can read as a ground force, and a heel lifts while its foot
    rolls onto the toes: a stance test on force alone let those feet drag the estimate
    by metres per second at every stride.
    """
    from bcg_ros import policies
    from bcg_ros.runtime import estimator as est
    from bcg_ros.motion import load_motion
    reads, truth = [], []

    class Recording(est.BaseVelocity):
        def body_velocity(self):
            v = super().body_velocity()
            reads.append(v)
            return v

    monkeypatch.setattr(est, 'BaseVelocity', Recording)
    p = load_policy(policies.path('run'))
    run = load_motion('run', control_dt=p.contract.control_dt)
    r = run_once(p, g, 0, RolloutConfig(duration=3.0), run,
                 on_step=lambda v: truth.append(rotation.quat_rotate_inverse(v.qpos[3:7],
                                                                             v.data.qvel[0:3])))
    # The estimate read before step k+1 is of the state recorded after step k.
    err = np.asarray(reads[1:len(truth) + 1]) - np.asarray(truth[:len(reads) - 1])
    # The run records that error with the row of the action it chose.
    np.testing.assert_allclose(r.lin_vel_error[1:len(err) + 1], err, atol=1e-9)
    assert max(np.linalg.norm(np.asarray(truth)[:, :2], axis=-1)) > 1.2, 'it never ran'
    horizontal = np.sqrt(np.mean(np.sum(err[:, :2] ** 2, axis=-1)))
    assert horizontal < 0.15, horizontal
    assert np.sqrt(np.mean(err[:, 2] ** 2)) < 0.2


def test_sensor_noise_reaches_the_policy_and_its_estimator_at_the_robots_levels(
        g, tmp_path, monkeypatch):
    # A zero residual policy ignores what it reads, so with and without noise the runs are
    # the same physics: the estimator's samples then differ by the noise alone.
    from bcg_ros.runtime import estimator as est
    from bcg_ros.motion import load_motion
    from bcg_ros.robot.sensors import SensorNoise
    run = load_motion('run', control_dt=g1.CONTROL_DT)
    c = ct.imitation_contract(run.name, run.num_frames, residual=True, ref_velocity=True,
                              base_velocity=True)
    p = load_policy(synthetic.save_policy(tmp_path / 'vel.onnx', c))
    seen = []

    class Recording(est.BaseVelocity):
        def update(self, sample, time):
            seen[-1].append(sample)
            super().update(sample, time)

    monkeypatch.setattr(est, 'BaseVelocity', Recording)
    from bcg_ros.eval import rollout
    reads, targets = [], rollout.Controller.targets

    def reading(self, step, quat, gyro, joint_pos, joint_vel, lin_vel=None):
        reads[-1].append(joint_pos.copy())
        return targets(self, step, quat, gyro, joint_pos, joint_vel, lin_vel)

    monkeypatch.setattr(rollout.Controller, 'targets', reading)
    runs = []
    for k in (0.0, 2.0):
        seen.append([])
        reads.append([])
        runs.append(run_once(p, g, 3, RolloutConfig(duration=0.4, sensor_noise=k), run))
    np.testing.assert_allclose(runs[0].joint_pos, runs[1].joint_pos, atol=1e-9)
    exact, noisy = seen
    assert len(exact) == len(noisy) > 50
    robot = SensorNoise().scaled(2.0)
    for name, std in (('q', robot.joint_pos), ('dq', robot.joint_vel), ('gyro', robot.gyro),
                      ('acc', robot.acc)):
        diff = np.array([getattr(b, name) - getattr(a, name) for a, b in zip(exact, noisy)])
        assert 0.8 * std < diff.std() < 1.2 * std, (name, diff.std(), std)
    policy_diff = np.array(reads[1]) - np.array(reads[0])   # what the policy read
    assert 0.8 * robot.joint_pos < policy_diff.std() < 1.2 * robot.joint_pos
    np.testing.assert_array_equal(np.array([s.quat for s in exact]),
                                  np.array([s.quat for s in noisy]))
    with pytest.raises(ValueError, match='sensor_noise'):
        RolloutConfig(sensor_noise=-1.0)
    with pytest.raises(ValueError, match='SensorNoise.gyro'):
        SensorNoise(gyro=float('nan'))


def test_hold_runs_on_past_the_clip_with_its_last_frame(g, stand, zeros_policy):
    # policy_node holds the reference at the clip's last frame once it is over; --hold
    # judges that too: 0.2 s (10 policy steps) past the end, against the last frame.
    import dataclasses
    from bcg_ros.eval import metrics
    run = run_once(zeros_policy, g, 0, dataclasses.replace(QUIET, hold=0.2), stand)
    n = stand.num_frames - 1
    assert len(run.time) == n + 10
    assert run.time[-1] == pytest.approx((n + 10) * g1.CONTROL_DT)
    assert run.frame[n - 1:].tolist() == [n] * 11
    assert np.isfinite(metrics.run_metrics(run, stand)['e_track_cm'])
    with pytest.raises(ValueError, match='hold'):
        RolloutConfig(hold=-1.0)
    from bcg_ros.eval.render import RenderConfig
    ev = evaluate(EvalConfig(runs=1, rollout=dataclasses.replace(QUIET, hold=0.2),
                             baselines=(), render=RenderConfig(filmstrip=False)),
                  motion=stand, policy=zeros_policy)
    assert ev.per_run[0]['duration'] == pytest.approx((n + 10) * g1.CONTROL_DT)
    assert "0.2 s past the clip's end" in report.markdown(ev.to_dict())


def test_the_estimators_errors_are_written_for_training_to_replay(tmp_path):
    from bcg_ros import policies, velocity_errors
    out = tmp_path / 'errors.npz'
    rc = cli.main([str(policies.path('run')), '--motion', 'run', '--runs', '3', '--seed', '1',
                   '--no-filmstrip', '--no-plots', '--baselines', '--quiet',
                   '--out', str(tmp_path / 'eval'), '--velocity-errors', str(out)])
    assert rc == 0
    result = json.loads((tmp_path / 'eval' / 'result.json').read_text())
    stayed = sum(not r['fell'] for r in result['runs'])
    errors = velocity_errors.load(out, 281, 50.0)
    assert stayed >= 1 and errors.shape == (stayed, 281, 3)
    rms = np.sqrt(np.mean(errors ** 2))
    assert 0.005 < rms < 0.15, rms   # the estimator's, neither zero nor metres per second
    # A policy that observes no velocity has no such error to write.
    rc = cli.main([str(policies.path('jump')), '--motion', 'jump', '--runs', '1',
                   '--duration', '0.2', '--no-filmstrip', '--no-plots', '--baselines',
                   '--quiet', '--out', str(tmp_path / 'j'), '--velocity-errors',
                   str(tmp_path / 'j.npz')])
    assert rc == 2 and not (tmp_path / 'j.npz').exists()
