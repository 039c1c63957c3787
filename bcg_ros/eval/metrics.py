"""
The paper's sim2sim metrics, as small pure functions of recorded runs.

- falls: runs in which the root height drops below 0.3 m, or whose simulation
  diverged (a non-finite or exploding state: a NaN height never compares below);
- mean foot penetration depth in MuJoCo, and delta-d = training simulator's
  mean depth minus MuJoCo's [mm] (the trainer stores its own figure in the
  policy's metadata);
- E_track: global mean per-body position error against the reference [cm], over
  all of the G1's bodies (g1.TRACK_BODIES, :func:`bcg_ros.motion.tracking_error`);
- anchor-relative error: the same with both sides' key points expressed in
  their own root (pelvis) frame [cm];
- joint error: mean absolute joint angle error [rad];
- for velocity policies: commanded-vs-achieved base velocity error.
"""

from typing import Dict, List, Optional, Sequence

import numpy as np

from bcg_ros import rotation
from bcg_ros.core import contact
from bcg_ros.motion import body_positions, Motion, tracking_error

FALL_HEIGHT = 0.3
"""Root height [m] below which a run counts as a fall."""


def fall_index(root_height: np.ndarray, threshold: float = FALL_HEIGHT) -> int:
    """First row whose root height is below ``threshold``; -1 when there is none."""
    below = np.flatnonzero(np.asarray(root_height) < threshold)
    return int(below[0]) if below.size else -1


def mean_penetration_mm(depths: np.ndarray) -> float:
    """Mean depth [mm] over all penetrating foot contacts (depths in m, positive); 0 if none."""
    depths = np.asarray(depths, float).reshape(-1)
    total, count = contact.penetration_totals(depths, xp=np)
    return float(total / count) if count > 0 else 0.0


def delta_d_mm(train_mm: Optional[float], mujoco_mm: float) -> Optional[float]:
    """Training simulator's mean penetration minus MuJoCo's [mm]; None without the first."""
    return None if train_mm is None else float(train_mm - mujoco_mm)


def e_track_cm(sim_body: np.ndarray, ref_body: np.ndarray) -> float:
    """E_track: global mean per-body position error [cm], body arrays [T, B, 3]."""
    return float(tracking_error(np.asarray(sim_body), np.asarray(ref_body)).mean() * 100.0)


def in_root_frame(key: np.ndarray, root_pos: np.ndarray, root_quat: np.ndarray) -> np.ndarray:
    """Key points [T, K, 3] in their root's frame (root_pos [T, 3], root_quat [T, 4])."""
    rel = np.asarray(key) - np.asarray(root_pos)[:, None, :]
    q = np.broadcast_to(np.asarray(root_quat)[:, None, :], rel.shape[:-1] + (4,))
    return rotation.quat_rotate_inverse(q, rel)


def anchor_error_cm(sim_key, sim_root_pos, sim_root_quat,
                    ref_key, ref_root_pos, ref_root_quat) -> float:
    """Mean key-point error [cm] with each side's points in its own root frame."""
    a = in_root_frame(sim_key, sim_root_pos, sim_root_quat)
    b = in_root_frame(ref_key, ref_root_pos, ref_root_quat)
    return float(np.linalg.norm(a - b, axis=-1).mean() * 100.0)


def joint_error_rad(sim_q: np.ndarray, ref_q: np.ndarray) -> float:
    """Mean absolute joint angle error [rad] over joints and time."""
    return float(np.abs(np.asarray(sim_q) - np.asarray(ref_q)).mean())


def base_velocity(root_quat: np.ndarray, root_lin_vel_world: np.ndarray,
                  root_ang_vel_body: np.ndarray) -> np.ndarray:
    """[T, 3] achieved (vx, vy) in the base frame and yaw rate wz, the command's terms."""
    v = rotation.quat_rotate_inverse(np.asarray(root_quat), np.asarray(root_lin_vel_world))
    return np.concatenate([v[:, :2], np.asarray(root_ang_vel_body)[:, 2:3]], axis=-1)


def velocity_errors(command: np.ndarray, achieved: np.ndarray) -> Dict[str, float]:
    """Mean linear (vx, vy) error norm [m/s] and mean absolute yaw rate error [rad/s]."""
    e = np.asarray(command) - np.asarray(achieved)
    return {'lin_vel_error': float(np.linalg.norm(e[:, :2], axis=-1).mean()),
            'ang_vel_error': float(np.abs(e[:, 2]).mean())}


def run_metrics(run, motion: Optional[Motion] = None, fall_height: float = FALL_HEIGHT,
                velocity: bool = False, warmup: float = 1.0,
                ref_body: Optional[np.ndarray] = None,
                ground_height: Optional[np.ndarray] = None) -> Dict:
    """
    Compute the metrics of one run (a :class:`bcg_ros.eval.rollout.Run`).

    ``ref_body`` [T, B, 3]: the motion's body origins (``body_positions``),
    computed here when not given. ``ground_height`` [T]: the terrain's height under the
    pelvis, so that a fall is a pelvis low over the ground, not below z = 0 (a robot
    lying on a 45 cm stair is down). A diverged run falls at its divergence.
    """
    root_height = run.root_pos[:, 2] - (0.0 if ground_height is None else ground_height)
    fi = fall_index(root_height, fall_height)
    diverged = bool(run.diverged)
    end = float(run.time[-1]) if run.time.size else 0.0
    fall_time = float(run.time[fi]) if fi >= 0 else (end if diverged else None)
    out = {'seed': int(run.seed), 'fell': fi >= 0 or diverged, 'fall_time': fall_time,
           'diverged': run.diverged or None,
           'duration': end,
           'min_root_height': float(root_height.min()) if run.time.size else None,
           'penetration_mm': mean_penetration_mm(run.penetration),
           'max_penetration_mm': float(run.penetration.max() * 1e3) if run.penetration.size
           else 0.0,
           'friction_scale': float(run.friction_scale), 'pushes': int(run.pushes)}
    if motion is not None and run.time.size:   # a run that diverged at once has no rows
        f = run.frame
        if ref_body is None:
            ref_body = body_positions(motion)
        out['e_track_cm'] = e_track_cm(run.body_pos, ref_body[f])
        out['anchor_error_cm'] = anchor_error_cm(run.key_pos, run.root_pos, run.root_quat,
                                                 motion.key_pos[f], motion.root_pos[f],
                                                 motion.root_quat[f])
        out['joint_error_rad'] = joint_error_rad(run.joint_pos, motion.joint_pos[f])
        if not velocity:
            # How fast it moves against how fast the clip does (a run that trails its
            # clip shows here), up to a fall, in each one's own base frame.
            upto = fi if fi > 0 else len(run.time)
            clip = base_velocity(motion.root_quat[f], motion.root_lin_vel[f],
                                 rotation.quat_rotate_inverse(motion.root_quat[f],
                                                              motion.root_ang_vel[f]))
            ach = base_velocity(run.root_quat, run.root_lin_vel, run.root_ang_vel)
            out.update(velocity_errors(clip[:upto], ach[:upto]))
    if velocity:
        keep = run.time > warmup
        if not np.any(keep):
            keep = np.ones_like(run.time, bool)
        ach = base_velocity(run.root_quat[keep], run.root_lin_vel[keep], run.root_ang_vel[keep])
        out.update(velocity_errors(run.command[keep], ach))
    return out


_MEAN_KEYS = ('penetration_mm', 'e_track_cm', 'anchor_error_cm', 'joint_error_rad',
              'lin_vel_error', 'ang_vel_error')


def summarize(per_run: List[Dict], train_penetration_mm: Optional[float] = None) -> Dict:
    """Across runs: falls as a count, the other metrics as mean and std, delta-d."""
    out = {'runs': len(per_run), 'falls': int(sum(r['fell'] for r in per_run)),
           'diverged': int(sum(bool(r.get('diverged')) for r in per_run))}
    for k in _MEAN_KEYS:
        vals = [r[k] for r in per_run if k in r]
        if vals:
            out[k] = float(np.mean(vals))
            out[k + '_std'] = float(np.std(vals))
    out['train_penetration_mm'] = train_penetration_mm
    out['delta_d_mm'] = delta_d_mm(train_penetration_mm, out.get('penetration_mm', 0.0))
    return out


def fall_times(per_run: Sequence[Dict]) -> List[Optional[float]]:
    """Fall time of each run (None where it stood)."""
    return [r['fall_time'] for r in per_run]
