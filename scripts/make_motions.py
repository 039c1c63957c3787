#!/usr/bin/env python3
"""
Make the built-in G1 reference clips (run, jump, fight, dance) from keyframes.

Each clip is written as ``bcg_ros/motions/<name>.npz`` at the control rate
(50 fps) and passes :func:`bcg_ros.motion.check_motion`; the script refuses to
write one that does not. How the clips are made is described in
``bcg_ros/motions/README.md``. In short: the root pose and the feet are
keyframed in Cartesian space and the upper body in joint space; the feet follow
planned footholds (flat and still on the floor while they hold, a swing from
one to the next) and the root carries the weight over them or flies
ballistically between them; each leg's six joints are solved per frame by
damped least squares so that the ankle-roll link reaches its keyframed pose
exactly; velocities are finite differences; key points come from MuJoCo's
kinematics.

Run from the repository root: ``PYTHONPATH=. python scripts/make_motions.py``.
"""

import argparse
import pathlib
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import mujoco
import numpy as np
from scipy.interpolate import PchipInterpolator

from bcg_ros import motion as motion_lib
from bcg_ros.robot import g1
from bcg_ros.robot import model as g1_model
from bcg_ros.rotation import quat_conj, quat_mul, rpy_to_quat

FPS = 1.0 / g1.CONTROL_DT
GRAVITY = motion_lib.GRAVITY
FOOT_Y = 0.1185
"""Lateral ankle position of the standing pose [m]."""
SPHERES = np.array([p for _, p in g1.FOOT_SPHERES[:4]])
"""Foot sphere centres in the ankle-roll link frame (the same for both feet)."""
TOE = (SPHERES[:, 0].max(), SPHERES[SPHERES[:, 0].argmax(), 2])
"""x and z of the toe spheres' centres in the ankle-roll link frame [m]."""
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


def quintic(s, p0, v0, a0, p1, v1, a1, span):
    """
    Quintic on s in [0, 1] with end values p, rates v and accelerations a (per second).

    Unlike ``hermite`` it also matches accelerations, so a phase can hand its
    acceleration on to the next one (a crouch that is still braking when the
    push begins) and the force the motion implies has no jump there.
    """
    v0, v1, a0, a1 = v0 * span, v1 * span, a0 * span * span, a1 * span * span
    d = p1 - p0
    c3 = 10.0 * d - 6.0 * v0 - 4.0 * v1 - 1.5 * a0 + 0.5 * a1
    c4 = -15.0 * d + 8.0 * v0 + 7.0 * v1 + 1.5 * a0 - a1
    c5 = 6.0 * d - 3.0 * v0 - 3.0 * v1 - 0.5 * a0 + 0.5 * a1
    return p0 + s * (v0 + s * (0.5 * a0 + s * (c3 + s * (c4 + s * c5))))


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


def sole_height(pitch):
    """Return the ankle's height [m] above its foot's lowest sphere point at ``pitch`` [rad]."""
    pitch = np.asarray(pitch, dtype=np.float64)[..., None]
    # Ry(pitch) turns a sphere centre (x, y, z) to height -x sin(pitch) + z cos(pitch).
    z = -SPHERES[:, 0] * np.sin(pitch) + SPHERES[:, 2] * np.cos(pitch)
    return -z.min(axis=-1) + g1.FOOT_SPHERE_RADIUS


# Footholds.

@dataclass
class Hold:
    """A foot on the floor from t_on to t_off, its ankle at (x, y), flat and still."""

    t_on: float
    t_off: float
    x: float
    y: float
    yaw: float = 0.0
    """Heading of the foot [rad]."""
    path: Tuple[Tuple[float, float, float, float, float, float], ...] = ()
    """Keys (time, x, y, height, pitch, yaw) of the swing that lands here; empty: a plain step."""
    clearance: Optional[float] = None
    """Peak height of the plain step that lands here [m]; None: foot_tracks' default."""
    toe: Optional[float] = None
    """Peak toe-down pitch of that step [rad]; None: foot_tracks' default."""
    roll: float = 0.0
    """Heel rise: toe-down pitch the foot has rolled to (on its toes) at lift-off [rad]."""
    roll_time: float = 0.1
    """How long before lift-off the heel starts to rise [s]."""
    shift: Optional[float] = None
    """support_keys: sideways weight on the stance foot in the swing that lands here."""
    lead: Optional[float] = None
    """support_keys: weight along the stance foot in that swing."""


def hold_at(holds: Sequence[Hold], time: float) -> Optional[Hold]:
    """Return the hold of one foot that covers ``time``, None while it swings."""
    return next((h for h in holds if h.t_on <= time <= h.t_off), None)


def on_toes(pitch, rate=0.0) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """
    Return a foot rolled onto its toes: ankle offset ahead, ankle height, their rates.

    The foot pitches toes down by ``pitch`` [rad] at ``rate`` [rad/s] about its
    toe spheres, which stay put on the floor: the ankle rises and moves ahead
    of where it is with the foot flat (offset 0, height sole_height(0)).
    """
    a, c = TOE
    return (a - a * np.cos(pitch) - c * np.sin(pitch), sole_height(pitch),
            (a * np.sin(pitch) - c * np.cos(pitch)) * rate,
            (a * np.cos(pitch) + c * np.sin(pitch)) * rate)


def foot_tracks(t: np.ndarray, holds: Sequence[Sequence[Hold]], clearance: float = 0.06,
                toe: float = 0.3, profile: Sequence[Tuple[float, float]] = ((0.5, 1.0),)
                ) -> Tuple[np.ndarray, np.ndarray]:
    """
    Return feet [T, 2, 3] and foot_rot [T, 2, 2] (Clip's layout) of each foot's holds.

    ``holds`` lists the left foot's holds, then the right's, in time order; the
    first starts by time 0 and the last never ends (t_off = inf). A hold with a
    ``roll`` ends with the heel rising: over its last ``roll_time`` the foot
    rolls onto its toes (:func:`on_toes`), the pitch growing as the square of
    the time. Between two holds the foot swings: x and y go from where it left
    the floor to the next hold (a quintic that starts at the roll's speed and
    ends at rest), yaw eases across, its lowest point rises through ``profile``
    (keys of (fraction of the swing, fraction of ``clearance``)) and comes back
    down, and the toes dip by ``toe`` rad early in the swing and come back up as
    the foot comes forward, or late in a step backwards (a foot off the floor
    behind the hip needs its toes down, or the ankle runs out of range). A
    hold's ``path`` replaces that plain step with keyed positions (a kick).
    Either way the foot leaves and meets the floor at zero speed, so the legs'
    joint velocities do not jump at a contact.
    """
    feet, rot = np.zeros((len(t), 2, 3)), np.zeros((len(t), 2, 2))
    for side, seq in enumerate(holds):
        for h in seq:
            sel = (t >= h.t_on) & (t <= h.t_off)
            feet[sel, side] = (h.x, h.y, 0.0)
            rot[sel, side] = (0.0, h.yaw)
            if h.roll:
                sel &= t > h.t_off - h.roll_time
                pitch = h.roll * ((t[sel] - (h.t_off - h.roll_time)) / h.roll_time) ** 2
                ahead = on_toes(pitch)[0]
                feet[sel, side, 0] += ahead * np.cos(h.yaw)
                feet[sel, side, 1] += ahead * np.sin(h.yaw)
                rot[sel, side, 0] = pitch
        for a, b in zip(seq[:-1], seq[1:]):
            sel = (t > a.t_off) & (t < b.t_on)
            ts, span = t[sel], b.t_on - a.t_off
            s = (ts - a.t_off) / span
            if b.path:
                pts = [(a.t_off, a.x, a.y, 0.0, 0.0, a.yaw)] + list(b.path) \
                    + [(b.t_on, b.x, b.y, 0.0, 0.0, b.yaw)]
                cols = [keys(ts, [(p[0], p[k]) for p in pts]) for k in range(1, 6)]
                feet[sel, side] = np.stack(cols[:3], axis=-1)
                rot[sel, side] = np.stack(cols[3:], axis=-1)
                continue
            heading = np.array([np.cos(a.yaw), np.sin(a.yaw)])
            rate = 2.0 * a.roll / a.roll_time if a.roll else 0.0
            ahead, _, speed, _ = on_toes(a.roll, rate)
            for k, (start, end) in enumerate(((a.x, b.x), (a.y, b.y))):
                feet[sel, side, k] = quintic(s, start + ahead * heading[k], speed * heading[k],
                                             0.0, end, 0.0, 0.0, span)
            rot[sel, side, 1] = a.yaw + (b.yaw - a.yaw) * smooth5(s)
            height = clearance if b.clearance is None else b.clearance
            feet[sel, side, 2] = height * keys(s, [(0.0, 0.0)] + list(profile) + [(1.0, 0.0)])
            peak = toe if b.toe is None else b.toe
            top = 0.7 if (np.array([b.x - a.x, b.y - a.y]) @ heading) < 0.0 else 0.3
            up = s < top
            rot[sel, side, 0] = np.where(
                up, hermite(np.minimum(s / top, 1.0), a.roll, rate, peak, 0.0, top * span),
                hermite(np.maximum((s - top) / (1.0 - top), 0.0), peak, 0.0, 0.0, 0.0,
                        (1.0 - top) * span))
    return feet, rot


def support_keys(holds: Sequence[Sequence[Hold]], shift: float, lead: float = 0.0
                 ) -> List[Tuple[float, float, float, float]]:
    """
    Return root keys (time, x, y, yaw) that carry the weight from foot to foot.

    At lift-off, mid-swing and touch-down of each swing the root is over the
    feet's midpoint, moved toward the stance foot by ``shift`` of the way
    across (sideways, in the stance foot's frame) and ``lead`` of the way along
    (0: midpoint, 1: over the stance foot; a swing's ``Hold.shift`` and
    ``Hold.lead`` override them); its yaw is midway between the feet's. In
    double support it moves across. The holds are as ``foot_tracks`` takes them.
    """
    out = []
    for side in (0, 1):
        for a, b in zip(holds[side][:-1], holds[side][1:]):
            mid = 0.5 * (a.t_off + b.t_on)
            st = hold_at(holds[1 - side], mid)
            fwd = np.array([np.cos(st.yaw), np.sin(st.yaw)])
            lat = np.array([-fwd[1], fwd[0]])
            w_lat = 0.5 * (1.0 - (shift if b.shift is None else b.shift))
            w_fwd = 0.5 * (1.0 - (lead if b.lead is None else b.lead))
            for tk, x, y, yaw in ((a.t_off, a.x, a.y, a.yaw),
                                  (mid, 0.5 * (a.x + b.x), 0.5 * (a.y + b.y),
                                   0.5 * (a.yaw + b.yaw)),
                                  (b.t_on, b.x, b.y, b.yaw)):
                d = np.array([x - st.x, y - st.y])
                p = np.array([st.x, st.y]) + w_fwd * (d @ fwd) * fwd + w_lat * (d @ lat) * lat
                out.append((tk, p[0], p[1], st.yaw + 0.5 * (yaw - st.yaw)))
    return sorted(out)


def turned(c: Sequence[float], yaw: float, side: int) -> Tuple[float, float]:
    """Return the ankle (x, y) of one foot (0 left, 1 right) of a stance at c facing yaw."""
    y = FOOT_Y if side == 0 else -FOOT_Y
    return c[0] - y * np.sin(yaw), c[1] + y * np.cos(yaw)


# The clips.

def make_run() -> Clip:
    """
    Make a run from standing to v_max and back to standing, with flight phases.

    Cadence and ground time follow the root speed: walking steps with double
    support below 0.9 m/s, running steps with a flight phase above it. Foot
    placements follow the root (each foot lands half a stance ahead of where
    the root will be at mid-stance); during flight the root is ballistic
    (constant horizontal speed, a parabola in height). The feet roll onto their
    toes before they lift.
    """
    v_max, v_run, v_stop, t_accel, t_decel, ramp, duration = 1.8, 0.9, 1.3, 0.5, 3.0, 1.5, 5.6
    t = np.arange(int(round(duration * FPS)) + 1) / FPS

    def speed(tt):
        return v_max * smooth5((tt - t_accel) / ramp) * (1.0 - smooth5((tt - t_decel) / ramp))
    fine = np.linspace(0.0, duration, 20001)
    x_fine = np.concatenate([[0.0], np.cumsum(0.5 * (speed(fine[1:]) + speed(fine[:-1]))
                                              * np.diff(fine))])

    def root_x(tt):
        return np.interp(tt, fine, x_fine)

    def period(v):
        """Return the step period [s]: 0.45 s standing still, 0.33 s at v_max."""
        return 0.45 - 0.12 * v / v_max

    def stance(v, tt):
        """
        Return the ground time [s] of a foot that lands at time tt at speed v.

        Walking, a step period plus a double support that shrinks from 0.1 s to
        nothing at v_run; running, a step period less a flight of 0.1 s at v_run
        growing to 0.13 s at v_max (the gait changes at once, as a person's does).
        Slowing down, it walks again below v_stop.
        """
        if v < (v_run if tt < t_decel else v_stop):
            return period(v) + 0.1 * max(0.0, 1.0 - v / v_run)
        return period(v) - 0.1 - 0.03 * (v - v_run) / (v_max - v_run)
    # Footfalls [side, touchdown, liftoff, x], side 0 left, 1 right: first the two
    # standing feet, then the steps, right foot first; the last two stay down.
    t_first = t_accel + 0.3
    falls = [[1, 0.0, t_first - 0.3, 0.0], [0, 0.0, t_first + 0.1, 0.0]]
    tdk, side = t_first, 1
    while True:
        v = speed(tdk)
        # The last step: the root has less than 3 cm left to go.
        last = root_x(duration) - root_x(tdk) < 0.03
        x = root_x(duration) if last else root_x(tdk + 0.5 * stance(v, tdk))
        falls.append([side, tdk, np.inf if last else tdk + stance(v, tdk), x])
        if last:
            if falls[-2][2] < np.inf:
                falls[-2][2], falls[-2][3] = np.inf, x
            break
        tdk, side = tdk + period(v), 1 - side
    if falls[-1][1] + 0.3 > duration:
        raise RuntimeError(f'run: the last step lands at {falls[-1][1]:.2f} s, the clip ends '
                           f'at {duration} s')
    # No foot down, no horizontal force: in each flight the root keeps its speed, and
    # the speed change the profile has there is made in the stance that follows. The
    # feet then land half a stance ahead of where this root will be at mid-stance.
    flights = _flights(falls, duration)
    acc = np.gradient(speed(fine), fine)
    for a, b in flights:
        inside = (fine > a) & (fine < b)
        lost = acc[inside].sum() * (fine[1] - fine[0])
        acc[inside] = 0.0
        lift = min(f[2] for f in falls if f[1] <= b < f[2])
        after = (fine >= b) & (fine < lift)
        acc[after] += lost / (after.sum() * (fine[1] - fine[0]))
    v_fine = np.concatenate([[0.0], np.cumsum(0.5 * (acc[1:] + acc[:-1]) * np.diff(fine))])
    x_fine = np.concatenate([[0.0], np.cumsum(0.5 * (v_fine[1:] + v_fine[:-1])
                                              * np.diff(fine))])
    for f in falls[2:]:
        f[3] = root_x(duration) if f[2] == np.inf else root_x(0.5 * (f[1] + f[2]))
    # The faster, the higher the feet swing and the more they roll onto the toes before
    # they lift (the knee starts to bend while the foot is still down) and point them
    # in the swing (a bent knee then needs no more ankle flexion than the ankle has).
    # The foot lifts early and drops late and fast, clear of the floor soon after
    # lift-off and until just before touch-down, so the flights show.
    holds = ([], [])
    for side, tdk, lo, x in falls:
        frac = speed(tdk) / v_max
        holds[side].append(Hold(tdk, lo, x, FOOT_Y if side == 0 else -FOOT_Y,
                                clearance=0.05 + 0.05 * frac, toe=0.35 + 0.5 * frac,
                                roll=0.1 + 0.3 * frac))
    feet, foot_rot = foot_tracks(t, holds, profile=((0.4, 1.0), (0.85, 0.6)))
    # Root height: lower while running, plus the bounce the contacts impose.
    speed_frac = np.interp(t, fine, v_fine) / v_max
    z = STAND_Z - 0.04 * speed_frac + _bounce(t, falls)
    # Gait phase: 0 at a left touchdown, pi at a right one.
    phase = np.interp(t, [f[1] for f in falls[2:]], np.pi * np.arange(1, len(falls) - 1))
    swing_amp = speed_frac * np.cos(phase)
    root_rpy = np.stack([np.zeros_like(t), 0.12 * speed_frac, -0.06 * swing_amp], axis=-1)
    upper = np.tile(np.asarray(g1.DEFAULT_POSE), (len(t), 1))
    for name, value in (('left_shoulder_pitch_joint', 0.2 + 0.6 * swing_amp),
                        ('right_shoulder_pitch_joint', 0.2 - 0.6 * swing_amp),
                        ('left_elbow_joint', 0.6 - 0.3 * speed_frac),
                        ('right_elbow_joint', 0.6 - 0.3 * speed_frac),
                        ('waist_yaw_joint', 0.08 * swing_amp)):
        upper[:, g1.joint_index(name)] = value
    root_pos = np.stack([root_x(t), np.zeros_like(t), z], axis=-1)
    return Clip(t, root_pos, root_rpy, feet, foot_rot, upper)


def _flights(falls: List[list], t_end: float) -> List[Tuple[float, float]]:
    """Return the (lift-off, touch-down) times with no foot down of a run's footfalls."""
    events = sorted({e for f in falls for e in (f[1], f[2]) if np.isfinite(e)} | {0.0, t_end})
    return [(a, b) for a, b in zip(events[:-1], events[1:])
            if not any(f[1] <= 0.5 * (a + b) <= f[2] for f in falls)]


def _bounce(t: np.ndarray, falls: List[list]) -> np.ndarray:
    """
    Return the vertical root offset the contact schedule imposes.

    A ballistic parabola in each flight; between flights a cubic that joins
    their landing and take-off speeds.
    """
    events = sorted({e for f in falls for e in (f[1], f[2]) if np.isfinite(e)} | {0.0, t[-1]})
    flights = _flights(falls, t[-1])
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
    Make a forward jump with both feet: one flight, the root rising well above standing.

    Countermovement crouch with the arms swung back; push off with the arms
    swung up, the heels rising at the end so the feet roll onto the toes; a
    ballistic flight with the legs tucked; land toes first, the heels coming
    down as the legs absorb into a crouch; stand up where the feet landed.
    """
    z_crouch, z_off, apex, z_land = 0.62, 0.775, STAND_Z + 0.17, 0.65
    v_off = np.sqrt(2.0 * GRAVITY * (apex - z_off))
    t_crouch, t_push, push, absorb = 0.9, 1.4, 0.25, 0.35
    t_lo = t_push + push
    fly = 2.0 * v_off / GRAVITY
    t_td = t_lo + fly
    t_up = t_td + absorb + 0.9
    duration = t_up + 0.8
    t = np.arange(int(round(duration * FPS)) + 1) / FPS
    # Vertical: the crouch ends still braking, which the push carries on; the
    # push ends at take-off speed; touch-down at the take-off height and speed.
    z = np.full_like(t, STAND_Z)
    brake = 0.8 * GRAVITY
    for a, b, args in ((t_crouch, t_push, (STAND_Z, 0.0, 0.0, z_crouch, 0.0, brake)),
                       (t_push, t_lo, (z_crouch, 0.0, brake, z_off, v_off, 2.0)),
                       (t_td, t_td + absorb, (z_off, -v_off, 1.5 * GRAVITY, z_land, 0.0, 0.0))):
        sel = (t > a) & (t <= b)
        z[sel] = quintic((t[sel] - a) / (b - a), *args, b - a)
    sel = (t > t_lo) & (t < t_td)
    z[sel] = z_off + v_off * (t[sel] - t_lo) - 0.5 * GRAVITY * (t[sel] - t_lo) ** 2
    sel = t > t_td + absorb
    z[sel] = keys(t[sel], [(t_td + absorb, z_land), (t_up, STAND_Z)])
    # Horizontal: hips back in the crouch, forward speed built in the push and kept in
    # the flight, braked in the landing.
    x_crouch, vx = -0.03, 0.55
    x_lo = x_crouch + 0.5 * vx * push
    x_td = x_lo + vx * fly
    x_abs = x_td + 0.5 * vx * absorb
    reach = x_td + 0.03   # where the ankles land (heels down), a little ahead of the root
    x = keys(t, [(0.0, 0.0), (t_crouch, 0.0), (t_push, x_crouch)])
    sel = (t > t_push) & (t <= t_lo)
    x[sel] = hermite((t[sel] - t_push) / push, x_crouch, 0.0, x_lo, vx, push)
    sel = (t > t_lo) & (t < t_td)
    x[sel] = x_lo + vx * (t[sel] - t_lo)
    sel = (t >= t_td) & (t <= t_td + absorb)
    x[sel] = hermite((t[sel] - t_td) / absorb, x_td, vx, x_abs, 0.0, absorb)
    sel = t > t_td + absorb
    x[sel] = keys(t[sel], [(t_td + absorb, x_abs), (t_up, reach)])
    # The feet. Heel rise: in the push's last 0.15 s the feet pitch onto the toes
    # (0.3 rad, still speeding up at take-off); heel strike: they touch down toes
    # first at 0.25 rad and the heels come down in 0.12 s. Rolling about the toe
    # spheres, which stay put, the ankles rise and fall with the pitch.
    heel, roll_lo, drop, roll_td = 0.15, 0.3, 0.12, 0.25
    pitch = np.zeros_like(t)
    sel = (t > t_lo - heel) & (t <= t_lo)
    pitch[sel] = roll_lo * ((t[sel] - (t_lo - heel)) / heel) ** 2
    sel = (t >= t_td) & (t < t_td + drop)
    pitch[sel] = roll_td * (1.0 - (t[sel] - t_td) / drop) ** 2
    rate_lo, rate_td = 2.0 * roll_lo / heel, -2.0 * roll_td / drop
    ahead, az = on_toes(pitch)[:2]
    ax = np.where(t < t_td, 0.0, reach) + ahead
    # In the air: the legs go on extending just after take-off (the knees do not stop at
    # once), tuck 8 cm, and are extending again just before touch-down; the toes point,
    # 0.5 rad; the ankles leave and meet the floor at the speeds the roll gives them.
    x_lo_a, z_lo_a, vx_lo, vz_lo = on_toes(roll_lo, rate_lo)
    x_td_a, z_td_a, vx_td, vz_td = on_toes(roll_td, rate_td)
    x_td_a += reach
    sel = (t > t_lo) & (t < t_td)
    ts = t[sel]
    ease, tuck, point = 0.04, 0.08, 0.5
    leg_lo, rate_leg_lo = z_off - z_lo_a, v_off - vz_lo
    leg_td, rate_leg_td = z_off - z_td_a, -v_off - vz_td
    leg = keys(ts, [(t_lo + ease, leg_lo + 0.5 * rate_leg_lo * ease),
                    (0.5 * (t_lo + t_td), 0.5 * (leg_lo + leg_td) - tuck),
                    (t_td - ease, leg_td - 0.5 * rate_leg_td * ease)])
    for a, args in ((t_lo, (leg_lo, rate_leg_lo, leg_lo + 0.5 * rate_leg_lo * ease, 0.0)),
                    (t_td - ease, (leg_td - 0.5 * rate_leg_td * ease, 0.0, leg_td,
                                   rate_leg_td))):
        part = (ts >= a) & (ts <= a + ease)
        leg[part] = hermite((ts[part] - a) / ease, *args, ease)
    p_air = keys(ts, [(t_lo + 0.1, point), (t_td - 0.1, point)])
    for a, args in ((t_lo, (roll_lo, rate_lo, point, 0.0)),
                    (t_td - 0.1, (point, 0.0, roll_td, rate_td))):
        part = (ts >= a) & (ts <= a + 0.1)
        p_air[part] = hermite((ts[part] - a) / 0.1, *args, 0.1)
    pitch[sel] = p_air
    az[sel] = z[sel] - leg
    ax[sel] = hermite((ts - t_lo) / fly, x_lo_a, vx_lo, x_td_a, vx_td, fly)
    feet = np.zeros((len(t), 2, 3))
    feet[:, :, 0] = ax[:, None]
    feet[:, 0, 1], feet[:, 1, 1] = FOOT_Y, -FOOT_Y
    feet[:, :, 2] = (az - sole_height(pitch))[:, None]
    foot_rot = np.zeros((len(t), 2, 2))
    foot_rot[:, :, 0] = pitch[:, None]
    lean = keys(t, [(0.0, 0.0), (t_crouch, 0.0), (t_push, 0.45), (t_lo, 0.08), (t_td, 0.08),
                    (t_td + absorb, 0.35), (t_up, 0.0)])
    root_pos = np.stack([x, np.zeros_like(t), z], axis=-1)
    root_rpy = np.stack([np.zeros_like(t), lean, np.zeros_like(t)], axis=-1)
    # Arms back in the crouch, swung up through the push; the waist takes back part
    # of the pelvis's lean, so the heavy torso turns less, and more slowly, than the
    # pelvis does when the hips extend.
    stand = arms()
    back = arms(ls_pitch=0.7, rs_pitch=0.7, l_elbow=0.9, r_elbow=0.9)
    up = arms(ls_pitch=-1.3, rs_pitch=-1.3, l_elbow=0.6, r_elbow=0.6)
    upper = joint_keys(t, [(0.0, stand), (t_crouch, stand), (t_push - 0.05, back),
                           (t_lo + 0.08, up),
                           (t_td, arms(ls_pitch=-0.9, rs_pitch=-0.9, l_elbow=0.8, r_elbow=0.8)),
                           (t_td + absorb, arms(ls_pitch=-0.3, rs_pitch=-0.3, l_elbow=0.5,
                                                r_elbow=0.5)),
                           (t_up, stand)])
    upper[:, g1.joint_index('waist_pitch_joint')] = -0.4 * lean
    return Clip(t, root_pos, root_rpy, feet, foot_rot, upper)


KICK = 1.1
"""Lift-off to touch-down of a kick [s]."""


def _kick(t_lift: float, foot: Tuple[float, float], land: Tuple[float, float],
          hip: Tuple[float, float], yaw: float, reach: float, height: float
          ) -> Tuple[Tuple[float, float, float, float, float, float], ...]:
    """
    Return the swing keys of a front kick by a foot lifting at t_lift from ``foot``.

    Heel up (toes down, for a rear foot); knee up to a chamber in front of the
    hip (x, y); the foot driven ``reach`` ahead of the hip along ``yaw`` (the
    way the pelvis faces, so the leg swings in its own plane), its sole forward
    (toes up) and its lowest point at ``height``; back to the chamber; down at
    ``land`` KICK seconds after lift-off.
    """
    hip, foot, land = np.asarray(hip), np.asarray(foot), np.asarray(land)
    ahead = np.array([np.cos(yaw), np.sin(yaw)])
    chamber = (*(hip + 0.25 * ahead), 0.25, 0.2, yaw)
    # A rear foot leaves and comes back toes down; a front one, in front of the hip, flat.
    toes = [0.6, 0.8, 0.7] if (foot - hip) @ ahead < 0.0 else [0.0, 0.1, 0.1]
    return ((t_lift + 0.1 * KICK, *(foot + 0.1 * (hip - foot)), 0.05, toes[0], yaw),
            (t_lift + 0.2 * KICK, *(foot + 0.4 * (hip - foot)), 0.15, toes[1], yaw),
            (t_lift + 0.34 * KICK, *chamber),
            (t_lift + 0.52 * KICK, *(hip + reach * ahead), height, -0.7, yaw),
            (t_lift + 0.7 * KICK, *chamber),
            (t_lift + 0.84 * KICK, *(land + 0.4 * (hip - land)), 0.12, toes[2], yaw))


def make_fight() -> Clip:
    """
    Make a fight: a stance step, an advance with punches, two front kicks, a retreat.

    Step the right foot back into a guard; advance 0.22 m (left foot, then
    right) with a left jab and a right cross; right front kick; retreat 0.22 m;
    left front kick; left hook, right uppercut; step back to standing. The root
    carries the weight onto the stance foot for each step and almost all of it
    for a kick.
    """
    w, stagger, half, step = FOOT_Y, 0.22, 0.1, 0.35
    # Guard stance: both feet and the pelvis turned 0.25 rad to the right (left
    # shoulder forward), so a kicking leg swings in the plane it faces.
    turn = -0.25
    # Lift-off times: right foot back; advance (left, right) with a jab and a cross;
    # right kick; retreat (right, left); left kick; hook and uppercut; right foot
    # forward.
    back, advance = 0.3, 1.0
    jab_t = advance
    kick_r = advance + 2 * step + 0.55
    retreat = kick_r + KICK + 0.35
    kick_l = retreat + 2 * step + 0.4
    hook_t = kick_l + KICK + 0.1
    close = hook_t + 1.05
    duration = close + step + 0.55
    t = np.arange(int(round(duration * FPS)) + 1) / FPS
    left = [Hold(0.0, advance, 0.0, w),
            Hold(advance + step, retreat + step + 0.15, stagger, half, turn, shift=0.1),
            Hold(retreat + 2 * step + 0.15, kick_l, 0.0, half, turn, shift=0.1),
            Hold(kick_l + KICK, np.inf, 0.0, w,
                 path=_kick(kick_l, (0.0, half), (0.0, w), (0.04 - stagger, -0.02), turn,
                            0.55, 0.35),
                 shift=0.8, lead=0.9)]
    right = [Hold(0.0, back, 0.0, -w),
             Hold(back + step, advance + step + 0.15, -stagger, -half, turn, shift=0.6,
                  roll=0.5, roll_time=0.3),
             Hold(advance + 2 * step + 0.15, kick_r, 0.0, -half, turn, toe=0.5, shift=0.1),
             Hold(kick_r + KICK, retreat, 0.0, -half, turn,
                  path=_kick(kick_r, (0.0, -half), (0.0, -half), (stagger - 0.04, 0.02),
                             turn, 0.55, 0.4),
                  shift=0.8, lead=0.9),
             Hold(retreat + step, close, -stagger, -half, turn, toe=0.5, shift=0.1),
             Hold(close + step, np.inf, 0.0, -w, shift=0.6)]
    holds = (left, right)
    feet, foot_rot = foot_tracks(t, holds, clearance=0.07)
    # At rest at both ends: held a moment before the first step and after the last.
    root = sorted(support_keys(holds, 0.5) + [(0.0, 0.0, 0.0, 0.0), (0.1, 0.0, 0.0, 0.0),
                                              (duration - 0.15, 0.0, 0.0, 0.0),
                                              (duration, 0.0, 0.0, 0.0)])
    root_x = keys(t, [(k[0], k[1]) for k in root])
    root_y = keys(t, [(k[0], k[2]) for k in root])
    # The pelvis leans back as a kick goes out.
    lean = keys(t, [(0.0, 0.0)] + [(k + dt, v) for k in (kick_r, kick_l)
                                   for dt, v in ((0.1, 0.0), (0.52 * KICK, -0.12),
                                                 (0.8 * KICK, 0.0))])
    guard_on = keys(t, [(0.0, 0.0), (back, 0.0), (back + 0.5, 1.0), (close + 0.1, 1.0),
                        (close + step + 0.25, 0.0)])
    z = STAND_Z - 0.05 * guard_on
    guard = dict(ls_pitch=-0.45, ls_roll=0.15, l_elbow=-0.55,
                 rs_pitch=-0.45, rs_roll=-0.15, r_elbow=-0.55)
    jab = dict(guard, ls_pitch=-1.45, ls_roll=0.0, l_elbow=1.3)
    cross = dict(guard, rs_pitch=-1.45, rs_roll=0.0, r_elbow=1.3)
    hook = dict(guard, ls_pitch=-0.6, ls_roll=1.2, ls_yaw=0.3, l_elbow=0.0)
    upper_cut = dict(guard, rs_pitch=-1.0, rs_roll=-0.1, r_elbow=-0.35)
    # Arms: (time, pose, waist yaw); each punch 0.25 s out, 0.08 s held, 0.25 s back.
    frames = [(0.0, arms(), 0.0), (back, arms(), 0.0), (back + 0.5, arms(**guard), 0.0)]
    for t0, pose, twist in ((jab_t, jab, -0.3), (jab_t + 0.58, cross, 0.4),
                            (hook_t, hook, -0.45), (hook_t + 0.58, upper_cut, 0.3)):
        frames += [(t0, arms(**guard), 0.0), (t0 + 0.25, arms(**pose), twist),
                   (t0 + 0.33, arms(**pose), twist), (t0 + 0.58, arms(**guard), 0.0)]
    # Kicks: the arms guard the head, the one on the kick's side swung back.
    for t0, side in ((kick_r, 'r'), (kick_l, 'l')):
        other = 'l' if side == 'r' else 'r'
        pose = dict(guard, **{f'{side}s_pitch': 0.3, f'{side}_elbow': 0.6,
                              f'{other}s_pitch': -0.7})
        frames += [(t0 - 0.1, arms(**guard), 0.0), (t0 + 0.52 * KICK, arms(**pose), 0.0),
                   (t0 + KICK, arms(**guard), 0.0)]
    frames += [(close + 0.1, arms(**guard), 0.0), (close + step + 0.25, arms(), 0.0)]
    # One keyframe a time: a punch that starts where the last one ended keys its guard once.
    frames = sorted({round(f[0], 6): f for f in frames}.values(), key=lambda f: f[0])
    upper = joint_keys(t, [(ft, dict(f, waist_yaw_joint=wy)) for ft, f, wy in frames])
    # Pelvis yaw: the feet's, and punches twist it a little further.
    yaw = keys(t, [(k[0], k[3]) for k in root]) \
        + 0.2 * keys(t, [(ft, wy) for ft, _, wy in frames])
    root_pos = np.stack([root_x, root_y, z], axis=-1)
    root_rpy = np.stack([np.zeros_like(t), 0.06 * guard_on + lean, yaw], axis=-1)
    return Clip(t, root_pos, root_rpy, feet, foot_rot, upper)


def make_dance() -> Clip:
    """
    Make a dance: side steps, a half turn, a wave, a quarter turn back.

    Step-close to the right and back to the left with the arms swinging; a half
    turn to the left, a foot at a time, with the arms out; an arm wave from the
    left hand to the right over a hip sway; a quarter turn back to the right
    with alternating arm raises; it ends facing 90 degrees left of where it
    began. The knees bounce on every beat.
    """
    beat, w, out = 0.5, FOOT_Y, 0.12
    duration = 7.9
    t = np.arange(int(round(duration * FPS)) + 1) / FPS
    # Steps: (lift-off, foot, ankle x, y, yaw); each swing takes 0.3 s. The turns
    # pivot about the origin, a foot at a time, 45 degrees a step.
    plan = [(0.45, 1, 0.0, -w - out, 0.0),    # step right, wide
            (0.95, 0, 0.0, w - out, 0.0),     # close left
            (1.45, 0, 0.0, w, 0.0),           # step left
            (1.95, 1, 0.0, -w, 0.0)]          # close right
    for t_lift, side, yaw in ((2.45, 0, np.pi / 4), (2.95, 1, np.pi / 2),
                              (3.45, 0, 3 * np.pi / 4), (3.95, 1, np.pi), (4.45, 0, np.pi),
                              (6.0, 1, 3 * np.pi / 4), (6.5, 0, np.pi / 2),
                              (7.0, 1, np.pi / 2)):
        plan.append((t_lift, side, *turned((0.0, 0.0), yaw, side), yaw))
    holds = ([Hold(0.0, np.inf, 0.0, w)], [Hold(0.0, np.inf, 0.0, -w)])
    for t_lift, side, x, y, yaw in plan:
        holds[side][-1].t_off = t_lift
        holds[side].append(Hold(t_lift + 0.3, np.inf, x, y, yaw))
    feet, foot_rot = foot_tracks(t, holds, clearance=0.08, toe=0.35)
    # At rest at both ends: held a moment before the first step and after the last.
    root = sorted(support_keys(holds, 0.3) + [(0.0, 0.0, 0.0, 0.0), (0.1, 0.0, 0.0, 0.0),
                                              (duration - 0.15, 0.0, 0.0, np.pi / 2),
                                              (duration, 0.0, 0.0, np.pi / 2)])
    root_x = keys(t, [(k[0], k[1]) for k in root])
    root_y = keys(t, [(k[0], k[2]) for k in root])
    yaw = keys(t, [(k[0], k[3]) for k in root])
    # The hip sway during the wave (both feet down from 4.8 s to 6.0 s), across the
    # pelvis, which faces backwards then.
    sway_on = smooth5((t - 4.85) / 0.25) * (1.0 - smooth5((t - 5.7) / 0.25))
    sway = 0.04 * sway_on * np.sin(2.0 * np.pi * (t - 4.85) / (2.0 * beat))
    root_x += sway * -np.sin(yaw)
    root_y += sway * np.cos(yaw)
    dance_on = smooth5((t - 0.2) / 0.3) * (1.0 - smooth5((t - (duration - 0.6)) / 0.4))
    z = STAND_Z - dance_on * (0.03 + 0.015 * (1.0 - np.cos(2.0 * np.pi * (t - 0.45) / beat))
                              / 2.0)
    roll = -0.5 * sway
    # Upper body keyframes: arm swings with the side steps, arms out for the turn, then
    # (added below) the wave, then alternating raises.
    stand = arms()
    swing_r = arms(ls_pitch=-0.3, ls_roll=0.2, l_elbow=1.2, rs_pitch=0.3, rs_roll=-0.7,
                   r_elbow=0.4, waist_yaw_joint=-0.2)
    swing_l = arms(ls_pitch=0.3, ls_roll=0.7, l_elbow=0.4, rs_pitch=-0.3, rs_roll=-0.2,
                   r_elbow=1.2, waist_yaw_joint=0.2)
    wings = arms(ls_roll=1.3, rs_roll=-1.3, l_elbow=0.2, r_elbow=0.2)
    raise_l = arms(ls_pitch=-2.2, ls_roll=0.4, l_elbow=0.3, waist_yaw_joint=0.25)
    raise_r = arms(rs_pitch=-2.2, rs_roll=-0.4, r_elbow=0.3, waist_yaw_joint=-0.25)
    upper = joint_keys(t, [(0.0, stand), (0.3, stand), (0.8, swing_r), (1.3, swing_r),
                           (1.8, swing_l), (2.3, swing_l), (2.7, wings), (4.6, wings),
                           (5.0, arms(ls_roll=1.1, rs_roll=-1.1, l_elbow=0.2, r_elbow=0.2)),
                           (5.8, arms(ls_roll=1.1, rs_roll=-1.1, l_elbow=0.2, r_elbow=0.2)),
                           (6.2, raise_l), (6.7, raise_r), (7.2, raise_l), (7.6, stand)])
    wave_on = smooth5((t - 4.7) / 0.3) * (1.0 - smooth5((t - 5.7) / 0.3))
    w_rate = 2.0 * np.pi / 1.0
    for name, lag, amp in (('left_wrist_roll_joint', 0.0, 0.6), ('left_elbow_joint', 0.5, 0.5),
                           ('left_shoulder_roll_joint', 1.0, 0.25),
                           ('right_shoulder_roll_joint', 1.6, -0.25),
                           ('right_elbow_joint', 2.1, 0.5), ('right_wrist_roll_joint', 2.6, 0.6)):
        upper[:, g1.joint_index(name)] += wave_on * amp * np.sin(w_rate * (t - 4.7) - lag)
    upper[:, g1.joint_index('waist_roll_joint')] += 1.2 * sway
    root_pos = np.stack([root_x, root_y, z], axis=-1)
    root_rpy = np.stack([roll, np.zeros_like(t), yaw], axis=-1)
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
        # Lift the ankles so the feet's lowest sphere points are at the keyed heights.
        target_pos[:, 2] += sole_height(clip.foot_rot[i, :, 0])
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
                qe = quat_mul(target_quat[side], quat_conj(data.xquat[foot]))
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


# Balance.

BALANCED = ('run', 'fight')
"""Clips whose root is moved by :func:`balance` (jump and dance keep their keyed root)."""
BALANCE_MARGIN = 0.02
"""balance: the centre of pressure is kept this far inside the support polygon [m]."""
REST_FRAMES = 5
"""balance: frames at each end where the root is not moved (the clip is at rest there)."""


def balance(robot: g1_model.G1Model, clip: Clip, iterations: int = 8
            ) -> Tuple[np.ndarray, List[Dict[str, float]]]:
    """
    Move the clip's root sideways and fore-aft so its feet can carry it; return legs.

    Keyframed weight shifts ask the floor for a centre of pressure (CoP) that
    no foot can give (:func:`bcg_ros.motion.balance_stats`). Each iteration
    computes the CoP the clip needs, projects it into the support polygon
    shrunk by BALANCE_MARGIN, and solves, by least squares over the whole clip,
    for a horizontal root offset ``d`` whose cart-table CoP change
    ``d - h d''`` (``h``: CoM height over vertical acceleration plus gravity)
    makes up the difference, with ``d'' = 0`` in flight (the flights stay
    ballistic), ``d = 0`` over REST_FRAMES at both ends, and a small weight on
    ``d`` itself. The feet stay where they are keyed; the legs are solved
    again. Returns the joint angles and each iteration's balance figures.
    """
    dt = 1.0 / FPS
    n = len(clip.t)
    d2 = (np.eye(n, k=-1) - 2.0 * np.eye(n) + np.eye(n, k=1))[1:-1] / dt ** 2
    log = []
    fit_reach(robot, clip)
    joint_pos = solve_legs(robot, clip)
    for k in range(iterations + 1):
        motion = motion_lib.from_trajectory('balancing', FPS, clip.root_pos,
                                            rpy_to_quat(clip.root_rpy), joint_pos, robot)
        cop, force, com = motion_lib.centre_of_pressure(motion, robot)
        _, spheres = motion_lib.forward_kinematics(clip.root_pos, rpy_to_quat(clip.root_rpy),
                                                   joint_pos, robot)
        touching = spheres[..., 2] - g1.FOOT_SPHERE_RADIUS < motion_lib.CONTACT_HEIGHT
        stance = touching.any(axis=1)
        want = cop.copy()
        distance = []
        for t in np.flatnonzero(stance):
            poly = motion_lib.support_polygon(spheres[t, touching[t], :2])
            near, dist = motion_lib.closest_in_polygon(poly, cop[t])
            distance.append(dist)
            if dist > -BALANCE_MARGIN:
                inward = poly.mean(axis=0) - near
                length = np.linalg.norm(inward)
                step = min(BALANCE_MARGIN, length)
                want[t] = near + (inward / length * step if length > 1e-9 else 0.0)
        log.append(motion_lib.outside_figures(np.array(distance)))
        if k == iterations:
            break
        mass = float(robot.model.body_subtreemass[int(robot.model.jnt_bodyid[0])])
        lift = np.maximum(force[:, 2] / mass, 0.2 * GRAVITY)
        h = com[:, 2] / lift
        rows, rhs = [], []
        cart = np.eye(n)[1:-1] - h[1:-1, None] * d2
        inner = stance[1:-1]
        rows.append(cart[inner])
        rhs.append((want - cop)[1:-1][inner])
        rows.append(10.0 * 0.07 * d2[~inner])
        rhs.append(np.zeros(((~inner).sum(), 2)))
        ends = np.r_[0:REST_FRAMES, n - REST_FRAMES:n]
        rows.append(100.0 * np.eye(n)[ends])
        rhs.append(np.zeros((len(ends), 2)))
        rows.append(0.05 * np.eye(n))
        rhs.append(np.zeros((n, 2)))
        offset = np.linalg.lstsq(np.concatenate(rows), np.concatenate(rhs), rcond=None)[0]
        offset[ends] = 0.0
        for a, b in motion_lib.runs_of(~stance):  # exactly straight in flight: ballistic
            lo, hi = max(a - 1, 0), min(b, n - 1)
            offset[lo:hi + 1] = np.linspace(offset[lo], offset[hi], hi - lo + 1)
        # A step the legs cannot follow (a foot out of reach or past an ankle limit) is
        # halved until they can; the clip stays as balanced as the legs allow.
        base = clip.root_pos.copy()
        for scale in (1.0, 0.5, 0.25, 0.0):
            clip.root_pos[:] = base
            clip.root_pos[:, :2] += scale * offset
            fit_reach(robot, clip)
            try:
                joint_pos = solve_legs(robot, clip)
                break
            except RuntimeError:
                continue
        if scale == 0.0:
            break
    return joint_pos, log


REACH = 0.95
"""fit_reach: a leg's hip-to-ankle distance stays within this share of its straight length."""


def fit_reach(robot: g1_model.G1Model, clip: Clip) -> None:
    """
    Lower the root where a leg would have to reach further than REACH of its length.

    Moving the root over the feet (:func:`balance`) can take a hip beyond a
    foot's reach (a foot more than 3 cm up, a kick, is not considered). The drop
    each frame needs is spread over 0.3 s (largest within the window, then a
    smooth window); in a flight it is the straight line between the flight's
    ends, so a flight stays ballistic; it fades out toward the REST_FRAMES at
    each end, where the clip stands.
    """
    model = robot.model
    data = mujoco.MjData(model)
    hips = [model.body_parentid[robot.foot_bodies[s]] for s in (0, 1)]
    for _ in range(5):  # the parents of the ankle-roll link, up to the hip pitch link
        hips = [model.body_parentid[b] for b in hips]
    data.qpos[:] = model.qpos0
    data.qpos[2] = 1.0
    mujoco.mj_kinematics(model, data)
    straight = np.linalg.norm(data.xpos[hips[0]] - data.xpos[robot.foot_bodies[0]])
    limit = REACH * straight
    quat = rpy_to_quat(clip.root_rpy)
    drop = np.zeros(len(clip.t))
    for t in range(len(clip.t)):
        data.qpos[0:3], data.qpos[3:7] = clip.root_pos[t], quat[t]
        mujoco.mj_kinematics(model, data)
        for side in (0, 1):
            if clip.feet[t, side, 2] > 0.03:
                continue  # a foot well off the floor (a kick) bends its knee to reach
            ankle = clip.feet[t, side].copy()
            ankle[2] += sole_height(clip.foot_rot[t, side, 0])
            gap = ankle - data.xpos[hips[side]]
            flat = np.linalg.norm(gap[:2])
            if np.linalg.norm(gap) > limit and flat < limit:
                drop[t] = max(drop[t], -gap[2] - np.sqrt(limit ** 2 - flat ** 2))
    if not drop.any():
        return
    half = int(round(0.15 * FPS))
    padded = np.pad(drop, half, mode='edge')
    drop = np.array([padded[t:t + 2 * half + 1].max() for t in range(len(drop))])
    window = np.hanning(2 * half + 3)[1:-1]
    drop = np.convolve(np.pad(drop, half, mode='edge'), window / window.sum(), mode='valid')
    for a, b in motion_lib.runs_of((clip.feet[:, :, 2] > 0.0).all(axis=1)):
        lo, hi = max(a - 1, 0), min(b, len(drop) - 1)
        drop[lo:hi + 1] = np.linspace(drop[lo], drop[hi], hi - lo + 1)
    # None at the ends, where the clip stands at rest.
    k = np.arange(len(drop))
    drop *= smooth5((k - REST_FRAMES) / 10.0) * smooth5((len(drop) - 1 - REST_FRAMES - k) / 10.0)
    clip.root_pos[:, 2] -= drop


def build(name: str, robot: g1_model.G1Model) -> motion_lib.Motion:
    """Make one clip as a Motion (BALANCED clips through :func:`balance`)."""
    clip = MAKERS[name]()
    if name in BALANCED:
        joint_pos, log = balance(robot, clip)
        print(f'{name}: balance, CoP outside by > 2 cm in '
              + ', '.join(f'{g["cop_outside_share"]:.0%} (max {g["cop_outside_max_cm"]:.1f} cm)'
                          for g in log) + ' of stance frames')
    else:
        joint_pos = solve_legs(robot, clip)
    return motion_lib.from_trajectory(name, FPS, clip.root_pos, rpy_to_quat(clip.root_rpy),
                                      joint_pos, robot)


def summary(motion: motion_lib.Motion, robot: g1_model.G1Model) -> str:
    """Return one line of figures about a clip (those of ``bcg-motion info`` and the floor)."""
    st = motion_lib.motion_stats(motion, robot)
    _, spheres = motion_lib.forward_kinematics(motion.root_pos, motion.root_quat,
                                               motion.joint_pos, robot)
    lowest = (spheres[..., 2] - g1.FOOT_SPHERE_RADIUS).min()
    return (f'{motion.name}: {motion.num_frames} frames ({st["duration_s"]:.2f} s), travel '
            f'{st["root_travel_m"]:.2f} m, root rise {st["max_root_rise_m"] * 100:.1f} cm, '
            f'{st["flight_phases"]} flights ({st["shortest_flight_s"]:.2f}-'
            f'{st["longest_flight_s"]:.2f} s), foot up to {st["max_foot_height_m"] * 100:.1f} '
            f'cm, yaw {st["yaw_accumulated_deg"]:.0f} deg, stand-still '
            f'{st["stand_still_cm"]:.1f} cm, joint speed {st["peak_joint_speed"]:.2f} of rated, '
            f'joint acc {st["peak_joint_acc"]:.0f} rad/s^2, lowest foot {lowest * 1e3:+.2f} mm, '
            f'stance slide {motion_lib.stance_slide(spheres).max() * 1e3:.2f} mm')


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
