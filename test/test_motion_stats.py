"""motion_stats, the built-in clips' dynamic content and pinned files, bcg-motion info."""

import pathlib

import mujoco
import numpy as np
import pytest

from bcg_ros import motion as M
from bcg_ros import motion_cli
from bcg_ros import rotation
from bcg_ros.robot import g1
from bcg_ros.robot import model as g1_model

REPO = pathlib.Path(__file__).resolve().parents[1]

CLIP_SHA256 = {
    'run': '0a5a4f2b32b3960f36d02fb8ac99eba5451a9923f851cb730766b14051fbe315',
    'jump': 'fdc0e7f8d02ef4161af54b9928923d4b085c7231b67dc26dc5604770f107701e',
    'fight': 'afbac95dfd3d4ecaac9f6082d4de344b422515b6e689594a12bc4809685e48de',
    'dance': '99883dcead21b268a2f344135d5fde56c551ec36615c8a54b138922a60e2f939',
}
"""Content digests (motion_cli.content_digest) of the committed clips.

After a deliberate change: ``PYTHONPATH=. python scripts/make_motions.py``, then
``bcg-motion info`` (last row) and the table in bcg_ros/motions/README.md.
"""

STAND_STILL_MIN_CM = 15.0
"""A dynamic clip is at least this far (key-point E_track) from holding frame 0."""
JOINT_ACC_MAX = 450.0
"""Smoothness: no joint changes speed faster than this [rad/s^2] between frames."""
BALANCED_SHARE_MAX = 0.02
"""run and fight (balanced by make_motions): stance frames with the CoP off the feet."""


@pytest.fixture(scope='module')
def robot():
    """Return the project's G1 model, compiled once."""
    return g1_model.load()


@pytest.fixture(scope='module')
def clips(robot):
    """Return the built-in clips at the control rate and their motion_stats."""
    out = {}
    for name in M.BUILTIN:
        motion = M.load_motion(name, robot=robot)
        out[name] = (motion, M.motion_stats(motion, robot))
    return out


def _held(motion, frames, robot):
    """Return frame 0 of ``motion`` held for ``frames`` frames."""
    root_pos, root_quat, joint_pos = (np.repeat(a[:1], frames, axis=0) for a in (
        motion.root_pos, motion.root_quat, motion.joint_pos))
    return M.from_trajectory('held', motion.fps, root_pos, root_quat, joint_pos, robot)


# motion_stats on motions whose figures are known.

def test_stats_of_standing_still_are_zero(clips, robot):
    stats = M.motion_stats(_held(clips['jump'][0], 60, robot), robot)
    assert stats['duration_s'] == pytest.approx(59 / 50)
    for key in ('root_travel_m', 'net_displacement_m', 'max_root_rise_m', 'flight_phases',
                'longest_flight_s', 'shortest_flight_s', 'total_flight_s', 'touchdowns',
                'yaw_accumulated_deg', 'yaw_net_deg', 'peak_joint_speed', 'peak_joint_acc',
                'stand_still_cm'):
        assert stats[key] == pytest.approx(0.0, abs=1e-9), key
    assert stats['max_foot_height_m'] == pytest.approx(0.0, abs=1e-6)
    assert list(stats) == [row[0] for row in motion_cli.ROWS]


def test_stats_of_a_hop_a_walk_and_a_turn(clips, robot):
    still = _held(clips['jump'][0], 60, robot)
    pos = still.root_pos.copy()
    # The whole robot: 20 frames 0.2 m up (one flight, both feet landing), and a
    # 1 m drift along x and back 0.5 m while it turns 90 degrees, then back 30.
    pos[10:30, 2] += 0.2
    pos[:, 0] += np.concatenate([np.linspace(0.0, 1.0, 40), np.linspace(1.0, 0.5, 20)])
    yaw = np.radians(np.concatenate([np.linspace(0.0, 90.0, 40), np.linspace(90.0, 60.0, 20)]))
    turn = np.stack([np.cos(yaw / 2), 0 * yaw, 0 * yaw, np.sin(yaw / 2)], axis=-1)
    quat = rotation.quat_mul(turn, still.root_quat)
    # Turning about the pelvis moves the feet: the stats do not check plausibility.
    moved = M.from_trajectory('moved', still.fps, pos, quat, still.joint_pos, robot)
    stats = M.motion_stats(moved, robot)
    assert stats['root_travel_m'] == pytest.approx(1.5, abs=1e-9)
    assert stats['net_displacement_m'] == pytest.approx(0.5, abs=1e-9)
    assert stats['max_root_rise_m'] == pytest.approx(0.2, abs=1e-9)
    assert stats['flight_phases'] == 1
    assert stats['longest_flight_s'] == stats['shortest_flight_s'] == stats['total_flight_s'] \
        == pytest.approx(20 / 50)
    assert stats['max_foot_height_m'] == pytest.approx(0.2, abs=1e-3)
    assert stats['touchdowns'] == 2
    assert stats['yaw_accumulated_deg'] == pytest.approx(120.0, abs=1e-6)
    assert stats['yaw_net_deg'] == pytest.approx(60.0, abs=1e-6)
    assert stats['stand_still_cm'] > 20.0


# The built-in clips do what their names say.

@pytest.mark.parametrize('name', M.BUILTIN)
def test_builtin_clip_is_plausible_and_starts_standing(clips, robot, name):
    motion, stats = clips[name]
    assert M.check_motion(motion, robot) == []
    assert 4.0 <= stats['duration_s'] <= 8.0
    assert stats['peak_joint_acc'] <= JOINT_ACC_MAX
    assert stats['stand_still_cm'] >= STAND_STILL_MIN_CM
    # Frame 0: the standing pose, level, both feet flat on the floor.
    assert abs(motion.root_pos[0, 2] - 0.757) < 5e-3
    np.testing.assert_allclose(motion.root_quat[0], [1.0, 0.0, 0.0, 0.0], atol=1e-9)
    assert np.abs(motion.joint_pos[0] - np.asarray(g1.DEFAULT_POSE)).max() < 0.05
    _, spheres = M.forward_kinematics(motion.root_pos[:1], motion.root_quat[:1],
                                      motion.joint_pos[:1], robot)
    assert np.abs(spheres[0, :, 2] - g1.FOOT_SPHERE_RADIUS).max() < 1e-6


def test_run_has_flights_and_covers_ground(clips):
    stats = clips['run'][1]
    assert stats['flight_phases'] >= 4
    assert stats['shortest_flight_s'] >= 0.05
    assert stats['root_travel_m'] >= 3.0


def test_jump_flies_once_and_high(clips):
    stats = clips['jump'][1]
    assert stats['flight_phases'] == 1
    assert stats['longest_flight_s'] >= 0.2
    assert stats['max_root_rise_m'] >= 0.15


def test_fight_steps_and_kicks(clips):
    stats = clips['fight'][1]
    assert stats['max_foot_height_m'] >= 0.15
    assert stats['root_travel_m'] >= 0.5
    assert stats['touchdowns'] >= 4


def test_dance_steps_and_turns(clips):
    stats = clips['dance'][1]
    assert max(stats['yaw_accumulated_deg'], abs(stats['yaw_net_deg'])) >= 90.0
    assert stats['touchdowns'] >= 4


@pytest.mark.parametrize('name', ['run', 'jump'])
def test_flights_are_ballistic(clips, robot, name):
    """With both feet off the floor the root falls at g and keeps its horizontal speed."""
    motion = clips[name][0]
    _, spheres = M.forward_kinematics(motion.root_pos, motion.root_quat, motion.joint_pos,
                                      robot)
    air = (spheres[..., 2] - g1.FOOT_SPHERE_RADIUS).min(axis=1) > M.CONTACT_HEIGHT
    inner = np.flatnonzero(air[:-2] & air[1:-1] & air[2:])   # frame and both neighbours
    assert len(inner) >= 5
    pos = motion.root_pos
    acc = (pos[2:] - 2.0 * pos[1:-1] + pos[:-2]) * motion.fps ** 2
    np.testing.assert_allclose(acc[inner, 2], -9.81, atol=1e-6)
    np.testing.assert_allclose(acc[inner, :2], 0.0, atol=1e-6)


def _free_chain_torque(motion, robot):
    """
    Return |torque| / limit [T, 29] that inverse dynamics asks of free chains.

    The upper body hangs from the pelvis, and a leg whose foot is off the floor
    from the hip: their torques follow from the motion alone. A stance leg's
    depend on the unknown ground force; they read 0.
    """
    model = robot.model
    qpos, qvel = M.reference_state(motion, robot)
    _, spheres = M.forward_kinematics(motion.root_pos, motion.root_quat, motion.joint_pos,
                                      robot)
    foot_low = (spheres[..., 2] - g1.FOOT_SPHERE_RADIUS).reshape(len(qpos), 2, -1).min(-1)
    data = mujoco.MjData(model)
    out = np.zeros((len(qpos), g1.NUM_JOINTS))
    for t in range(1, len(qpos) - 1):
        data.qpos[:], data.qvel[:] = qpos[t], qvel[t]
        data.qacc[:] = (qvel[t + 1] - qvel[t - 1]) * motion.fps / 2.0
        mujoco.mj_inverse(model, data)
        out[t] = np.abs(data.qfrc_inverse[robot.qvel_adr]) / np.asarray(g1.TORQUE_LIMIT)
        for side, leg in enumerate((slice(0, 6), slice(6, 12))):
            if foot_low[t, side] < M.CONTACT_HEIGHT:
                out[t, leg] = 0.0
    return out


@pytest.mark.parametrize('name', M.BUILTIN)
def test_builtin_clip_needs_no_more_torque_than_the_g1_has(clips, robot, name):
    ratio = _free_chain_torque(clips[name][0], robot)
    frame, joint = np.unravel_index(np.argmax(ratio), ratio.shape)
    assert ratio.max() <= 1.0, (f'{name}: frame {frame}, {g1.JOINT_NAMES[joint]} needs '
                                f'{ratio.max():.2f} of its torque limit')


# The committed files.

@pytest.mark.parametrize('name', M.BUILTIN)
def test_builtin_clip_content_is_pinned(name):
    assert motion_cli.content_digest(M.builtin_path(name)) == CLIP_SHA256[name], (
        f'{name}.npz changed; if on purpose, update CLIP_SHA256 and the README table')


def test_content_digest_ignores_the_zip_container(tmp_path):
    path = M.builtin_path('jump')
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    np.savez(tmp_path / 'plain.npz', **arrays)                # stored, not deflated
    assert motion_cli.content_digest(tmp_path / 'plain.npz') == CLIP_SHA256['jump']
    arrays['fps'] = np.array(arrays['fps'] + 1.0)
    np.savez(tmp_path / 'other.npz', **arrays)
    assert motion_cli.content_digest(tmp_path / 'other.npz') != CLIP_SHA256['jump']


# bcg-motion info.

def test_cli_info_prints_the_table_of_the_builtin_clips(capsys, clips):
    assert motion_cli.main(['info']) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert lines[0] == '| | run | jump | fight | dance |'
    assert len(lines) == 2 + len(motion_cli.ROWS) + 1
    travel = next(line for line in lines if line.startswith('| root travel'))
    assert travel.split('|')[2].strip() == f'{clips["run"][1]["root_travel_m"]:.2f}'
    assert lines[-1].split('|')[2].strip() == CLIP_SHA256['run'][:12]


def test_cli_info_takes_files(capsys, tmp_path, clips):
    path = M.save_motion(clips['fight'][0], tmp_path / 'copy.npz')
    assert motion_cli.main(['info', str(path), 'dance']) == 0
    assert capsys.readouterr().out.splitlines()[0] == '| | fight | dance |'


def test_cli_info_fails_on_a_malformed_file(capsys, tmp_path):
    bad = tmp_path / 'broken.npz'
    np.savez(bad, fps=np.array(50.0), joint_pos=np.zeros((20, 7)))
    assert motion_cli.main(['info', 'run', str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith('bcg-motion: error: ') and str(bad) in captured.err
    assert captured.out == ''


def test_cli_is_a_console_script():
    setup = (REPO / 'setup.py').read_text()
    assert "'bcg-motion = bcg_ros.motion_cli:main'," in setup


# The centre of pressure a motion needs.

def test_support_polygon_and_distance():
    square = M.support_polygon([[0, 0], [1, 0], [1, 1], [0, 1], [0.5, 0.5]])
    assert len(square) == 4
    near, dist = M.closest_in_polygon(square, [0.5, 0.25])
    assert np.allclose(near, [0.5, 0.25]) and dist == pytest.approx(-0.25)
    near, dist = M.closest_in_polygon(square, [2.0, 0.5])
    assert np.allclose(near, [1.0, 0.5]) and dist == pytest.approx(1.0)
    line = M.support_polygon([[0, 0], [1, 0], [0.5, 0.0]])   # two toe spheres: a segment
    assert len(line) == 2
    near, dist = M.closest_in_polygon(line, [0.5, 0.3])
    assert np.allclose(near, [0.5, 0.0]) and dist == pytest.approx(0.3)


def test_centre_of_pressure_matches_mujocos_contact_forces(robot):
    """
    Match the CoP of MuJoCo's own contact forces, from the kinematics alone.

    A G1 crouching and rising under the PD is recorded in MuJoCo; the CoP computed
    from the recorded motion must match the one of the contact forces.
    """
    import mujoco

    from bcg_ros.robot import pd
    sim = g1_model.load()   # a copy of its own: the PD actuators change the model
    model = sim.model
    pd.use_pd_actuators(model, sim.actuator_ids, np.asarray(g1.TORQUE_LIMIT, float))
    data = mujoco.MjData(model)
    start = M.load_motion('jump', robot=robot)
    qpos0, _ = M.reference_state(start, robot)
    data.qpos[:] = qpos0[0]
    data.qpos[2] += 0.002
    kp, kd = np.asarray(g1.DEFAULT_KP), np.asarray(g1.DEFAULT_KD)
    substeps = int(round(1.0 / (start.fps * model.opt.timestep)))
    qpos, cop_true = [], []
    # The jump's countermovement crouch fed to the PD, down and back up, the arms swinging.
    crouch = np.r_[np.arange(70), np.arange(70)[::-1]]
    for k in crouch:
        target = start.joint_pos[k]
        pd.set_pd(model, data, sim.actuator_ids, kp, kd, target)
        for _ in range(substeps):
            mujoco.mj_step(model, data)
        force, moment = np.zeros(3), np.zeros(3)
        for i in range(data.ncon):
            f6 = np.zeros(6)
            mujoco.mj_contactForce(model, data, i, f6)
            f = data.contact[i].frame.reshape(3, 3).T @ f6[:3]
            force += f
            moment += np.cross(data.contact[i].pos, f)
        qpos.append(data.qpos.copy())
        fz = max(force[2], 1e-9)
        cop_true.append([-moment[1] / fz, moment[0] / fz])
    qpos, cop_true = np.array(qpos), np.array(cop_true)
    assert qpos[:, 2].min() > 0.5, 'the G1 fell; the check needs it standing'
    motion = M.from_trajectory('sway', start.fps, qpos[:, 0:3], qpos[:, 3:7],
                               qpos[:, sim.qpos_adr], robot)
    cop, force, _ = M.centre_of_pressure(motion, robot)
    err = np.linalg.norm(cop - cop_true, axis=-1)[5:-5]
    travel = np.ptp(cop_true[5:-5, 0])
    assert travel > 0.03, 'the sway must move the CoP for the check to mean something'
    assert np.median(err) < 0.005 and np.percentile(err, 90) < 0.03, (np.median(err), travel)


@pytest.mark.parametrize('name', ('run', 'fight'))
def test_balanced_clips_keep_the_cop_on_the_feet(clips, name):
    """make_motions balances these clips: their floor forces are ones feet can give."""
    stats = clips[name][1]
    assert stats['cop_outside_share'] <= BALANCED_SHARE_MAX
    assert stats['cop_outside_max_cm'] < 5.0
