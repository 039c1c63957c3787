"""Reference motions: loaders, resampling, bad files, built-in clips, FK, ADD features."""

import pathlib
import subprocess
import sys

import mujoco
import numpy as np
import pytest

from bcg_ros import motion as M
from bcg_ros.robot import g1
from bcg_ros.robot import model as g1_model
from bcg_ros.rotation import quat_mul

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope='module')
def robot():
    """Return the project's G1 model, compiled once."""
    return g1_model.load()


def _axis_quat(axis, angle):
    """(w, x, y, z) rotations by angles [T] about a fixed axis."""
    axis = np.asarray(axis, dtype=np.float64) / np.linalg.norm(axis)
    return np.concatenate([np.cos(angle / 2)[:, None], np.sin(angle / 2)[:, None] * axis], -1)


def _signal(t):
    """
    Return an analytic motion: root drifts and bobs, yaws at a constant rate, joints oscillate.

    Returns root_pos [T, 3], root_quat [T, 4] (w, x, y, z), joint_pos [T, 29] and the
    exact rates: root velocity, world angular velocity, joint velocities.
    """
    t = np.asarray(t, dtype=np.float64)
    root_pos = np.stack([0.5 * t, 0.02 * np.sin(2.0 * t), 0.75 + 0.01 * np.cos(3.0 * t)], -1)
    root_vel = np.stack([0.5 + 0.0 * t, 0.04 * np.cos(2.0 * t), -0.03 * np.sin(3.0 * t)], -1)
    yaw_rate = 0.8
    root_quat = _axis_quat((0.0, 0.0, 1.0), yaw_rate * t)
    ang_vel = np.tile([0.0, 0.0, yaw_rate], (len(t), 1))
    j = np.arange(g1.NUM_JOINTS)
    mid = 0.5 * (np.asarray(g1.JOINT_LOWER) + np.asarray(g1.JOINT_UPPER))
    amp, freq = 0.1, 1.0 + 0.05 * j
    joint_pos = mid + amp * np.sin(freq * t[:, None] + j)
    joint_vel = amp * freq * np.cos(freq * t[:, None] + j)
    return root_pos, root_quat, joint_pos, root_vel, ang_vel, joint_vel


def _write_csv(path, root_pos, root_quat_wxyz, joint_pos, fmt='%.9f'):
    rows = np.concatenate([root_pos, root_quat_wxyz[:, [1, 2, 3, 0]], joint_pos], axis=1)
    np.savetxt(path, rows, delimiter=',', fmt=fmt)
    return path


def _write_beyondmimic(path, fps, root_pos, root_quat, joint_pos, n_bodies=4, **extra):
    t = len(root_pos)
    body_pos = np.zeros((t, n_bodies, 3))
    body_quat = np.tile([1.0, 0.0, 0.0, 0.0], (t, n_bodies, 1))
    body_pos[:, 0], body_quat[:, 0] = root_pos, root_quat
    body_pos[:, 1:] = root_pos[:, None] + 0.1   # other bodies: present but unused
    np.savez(path, fps=np.array([fps]), joint_pos=joint_pos, body_pos_w=body_pos,
             body_quat_w=body_quat, **extra)
    return path


# Loaders and resampling.

def test_csv_resampled_30_to_50_fps_matches_the_analytic_signal(tmp_path, robot):
    t30 = np.arange(61) / 30.0   # 2 s
    root_pos, root_quat, joint_pos, root_vel, ang_vel, joint_vel = _signal(t30)
    path = _write_csv(tmp_path / 'walk.csv', root_pos, root_quat, joint_pos)
    motion = M.load_motion(path, control_dt=0.02, robot=robot)
    assert motion.fps == 50.0 and motion.num_frames == 101 and motion.name == 'walk'
    t50 = np.arange(101) / 50.0
    exp_pos, exp_quat, exp_joint, exp_vel, exp_ang, exp_jvel = _signal(t50)
    # Linear interpolation of a signal with curvature c over h = 1/30 s errs by at
    # most c h^2 / 8: joints 0.1 * 2.4^2 / 8 / 900 = 8e-5 rad; root 0.09 / 7200 = 1.3e-5 m.
    assert np.abs(motion.joint_pos - exp_joint).max() < 1e-4
    assert np.abs(motion.root_pos - exp_pos).max() < 2e-5
    # Slerp of a constant-rate rotation is exact.
    dot = np.abs(np.sum(motion.root_quat * exp_quat, axis=-1))
    assert np.max(1.0 - dot) < 1e-12
    # Velocities: differences of the resampled signal, away from the ends where the
    # linear pieces meet least smoothly.
    inner = slice(2, -2)
    assert np.abs(motion.root_ang_vel - exp_ang)[inner].max() < 1e-6
    assert np.abs(motion.joint_vel - exp_jvel)[inner].max() < 0.02
    assert np.abs(motion.root_lin_vel - exp_vel)[inner].max() < 5e-3


def test_csv_at_control_rate_keeps_every_frame(tmp_path, robot):
    t = np.arange(40) / 30.0
    root_pos, root_quat, joint_pos, *_ = _signal(t)
    path = _write_csv(tmp_path / 'clip.csv', root_pos, root_quat, joint_pos)
    motion = M.load_motion(path, control_dt=1.0 / 30.0, robot=robot)
    assert motion.num_frames == 40
    np.testing.assert_allclose(motion.joint_pos, joint_pos, atol=1e-8)
    np.testing.assert_allclose(motion.root_quat, root_quat, atol=1e-8)


def test_beyondmimic_npz_loads_with_its_velocities(tmp_path, robot):
    t = np.arange(50) / 50.0
    root_pos, root_quat, joint_pos, root_vel, ang_vel, joint_vel = _signal(t)
    n_bodies = 4
    lin = np.zeros((len(t), n_bodies, 3))
    ang = np.zeros((len(t), n_bodies, 3))
    lin[:, 0], ang[:, 0] = root_vel, ang_vel
    path = _write_beyondmimic(tmp_path / 'bm.npz', 50.0, root_pos, root_quat, joint_pos,
                              joint_vel=joint_vel, body_lin_vel_w=lin, body_ang_vel_w=ang)
    motion = M.load_motion(path, robot=robot, joint_order='motor')
    assert motion.num_frames == 50
    np.testing.assert_allclose(motion.root_pos, root_pos, atol=1e-12)
    np.testing.assert_allclose(motion.joint_vel, joint_vel, atol=1e-12)
    np.testing.assert_allclose(motion.root_lin_vel, root_vel, atol=1e-12)
    np.testing.assert_allclose(motion.root_ang_vel, ang_vel, atol=1e-12)


def test_beyondmimic_npz_resampled_recomputes_velocities_and_reorders_joints(tmp_path, robot):
    t30 = np.arange(61) / 30.0
    root_pos, root_quat, joint_pos, _, ang_vel, joint_vel = _signal(t30)
    perm = np.random.default_rng(0).permutation(g1.NUM_JOINTS)
    names = np.array(g1.JOINT_NAMES)[perm]
    path = _write_beyondmimic(tmp_path / 'bm30.npz', 30.0, root_pos, root_quat,
                              joint_pos[:, perm], joint_names=names,
                              joint_vel=np.zeros_like(joint_vel))
    motion = M.load_motion(path, robot=robot)
    assert motion.fps == 50.0 and motion.num_frames == 101
    _, _, exp_joint, _, exp_ang, exp_jvel = _signal(np.arange(101) / 50.0)
    assert np.abs(motion.joint_pos - exp_joint).max() < 1e-4
    # The file's (wrong, zero) joint velocities were not kept: they are recomputed.
    assert np.abs(motion.joint_vel - exp_jvel)[2:-2].max() < 0.02
    assert np.abs(motion.root_ang_vel - exp_ang)[2:-2].max() < 1e-6


def test_beyondmimic_npz_without_names_needs_its_joint_order(tmp_path, robot):
    t = np.arange(20) / 50.0
    root_pos, root_quat, joint_pos, *_ = _signal(t)
    isaac = joint_pos[:, np.asarray(g1.ISAACLAB_MOTOR_SLOTS)]   # column i: IsaacLab joint i
    path = _write_beyondmimic(tmp_path / 'bm.npz', 50.0, root_pos, root_quat, isaac)
    with pytest.raises(M.MotionError, match=r"bm\.npz: key 'joint_names' missing.*isaaclab"):
        M.load_motion(path, robot=robot)
    motion = M.load_motion(path, robot=robot, joint_order='isaaclab')
    np.testing.assert_allclose(motion.joint_pos, joint_pos, atol=1e-12)
    first = ('left_hip_pitch_joint', 'right_hip_pitch_joint', 'waist_yaw_joint')
    assert g1.ISAACLAB_JOINT_NAMES[:3] == first
    assert sorted(g1.ISAACLAB_MOTOR_SLOTS) == list(range(g1.NUM_JOINTS))
    with pytest.raises(M.MotionError, match='joint order'):
        M.load_motion(path, robot=robot, joint_order='xyz')


def test_own_npz_round_trip(tmp_path, robot):
    motion = M.load_motion('jump', robot=robot)
    path = M.save_motion(motion, tmp_path / 'copy.npz')
    back = M.load_motion(path, robot=robot)
    assert back.name == motion.name and back.fps == motion.fps
    for f in ('root_pos', 'root_quat', 'joint_pos', 'joint_vel', 'root_lin_vel',
              'root_ang_vel', 'key_pos'):
        np.testing.assert_array_equal(getattr(back, f), getattr(motion, f))


def test_csv_written_from_a_motion_loads_back(tmp_path, robot):
    motion = M.load_motion('fight', control_dt=1.0 / 30.0, robot=robot)
    path = _write_csv(tmp_path / 'fight.csv', motion.root_pos, motion.root_quat,
                      motion.joint_pos, fmt='%.12f')
    back = M.load_csv(path, robot=robot)
    np.testing.assert_allclose(back.joint_pos, motion.joint_pos, atol=1e-11)
    np.testing.assert_allclose(back.key_pos, motion.key_pos, atol=1e-9)


def test_resampling_keeps_the_duration_and_start():
    motion = M.load_motion('dance', control_dt=1.0 / 30.0)
    again = M.resample(motion, 50.0)
    assert abs(again.duration - motion.duration) <= 1.0 / 50.0
    np.testing.assert_allclose(again.root_pos[0], motion.root_pos[0])


# Bad files.

def _good_rows(n=20):
    root_pos, root_quat, joint_pos, *_ = _signal(np.arange(n) / 30.0)
    return np.concatenate([root_pos, root_quat[:, [1, 2, 3, 0]], joint_pos], axis=1)


def _csv_text(rows):
    return '\n'.join(','.join(f'{v:.9f}' for v in r) for r in rows) + '\n'


def _bad_csv_cases():
    rows = _good_rows()
    cases = {}
    short = [','.join(f'{v:.6f}' for v in r) for r in rows]
    short[7] = ','.join(short[7].split(',')[:35])
    cases['wrong column count'] = ('\n'.join(short) + '\n', 7, 35, 'columns')
    r = rows.copy()
    r[4, 12] = np.nan
    cases['nan'] = (_csv_text(r), 4, 12, 'not finite')
    r = rows.copy()
    r[9, 2] = np.inf
    cases['inf'] = (_csv_text(r), 9, 2, 'not finite')
    r = rows.copy()
    r[11, 3:7] *= 1.2
    cases['non-unit quaternion'] = (_csv_text(r), 11, 3, 'norm')
    r = rows.copy()
    r[13, 7 + 3] = g1.JOINT_UPPER[3] + 0.5
    cases['joint far outside limits'] = (_csv_text(r), 13, 10, 'limits')
    cases['too short'] = (_csv_text(rows[:5]), 5, 0, 'at least')
    lines = _csv_text(rows).splitlines()
    cells = lines[6].split(',')
    cells[20] = 'abc'
    lines[6] = ','.join(cells)
    cases['not a number'] = ('\n'.join(lines) + '\n', 6, 20, 'not a number')
    return cases


@pytest.mark.parametrize('case', sorted(_bad_csv_cases()))
def test_bad_csv_fails_naming_file_row_and_column(tmp_path, case):
    text, row, col, what = _bad_csv_cases()[case]
    path = tmp_path / 'bad_clip.csv'
    path.write_text(text)
    with pytest.raises(M.MotionError) as exc:
        M.load_motion(path)
    msg = str(exc.value)
    assert str(path) in msg and f'row {row}' in msg and f'column {col}' in msg, msg
    assert what in msg, msg


def test_joint_just_beyond_limits_within_the_margin_loads(tmp_path):
    rows = _good_rows()
    rows[3, 7 + 3] = g1.JOINT_UPPER[3] + 0.5 * M.JOINT_LIMIT_MARGIN
    path = tmp_path / 'edge.csv'
    path.write_text(_csv_text(rows))
    assert M.load_motion(path).num_frames > 0


def _bad_npz_cases():
    root_pos, root_quat, joint_pos, *_ = _signal(np.arange(20) / 50.0)
    cases = {}
    j = joint_pos.copy()
    j[5, 17] = np.nan
    cases['nan joint'] = (dict(joint_pos=j), "'joint_pos'", 5, 17, 'not finite')
    q = root_quat.copy()
    q[8] *= 0.9
    cases['non-unit quaternion'] = (dict(root_quat=q), "'body_quat_w'", 8, 0, 'norm')
    j = joint_pos.copy()
    j[2, 0] = g1.JOINT_LOWER[0] - 1.0
    cases['joint outside limits'] = (dict(joint_pos=j), "'joint_pos'", 2, 0, 'limits')
    cases['wrong joint count'] = (dict(joint_pos=joint_pos[:, :23]), "'joint_pos'", 0, 23,
                                  'joint columns')
    cases['too short'] = (dict(root_pos=root_pos[:4], root_quat=root_quat[:4],
                               joint_pos=joint_pos[:4]), "'joint_pos'", 4, 0, 'at least')
    return cases, (root_pos, root_quat, joint_pos)


@pytest.mark.parametrize('case', sorted(_bad_npz_cases()[0]))
def test_bad_beyondmimic_npz_fails_naming_file_row_and_column(tmp_path, case):
    cases, (root_pos, root_quat, joint_pos) = _bad_npz_cases()
    change, key, row, col, what = cases[case]
    arrays = dict(root_pos=root_pos, root_quat=root_quat, joint_pos=joint_pos)
    arrays.update(change)
    path = _write_beyondmimic(tmp_path / 'bad_bm.npz', 50.0, **arrays)
    with pytest.raises(M.MotionError) as exc:
        M.load_motion(path, joint_order='motor')
    msg = str(exc.value)
    assert str(path) in msg and key in msg and f'row {row}' in msg \
        and f'column {col}' in msg and what in msg, msg


def test_bad_own_npz_fails_naming_file_row_and_column(tmp_path):
    motion = M.load_motion('run')
    path = M.save_motion(motion, tmp_path / 'own.npz')
    data = dict(np.load(path))
    data['joint_pos'] = data['joint_pos'].copy()
    data['joint_pos'][30, 4] = np.inf
    np.savez(path, **data)
    with pytest.raises(M.MotionError, match=r"own\.npz: key 'joint_pos' row 30, column 4"):
        M.load_motion(path)


def test_unknown_name_and_missing_file_are_explained(tmp_path):
    with pytest.raises(M.MotionError, match='built-in motions: run, jump, fight, dance'):
        M.load_motion('moonwalk')
    bad = tmp_path / 'clip.bvh'
    bad.write_text('x')
    with pytest.raises(M.MotionError, match='unknown motion file type'):
        M.load_motion(bad)


# Built-in clips.

@pytest.fixture(scope='module')
def builtins(robot):
    """Return the four built-in clips at the control rate."""
    return {name: M.load_motion(name, robot=robot) for name in M.BUILTIN}


@pytest.mark.parametrize('name', M.BUILTIN)
def test_builtin_clip_is_kinematically_valid(builtins, robot, name):
    motion = builtins[name]
    assert motion.fps == 1.0 / g1.CONTROL_DT
    assert 2.0 < motion.duration < 10.0
    assert M.check_motion(motion, robot) == []


def test_builtin_clips_move_as_their_names_say(builtins, robot):
    stand = builtins['run'].root_pos[0, 2]
    # Run: around 1.5-2 m/s with flight phases (no foot on the floor).
    run = builtins['run']
    _, spheres = M.forward_kinematics(run.root_pos, run.root_quat, run.joint_pos, robot)
    airborne = (spheres[..., 2] - g1.FOOT_SPHERE_RADIUS).min(axis=1) > M.CONTACT_HEIGHT
    assert 1.5 <= np.abs(run.root_lin_vel[:, 0]).max() <= 2.0
    assert airborne.sum() >= 5 and run.root_pos[-1, 0] > 3.0
    # Jump: 10-20 cm of root rise, both feet off the floor at the top.
    jump = builtins['jump']
    assert 0.10 <= jump.root_pos[:, 2].max() - stand <= 0.20
    _, spheres = M.forward_kinematics(jump.root_pos, jump.root_quat, jump.joint_pos, robot)
    top = int(np.argmax(jump.root_pos[:, 2]))
    assert (spheres[top, :, 2] - g1.FOOT_SPHERE_RADIUS).min() > 0.05
    # Fight and dance: they step (a foot off the floor) and the wrists travel.
    for name in ('fight', 'dance'):
        m = builtins[name]
        _, spheres = M.forward_kinematics(m.root_pos, m.root_quat, m.joint_pos, robot)
        assert (spheres[..., 2] - g1.FOOT_SPHERE_RADIUS).max() > 0.05
        wrists = m.key_pos[:, 3:5]
        assert np.ptp(wrists, axis=0).max() > 0.25
    # A punch reaches at least 30 cm ahead of the pelvis.
    fight = builtins['fight']
    assert (fight.key_pos[:, 3:5, 0] - fight.root_pos[:, None, 0]).max() > 0.3


def test_builtin_clips_start_and_end_at_rest(builtins):
    for name, m in builtins.items():
        for f in ('joint_vel', 'root_lin_vel', 'root_ang_vel'):
            v = getattr(m, f)
            assert np.abs(v[0]).max() < 1e-6 and np.abs(v[-1]).max() < 1e-6, (name, f)


def test_make_motions_script_reproduces_the_committed_clips(tmp_path, builtins):
    out = subprocess.run([sys.executable, str(REPO / 'scripts' / 'make_motions.py'),
                          '--out', str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                         env={'PYTHONPATH': str(REPO), 'PATH': '/usr/bin:/bin'}, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    for name in M.BUILTIN:
        made = M.load_npz(tmp_path / f'{name}.npz')
        np.testing.assert_allclose(made.joint_pos, builtins[name].joint_pos, atol=1e-6)
        np.testing.assert_allclose(made.root_pos, builtins[name].root_pos, atol=1e-9)


# check_motion catches what it should.

def test_check_motion_finds_a_foot_through_the_floor(builtins, robot):
    m = builtins['dance']
    sunk = M.from_trajectory('sunk', m.fps, m.root_pos - [0.0, 0.0, 0.01], m.root_quat,
                             m.joint_pos, robot)
    problems = M.check_motion(sunk, robot)
    assert any('below the floor' in p for p in problems), problems


def test_check_motion_finds_a_sliding_stance_foot(builtins, robot):
    m = builtins['fight']
    drift = np.zeros_like(m.root_pos)
    drift[:, 0] = np.linspace(0.0, 0.05, m.num_frames)   # the whole robot glides 5 cm
    slid = M.from_trajectory('slid', m.fps, m.root_pos + drift, m.root_quat, m.joint_pos,
                             robot)
    problems = M.check_motion(slid, robot)
    assert any('slid' in p for p in problems), problems


def test_check_motion_finds_limits_and_stale_key_points(builtins, robot):
    m = builtins['jump']
    joint_pos = m.joint_pos.copy()
    joint_pos[10:15, 3] = g1.JOINT_UPPER[3] + 0.05
    bad = M.Motion(m.name, m.fps, m.root_pos, m.root_quat, joint_pos, m.joint_vel,
                   m.root_lin_vel, m.root_ang_vel, m.key_pos)
    problems = M.check_motion(bad, robot)
    assert any('joint angle row 10, column 3' in p for p in problems), problems
    assert any('key_pos' in p for p in problems), problems


# Forward kinematics and the MuJoCo state.

def test_key_points_match_mujoco_sites(builtins, robot):
    m = builtins['run']
    frame = 120
    qpos, _ = M.reference_state(m, robot)
    data = mujoco.MjData(robot.model)
    data.qpos[:] = qpos[frame]
    mujoco.mj_kinematics(robot.model, data)
    for k, site in enumerate(g1.KEY_SITES):
        sid = mujoco.mj_name2id(robot.model, mujoco.mjtObj.mjOBJ_SITE, site)
        np.testing.assert_allclose(m.key_pos[frame, k], data.site_xpos[sid], atol=1e-9)


def test_reference_state_qvel_is_the_rate_of_qpos(builtins, robot):
    m = builtins['jump']
    qpos, qvel = M.reference_state(m, robot)
    frame = 55
    diff = np.zeros(robot.model.nv)
    # Central difference on the configuration manifold (free joint included).
    mujoco.mj_differentiatePos(robot.model, diff, 2.0 / m.fps, qpos[frame - 1], qpos[frame + 1])
    np.testing.assert_allclose(qvel[frame], diff, atol=0.05 * np.abs(diff).max())


def test_angular_velocity_of_a_tilted_spin():
    t = np.arange(100) / 50.0
    spin = _axis_quat((0.0, 0.0, 1.0), 1.5 * t)
    tilt = _axis_quat((1.0, 0.0, 0.0), np.full_like(t, 0.4))
    # q = tilt * spin: spinning about the body z axis, which the tilt carries to
    # world (0, -sin 0.4, cos 0.4).
    q = quat_mul(tilt, spin)
    w = M.angular_velocity(q, 50.0)
    np.testing.assert_allclose(w, np.tile([0.0, -1.5 * np.sin(0.4), 1.5 * np.cos(0.4)],
                                          (100, 1)), atol=1e-4)


# ADD features.

def test_features_numpy_and_jax_agree(builtins):
    jnp = pytest.importorskip('jax.numpy')
    import jax
    m = builtins['fight']
    args = [getattr(m, f) for f in ('root_pos', 'root_quat', 'joint_pos', 'joint_vel',
                                    'root_lin_vel', 'root_ang_vel', 'key_pos')]
    ref = M.add_features(*args, xp=np)
    with jax.enable_x64(True):
        got = np.asarray(jax.jit(lambda *a: M.add_features(*a, xp=jnp))(
            *[jnp.asarray(a) for a in args]))
    assert ref.shape == (m.num_frames, M.FEATURE_SIZE)
    np.testing.assert_allclose(got, ref, atol=1e-12)
    # float32 as the trainer runs it.
    got32 = np.asarray(M.add_features(*[jnp.asarray(a, jnp.float32) for a in args], xp=jnp))
    np.testing.assert_allclose(got32, ref, atol=1e-5)
    # Batched: [B, T, ...] gives the same as row by row.
    batched = M.add_features(*[np.stack([a, a]) for a in args], xp=np)
    np.testing.assert_array_equal(batched[1], ref)


def test_features_are_root_frame_quantities(builtins):
    m = builtins['run']
    args = [getattr(m, f) for f in ('root_pos', 'root_quat', 'joint_pos', 'joint_vel',
                                    'root_lin_vel', 'root_ang_vel', 'key_pos')]
    feat = M.add_features(*args)
    # Shift the whole motion sideways and turn it about the vertical by 1 rad: the
    # features other than the root's world rotation do not change.
    yaw = _axis_quat((0.0, 0.0, 1.0), np.ones(m.num_frames))
    rot = np.zeros((m.num_frames, 9))
    for i in range(m.num_frames):
        mujoco.mju_quat2Mat(rot[i], yaw[i])
    rot = rot.reshape(-1, 3, 3)
    turn = np.einsum('tij,t...j->t...i', rot, np.stack([args[0]], 1))[:, 0] + [3.0, -2.0, 0.0]
    moved = [turn, quat_mul(yaw, args[1]), args[2], args[3],
             np.einsum('tij,tj->ti', rot, args[4]), np.einsum('tij,tj->ti', rot, args[5]),
             np.einsum('tij,tkj->tki', rot, args[6]) + (turn - np.einsum(
                 'tij,tj->ti', rot, args[0]))[:, None]]
    feat2 = M.add_features(*moved)
    names = [n for n, size in M.FEATURE_TERMS for _ in range(size)]
    keep = np.array([n != 'root_rot_6d' for n in names])
    np.testing.assert_allclose(feat2[:, keep], feat[:, keep], atol=1e-9)
    assert np.abs(feat2[:, ~keep] - feat[:, ~keep]).max() > 0.1
    # Root height is the first feature; key points at rest sit where the pelvis holds them.
    np.testing.assert_allclose(feat[:, 0], m.root_pos[:, 2])
