#!/usr/bin/env python3
"""
Make the built-in G1 reference clips (run, jump, fight, dance) from keyframes.

Each clip is written as ``bcg_ros/motions/<name>.npz`` at the control rate
(50 fps) and passes :func:`bcg_ros.motion.check_motion`; the script refuses to
write one that does not. How the clips are made is described in
``bcg_ros/motions/README.md``. In short: the root pose and the feet are
keyframed in Cartesian space and the upper body in joint space; each leg's six
joints are solved per frame by damped least squares so that the ankle-roll link
reaches its keyframed pose exactly (stance feet flat and still on the floor);
velocities are finite differences; key points come from MuJoCo's kinematics.

Run from the repository root: ``PYTHONPATH=. python scripts/make_motions.py``.
"""

import argparse
import pathlib
import sys
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import mujoco
import numpy as np
from scipy.interpolate import PchipInterpolator

from bcg_ros import motion as motion_lib
from bcg_ros.robot import g1
from bcg_ros.robot import model as g1_model

FPS = 1.0 / g1.CONTROL_DT
GRAVITY = 9.81
FOOT_Y = 0.1185
"""Lateral ankle position of the standing pose [m]."""
SPHERES = np.array([p for _, p in g1.FOOT_SPHERES[:4]])
"""Foot sphere centres in the ankle-roll link frame (the same for both feet)."""
STAND_Z = 0.757
"""Root height of the standing pose with flat feet on the floor [m]."""
IK_TOL = 1e-7
"""Leg IK: largest accepted pose error (position [m] plus rotation [rad])."""

LEGS = (tuple(range(0, 6)), tuple(range(6, 12)))
"""Motor indices of the left and right leg joints."""


@dataclass
class Clip:
    """Cartesian and joint-space tracks of a clip, sampled at FPS."""

    t: np.ndarray
    """[T] time [s]."""
    root_pos: np.ndarray
    """[T, 3] pelvis position [m]."""
    root_rpy: np.ndarray
    """[T, 3] pelvis roll, pitch, yaw [rad] (applied yaw, then pitch, then roll)."""
    feet: np.ndarray
    """[T, 2, 3] left/right ankle x, y and height of the foot's lowest point [m]."""
    foot_rot: np.ndarray
    """[T, 2, 2] left/right foot pitch (toe down positive) and yaw [rad]; no roll."""
    upper: np.ndarray
    """[T, 29] joint angles; the leg columns are replaced by the IK solution."""


# Time functions.

def smooth5(s):
    """Quintic smoothstep: 0 -> 1 with zero velocity and acceleration at both ends."""
    s = np.clip(s, 0.0, 1.0)
    return s * s * s * (10.0 + s * (-15.0 + 6.0 * s))


def keys(t: np.ndarray, points: Sequence[Tuple[float, float]]) -> np.ndarray:
    """
    Monotone cubic (PCHIP) through (time, value) keyframes, held beyond the ends.

    PCHIP does not overshoot between keys, so a value held across two equal
    keys stays put and a joint keyed within its limits stays within them.
    """
    kt, kv = np.array(points, dtype=np.float64).T
    # A held key one second beyond each end makes PCHIP's slope zero at the ends, so
    # the track comes to rest there instead of stopping with a jump in velocity.
    kt = np.concatenate([[kt[0] - 1.0], kt, [kt[-1] + 1.0]])
    kv = np.concatenate([[kv[0]], kv, [kv[-1]]])
    return PchipInterpolator(kt, kv)(np.clip(t, kt[0], kt[-1]))


def hermite(s, p0, v0, p1, v1, span):
    """Cubic Hermite on s in [0, 1] with end values p and end rates v (per second)."""
    s2, s3 = s * s, s * s * s
    return ((2 * s3 - 3 * s2 + 1) * p0 + (s3 - 2 * s2 + s) * span * v0
            + (-2 * s3 + 3 * s2) * p1 + (s3 - s2) * span * v1)


def rpy_to_quat(rpy: np.ndarray) -> np.ndarray:
    """(w, x, y, z) of R = Rz(yaw) Ry(pitch) Rx(roll), rows of rpy [T, 3]."""
    r, p, y = (rpy[:, i] / 2.0 for i in range(3))
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    return np.stack([cr * cp * cy + sr * sp * sy, sr * cp * cy - cr * sp * sy,
                     cr * sp * cy + sr * cp * sy, cr * cp * sy - sr * sp * cy], axis=-1)


def joint_keys(t: np.ndarray, frames: Sequence[Tuple[float, Dict[str, float]]]) -> np.ndarray:
    """
    Return [T, 29] joint tracks from keyframes (time, {joint: angle}).

    A joint a keyframe does not name takes its standing angle at that keyframe.
    """
    out = np.tile(np.asarray(g1.DEFAULT_POSE), (len(t), 1))
    for j, name in enumerate(g1.JOINT_NAMES):
        if any(name in f for _, f in frames):
            out[:, j] = keys(t, [(ft, f.get(name, g1.DEFAULT_POSE[j])) for ft, f in frames])
    return out


def arms(ls_pitch=0.2, ls_roll=0.2, ls_yaw=0.0, l_elbow=0.6, rs_pitch=0.2, rs_roll=-0.2,
         rs_yaw=0.0, r_elbow=0.6, **extra) -> Dict[str, float]:
    """Return an upper-body keyframe: arm joints by short names, others by full name."""
    d = {'left_shoulder_pitch_joint': ls_pitch, 'left_shoulder_roll_joint': ls_roll,
         'left_shoulder_yaw_joint': ls_yaw, 'left_elbow_joint': l_elbow,
         'right_shoulder_pitch_joint': rs_pitch, 'right_shoulder_roll_joint': rs_roll,
         'right_shoulder_yaw_joint': rs_yaw, 'right_elbow_joint': r_elbow}
    d.update(extra)
    return d


def planted(t: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Return feet flat at the standing stance for the whole clip."""
    feet = np.zeros((len(t), 2, 3))
    feet[:, 0, 1], feet[:, 1, 1] = FOOT_Y, -FOOT_Y
    return feet, np.zeros((len(t), 2, 2))


# The clips.

def make_run() -> Clip:
    """
    Make a jog at 1.2 m/s with 70 ms flight phases, from standing back to standing.

    Cadence and ground time follow the root speed (walking steps with double
    support at the start and the end, flight phases at speed); foot
    placements follow the root (each foot lands half a stance ahead of where
    the root will be at mid-stance); during flight the root is ballistic.
    """
    v_max, t_accel, t_decel, ramp, duration = 1.2, 0.6, 3.4, 1.4, 5.4
    t = np.arange(int(round(duration * FPS)) + 1) / FPS

    def speed(tt):
        return v_max * smooth5((tt - t_accel) / ramp) * (1.0 - smooth5((tt - t_decel) / ramp))
    fine = np.linspace(0.0, duration, 20001)
    x_fine = np.concatenate([[0.0], np.cumsum(0.5 * (speed(fine[1:]) + speed(fine[:-1]))
                                              * np.diff(fine))])

    def root_x(tt):
        return np.interp(tt, fine, x_fine)

    def period(v):
        """Return the step period [s]: 0.45 s standing still, 0.32 s at v_max."""
        return 0.45 - 0.13 * v / v_max

    def stance(v):
        """
        Return a foot's ground time [s].

        0.1 s of double support standing still, 70 ms of flight at v_max.
        """
        return period(v) + 0.1 - 0.17 * v / v_max
    # Footfalls [side, touchdown, liftoff, x], side 0 left, 1 right: first the two
    # standing feet, then the steps, right foot first; the last two stay down.
    t_first = t_accel + 0.3
    falls = [[1, 0.0, t_first - 0.3, 0.0], [0, 0.0, t_first + 0.1, 0.0]]
    tdk, side = t_first, 1
    while True:
        v = speed(tdk)
        # The last step: the root has less than 3 cm left to go.
        last = root_x(duration) - root_x(tdk) < 0.03
        x = root_x(duration) if last else root_x(tdk + 0.5 * stance(v))
        falls.append([side, tdk, np.inf if last else tdk + stance(v), x])
        if last:
            if falls[-2][2] < np.inf:
                falls[-2][2], falls[-2][3] = np.inf, x
            break
        tdk, side = tdk + period(v), 1 - side
    if falls[-1][1] + 0.3 > duration:
        raise RuntimeError(f'run: the last step lands at {falls[-1][1]:.2f} s, the clip ends '
                           f'at {duration} s')
    # The foot stepping at footfall k lifts at the liftoff of footfall k - 2.
    feet, foot_rot = np.zeros((len(t), 2, 3)), np.zeros((len(t), 2, 2))
    speed_frac = speed(t) / v_max
    for i, f in enumerate(falls):
        side, tdk, lo, x = f
        y = FOOT_Y if side == 0 else -FOOT_Y
        stance = (t >= tdk) & (t <= lo)
        feet[stance, side] = (x, y, 0.0)
        nxt = next((g for g in falls[i + 1:] if g[0] == side), None)
        if nxt is None:
            continue
        swing = (t > lo) & (t < nxt[1])
        s = (t[swing] - lo) / (nxt[1] - lo)
        clearance = 0.05 + 0.04 * speed_frac[swing]
        # Forward a cubic (not a quintic): the foot picks up speed sooner, so it trails
        # the hip less after lift-off. Up a sine: the foot leaves and meets the floor
        # with a vertical speed, as a running foot does, and is clear of the floor
        # before it has moved forward.
        feet[swing, side] = np.stack([x + (nxt[3] - x) * s * s * (3.0 - 2.0 * s),
                                      np.full(s.shape, y),
                                      clearance * np.sin(np.pi * s)], axis=-1)
        # Toes down in the swing, so a bent knee does not need more ankle flexion than
        # the ankle has.
        foot_rot[swing, side, 0] = (0.2 + 0.4 * speed_frac[swing]) * np.sin(np.pi * s) ** 2
    # Root height: lower while jogging, plus the bounce the contacts impose.
    z = STAND_Z - 0.035 * speed_frac + _bounce(t, falls)
    # Gait phase: 0 at a left touchdown, pi at a right one.
    phase = np.interp(t, [f[1] for f in falls[2:]], np.pi * np.arange(1, len(falls) - 1))
    swing_amp = speed_frac * np.cos(phase)
    root_rpy = np.stack([np.zeros_like(t), 0.08 * speed_frac, -0.06 * swing_amp], axis=-1)
    upper = np.tile(np.asarray(g1.DEFAULT_POSE), (len(t), 1))
    for name, value in (('left_shoulder_pitch_joint', 0.2 + 0.45 * swing_amp),
                        ('right_shoulder_pitch_joint', 0.2 - 0.45 * swing_amp),
                        ('left_elbow_joint', 0.6 - 0.5 * speed_frac),
                        ('right_elbow_joint', 0.6 - 0.5 * speed_frac),
                        ('waist_yaw_joint', 0.06 * swing_amp)):
        upper[:, g1.joint_index(name)] = value
    root_pos = np.stack([root_x(t), np.zeros_like(t), z], axis=-1)
    return Clip(t, root_pos, root_rpy, feet, foot_rot, upper)


def _bounce(t: np.ndarray, falls: List[list]) -> np.ndarray:
    """
    Return the vertical root offset the contact schedule imposes.

    A ballistic parabola in each flight; between flights a cubic that joins
    their landing and take-off speeds.
    """
    events = sorted({e for f in falls for e in (f[1], f[2]) if np.isfinite(e)} | {0.0, t[-1]})

    def touching(tt):
        return any(f[1] <= tt <= f[2] for f in falls)
    flights = [(a, b) for a, b in zip(events[:-1], events[1:])
               if not touching(0.5 * (a + b))]
    rate = {}
    for a, b in flights:
        rate[a], rate[b] = 0.5 * GRAVITY * (b - a), -0.5 * GRAVITY * (b - a)
    out = np.zeros_like(t)
    for a, b in zip(events[:-1], events[1:]):
        sel = (t >= a) & (t <= b)
        if (a, b) in flights:
            out[sel] = 0.5 * GRAVITY * (t[sel] - a) * (b - t[sel])
        else:
            out[sel] = hermite((t[sel] - a) / (b - a), 0.0, rate.get(a, 0.0), 0.0,
                               rate.get(b, 0.0), b - a)
    return out


def make_jump() -> Clip:
    """
    Make a vertical jump in place with 11 cm of root rise above standing.

    Crouch with an arm swing back, push off, fly, land into a crouch, stand up.
    """
    z_crouch, z_off, rise = 0.67, 0.77, STAND_Z + 0.11
    v_off = np.sqrt(2.0 * GRAVITY * (rise - z_off))
    t_crouch, t_push, push = 0.4, 1.0, 0.2
    t_lo = t_push + push
    t_td = t_lo + 2.0 * v_off / GRAVITY
    absorb, t_up, duration = 0.3, 2.6, 3.2
    t = np.arange(int(round(duration * FPS)) + 1) / FPS
    z = keys(t, [(0.0, STAND_Z), (t_crouch, STAND_Z), (t_push, z_crouch)])
    sel = (t > t_push) & (t <= t_lo)
    z[sel] = hermite((t[sel] - t_push) / push, z_crouch, 0.0, z_off, v_off, push)
    sel = (t > t_lo) & (t < t_td)
    z[sel] = z_off + v_off * (t[sel] - t_lo) - 0.5 * GRAVITY * (t[sel] - t_lo) ** 2
    sel = (t >= t_td) & (t <= t_td + absorb)
    z_land = 0.69
    z[sel] = hermite((t[sel] - t_td) / absorb, z_off, -v_off, z_land, 0.0, absorb)
    sel = t > t_td + absorb
    z[sel] = keys(t[sel], [(t_td + absorb, z_land), (t_up, STAND_Z)])
    feet, foot_rot = planted(t)
    sel = (t > t_lo) & (t < t_td)
    s = (t[sel] - t_lo) / (t_td - t_lo)
    # Airborne, the legs keep their take-off length and tuck 5 cm at the apex.
    feet[sel, :, 2] = (z[sel] - z_off + 0.05 * np.sin(np.pi * s) ** 2)[:, None]
    pitch = keys(t, [(0.0, 0.0), (t_crouch, 0.0), (t_push, 0.3), (t_lo, 0.04), (t_td, 0.04),
                     (t_td + absorb, 0.25), (t_up, 0.0)])
    x = keys(t, [(0.0, 0.0), (t_crouch, 0.0), (t_push, -0.03), (t_lo, 0.0), (t_td, 0.0),
                 (t_td + absorb, -0.025), (t_up, 0.0)])
    root_pos = np.stack([x, np.zeros_like(t), z], axis=-1)
    root_rpy = np.stack([np.zeros_like(t), pitch, np.zeros_like(t)], axis=-1)
    stand = arms()
    back = arms(ls_pitch=0.8, rs_pitch=0.8, l_elbow=1.2, r_elbow=1.2)
    up = arms(ls_pitch=-1.3, rs_pitch=-1.3, l_elbow=1.0, r_elbow=1.0)
    upper = joint_keys(t, [(0.0, stand), (t_crouch, stand), (t_push, back), (t_lo, up),
                           (t_td, arms(ls_pitch=-0.8, rs_pitch=-0.8, l_elbow=0.8, r_elbow=0.8)),
                           (t_td + absorb, arms(ls_pitch=-0.3, rs_pitch=-0.3, l_elbow=0.4,
                                                r_elbow=0.4)),
                           (t_up, stand)])
    return Clip(t, root_pos, root_rpy, feet, foot_rot, upper)


def make_fight() -> Clip:
    """
    Make a punch sequence with the feet planted in a lowered stance.

    Guard, left jab, right cross, left hook, right uppercut, each with a torso
    twist, back to guard between punches.
    """
    guard = dict(ls_pitch=-0.45, ls_roll=0.15, l_elbow=-0.55,
                 rs_pitch=-0.45, rs_roll=-0.15, r_elbow=-0.55)
    punches = [
        # (punch pose, waist yaw, pelvis yaw, root lift)
        (dict(guard, ls_pitch=-1.45, ls_roll=0.0, l_elbow=1.3), -0.3, -0.06, 0.0),
        (dict(guard, rs_pitch=-1.45, rs_roll=0.0, r_elbow=1.3), 0.35, 0.08, 0.0),
        (dict(guard, ls_pitch=-0.6, ls_roll=1.2, ls_yaw=0.3, l_elbow=0.0), -0.45, -0.08, 0.01),
        (dict(guard, rs_pitch=-1.0, rs_roll=-0.1, r_elbow=-0.35), 0.3, 0.06, 0.03),
    ]
    t_guard, out, hold, back, rest = 1.1, 0.25, 0.08, 0.3, 0.35
    # Keyframes: (time, arm pose, waist yaw, pelvis yaw, root lift).
    frames = [(0.0, arms(), 0.0, 0.0, 0.0), (0.4, arms(), 0.0, 0.0, 0.0),
              (t_guard, arms(**guard), 0.0, 0.0, 0.0)]
    tk = t_guard
    for pose, wy, py, dip in punches:
        tk += rest
        frames.append((tk, arms(**guard), 0.0, 0.0, 0.0))
        for dt in (out, hold):
            tk += dt
            frames.append((tk, arms(**pose), wy, py, dip))
        tk += back
        frames.append((tk, arms(**guard), 0.0, 0.0, 0.0))
    tk += rest
    frames.append((tk, arms(**guard), 0.0, 0.0, 0.0))
    t_end = tk + 0.8
    frames.append((t_end, arms(), 0.0, 0.0, 0.0))
    duration = t_end + 0.4
    t = np.arange(int(round(duration * FPS)) + 1) / FPS
    upper = joint_keys(t, [(ft, dict(f, waist_yaw_joint=wy)) for ft, f, wy, _, _ in frames])
    stance = keys(t, [(0.0, 0.0), (0.4, 0.0), (t_guard, 1.0), (tk, 1.0), (t_end, 0.0)])
    z = STAND_Z - 0.04 * stance + keys(t, [(f[0], f[4]) for f in frames])
    pitch = 0.06 * stance
    yaw = keys(t, [(f[0], f[3]) for f in frames])
    feet, foot_rot = planted(t)
    root_pos = np.stack([-0.01 * stance, np.zeros_like(t), z], axis=-1)
    root_rpy = np.stack([np.zeros_like(t), pitch, yaw], axis=-1)
    return Clip(t, root_pos, root_rpy, feet, foot_rot, upper)


def make_dance() -> Clip:
    """
    Make a dance with the feet planted.

    Side-to-side weight shifts with a knee bounce; an arm wave passed from the
    left hand to the right with the arms out; then alternating arm raises with a
    torso twist.
    """
    duration = 7.0
    t = np.arange(int(round(duration * FPS)) + 1) / FPS
    beat = 0.75   # one weight shift to a side per beat [s]
    env = smooth5((t - 0.3) / 0.8) * (1.0 - smooth5((t - (duration - 1.2)) / 0.8))
    sway = np.sin(np.pi * (t - 0.3) / beat)
    y = 0.045 * env * sway
    z = STAND_Z - env * (0.02 + 0.015 * (1.0 - np.cos(2.0 * np.pi * (t - 0.3) / beat)) / 2.0)
    roll = -0.04 * env * sway
    wave_on = smooth5((t - 0.6) / 0.6) * (1.0 - smooth5((t - 3.4) / 0.5))
    raise_on = smooth5((t - 3.6) / 0.5) * (1.0 - smooth5((t - (duration - 1.3)) / 0.6))
    upper = np.tile(np.asarray(g1.DEFAULT_POSE), (len(t), 1))

    def put(name, value):
        upper[:, g1.joint_index(name)] = value
    w = 2.0 * np.pi / 1.5
    # The wave: arms out to the sides, each joint a phase later than the one
    # before it, from the left wrist to the right wrist.
    chain = [('left_wrist_roll_joint', 0.0, 0.6), ('left_elbow_joint', 0.5, 0.5),
             ('left_shoulder_roll_joint', 1.0, 0.25), ('right_shoulder_roll_joint', 1.6, -0.25),
             ('right_elbow_joint', 2.1, 0.5), ('right_wrist_roll_joint', 2.6, 0.6)]
    wave = {name: amp * np.sin(w * t - lag) for name, lag, amp in chain}
    # Alternating arm raises: 0 -> 1 -> 0 per period, the right arm half a period later.
    lift = 0.5 * (1.0 - np.cos(w * (t - 3.6)))
    lift_r = 0.5 * (1.0 - np.cos(w * (t - 3.6) - np.pi))
    base = np.asarray(g1.DEFAULT_POSE)
    for side, sign, lift_s in (('left', 1.0, lift), ('right', -1.0, lift_r)):
        sr = f'{side}_shoulder_roll_joint'
        sp = f'{side}_shoulder_pitch_joint'
        el = f'{side}_elbow_joint'
        wr = f'{side}_wrist_roll_joint'
        put(sr, base[g1.joint_index(sr)] + wave_on * (sign * 1.1 + wave[sr])
            + raise_on * sign * 0.2 * lift_s)
        put(sp, base[g1.joint_index(sp)] + raise_on * (-2.0 * lift_s))
        put(el, base[g1.joint_index(el)] + wave_on * (-0.4 + wave[el])
            + raise_on * (0.3 * lift_s))
        put(wr, base[g1.joint_index(wr)] + wave_on * wave[wr])
    put('waist_yaw_joint', raise_on * 0.3 * np.sin(w * (t - 3.6)))
    put('waist_roll_joint', 0.05 * env * sway)
    feet, foot_rot = planted(t)
    root_pos = np.stack([np.zeros_like(t), y, z], axis=-1)
    root_rpy = np.stack([roll, np.zeros_like(t), np.zeros_like(t)], axis=-1)
    return Clip(t, root_pos, root_rpy, feet, foot_rot, upper)


MAKERS = {'run': make_run, 'jump': make_jump, 'fight': make_fight, 'dance': make_dance}


# Leg inverse kinematics.

def solve_legs(robot: g1_model.G1Model, clip: Clip) -> np.ndarray:
    """
    Return [T, 29] joint angles: the clip's upper body, legs solved by IK.

    Each ankle-roll link reaches its keyframed pose; RuntimeError names the
    frame where that fails.
    """
    model = robot.model
    data = mujoco.MjData(model)
    root_quat = rpy_to_quat(clip.root_rpy)
    lo, hi = np.asarray(g1.JOINT_LOWER), np.asarray(g1.JOINT_UPPER)
    q = np.asarray(g1.DEFAULT_POSE, dtype=np.float64).copy()
    out = np.empty((len(clip.t), g1.NUM_JOINTS))
    jacp, jacr = np.zeros((3, model.nv)), np.zeros((3, model.nv))
    for i in range(len(clip.t)):
        upper = clip.upper[i].copy()
        legs = np.concatenate(LEGS)
        upper[legs] = q[legs]
        q = upper
        target_pos = clip.feet[i].copy()
        target_quat = rpy_to_quat(np.concatenate([np.zeros((2, 1)), clip.foot_rot[i]], -1))
        for side in range(2):
            # Lift the ankle so the foot's lowest sphere point is at the keyed height.
            rot = np.zeros(9)
            mujoco.mju_quat2Mat(rot, target_quat[side])
            lowest = (SPHERES @ rot.reshape(3, 3).T)[:, 2].min() - g1.FOOT_SPHERE_RADIUS
            target_pos[side, 2] -= lowest
        for _ in range(100):
            data.qpos[0:3] = clip.root_pos[i]
            data.qpos[3:7] = root_quat[i]
            data.qpos[robot.qpos_adr] = q
            mujoco.mj_kinematics(model, data)
            mujoco.mj_comPos(model, data)
            worst = 0.0
            for side, leg in enumerate(LEGS):
                foot = robot.foot_bodies[side]
                err_p = target_pos[side] - data.xpos[foot]
                qe = motion_lib.quat_mul(target_quat[side],
                                         motion_lib.quat_conj(data.xquat[foot]))
                qe = qe if qe[0] >= 0 else -qe
                vec = qe[1:]
                angle = 2.0 * np.arctan2(np.linalg.norm(vec), qe[0])
                err_r = vec / max(np.linalg.norm(vec), 1e-12) * angle
                err = np.concatenate([err_p, err_r])
                worst = max(worst, np.linalg.norm(err))
                mujoco.mj_jacBody(model, data, jacp, jacr, foot)
                cols = robot.qvel_adr[list(leg)]
                jac = np.concatenate([jacp[:, cols], jacr[:, cols]])
                dq = np.linalg.solve(jac.T @ jac + 1e-8 * np.eye(6), jac.T @ err)
                q[list(leg)] = np.clip(q[list(leg)] + dq, lo[list(leg)], hi[list(leg)])
            if worst < IK_TOL:
                break
        else:
            raise RuntimeError(f'leg IK did not converge at frame {i} (t = {clip.t[i]:.2f} s): '
                               f'pose error {worst:.2e}; the feet are out of reach (legs '
                               f'{np.round(q[:12], 2)})')
        out[i] = q
    return out


def build(name: str, robot: g1_model.G1Model) -> motion_lib.Motion:
    """Make one clip as a Motion."""
    clip = MAKERS[name]()
    joint_pos = solve_legs(robot, clip)
    return motion_lib.from_trajectory(name, FPS, clip.root_pos, rpy_to_quat(clip.root_rpy),
                                      joint_pos, robot)


def summary(motion: motion_lib.Motion, robot: g1_model.G1Model) -> str:
    """Return one line of figures about a clip."""
    _, spheres = motion_lib.forward_kinematics(motion.root_pos, motion.root_quat,
                                               motion.joint_pos, robot)
    bottom = spheres[..., 2] - g1.FOOT_SPHERE_RADIUS
    slide = motion_lib.stance_slide(spheres)
    airborne = (bottom.min(axis=1) > motion_lib.CONTACT_HEIGHT).sum() / motion.fps
    speed = np.linalg.norm(motion.root_lin_vel[:, :2], axis=-1).max()
    return (f'{motion.name}: {motion.num_frames} frames ({motion.duration:.2f} s), root rise '
            f'{(motion.root_pos[:, 2].max() - motion.root_pos[0, 2]) * 100:.1f} cm, lowest root '
            f'{motion.root_pos[:, 2].min():.3f} m, top speed {speed:.2f} m/s, airborne '
            f'{airborne:.2f} s, lowest foot {bottom.min() * 1e3:+.2f} mm, stance slide '
            f'{slide.max() * 1e3:.2f} mm, top joint speed {np.abs(motion.joint_vel).max():.1f} '
            f'rad/s')


def main(argv=None) -> int:
    """Make the clips, check them, and write those that pass."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', type=pathlib.Path, default=motion_lib.MOTIONS_DIR,
                        help='folder to write <name>.npz into (default: %(default)s)')
    parser.add_argument('names', nargs='*', default=list(MAKERS),
                        help=f'clips to make, of {", ".join(MAKERS)} (default: all)')
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in MAKERS]
    if unknown:
        parser.error(f'unknown clip(s) {unknown}; known: {", ".join(MAKERS)}')
    robot = g1_model.load()
    failed = False
    for name in args.names:
        motion = build(name, robot)
        problems = motion_lib.check_motion(motion, robot)
        print(summary(motion, robot))
        if problems:
            failed = True
            for p in problems:
                print('  problem:', p)
            continue
        print('  wrote', motion_lib.save_motion(motion, args.out / f'{name}.npz'))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
