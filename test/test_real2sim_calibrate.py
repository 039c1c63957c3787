"""
Calibration: logs cut into shooting windows, parameters on the simulator, the fit.

One set of quick logs (1 s each: standing, a drop, a joint sweep in the band) and
one G1 simulator at the LowState period, shared by the module; the window error
compiles once (about a minute on a CPU).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

from bcg_ros.real2sim import calibrate as cal
from bcg_ros.real2sim import cli, logs
from bcg_ros.real2sim import groundtruth as gt
from bcg_ros.robot import g1, physics

CFG = cal.CalibrationConfig(window=0.1, stride=0.05)


@pytest.fixture(scope='module')
def quick_logs(tmp_path_factory):
    out = tmp_path_factory.mktemp('calib') / 'logs'
    assert cli.main(['make-logs', '--seed', '3', '--out', str(out), '--quick',
                     '--scenarios', 'stand', 'drop', 'sweep']) == 0
    return out


@pytest.fixture(scope='module')
def problem():
    return cal.make_problem(0.002)


@pytest.fixture(scope='module')
def windows(quick_logs, problem):
    contacts = cal.ContactCheck(problem)
    return {name: cal.make_windows(logs.read_log(quick_logs / name), CFG, problem.sim,
                                   contacts) for name in ('stand', 'drop', 'sweep')}


def test_windows_start_at_the_logged_state_and_know_a_gantry(quick_logs, windows, problem):
    stand, drop, sweep = windows['stand'], windows['drop'], windows['sweep']
    assert not stand.hanging.any() and sweep.hanging.all()
    # The drop hangs for its first 0.2 s, then falls and lands: windows of both kinds,
    # none across the release.
    assert drop.hanging[0] == 1 and drop.hanging[-1] == 0
    log = logs.read_log(quick_logs / 'stand')
    k = int(round(float(stand.source[0].split('@')[1][:-1]) / 0.002))
    o = int(np.flatnonzero(np.isclose(log.odom.t, log.lowstate.t[k]))[0])
    q0 = stand.qpos0[0]
    np.testing.assert_array_equal(q0[np.asarray(problem.sim.act_qpos)], log.lowstate.q[k])
    np.testing.assert_allclose(q0[0:3], log.odom.pos[o], atol=1e-12)
    np.testing.assert_allclose(stand.q[0], log.lowstate.q[k + 1:k + 1 + stand.q.shape[1]])
    # Commands from max_delay steps before the start: the one in force at LowState k - D.
    np.testing.assert_allclose(stand.kp[0, 0], log.lowcmd.kp[k - CFG.max_delay])


def test_a_command_feed_forward_folds_into_the_target_and_torque_alone_is_refused(quick_logs):
    log = logs.read_log(quick_logs / 'stand')
    c = log.lowcmd
    dq, tau = np.full_like(c.dq, 0.5), np.full_like(c.tau, 1.5)
    folded = dataclasses.replace(log, lowcmd=dataclasses.replace(c, dq=dq, tau=tau))
    target, kp, kd = cal._command_rows(folded)
    k = 100   # LowState k is answered by command k (same stamp)
    np.testing.assert_allclose(kp[k] * (target[k] - c.q[k]), c.kd[k] * 0.5 + 1.5, rtol=1e-9)
    kp_zero = c.kp.copy()
    kp_zero[50:, 3] = 0.0
    torque_only = dataclasses.replace(folded, lowcmd=dataclasses.replace(c, tau=tau, kp=kp_zero),
                                      source='bag_x')
    with pytest.raises(logs.LogError, match=f'bag_x.*{g1.JOINT_NAMES[3]}'):
        cal._command_rows(torque_only)


def test_parameters_round_trip_through_theta(quick_logs, problem):
    truth = physics.load(quick_logs / gt.HIDDEN / 'truth.yaml')
    theta = cal.from_physics(problem, truth)
    back = cal.to_physics(problem, theta, physics.latency_steps(truth.latency, problem.dt))
    # The ground's softness is MuJoCo's own (solref, solimp) and is not fitted.
    assert back == dataclasses.replace(truth, ground_solref=None, ground_solimp=None,
                                       latency=back.latency)
    assert abs(back.latency - truth.latency) <= problem.dt / 2 + 1e-9


def test_the_fit_recovers_a_robot_the_simulator_itself_made(windows, problem):
    # Logs without model mismatch: the windows' own commands and starts, their
    # outcomes simulated with motors 10 % weak and arms of 1.5x armature. The fit
    # starts from the nominal robot and must find both.
    truth = cal.zero_theta()
    truth['strength'][:] = np.log(0.9)
    arms = [g1.JOINT_NAMES.index(n) for n in g1.JOINT_NAMES if 'shoulder' in n or 'elbow' in n]
    truth['armature'][arms] = np.log(1.5)
    wins = cal.concat([windows['stand'], windows['sweep']])
    delay = 2
    sim_out = jax.jit(jax.vmap(lambda w: cal.window_rollout(
        problem, CFG, jax.tree.map(jnp.asarray, truth), w, delay)))(
            cal._arrays(wins, problem.sim.dtype))
    q, pos, quat = (np.asarray(x, np.float64) for x in sim_out)
    made = dataclasses.replace(wins, q=q, base_pos=pos, base_quat=quat)
    cfg = dataclasses.replace(CFG, iterations=15, batch=18, q_sigma=0.002)
    result = cal.fit(problem, made, cfg, log=lambda line: None)
    assert result.delay == delay
    assert result.error_after['q_rad'] < 0.4 * result.error_before['q_rad'], (
        result.error_before, result.error_after)
    # A second of each log leaves much to the prior: the estimates move from nominal
    # toward the truth, not all the way.
    strength = np.log([result.params.motor_strength[n] for n in g1.JOINT_NAMES])
    assert np.log(0.9) - 0.02 < np.mean(strength) < -0.005, strength
    armature = np.log([result.params.joint_armature[g1.JOINT_NAMES[i]] for i in arms])
    assert 0.0 < np.mean(armature) < np.log(1.5) + 0.1, armature


def test_bcg_calibrate_writes_a_physics_file_and_its_uncertainty(quick_logs, tmp_path, capsys):
    out = tmp_path / 'params.yaml'
    assert cli.calibrate_main([str(quick_logs / 'stand'), str(quick_logs / 'drop'),
                               '--out', str(out), '--iterations', '3', '--batch', '16']) == 0
    printed = capsys.readouterr().out
    params = physics.load(out)       # a PhysicsParams file g1_sim_node and bcg-eval read
    assert set(params.joint_damping) == set(g1.JOINT_NAMES)
    assert 0.0 <= params.latency <= CFG.max_delay * 0.002
    std = yaml.safe_load(cal.std_path(out).read_text())
    assert std['rms_after']['q_rad'] < std['rms_before']['q_rad'], std
    prior = std['prior_std']['joint_damping']
    # Every standard deviation is at most the prior's (the logs can only add knowledge),
    # and identified parameters are those well under it.
    sds = np.asarray(list(std['std']['joint_damping'].values()))
    assert np.all(sds <= prior * 1.0001)
    assert all(std['std']['joint_damping'][n] < cal.IDENTIFIED * prior
               for n in std['identified']['joint_damping'])
    assert 'identified' in printed and str(out) in printed


def test_bcg_calibrate_names_a_log_without_odometry(tmp_path, quick_logs, capsys):
    log = logs.read_log(quick_logs / 'stand')
    bare = tmp_path / 'bare'
    logs.write_log(dataclasses.replace(log, odom=None), bare)
    assert cli.calibrate_main([str(bare), '--out', str(tmp_path / 'p.yaml'), '--quick']) == 2
    assert 'bare' in capsys.readouterr().err


def test_a_physics_file_reaches_the_training_simulator_as_mujoco_reads_it(tmp_path):
    from bcg_ros.core import bcg as bcg_mod
    from bcg_ros.core.g1_env import G1Env, G1EnvConfig
    from bcg_ros.robot import model as model_mod

    params = physics.draw(5)
    path = physics.save(params, tmp_path / 'robot.yaml')
    env = G1Env(G1EnvConfig(num_envs=2, bcg=bcg_mod.BCGConfig(enabled=False),
                            physics_params=str(path)))
    nominal = G1Env(G1EnvConfig(num_envs=2, bcg=bcg_mod.BCGConfig(enabled=False)))
    mj = model_mod.load(None).model
    physics.apply(mj, params)
    m = env.sim.mjx_model
    for name in ('body_mass', 'body_inertia', 'body_ipos', 'dof_armature'):
        np.testing.assert_allclose(np.asarray(getattr(m, name)), getattr(mj, name),
                                   rtol=2e-6, atol=1e-7, err_msg=name)
    for name in ('dof_damping', 'dof_frictionloss'):
        np.testing.assert_allclose(np.asarray(getattr(env.sim, name)), getattr(mj, name),
                                   rtol=2e-6, atol=1e-7, err_msg=name)
    strength = np.asarray([params.motor_strength[n] for n in g1.JOINT_NAMES])
    np.testing.assert_allclose(np.asarray(env.sim.kp), np.asarray(nominal.sim.kp) * strength,
                               rtol=1e-6)
    # The ground's friction as a factor on the simulator's own, relative to the file's.
    floor = model_mod.load(None).model
    file_friction = floor.geom_friction[physics.ground_geoms(floor)[0], 0]
    np.testing.assert_allclose(np.asarray(env.sim.contact.friction),
                               np.asarray(nominal.sim.contact.friction)
                               * params.ground_friction / file_friction, rtol=1e-6)


def test_real2sim_bench_prints_recovery_held_out_errors_and_the_ratio(tmp_path, capsys):
    from bcg_ros.bench import cli as bench

    assert bench.main(['real2sim', '--quick', '--seed', '2', '--out', str(tmp_path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith('real2sim_error_ratio: ')
    assert 0.0 < float(out[-1].split()[-1]) < 10.0
    table = [line for line in out if line.startswith('| joint_damping |')]
    assert len(table) == 1 and table[0].count('|') == 6
    held = [line for line in out if line.startswith('| calibrated |')]
    assert len(held) == 1      # --quick: from the four logs only
    assert physics.load(tmp_path / 'params_4.yaml').joint_damping


def test_contact_check_tells_feet_on_the_floor_from_anything_else(problem, windows):
    contacts = cal.ContactCheck(problem)
    act = np.asarray(problem.sim.act_qpos)
    stand = windows['stand'].qpos0[0]       # a logged standing pose
    arm_in = stand.copy()
    arm_in[act[g1.JOINT_NAMES.index('left_shoulder_roll_joint')]] = -0.8   # into the torso
    sunk = stand.copy()
    sunk[2] -= 0.4                          # legs through the floor, as after a fall
    rows = np.stack([stand, arm_in, sunk])
    np.testing.assert_array_equal(contacts.feet(rows), [True, True, True])
    np.testing.assert_array_equal(contacts.elsewhere(rows), [False, True, True])
