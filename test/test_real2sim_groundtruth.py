"""
The hidden-parameter robot and its logs.

Physical parameters drawn, applied and run; the generator's bags read back and replayed.

The model checks compare arrays with the values the parameters name; the latency checks
count physics steps; the replay checks run the logged commands through g1_sim_node's loop.
"""

import copy
import dataclasses

import mujoco
import numpy as np
import pytest

from bcg_ros.real2sim import cli, groundtruth as gt, logs
from bcg_ros.robot import g1, lowlevel, model as g1_model, physics
from bcg_ros.robot.g1_sim import G1Sim, G1SimConfig

RANGES = physics.PhysicsRanges()


@pytest.fixture(scope='module')
def whole_body():
    """The project's model as g1_sim_node loads it (read-only)."""
    return g1_model.load(whole_body=True)


def _model_arrays(m: mujoco.MjModel) -> dict:
    out = {}
    for name in dir(m):
        value = getattr(m, name, None) if not name.startswith('_') else None
        if isinstance(value, np.ndarray):
            out[name] = value.tobytes()
    return out


# --- the parameters ---------------------------------------------------------

def test_a_seed_draws_the_same_robot_within_the_stated_ranges():
    p = physics.draw(7)
    assert p == physics.draw(7) and p != physics.draw(8)
    for name, (lo, hi) in zip(physics.JOINT_FIELDS,
                              (RANGES.frictionloss, RANGES.damping, RANGES.armature,
                               RANGES.strength)):
        values = np.array([getattr(p, name)[j] for j in g1.JOINT_NAMES])
        assert set(getattr(p, name)) == set(g1.JOINT_NAMES), name
        assert np.all((values >= lo) & (values <= hi)), name
        assert np.ptp(values) > 0, f'{name}: every joint drawn alike'
    masses = np.array([p.body_mass[b] for b in g1.TRACK_BODIES])
    assert np.all((masses >= RANGES.mass[0]) & (masses <= RANGES.mass[1]))
    com = np.array([p.body_com[b] for b in g1.TRACK_BODIES])
    assert np.all(np.abs(com) <= RANGES.com)
    assert RANGES.latency[0] <= p.latency <= RANGES.latency[1]
    assert p.latency * 1000 == pytest.approx(round(p.latency * 1000))   # whole milliseconds
    assert RANGES.ground_friction[0] <= p.ground_friction <= RANGES.ground_friction[1]
    assert RANGES.ground_timeconst[0] <= p.ground_solref[0] <= RANGES.ground_timeconst[1]
    assert RANGES.ground_dampratio[0] <= p.ground_solref[1] <= RANGES.ground_dampratio[1]
    dmin, dmax, width = p.ground_solimp[:3]
    assert RANGES.ground_dmin[0] <= dmin <= RANGES.ground_dmin[1]
    assert RANGES.ground_dmax[0] <= dmax <= RANGES.ground_dmax[1]
    assert RANGES.ground_width[0] <= width <= RANGES.ground_width[1]


def test_a_parameter_file_round_trips_and_names_its_errors(tmp_path):
    p = physics.draw(3)
    path = physics.save(p, tmp_path / 'truth.yaml', 'a header line')
    assert path.read_text().startswith('# a header line\n')
    assert physics.load(path) == p
    assert physics.resolve(str(path)) == p and physics.resolve('seed:3') == p
    assert physics.resolve('').is_nominal
    (tmp_path / 'bad.yaml').write_text('joint_damping: {left_knee_joint: 1.2}\nmass: 2\n')
    with pytest.raises(physics.PhysicsError, match=r'bad\.yaml: unknown fields \[.mass.\]'):
        physics.load(tmp_path / 'bad.yaml')
    (tmp_path / 'neg.yaml').write_text('joint_damping: {left_knee_joint: -1.0}\n')
    with pytest.raises(physics.PhysicsError, match=r'neg\.yaml.*joint_damping\[left_knee'):
        physics.load(tmp_path / 'neg.yaml')
    with pytest.raises(physics.PhysicsError, match='seed:<integer>'):
        physics.resolve('seed:x')
    with pytest.raises(physics.PhysicsError, match="joint 'elbow' is not in the model"):
        physics.apply(copy.deepcopy(g1_model.load().model),
                      physics.PhysicsParams(joint_damping={'elbow': 1.1}), 'here')


def test_applied_parameters_change_the_model_exactly_as_specified(whole_body):
    m0 = whole_body.model
    p = physics.draw(11)
    g = physics.perturb(whole_body, p)
    m = g.model
    assert g.physics == p and m0 is not g.model
    for j in g1.JOINT_NAMES:
        dof = m.jnt_dofadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, j)]
        assert m.dof_frictionloss[dof] == m0.dof_frictionloss[dof] * p.joint_frictionloss[j]
        assert m.dof_damping[dof] == m0.dof_damping[dof] * p.joint_damping[j]
        assert m.dof_armature[dof] == m0.dof_armature[dof] * p.joint_armature[j]
    strength = m.actuator_gainprm[g.actuator_ids, 0]
    np.testing.assert_array_equal(strength, [p.motor_strength[j] for j in g1.JOINT_NAMES])
    for b in g1.TRACK_BODIES:
        i = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, b)
        assert m.body_mass[i] == m0.body_mass[i] * p.body_mass[b]
        np.testing.assert_array_equal(m.body_inertia[i], m0.body_inertia[i] * p.body_mass[b])
        np.testing.assert_array_equal(m.body_ipos[i], m0.body_ipos[i] + p.body_com[b])
    # MuJoCo's compile-time constants follow: the pelvis carries the whole robot.
    assert m.body_subtreemass[g.root_body] == pytest.approx(
        sum(m0.body_mass[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, b)] * p.body_mass[b]
            for b in g1.TRACK_BODIES))
    floor = physics.ground_geoms(m)
    assert floor.size == 1
    assert m.geom_friction[floor[0], 0] == p.ground_friction
    np.testing.assert_array_equal(m.geom_solref[floor[0]], p.ground_solref)
    np.testing.assert_array_equal(m.geom_solimp[floor[0]], p.ground_solimp)
    # Every ground contact takes the ground's values, not a mix with the foot's.
    d = mujoco.MjData(m)
    d.qpos[:] = g.standing_qpos()
    mujoco.mj_forward(m, d)
    ground = [c for c in d.contact[:d.ncon] if floor[0] in (c.geom1, c.geom2)]
    assert ground
    for c in ground:
        assert c.friction[0] == p.ground_friction
        np.testing.assert_allclose(c.solref, p.ground_solref)
        np.testing.assert_allclose(c.solimp, p.ground_solimp)
    # The loaded model is left as it was.
    assert _model_arrays(m0) == _model_arrays(g1_model.load(whole_body=True).model)


def test_nominal_parameters_leave_the_model_bit_for_bit(whole_body):
    m = copy.deepcopy(whole_body.model)
    physics.apply(m, physics.PhysicsParams())
    assert _model_arrays(m) == _model_arrays(whole_body.model)
    # Factors of one and zero offsets, spelled out, change nothing either.
    ones = physics.PhysicsParams(
        **{f: {j: 1.0 for j in g1.JOINT_NAMES} for f in physics.JOINT_FIELDS},
        body_mass={b: 1.0 for b in g1.TRACK_BODIES},
        body_com={b: (0.0, 0.0, 0.0) for b in g1.TRACK_BODIES})
    physics.apply(m, ones)
    assert _model_arrays(m) == _model_arrays(whole_body.model)


# --- the motor layer: strength and latency ----------------------------------

def _stand_command(offset: float = 0.0) -> lowlevel.MotorCommand:
    return lowlevel.pd_command(np.asarray(g1.DEFAULT_POSE) + offset, np.asarray(g1.DEFAULT_KP),
                               np.asarray(g1.DEFAULT_KD), g1.MODE_MACHINE_29DOF)


def test_latency_delays_the_command_by_the_stated_time(tmp_path):
    latency = 0.007
    path = physics.save(physics.PhysicsParams(latency=latency), tmp_path / 'p.yaml')
    sim = G1Sim(G1SimConfig(physics_params=str(path)))
    assert sim.delay.steps == 7
    sim.command = _stand_command()   # arrives before physics step 0
    forces, acting = [], []
    for _ in range(10):
        sim.step()
        forces.append(sim.tau.copy())
        acting.append(sim.applied is not None)
    # Zero torque while the command travels; the PD acts from the step at 7 ms on.
    assert acting == [False] * 7 + [True] * 3
    assert np.all(np.array(forces[:7]) == 0.0)
    assert np.all(np.abs(forces[7]) > 0.0)
    # A newer command, too, is applied 7 steps after it arrived; the older one until then.
    first, sim.command = sim.command, _stand_command(0.1)
    for _ in range(7):
        sim.step()
        assert sim.applied is first
    sim.step()
    assert sim.applied is sim.command


def test_motor_strength_scales_the_torque_and_tau_est_stays_the_command():
    params = physics.PhysicsParams(motor_strength={j: 0.9 for j in g1.JOINT_NAMES})
    robot = physics.perturb(g1_model.load(whole_body=True), params)
    sim, nominal = G1Sim(G1SimConfig(), robot), G1Sim(G1SimConfig())
    for s in (sim, nominal):
        s.command = _stand_command(0.05)
        s.step()
    acts = sim.robot.actuator_ids
    np.testing.assert_allclose(sim.data.actuator_force[acts],
                               0.9 * nominal.data.actuator_force[acts], rtol=1e-12)
    np.testing.assert_allclose(sim.tau, nominal.tau, rtol=1e-12)


def test_the_evaluator_runs_the_same_latency(g, tmp_path):
    # The 'replay' baseline feeds a ramp of joint targets; with a latency longer than a
    # policy period (23 physics steps of 1 ms, 20 per period), the actuators hold the
    # targets of the period before at the end of each one.
    from bcg_ros.eval import synthetic
    from bcg_ros.eval.rollout import Baseline, run_once

    held = synthetic.held_pose_motion(g, seconds=0.3)
    ramp = dataclasses.replace(held, joint_pos=held.joint_pos + 0.01 * np.arange(
        held.num_frames)[:, None])
    base = Baseline.of(synthetic.zeros_policy(tmp_path, ramp), 'replay')
    kp = np.asarray(base.contract.kp)
    config = synthetic.quiet_rollout(sim_dt=0.001)

    def applied_targets(model):
        seen = []
        run_once(base, model, 0, config, ramp,
                 on_step=lambda v: seen.append(v.data.ctrl[model.actuator_ids][base.motor_ids]
                                               / kp))
        return np.array(seen)

    now = applied_targets(g)
    late = applied_targets(physics.perturb(g, physics.PhysicsParams(latency=0.023)))
    wanted = ramp.joint_pos[1:len(now) + 1][:, base.motor_ids]
    np.testing.assert_allclose(now, wanted, atol=1e-9)
    np.testing.assert_allclose(late[1:], wanted[:-1], atol=1e-9)
    np.testing.assert_allclose(late[0], base.contract.default_pose, atol=1e-9)


# --- g1_sim_node --------------------------------------------------------------

def test_g1_sim_node_builds_the_perturbed_robot(tmp_path, whole_body):
    p = physics.draw(5)
    path = physics.save(p, tmp_path / 'truth.yaml')
    for spec in ('seed:5', str(path)):
        sim = G1Sim(G1SimConfig(physics_params=spec))
        want = physics.perturb(whole_body, p).model
        assert sim.physics == p and sim.delay.steps == round(p.latency / 0.001)
        for name in ('body_mass', 'body_ipos', 'dof_frictionloss', 'dof_damping',
                     'dof_armature', 'geom_friction', 'geom_solref', 'geom_solimp'):
            np.testing.assert_array_equal(getattr(sim.model, name), getattr(want, name), name)
    with pytest.raises(physics.PhysicsError, match='nope.yaml'):
        G1Sim(G1SimConfig(physics_params=str(tmp_path / 'nope.yaml')))


@pytest.mark.ros
def test_g1_sim_node_reads_the_physics_params_parameter(tmp_path):
    rclpy = pytest.importorskip('rclpy')
    try:
        from bcg_ros.nodes.g1_sim_node import G1SimNode
    except ImportError as exc:  # unitree_hg not built
        pytest.skip(f'g1_sim_node is not importable ({exc!r})')
    from rclpy.parameter import Parameter

    path = physics.save(physics.draw(2), tmp_path / 'truth.yaml')
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        node = G1SimNode(context=context, parameter_overrides=[
            Parameter('physics_params', value=str(path)),
            Parameter('real_time_factor', value=1.0)])
        try:
            assert node.sim.physics == physics.draw(2)
            assert node.get_parameter('physics_params').value == str(path)
        finally:
            node.destroy_node()
    finally:
        rclpy.try_shutdown(context=context)


# --- the generator ------------------------------------------------------------

@pytest.fixture(scope='module')
def quick_logs(tmp_path_factory):
    """``bcg-real2sim make-logs --quick`` (1 s a log, sensor noise on)."""
    out = tmp_path_factory.mktemp('real') / 'logs'
    assert cli.main(['make-logs', '--seed', '4', '--out', str(out), '--quick']) == 0
    return out


def test_quick_logs_read_back_as_robot_logs(quick_logs):
    hidden = sorted(p.name for p in (quick_logs / gt.HIDDEN).iterdir())
    assert hidden == ['scenarios.yaml', 'truth.yaml']
    assert physics.load(quick_logs / gt.HIDDEN / 'truth.yaml') == physics.draw(4)
    scenarios = gt.load_scenarios(quick_logs / gt.HIDDEN / 'scenarios.yaml')
    assert [s.kind for s in scenarios] == list(gt.SCENARIOS)
    for name in gt.SCENARIOS:
        log = logs.read_log(quick_logs / name, require_odom=True)
        s, c, o = log.lowstate, log.lowcmd, log.odom
        assert len(s.t) == 501 and len(c.t) == 500 and len(o.t) == 101, name
        np.testing.assert_allclose(np.diff(s.t), 0.002, atol=1e-9)
        np.testing.assert_array_equal(s.tick, np.arange(501) * 2)
        np.testing.assert_allclose(o.t, s.t[::5], atol=1e-9)
        assert np.all(c.crc_ok) and np.all(c.mode == 1) and np.all(s.mode_machine == 5)
        assert np.all(np.isfinite(s.q)) and np.all(np.isfinite(s.acc)), name
        assert o.pos[-1, 2] > 0.6, f'{name}: the robot fell'
    # The pushes push, the drop drops, the sweep sweeps.
    drop = logs.read_log(quick_logs / 'drop').odom.pos[:, 2]
    assert drop[0] - drop.min() > 0.1
    sweep = logs.read_log(quick_logs / 'sweep').lowcmd.q
    assert np.ptp(sweep, axis=0).min() > 0.02
    assert scenarios[1].pushes and scenarios[2].policy == 'jump'
    # The bags hold messages only: no parameter value in their metadata.
    for name in gt.SCENARIOS:
        meta = (quick_logs / name / 'metadata.yaml').read_text()
        assert 'physics' not in meta and 'latency' not in meta and 'truth' not in meta


def test_logged_commands_replay_the_logged_states_with_the_truth_only(quick_logs):
    truth = physics.load(quick_logs / gt.HIDDEN / 'truth.yaml')
    noise = gt.SensorNoise().joint_pos
    for scenario in gt.load_scenarios(quick_logs / gt.HIDDEN / 'scenarios.yaml'):
        log = logs.read_log(quick_logs / scenario.name)

        def rms(params):
            q = gt.replay(log, params, scenario).lowstate.q
            return float(np.sqrt(np.mean((q - log.lowstate.q) ** 2)))

        with_truth, nominal = rms(truth), rms(physics.PhysicsParams())
        # With the truth only the sensor noise is left; the nominal robot is further off.
        assert with_truth < 1.2 * noise, scenario.name
        assert nominal > 4 * with_truth, scenario.name


def test_exact_sensors_replay_bit_for_float32_bit(whole_body):
    cfg = dataclasses.replace(gt.GeneratorConfig(seed=9, duration=0.4), noise=None)
    params = physics.draw(9)
    robot = physics.perturb(whole_body, params)
    rng = np.random.default_rng(0)
    for kind in ('policy', 'sweep'):
        scenario, controller = gt.make_scenario(kind, cfg, robot, rng)
        log = gt.simulate(G1Sim(gt.sim_config(None), robot), scenario, controller)
        back = gt.replay(log, params, scenario)
        np.testing.assert_array_equal(back.lowstate.q, log.lowstate.q)
        np.testing.assert_array_equal(back.odom.pos, log.odom.pos)


def test_make_logs_refuses_a_folder_with_logs(quick_logs, capsys):
    assert cli.main(['make-logs', '--out', str(quick_logs), '--quick']) == 2
    assert 'exist already' in capsys.readouterr().err
