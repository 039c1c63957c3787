"""
Reference motions: one in-memory form for every consumer.

A :class:`Motion` is sampled at a fixed rate (the control rate once loaded for
training or evaluation), joints in the G1's motor order, quaternions
(w, x, y, z), positions in the world frame.

Files that load (:func:`load_motion` picks the reader):

- a built-in clip by name (``run``, ``jump``, ``fight``, ``dance``), made by
  ``scripts/make_motions.py`` and stored in ``bcg_ros/motions/``;
- ``*.csv``: the LAFAN1-G1 retargeted layout, 30 fps, no header, one frame per
  row: root x, y, z [m], root quaternion x, y, z, w, then the 29 joint angles
  in motor order [rad];
- ``*.npz`` written by :func:`save_motion` (key ``format`` = ``bcg_ros.motion``);
- ``*.npz`` in the BeyondMimic/mjlab layout: ``fps``, ``joint_pos`` [T, 29],
  ``body_pos_w`` [T, B, 3], ``body_quat_w`` [T, B, 4] (w, x, y, z), body 0 the
  pelvis; ``joint_vel``, ``body_lin_vel_w`` and ``body_ang_vel_w`` are used when
  present and no resampling is needed, recomputed otherwise.

Rows and columns in error messages count from 0 (a row is a frame); CSV
messages also give the 1-based line number an editor shows.
"""

import dataclasses
import pathlib
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from bcg_ros import rotation
from bcg_ros.robot import g1

MOTIONS_DIR = pathlib.Path(__file__).resolve().parent / 'motions'
BUILTIN = ('run', 'jump', 'fight', 'dance')
"""Clips shipped with the package (``bcg_ros/motions/<name>.npz``)."""

FORMAT = 'bcg_ros.motion'
"""Value of the ``format`` key in the project's own npz files."""
FORMAT_VERSION = 1
CSV_FPS = 30.0
"""Frame rate of the LAFAN1-G1 retargeted CSV files."""
CSV_COLUMNS = ('root_x', 'root_y', 'root_z', 'root_qx', 'root_qy', 'root_qz', 'root_qw') \
    + g1.JOINT_NAMES
"""Column names of the CSV layout (36 columns)."""

MIN_FRAMES = 10
"""A file with fewer frames is refused: too short to resample or to imitate."""
QUAT_NORM_TOL = 1e-2
"""A file's root quaternion must have norm 1 within this; it is then renormalised."""
JOINT_LIMIT_MARGIN = 0.1
"""A file's joint angles may exceed the G1 limits by at most this [rad]."""

FLOOR_TOL = 1e-3
"""check_motion: the lowest point of every foot sphere stays above -1 mm [m]."""
CONTACT_HEIGHT = 5e-3
"""check_motion: a foot sphere whose lowest point is below 5 mm touches the floor [m]."""
SLIDE_TOL = 1e-2
"""check_motion: a foot sphere that keeps touching moves at most 1 cm horizontally [m]."""
COP_TOL = 2e-2
"""motion_stats: a centre of pressure this far outside the support polygon counts as out [m]."""
GRAVITY = 9.81
"""Standard gravity [m/s^2]: the clips' ballistic flights and the force they ask for."""
KEY_POS_TOL = 1e-3
"""check_motion: stored key points agree with forward kinematics within 1 mm [m]."""
JOINT_LIMIT_TOL = 1e-6
"""check_motion: joint angles stay within the G1 limits up to rounding [rad]."""


class MotionError(ValueError):
    """A motion file that is missing, malformed or not a plausible G1 motion."""


@dataclass(frozen=True)
class Motion:
    """A reference motion of the G1."""

    name: str
    fps: float
    """Frames per second."""
    root_pos: np.ndarray
    """[T, 3] pelvis position, world frame [m]."""
    root_quat: np.ndarray
    """[T, 4] pelvis orientation (w, x, y, z), world frame."""
    joint_pos: np.ndarray
    """[T, 29] joint angles in motor order [rad]."""
    joint_vel: np.ndarray
    """[T, 29] joint velocities [rad/s]."""
    root_lin_vel: np.ndarray
    """[T, 3] pelvis linear velocity, world frame [m/s]."""
    root_ang_vel: np.ndarray
    """[T, 3] pelvis angular velocity, world frame [rad/s]."""
    key_pos: np.ndarray
    """[T, len(g1.KEY_SITES), 3] key points (ankles, head, wrists), world frame [m]."""
    flat: Optional['Motion'] = None
    """The clip as recorded on flat ground, when this one was raised onto a terrain
    (:func:`bcg_ros.core.terrain.lift_motion`): what a policy observes, as on the robot."""

    @property
    def observed(self) -> 'Motion':
        """The motion a policy's reference observation reads: the recorded clip."""
        return self if self.flat is None else self.flat

    @property
    def num_frames(self) -> int:
        """Return the number of frames."""
        return int(self.root_pos.shape[0])

    @property
    def duration(self) -> float:
        """Return the length in seconds."""
        return (self.num_frames - 1) / self.fps

    def __post_init__(self):
        """Check shapes against each other and the G1, naming the motion and the field."""
        t = self.root_pos.shape[0]
        expect = {'root_pos': (t, 3), 'root_quat': (t, 4),
                  'joint_pos': (t, g1.NUM_JOINTS), 'joint_vel': (t, g1.NUM_JOINTS),
                  'root_lin_vel': (t, 3), 'root_ang_vel': (t, 3),
                  'key_pos': (t, len(g1.KEY_SITES), 3)}
        for name, shape in expect.items():
            got = np.shape(getattr(self, name))
            if got != shape:
                raise ValueError(f'motion {self.name!r}: field {name} has shape {got}, '
                                 f'expected {shape}')


_ARRAY_FIELDS = ('root_pos', 'root_quat', 'joint_pos', 'joint_vel', 'root_lin_vel',
                 'root_ang_vel', 'key_pos')


# Orientation tracks (w, x, y, z), NumPy.

def angular_velocity(quat: np.ndarray, fps: float) -> np.ndarray:
    """
    Return the world-frame angular velocity [T, 3] of an orientation track [T, 4].

    The rotation from frame t-1 to frame t+1 (one-sided at the ends) as a
    rotation vector, over its time span: exact for a constant angular velocity.
    """
    q = np.asarray(quat, dtype=np.float64)
    nxt = np.concatenate([q[1:2], q[2:], q[-1:]])
    prev = np.concatenate([q[:1], q[:-2], q[-2:-1]])
    span = np.full(len(q), 2.0 / fps)
    span[0] = span[-1] = 1.0 / fps
    turn = rotation.quat_mul(nxt, rotation.quat_conj(prev))
    return rotation.quat_to_rotvec(turn) / span[:, None]


def _gradient(x: np.ndarray, fps: float) -> np.ndarray:
    """Time derivative along axis 0, second order inside and at the ends."""
    return np.gradient(x, 1.0 / fps, axis=0, edge_order=2 if len(x) > 2 else 1)


# Kinematics.

@dataclass(frozen=True)
class _Points:
    """Bodies and local offsets of the points forward kinematics reports."""

    key_bodies: np.ndarray
    key_offsets: np.ndarray
    sphere_bodies: np.ndarray
    sphere_offsets: np.ndarray


def _points(model) -> _Points:
    """Body ids and offsets of the key points and foot spheres in ``model`` (a MjModel)."""
    import mujoco

    def body_id(name):
        i = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name)
        if i < 0:
            raise MotionError(f'model has no body {name!r}, which motions need')
        return i
    return _Points(np.array([body_id(b) for _, b, _ in g1.KEY_POINTS]),
                   np.array([p for _, _, p in g1.KEY_POINTS], dtype=np.float64),
                   np.array([body_id(b) for b, _ in g1.FOOT_SPHERES]),
                   np.array([p for _, p in g1.FOOT_SPHERES], dtype=np.float64))


def _default_model():
    from bcg_ros.robot import model as g1_model
    return g1_model.load()


def forward_kinematics(root_pos: np.ndarray, root_quat: np.ndarray, joint_pos: np.ndarray,
                       robot=None) -> Tuple[np.ndarray, np.ndarray]:
    """
    Return world positions of the key points [T, K, 3] and foot spheres [T, 8, 3].

    Runs MuJoCo's mj_kinematics per frame on ``robot`` (a
    :class:`bcg_ros.robot.model.G1Model`, the project's model when None). Key
    points are the bodies and offsets of ``g1.KEY_POINTS``, so any G1 model
    works, with or without the project's sites.
    """
    import mujoco
    robot = robot if robot is not None else _default_model()
    model = robot.model
    pts = _points(model)
    data = mujoco.MjData(model)
    qpos = np.tile(model.qpos0, (len(root_pos), 1))
    qpos[:, 0:3] = root_pos
    qpos[:, 3:7] = root_quat
    qpos[:, robot.qpos_adr] = joint_pos
    key = np.empty((len(root_pos), len(pts.key_bodies), 3))
    spheres = np.empty((len(root_pos), len(pts.sphere_bodies), 3))
    for t in range(len(root_pos)):
        data.qpos[:] = qpos[t]
        mujoco.mj_kinematics(model, data)
        for out, bodies, offsets in ((key[t], pts.key_bodies, pts.key_offsets),
                                     (spheres[t], pts.sphere_bodies, pts.sphere_offsets)):
            rot = data.xmat[bodies].reshape(-1, 3, 3)
            out[:] = data.xpos[bodies] + np.einsum('bij,bj->bi', rot, offsets)
    return key, spheres


def body_positions(motion: 'Motion', robot=None) -> np.ndarray:
    """Return the origins of the ``g1.TRACK_BODIES`` [T, B, 3] over a motion, by FK."""
    import mujoco
    robot = robot if robot is not None else _default_model()
    model = robot.model
    ids = []
    for name in g1.TRACK_BODIES:
        i = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name)
        if i < 0:
            raise MotionError(f'model has no body {name!r}, which E_track needs')
        ids.append(i)
    qpos, _ = reference_state(motion, robot)
    data = mujoco.MjData(model)
    out = np.empty((motion.num_frames, len(ids), 3))
    for t in range(motion.num_frames):
        data.qpos[:] = qpos[t]
        mujoco.mj_kinematics(model, data)
        out[t] = data.xpos[ids]
    return out


def tracking_error(sim_body, ref_body, xp=np):
    """
    Per-frame E_track [m]: the mean over bodies of the body position error.

    ``sim_body`` and ``ref_body`` [..., B, 3] are world positions of the same
    bodies (``g1.TRACK_BODIES``); the training env (``xp=jax.numpy``) and the
    evaluator both use this one definition.
    """
    return xp.mean(xp.linalg.norm(sim_body - ref_body, axis=-1), axis=-1)


def from_trajectory(name: str, fps: float, root_pos: np.ndarray, root_quat: np.ndarray,
                    joint_pos: np.ndarray, robot=None) -> Motion:
    """Build a Motion from positions: velocities by finite differences, key points by FK."""
    root_quat = rotation.quat_continuous(root_quat)
    root_quat = root_quat / np.linalg.norm(root_quat, axis=-1, keepdims=True)
    key_pos, _ = forward_kinematics(root_pos, root_quat, joint_pos, robot)
    return Motion(name=name, fps=float(fps), root_pos=np.asarray(root_pos, np.float64),
                  root_quat=root_quat, joint_pos=np.asarray(joint_pos, np.float64),
                  joint_vel=_gradient(np.asarray(joint_pos, np.float64), fps),
                  root_lin_vel=_gradient(np.asarray(root_pos, np.float64), fps),
                  root_ang_vel=angular_velocity(root_quat, fps), key_pos=key_pos)


def reference_state(motion: Motion, robot=None) -> Tuple[np.ndarray, np.ndarray]:
    """
    Return MuJoCo qpos [T, nq] and qvel [T, nv] of every frame.

    The free joint's angular velocity is in the pelvis frame, as MuJoCo defines it.
    """
    robot = robot if robot is not None else _default_model()
    model = robot.model
    qpos = np.tile(model.qpos0, (motion.num_frames, 1))
    qpos[:, 0:3] = motion.root_pos
    qpos[:, 3:7] = motion.root_quat
    qpos[:, robot.qpos_adr] = motion.joint_pos
    qvel = np.zeros((motion.num_frames, model.nv))
    qvel[:, 0:3] = motion.root_lin_vel
    qvel[:, 3:6] = rotation.quat_rotate_inverse(motion.root_quat, motion.root_ang_vel)
    qvel[:, robot.qvel_adr] = motion.joint_vel
    return qpos, qvel


# Resampling.

def resample(motion: Motion, fps: float, robot=None) -> Motion:
    """
    Return the motion at ``fps``.

    Positions are interpolated linearly, orientations by slerp; velocities are
    finite differences of the resampled signal, key points come from FK. The
    start is kept, and as many frames as fit in the original duration.
    """
    if abs(motion.fps - fps) < 1e-9:
        return motion
    n = int(np.floor(motion.duration * fps + 1e-6)) + 1
    src = np.arange(n) * (motion.fps / fps)
    i = np.minimum(np.floor(src).astype(int), motion.num_frames - 2)
    a = (src - i)[:, None]

    def lerp(x):
        return (1.0 - a) * x[i] + a * x[i + 1]
    quat = rotation.quat_continuous(motion.root_quat)
    root_quat = rotation.quat_slerp(quat[i], quat[i + 1], a[:, 0])
    out = from_trajectory(motion.name, fps, lerp(motion.root_pos), root_quat,
                          lerp(motion.joint_pos), robot)
    if motion.flat is not None:
        out = dataclasses.replace(out, flat=resample(motion.flat, fps, robot))
    return out


# Validation of what a file holds.

def _validate(source: str, root_pos: np.ndarray, root_quat: np.ndarray, joint_pos: np.ndarray,
              columns: Sequence[Tuple[str, int]], root_quat_order: str = 'wxyz'):
    """
    Raise MotionError naming the file, row and column of the first bad value.

    ``columns[k]`` says where field k (0 root_pos, 1 root_quat, 2 joint_pos)
    lives in the file: (label prefix, index of its first column).
    """
    n = len(root_pos)
    if n < MIN_FRAMES:
        prefix, first = columns[2]
        raise MotionError(f'{source}: {prefix}row {n}{_line(prefix, n)}, column 0: the motion '
                          f'ends after {n} frames, it needs at least {MIN_FRAMES}')
    quat_names = tuple('q' + c for c in root_quat_order)
    names = (('x', 'y', 'z'), quat_names, g1.JOINT_NAMES)
    for k, arr in enumerate((root_pos, root_quat, joint_pos)):
        bad = np.argwhere(~np.isfinite(arr))
        if bad.size:
            r, c = bad[0]
            prefix, first = columns[k]
            raise MotionError(f'{source}: {prefix}row {r}{_line(prefix, r)}, column {first + c} '
                              f'({names[k][c]}): value {arr[r, c]} is not finite')
    norm = np.linalg.norm(root_quat, axis=-1)
    bad = np.flatnonzero(np.abs(norm - 1.0) > QUAT_NORM_TOL)
    if bad.size:
        r = bad[0]
        prefix, first = columns[1]
        raise MotionError(f'{source}: {prefix}row {r}{_line(prefix, r)}, column {first} '
                          f'(root quaternion {root_quat_order} in columns {first}-{first + 3}): '
                          f'norm {norm[r]:.6f}, expected 1 within {QUAT_NORM_TOL}')
    lo = np.asarray(g1.JOINT_LOWER) - JOINT_LIMIT_MARGIN
    hi = np.asarray(g1.JOINT_UPPER) + JOINT_LIMIT_MARGIN
    bad = np.argwhere((joint_pos < lo) | (joint_pos > hi))
    if bad.size:
        r, c = bad[0]
        prefix, first = columns[2]
        raise MotionError(
            f'{source}: {prefix}row {r}{_line(prefix, r)}, column {first + c} '
            f'({g1.JOINT_NAMES[c]}): angle {joint_pos[r, c]:.4f} rad is outside the G1 limits '
            f'[{g1.JOINT_LOWER[c]:.4f}, {g1.JOINT_UPPER[c]:.4f}] by more than '
            f'{JOINT_LIMIT_MARGIN} rad (is the joint order the motor order?)')


def _line(prefix: str, row: int) -> str:
    """Return the editor line of a CSV row (CSV messages have no key prefix)."""
    return '' if prefix else f' (line {row + 1})'


# Readers.

def load_csv(path: Union[str, pathlib.Path], fps: float = CSV_FPS, robot=None) -> Motion:
    """Read a LAFAN1-G1 retargeted CSV at its own rate (30 fps unless told)."""
    path = pathlib.Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise MotionError(f'{path}: cannot read it: {exc}') from exc
    rows = []
    for r, line in enumerate(ln for ln in text.splitlines() if ln.strip()):
        cells = line.split(',')
        if len(cells) != len(CSV_COLUMNS):
            raise MotionError(
                f'{path}: row {r} (line {r + 1}), column {min(len(cells), len(CSV_COLUMNS))}: '
                f'{len(cells)} columns, expected {len(CSV_COLUMNS)} (root x y z, root '
                f'quaternion x y z w, {g1.NUM_JOINTS} joint angles in motor order)')
        try:
            rows.append([float(c) for c in cells])
        except ValueError:
            c = next(j for j, cell in enumerate(cells) if not _is_float(cell))
            raise MotionError(f'{path}: row {r} (line {r + 1}), column {c} '
                              f'({CSV_COLUMNS[c]}): {cells[c].strip()!r} is not a number') \
                from None
    data = np.array(rows, dtype=np.float64).reshape(-1, len(CSV_COLUMNS))
    root_pos, quat_xyzw, joint_pos = data[:, 0:3], data[:, 3:7], data[:, 7:]
    _validate(str(path), root_pos, quat_xyzw, joint_pos, (('', 0), ('', 3), ('', 7)),
              root_quat_order='xyzw')
    quat = quat_xyzw[:, [3, 0, 1, 2]]
    quat = quat / np.linalg.norm(quat, axis=-1, keepdims=True)
    return from_trajectory(path.stem, fps, root_pos, quat, joint_pos, robot)


def _is_float(cell: str) -> bool:
    try:
        float(cell)
        return True
    except ValueError:
        return False


def _npz_array(path, npz, key, ndim, last: Optional[int] = None) -> np.ndarray:
    if key not in npz:
        raise MotionError(f'{path}: key {key!r} missing (keys: {sorted(npz.files)})')
    arr = np.asarray(npz[key], dtype=np.float64)
    if arr.ndim != ndim or (last is not None and arr.shape[-1] != last):
        want = f'{ndim} dimensions' + (f', last of size {last}' if last is not None else '')
        raise MotionError(f'{path}: key {key!r} has shape {arr.shape}, expected {want}')
    return arr


def _npz_fps(path, npz) -> float:
    if 'fps' not in npz:
        raise MotionError(f'{path}: key \'fps\' missing (keys: {sorted(npz.files)})')
    fps = np.asarray(npz['fps'], dtype=np.float64).reshape(-1)
    if fps.size != 1 or not np.isfinite(fps[0]) or fps[0] <= 0:
        raise MotionError(f'{path}: key \'fps\' must be one positive number, got {fps}')
    return float(fps[0])


JOINT_ORDERS = ('isaaclab', 'motor')
"""Column orders a motion file without joint names may be declared in."""


def load_beyondmimic(path: Union[str, pathlib.Path], robot=None,
                     joint_order: Optional[str] = None) -> Motion:
    """
    Read a BeyondMimic/mjlab motion npz at its own rate (body 0 is the pelvis).

    The columns are reordered by the file's ``joint_names``. BeyondMimic writes none
    (its columns are in the simulator's order), so without them ``joint_order`` must
    say which: 'isaaclab' (:data:`bcg_ros.robot.g1.ISAACLAB_JOINT_NAMES`) or 'motor'.
    """
    path = pathlib.Path(path)
    if joint_order is not None and joint_order not in JOINT_ORDERS:
        raise MotionError(f'{path}: joint order {joint_order!r} unknown (known: '
                          f'{", ".join(JOINT_ORDERS)})')
    with _open_npz(path) as npz:
        fps = _npz_fps(path, npz)
        joint_pos = _npz_array(path, npz, 'joint_pos', 2)
        body_pos = _npz_array(path, npz, 'body_pos_w', 3, 3)
        body_quat = _npz_array(path, npz, 'body_quat_w', 3, 4)
        order = _joint_order(path, npz)
        if order is None and joint_pos.shape[1] != g1.NUM_JOINTS:
            raise MotionError(f'{path}: key \'joint_pos\' row 0, column {joint_pos.shape[1]}: '
                              f'{joint_pos.shape[1]} joint columns, expected {g1.NUM_JOINTS} '
                              f'(the 29-DoF G1)')
        if order is None:
            if joint_order is None:
                raise MotionError(
                    f'{path}: key \'joint_names\' missing: the file does not say which joint '
                    f'each column of \'joint_pos\' is; give the order its columns are in '
                    f'(joint order: {" or ".join(JOINT_ORDERS)}; BeyondMimic writes IsaacLab\'s)')
            if joint_order == 'isaaclab':
                order = np.argsort(np.asarray(g1.ISAACLAB_MOTOR_SLOTS))
        if order is not None:
            joint_pos = joint_pos[:, order]
        t = len(joint_pos)
        for key, arr in (('body_pos_w', body_pos), ('body_quat_w', body_quat)):
            if len(arr) != t:
                raise MotionError(f'{path}: key {key!r} has {len(arr)} frames, joint_pos {t}')
        vel = {}
        for key, ndim in (('joint_vel', 2), ('body_lin_vel_w', 3), ('body_ang_vel_w', 3)):
            if key in npz:
                vel[key] = _npz_array(path, npz, key, ndim)
    root_pos, root_quat = body_pos[:, 0], body_quat[:, 0]
    _validate(str(path), root_pos, root_quat, joint_pos,
              (("key 'body_pos_w' body 0, ", 0), ("key 'body_quat_w' body 0, ", 0),
               ("key 'joint_pos' ", 0)))
    motion = from_trajectory(path.stem, fps, root_pos, root_quat, joint_pos, robot)
    # The file's own velocities are exact where finite differences are not; keep
    # them when they are whole and finite.
    replace = {}
    if 'joint_vel' in vel and vel['joint_vel'].shape[0] == t:
        jv = vel['joint_vel'][:, order] if order is not None else vel['joint_vel']
        if jv.shape == motion.joint_vel.shape and np.all(np.isfinite(jv)):
            replace['joint_vel'] = jv
    for key, field in (('body_lin_vel_w', 'root_lin_vel'), ('body_ang_vel_w', 'root_ang_vel')):
        if key in vel and vel[key].shape[0] == t and vel[key].shape[2] == 3 \
                and np.all(np.isfinite(vel[key][:, 0])):
            replace[field] = vel[key][:, 0]
    return _replace(motion, **replace)


def _joint_order(path, npz) -> Optional[np.ndarray]:
    if 'joint_names' not in npz:
        return None
    names = [str(n) for n in np.asarray(npz['joint_names']).reshape(-1)]
    missing = [n for n in g1.JOINT_NAMES if n not in names]
    if missing:
        raise MotionError(f'{path}: key \'joint_names\' lacks G1 joints {missing}')
    return np.array([names.index(n) for n in g1.JOINT_NAMES])


def _replace(motion: Motion, **fields) -> Motion:
    d = {f: getattr(motion, f) for f in ('name', 'fps') + _ARRAY_FIELDS}
    d.update(fields)
    return Motion(**d)


def save_motion(motion: Motion, path: Union[str, pathlib.Path]) -> pathlib.Path:
    """Write ``motion`` as the project's npz (every field, joint and key point names)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + '.tmp.npz')
    np.savez_compressed(tmp, format=np.array(FORMAT), version=np.array(FORMAT_VERSION),
                        name=np.array(motion.name), fps=np.array(motion.fps),
                        joint_names=np.array(g1.JOINT_NAMES), key_sites=np.array(g1.KEY_SITES),
                        **{f: np.asarray(getattr(motion, f), np.float64)
                           for f in _ARRAY_FIELDS})
    tmp.replace(path)
    return path


def load_npz(path: Union[str, pathlib.Path], robot=None,
             joint_order: Optional[str] = None) -> Motion:
    """Read an npz in the project's format or, failing that, the BeyondMimic layout."""
    path = pathlib.Path(path)
    with _open_npz(path) as npz:
        if 'format' not in npz:
            own = None
        else:
            own = {k: npz[k] for k in npz.files}
    if own is None:
        return load_beyondmimic(path, robot, joint_order)
    if str(own['format']) != FORMAT:
        raise MotionError(f'{path}: key \'format\' is {str(own["format"])!r}, expected '
                          f'{FORMAT!r}')
    if int(own.get('version', 0)) > FORMAT_VERSION:
        raise MotionError(f'{path}: key \'version\' {int(own["version"])} is newer than this '
                          f'bcg_ros reads ({FORMAT_VERSION})')
    names = tuple(str(n) for n in own.get('joint_names', ()))
    if names != g1.JOINT_NAMES:
        raise MotionError(f'{path}: key \'joint_names\' does not list the G1 joints in motor '
                          f'order')
    sites = tuple(str(n) for n in own.get('key_sites', ()))
    if sites != g1.KEY_SITES:
        raise MotionError(f'{path}: key \'key_sites\' is {sites}, expected {g1.KEY_SITES}')
    missing = [f for f in _ARRAY_FIELDS + ('fps', 'name') if f not in own]
    if missing:
        raise MotionError(f'{path}: key(s) {missing} missing')
    arrays = {f: np.asarray(own[f], np.float64) for f in _ARRAY_FIELDS}
    _validate(str(path), arrays['root_pos'], arrays['root_quat'], arrays['joint_pos'],
              (("key 'root_pos' ", 0), ("key 'root_quat' ", 0), ("key 'joint_pos' ", 0)))
    for f, arr in arrays.items():
        bad = np.argwhere(~np.isfinite(arr.reshape(len(arr), -1)))
        if bad.size:
            r, c = bad[0]
            raise MotionError(f'{path}: key {f!r} row {r}, column {c}: value is not finite')
    try:
        return Motion(name=str(own['name']), fps=float(own['fps']), **arrays)
    except ValueError as exc:
        raise MotionError(f'{path}: {exc}') from exc


class _open_npz:
    """np.load of an npz as a context manager whose errors name the file."""

    def __init__(self, path: pathlib.Path):
        self.path = path

    def __enter__(self):
        if not self.path.is_file():
            raise MotionError(f'{self.path}: no such motion file')
        try:
            self.npz = np.load(self.path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise MotionError(f'{self.path}: not a readable npz file: {exc}') from exc
        return self.npz

    def __exit__(self, *exc):
        self.npz.close()
        return False


def builtin_path(name: str) -> pathlib.Path:
    """Return the file of a built-in clip."""
    return MOTIONS_DIR / f'{name}.npz'


def load_motion(name_or_path: Union[str, pathlib.Path], control_dt: float = g1.CONTROL_DT,
                robot=None, joint_order: Optional[str] = None) -> Motion:
    """
    Load a built-in clip by name or a motion file by extension, at 1 / control_dt fps.

    ``joint_order``: the column order of a BeyondMimic npz without joint names
    (:func:`load_beyondmimic`).
    """
    if str(name_or_path) in BUILTIN:
        path = builtin_path(str(name_or_path))
    else:
        path = pathlib.Path(name_or_path)
        if not path.is_file():
            raise MotionError(f'{path}: no such motion file (built-in motions: '
                              f'{", ".join(BUILTIN)})')
    suffix = path.suffix.lower()
    if suffix == '.csv':
        motion = load_csv(path, robot=robot)
    elif suffix == '.npz':
        motion = load_npz(path, robot=robot, joint_order=joint_order)
    else:
        raise MotionError(f'{path}: unknown motion file type {suffix!r} (expected .csv or .npz)')
    return resample(motion, 1.0 / control_dt, robot)


# Checks of a whole motion.

def check_motion(motion: Motion, robot=None) -> List[str]:
    """
    List the problems that make ``motion`` kinematically invalid for the G1 (or none).

    Checks: finite values; unit root quaternions; joint angles within the G1
    limits and speeds within the motors' rated speeds; stored key points agree
    with forward kinematics; no foot sphere below the floor by more than
    FLOOR_TOL; a foot sphere touching the floor (lowest point under
    CONTACT_HEIGHT) moves at most SLIDE_TOL horizontally while it keeps
    touching, i.e. the root moves as the stance foot allows.
    """
    problems = []
    tag = f'motion {motion.name!r}'
    if motion.num_frames < MIN_FRAMES:
        problems.append(f'{tag}: {motion.num_frames} frames, fewer than {MIN_FRAMES}')
    for f in _ARRAY_FIELDS:
        arr = np.asarray(getattr(motion, f)).reshape(motion.num_frames, -1)
        bad = np.argwhere(~np.isfinite(arr))
        if bad.size:
            problems.append(f'{tag}: {f} row {bad[0][0]}, column {bad[0][1]} is not finite')
    if problems:
        return problems
    norm = np.linalg.norm(motion.root_quat, axis=-1)
    if np.max(np.abs(norm - 1.0)) > 1e-6:
        r = int(np.argmax(np.abs(norm - 1.0)))
        problems.append(f'{tag}: root_quat row {r} has norm {norm[r]:.8f}, not 1')
    for what, value, lo, hi in (
            ('angle', motion.joint_pos, np.asarray(g1.JOINT_LOWER), np.asarray(g1.JOINT_UPPER)),
            ('speed', motion.joint_vel, -np.asarray(g1.VELOCITY_LIMIT),
             np.asarray(g1.VELOCITY_LIMIT))):
        out = (value < lo - JOINT_LIMIT_TOL) | (value > hi + JOINT_LIMIT_TOL)
        for c in np.flatnonzero(out.any(axis=0)):
            r = int(np.flatnonzero(out[:, c])[0])
            problems.append(f'{tag}: joint {what} row {r}, column {c} ({g1.JOINT_NAMES[c]}): '
                            f'{value[r, c]:.4f} outside [{lo[c]:.4f}, {hi[c]:.4f}] '
                            f'({int(out[:, c].sum())} frames)')
    key, spheres = forward_kinematics(motion.root_pos, motion.root_quat, motion.joint_pos, robot)
    err = np.linalg.norm(key - motion.key_pos, axis=-1)
    if err.max() > KEY_POS_TOL:
        r, k = np.unravel_index(np.argmax(err), err.shape)
        problems.append(f'{tag}: key_pos row {r}, point {k} ({g1.KEY_SITES[k]}) is '
                        f'{err[r, k] * 1e3:.1f} mm from forward kinematics')
    bottom = spheres[..., 2] - g1.FOOT_SPHERE_RADIUS
    if bottom.min() < -FLOOR_TOL:
        r, s = np.unravel_index(np.argmin(bottom), bottom.shape)
        problems.append(f'{tag}: row {r}: foot sphere {s} ({g1.FOOT_SPHERES[s][0]}) is '
                        f'{-bottom[r, s] * 1e3:.1f} mm below the floor '
                        f'({int((bottom < -FLOOR_TOL).any(axis=1).sum())} frames)')
    slide = stance_slide(spheres)
    if slide.max() > SLIDE_TOL:
        r, s = np.unravel_index(np.argmax(slide), slide.shape)
        problems.append(f'{tag}: row {r}: foot sphere {s} ({g1.FOOT_SPHERES[s][0]}) slid '
                        f'{slide[r, s] * 1e3:.1f} mm while touching the floor (tolerance '
                        f'{SLIDE_TOL * 1e3:.0f} mm)')
    return problems


def stance_slide(spheres: np.ndarray) -> np.ndarray:
    """
    Return how far [T, S] each foot sphere is from where its floor contact began.

    Horizontal distance, 0 while not touching; ``spheres`` are centres [T, S, 3].
    """
    touching = spheres[..., 2] - g1.FOOT_SPHERE_RADIUS < CONTACT_HEIGHT
    slide = np.zeros(touching.shape)
    start = spheres[0, :, :2].copy()
    for t in range(len(spheres)):
        begins = touching[t] & (~touching[t - 1] if t > 0 else True)
        start[begins] = spheres[t, begins, :2]
        d = np.linalg.norm(spheres[t, :, :2] - start, axis=-1)
        slide[t] = np.where(touching[t], d, 0.0)
    return slide


def support_polygon(points: np.ndarray) -> np.ndarray:
    """
    Return the convex hull [N, 2] of 2D ``points``, counter-clockwise.

    Fewer than three distinct points (or collinear ones) give the segment's two
    ends or the single point: a support on two toe spheres is a line.
    """
    pts = sorted(set(map(tuple, np.round(np.asarray(points, np.float64), 9))))
    if len(pts) <= 2:
        return np.asarray(pts, np.float64).reshape(-1, 2)

    def cross(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])
    chains = []
    for seq in (pts, pts[::-1]):
        chain: list = []
        for p in seq:
            while len(chain) >= 2 and cross(chain[-2], chain[-1], p) <= 1e-12:
                chain.pop()
            chain.append(p)
        chains.append(chain[:-1])
    hull = np.asarray(chains[0] + chains[1], np.float64)
    return hull if len(hull) >= 3 else hull[[0, -1]]


def closest_in_polygon(poly: np.ndarray, p: np.ndarray) -> Tuple[np.ndarray, float]:
    """
    Return the point of convex ``poly`` (from :func:`support_polygon`) nearest ``p``.

    Also its signed distance: positive outside (how far ``p`` is from the
    polygon), negative inside (how far from the nearest edge).
    """
    p = np.asarray(p, np.float64)
    if len(poly) == 1:
        return poly[0].copy(), float(np.linalg.norm(p - poly[0]))
    a, b = poly, np.roll(poly, -1, axis=0)
    if len(poly) == 2:
        a, b = poly[:1], poly[1:]
    ab = b - a
    s = np.clip(np.einsum('ij,ij->i', p - a, ab) / np.maximum((ab * ab).sum(-1), 1e-18), 0, 1)
    near = a + s[:, None] * ab
    dist = np.linalg.norm(near - p, axis=-1)
    k = int(np.argmin(dist))
    inside = len(poly) >= 3 and np.all(ab[:, 0] * (p[1] - a[:, 1])
                                       - ab[:, 1] * (p[0] - a[:, 0]) >= 0.0)
    if inside:
        return p.copy(), -float(dist[k])
    return near[k], float(dist[k])


def centre_of_pressure(motion: Motion, robot=None
                       ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """
    Return what the floor must do for ``motion``: CoP [T, 2], force [T, 3], CoM [T, 3].

    Newton-Euler on the whole robot from its kinematics alone: the ground force
    is ``m (a_com - g)``, the centre of pressure the point of the floor (z = 0)
    about which that force gives the rate of change of the angular momentum
    about the centre of mass (MuJoCo's ``subtree_angmom``), both by central
    differences. Where the force is small (flight) the CoP is meaningless;
    :func:`balance_stats` only reads it in frames with a foot down.
    """
    import mujoco
    robot = robot if robot is not None else _default_model()
    model = robot.model
    data = mujoco.MjData(model)
    qpos, qvel = reference_state(motion, robot)
    root = int(model.jnt_bodyid[0])
    com, vel, mom = (np.empty((motion.num_frames, 3)) for _ in range(3))
    for t in range(motion.num_frames):
        data.qpos[:], data.qvel[:] = qpos[t], qvel[t]
        mujoco.mj_kinematics(model, data)
        mujoco.mj_comPos(model, data)
        mujoco.mj_comVel(model, data)
        mujoco.mj_subtreeVel(model, data)
        com[t], vel[t], mom[t] = (data.subtree_com[root], data.subtree_linvel[root],
                                  data.subtree_angmom[root])
    mass = float(model.body_subtreemass[root])
    force = mass * (_gradient(vel, motion.fps) + np.array([0.0, 0.0, GRAVITY]))
    torque = _gradient(mom, motion.fps)
    fz = np.where(np.abs(force[:, 2]) > 1e-6, force[:, 2], 1e-6)
    cop = np.stack([com[:, 0] - (torque[:, 1] + com[:, 2] * force[:, 0]) / fz,
                    com[:, 1] + (torque[:, 0] - com[:, 2] * force[:, 1]) / fz], axis=-1)
    return cop, force, com


def balance_stats(motion: Motion, robot=None) -> Dict[str, float]:
    """
    Return how far the motion's centre of pressure leaves the feet.

    ``cop_outside_share``: of the frames with a foot sphere down, the share whose
    :func:`centre_of_pressure` lies more than COP_TOL outside the support
    polygon (the convex hull of the touching spheres' centres);
    ``cop_outside_max_cm``: the farthest it gets [cm]. A motion with a high
    share asks for forces no foot can give: a policy that follows it closely
    falls, one that stays up must move otherwise.
    """
    cop, _, _ = centre_of_pressure(motion, robot)
    _, spheres = forward_kinematics(motion.root_pos, motion.root_quat, motion.joint_pos, robot)
    touching = spheres[..., 2] - g1.FOOT_SPHERE_RADIUS < CONTACT_HEIGHT
    return outside_figures(np.array([
        closest_in_polygon(support_polygon(spheres[t, touching[t], :2]), cop[t])[1]
        for t in range(motion.num_frames) if touching[t].any()]))


def outside_figures(distance: np.ndarray) -> Dict[str, float]:
    """Return :func:`balance_stats`'s figures from the CoP's signed distances [m] in stance."""
    out = np.maximum(np.asarray(distance, np.float64), 0.0)
    return {'cop_outside_share': float(np.mean(out > COP_TOL)) if len(out) else 0.0,
            'cop_outside_max_cm': float(out.max(initial=0.0) * 100.0)}


def runs_of(mask: np.ndarray) -> List[Tuple[int, int]]:
    """Return the (first, one past the last) index of each run of True in ``mask``."""
    edges = np.diff(np.concatenate([[0], np.asarray(mask).astype(int), [0]]))
    return list(zip(np.flatnonzero(edges > 0), np.flatnonzero(edges < 0)))


def motion_stats(motion: Motion, robot=None) -> Dict[str, float]:
    """
    Return figures that say how much, and how, a motion moves.

    Keys, in this order:

    - ``duration_s``;
    - ``root_travel_m``: horizontal path length of the root (pelvis);
      ``net_displacement_m``: horizontal distance from its first to its last
      position; ``max_root_rise_m``: highest root height above frame 0's;
    - ``flight_phases``, ``longest_flight_s``, ``shortest_flight_s`` (0 without
      one), ``total_flight_s``: runs of frames in which the lowest point of every
      foot sphere is above CONTACT_HEIGHT (both feet off the floor), a frame
      counting 1 / fps;
    - ``max_foot_height_m``: the highest either foot's lowest sphere point gets;
      ``touchdowns``: how often a foot comes back down (its lowest sphere point
      from above CONTACT_HEIGHT to below it), i.e. steps, landings and kicks;
    - ``yaw_accumulated_deg``: summed absolute change of the pelvis heading (the
      yaw of its x axis); ``yaw_net_deg``: last heading minus the first;
    - ``peak_joint_speed``: largest joint speed as a fraction of that motor's
      rated speed; ``peak_joint_acc``: largest joint acceleration [rad/s^2], from
      consecutive joint velocities;
    - ``stand_still_cm``: the E_track of standing still (:func:`tracking_error`
      over all bodies, frame 0's pose held against every frame) [cm];
    - ``cop_outside_share``, ``cop_outside_max_cm``: :func:`balance_stats`.

    Foot spheres come from :func:`forward_kinematics` on ``robot`` (the project's
    model when None).
    """
    _, spheres = forward_kinematics(motion.root_pos, motion.root_quat, motion.joint_pos, robot)
    bodies = body_positions(motion, robot)
    bottom = spheres[..., 2] - g1.FOOT_SPHERE_RADIUS
    airborne = bottom.min(axis=1) > CONTACT_HEIGHT
    flights = np.array([b - a for a, b in runs_of(airborne)], np.float64) / motion.fps
    feet = [bottom[:, [s for s, (b, _) in enumerate(g1.FOOT_SPHERES) if b == foot]].min(axis=1)
            for foot in g1.FOOT_BODIES]
    down = [f < CONTACT_HEIGHT for f in feet]
    xy = motion.root_pos[:, :2]
    q = motion.root_quat
    yaw = np.unwrap(np.arctan2(2.0 * (q[:, 0] * q[:, 3] + q[:, 1] * q[:, 2]),
                               1.0 - 2.0 * (q[:, 2] ** 2 + q[:, 3] ** 2)))
    acc = np.abs(np.diff(motion.joint_vel, axis=0)) * motion.fps
    return {
        'duration_s': motion.duration,
        'root_travel_m': float(np.linalg.norm(np.diff(xy, axis=0), axis=-1).sum()),
        'net_displacement_m': float(np.linalg.norm(xy[-1] - xy[0])),
        'max_root_rise_m': float(motion.root_pos[:, 2].max() - motion.root_pos[0, 2]),
        'flight_phases': int(len(flights)),
        'longest_flight_s': float(flights.max(initial=0.0)),
        'shortest_flight_s': float(flights.min(initial=np.inf)) if len(flights) else 0.0,
        'total_flight_s': float(flights.sum()),
        'max_foot_height_m': float(np.max(feet)),
        'touchdowns': int(sum(np.sum(d[1:] & ~d[:-1]) for d in down)),
        'yaw_accumulated_deg': float(np.degrees(np.abs(np.diff(yaw)).sum())),
        'yaw_net_deg': float(np.degrees(yaw[-1] - yaw[0])),
        'peak_joint_speed': float((np.abs(motion.joint_vel)
                                   / np.asarray(g1.VELOCITY_LIMIT)).max()),
        'peak_joint_acc': float(acc.max(initial=0.0)),
        'stand_still_cm': float(tracking_error(bodies[:1], bodies).mean() * 100.0),
        **balance_stats(motion, robot),
    }


# ADD features.

FEATURE_TERMS: Tuple[Tuple[str, int], ...] = (
    ('root_height', 1),
    ('root_rot_6d', 6),
    ('joint_pos', g1.NUM_JOINTS),
    ('key_pos_root', 3 * len(g1.KEY_SITES)),
    ('root_lin_vel_root', 3),
    ('root_ang_vel_root', 3),
    ('joint_vel', g1.NUM_JOINTS),
)
"""The ADD feature vector, in order: (name, size)."""
FEATURE_SIZE = sum(n for _, n in FEATURE_TERMS)


def add_features(root_pos, root_quat, joint_pos, joint_vel, root_lin_vel, root_ang_vel,
                 key_pos, xp=np):
    """
    Return the ADD features [..., FEATURE_SIZE] of a state (reference or simulated).

    Arguments are arrays with any leading batch shape: root_pos [..., 3],
    root_quat [..., 4] (w, x, y, z), joint_pos and joint_vel [..., 29],
    root_lin_vel and root_ang_vel [..., 3] in the world frame, key_pos
    [..., K, 3] in the world frame. Terms as FEATURE_TERMS lists: root height,
    root rotation as 6D, joint angles, key points relative to the root in the
    root frame, root linear and angular velocity in the root frame, joint
    velocities. Works with xp=numpy or jax.numpy (differentiable in the latter).
    """
    rel = rotation.quat_rotate_inverse(root_quat[..., None, :],
                                       key_pos - root_pos[..., None, :], xp)
    batch = rel.shape[:-2]
    return xp.concatenate([
        root_pos[..., 2:3],
        rotation.quat_to_6d(root_quat, xp),
        joint_pos,
        xp.reshape(rel, batch + (rel.shape[-2] * 3,)),
        rotation.quat_rotate_inverse(root_quat, root_lin_vel, xp),
        rotation.quat_rotate_inverse(root_quat, root_ang_vel, xp),
        joint_vel,
    ], axis=-1)


def motion_features(motion: Motion, xp=np):
    """Return the ADD features [T, FEATURE_SIZE] of every frame of a motion."""
    return add_features(*(xp.asarray(getattr(motion, f)) for f in (
        'root_pos', 'root_quat', 'joint_pos', 'joint_vel', 'root_lin_vel', 'root_ang_vel',
        'key_pos')), xp=xp)
