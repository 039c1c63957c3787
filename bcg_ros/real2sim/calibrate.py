"""
Calibration: the differentiable simulator's physical parameters fitted to robot logs.

What is fitted is what :class:`bcg_ros.robot.physics.PhysicsParams` describes and a
log can tell apart: per joint, factors on dry friction, viscous damping, armature
and motor strength; per body, a factor on mass and inertia and a centre-of-mass
offset; the ground's friction; and the control latency. Each is a log-factor (or an
offset) with a Gaussian prior whose width is the stated uncertainty of that
parameter (:class:`~bcg_ros.robot.physics.PhysicsRanges`), so a parameter the logs
say nothing about stays at its nominal value, and the fit is a MAP estimate (L-BFGS
on all windows, bounded to ``CalibrationConfig.bound`` prior widths).

**Multiple shooting.** A log is cut into short windows (0.1 s). Each window starts
from the logged state (joint encoders, the pelvis pose and velocity of the odometry)
and is simulated under the logged commands by :func:`bcg_ros.core.sim.substep` at
the LowState period (2 ms); its error is the joint angles against the encoders and
the pelvis pose against the odometry. A window is short enough that contact events
do not compound and the gradient stays informative; nothing is simulated across
windows.

**Commands.** Each LowState is answered by the latest command stamped at or before
it (``crc_ok``), acting ``d`` steps later; ``d`` (the latency in 2 ms steps) is
chosen by the error it gives, before and after the fit. A command's velocity target
and feed-forward torque are folded into its position target
(``q* + (kd dq* + tau) / kp``, exact while kp > 0); motor strength scales kp, kd and
the torque limit together, as a torque constant does.

**A gantry.** Windows in which no foot sphere is near the floor while the pelvis is
not falling are held by something (an elastic band, a gantry) whose force no log
records. There the pelvis is held on its logged trajectory by a stiff spring
(:data:`GANTRY`), so the joints' dynamics still inform the fit (the classic joint
sweep hangs) and the pelvis error is not counted; the whole body's weight on the
ground is what the other windows weigh. Windows in which the robot is partly held are
left out, and so are windows in which a link touches another link or the floor
(:class:`ContactCheck`): the simulator models the feet's contact only.

**Uncertainty.** At the estimate, the per-window gradients of the data term give
the empirical Fisher information; with the prior's precision added and inverted, a
standard deviation per parameter. A parameter is *identified* where that is under
half its prior's.

API::

    logs = [read_log(p) for p in paths]
    result = calibrate(logs, CalibrationConfig())
    physics.save(result.params, 'params.yaml')
"""

import dataclasses
import pathlib
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np

from bcg_ros import rotation
from bcg_ros.real2sim import logs as logs_mod
from bcg_ros.robot import g1, physics

JOINT_KEYS = ('frictionloss', 'damping', 'armature', 'strength')
"""Per-joint log-factors, in the order of :data:`bcg_ros.robot.physics.JOINT_FIELDS`."""
GANTRY = (20000.0, 1500.0, 3000.0, 30.0)
"""Spring [N/m], damper [N s/m], rotational spring [N m/rad] and damper [N m s/rad]
holding the pelvis on its logged trajectory in a hanging window. They act explicitly:
the rotational damper stays under the explicit bound (dt kw / I < 2) at the G1's
smallest rotational inertia about the pelvis, about critical for the spring there."""


@dataclass(frozen=True)
class CalibrationConfig:
    """How logs are cut into windows and how the parameters are fitted."""

    window: float = 0.1
    """Length of a shooting window [s]."""
    stride: float = 0.2
    """Time between window starts [s] (at odometry samples)."""
    iterations: int = 30
    """L-BFGS steps on the whole set of windows (each with its line search)."""
    batch: int = 32
    """Windows simulated at once (memory; the objective always sums all of them)."""
    max_delay: int = 6
    """Largest latency tried [LowState periods]."""
    q_sigma: float = 0.01
    """Joint angle error of one sample that counts as one unit [rad]: what the
    simulator does not model like the robot (its contact, its smooth dry friction),
    not the encoders' 0.2 mrad, or the fit bends the parameters to the mismatch."""
    bound: float = 3.0
    """No estimate leaves this many prior standard deviations (a factor of 0.3 to 3.3
    on a joint's damping): beyond, parameters that only absorb the mismatch would
    make the simulator unstable."""
    pos_sigma: float = 0.01
    """Pelvis position error that counts as one unit [m]."""
    rot_sigma: float = 0.02
    """Pelvis orientation error that counts as one unit [rad]."""
    ranges: physics.PhysicsRanges = dataclasses.field(default_factory=physics.PhysicsRanges)
    """The prior: each parameter's stated uncertainty."""

    def __post_init__(self):
        """Reject what cannot fit, naming the field."""
        for name in ('window', 'stride', 'q_sigma', 'pos_sigma', 'rot_sigma'):
            if not getattr(self, name) > 0:
                raise ValueError(f'CalibrationConfig.{name}: must be > 0, got '
                                 f'{getattr(self, name)!r}')
        if self.iterations < 0 or self.batch < 1 or self.max_delay < 0:
            raise ValueError('CalibrationConfig: iterations >= 0, batch >= 1 and '
                             'max_delay >= 0 are needed')


@dataclass(frozen=True)
class Windows:
    """Shooting windows of one or more logs, stacked (leading axis: window)."""

    qpos0: np.ndarray
    """[N, nq] logged state at the window's start."""
    qvel0: np.ndarray
    """[N, nv]."""
    target: np.ndarray
    """[N, D + W, 29] commanded position targets (feed-forward folded in), from D steps
    before the start, motor order."""
    kp: np.ndarray
    """[N, D + W, 29]."""
    kd: np.ndarray
    """[N, D + W, 29]."""
    q: np.ndarray
    """[N, W, 29] encoder angles after each step."""
    base_pos: np.ndarray
    """[N, W, 3] pelvis position after each step, interpolated between odometry samples."""
    base_quat: np.ndarray
    """[N, W, 4]."""
    gantry: np.ndarray
    """[N, W, 13] the pelvis at each step's start: position, quaternion, linear velocity
    (world) and angular velocity (body), interpolated; where a gantry holds it."""
    base_seen: np.ndarray
    """[N, W] 1 where an odometry sample falls on the step (the pose error counts)."""
    hanging: np.ndarray
    """[N] 1: held by a gantry (the pelvis follows its logged trajectory)."""
    source: Tuple[str, ...]
    """Each window's log and start time, for reports."""

    def __len__(self) -> int:
        return len(self.qpos0)


@dataclass(frozen=True)
class Calibration:
    """The result: the parameters, their uncertainty, and the fit's figures."""

    params: physics.PhysicsParams
    """MAP estimate (``physics.save`` writes it; g1_sim_node and bcg-eval read it)."""
    std: Dict[str, Dict[str, float]]
    """Posterior standard deviation of each fitted quantity: log-factors for factors,
    metres for offsets (keys as in ``params``)."""
    prior_std: Dict[str, float]
    """The prior's standard deviation of each kind of parameter, in the same units."""
    delay: int
    """Latency [LowState periods]."""
    error_before: Dict[str, float]
    """RMS errors over all windows with the nominal parameters (q [rad], pos [m], rot [rad])."""
    error_after: Dict[str, float]
    """The same with the estimate."""
    windows: int
    hanging: int
    seconds: float


# --- the logs as windows -----------------------------------------------------------

def _command_rows(log: logs_mod.RobotLog) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per LowState: the (target, kp, kd) in force, motor order (unpowered: kp = kd = 0)."""
    s, c = log.lowstate, log.lowcmd
    n = len(s.t)
    target, kp, kd = s.q.copy(), np.zeros((n, g1.NUM_JOINTS)), np.zeros((n, g1.NUM_JOINTS))
    if c is None or not len(c.t):
        return target, kp, kd
    ok = np.flatnonzero(c.crc_ok)
    idx = np.searchsorted(c.t[ok], s.t + 1e-9, side='right') - 1
    has = idx >= 0
    rows = ok[np.maximum(idx, 0)]
    on = (c.mode[rows] != 0) & has[:, None]
    ckp, ckd = np.where(on, c.kp[rows], 0.0), np.where(on, c.kd[rows], 0.0)
    ff = ckd * c.dq[rows] + np.where(on, c.tau[rows], 0.0)
    bad = (ckp <= 0) & (np.abs(ff) > 1e-9)
    if bad.any():
        k, j = np.argwhere(bad)[0]
        raise logs_mod.LogError(
            f'{log.source or "log"}: LowCmd at t = {c.t[rows[k]]:.3f} s drives joint '
            f'{g1.JOINT_NAMES[j]} by velocity or torque alone (kp = 0); calibration folds '
            'those into a position target and needs kp > 0')
    target = np.where(ckp > 0, c.q[rows] + ff / np.where(ckp > 0, ckp, 1.0), s.q)
    return target, ckp, ckd


def _odometry(log: logs_mod.RobotLog) -> logs_mod.OdometryLog:
    if log.odom is None or len(log.odom.t) < 2:
        raise logs_mod.LogError(f'{log.source or "log"}: no odometry (the pelvis pose); '
                                'calibration needs it')
    return log.odom


def _base_track(log: logs_mod.RobotLog) -> Tuple[np.ndarray, ...]:
    """Per LowState: pelvis position, quaternion, velocity [6] interpolated, and 'seen'."""
    o, t = _odometry(log), log.lowstate.t
    quat = rotation.quat_continuous(o.quat)
    lin_world = rotation.quat_rotate(quat, o.lin_vel)
    j = np.clip(np.searchsorted(o.t, t, side='right') - 1, 0, len(o.t) - 2)
    f = np.clip((t - o.t[j]) / (o.t[j + 1] - o.t[j]), 0.0, 1.0)

    def lerp(x):
        return x[j] + f[:, None] * (x[j + 1] - x[j])

    pos = lerp(o.pos)
    q = rotation.quat_slerp(quat[j], quat[j + 1], f)
    vel = np.concatenate([lerp(lin_world), lerp(o.ang_vel)], -1)
    seen = np.min(np.abs(t[:, None] - o.t[None, :]), -1) < 1e-4
    return pos, q, vel, seen.astype(float)


def make_windows(log: logs_mod.RobotLog, cfg: CalibrationConfig, sim,
                 contacts: 'ContactCheck') -> Windows:
    """
    Cut ``log`` into shooting windows for ``sim`` (a :class:`bcg_ros.core.sim.Sim`).

    ``contacts`` tells, from the logged poses, where the feet are on the floor
    (hanging windows from standing ones) and where anything else touches: a link on
    another or on the floor, which the simulator does not model; such windows are
    left out.
    """
    s = log.lowstate
    if len(s.t) < 3:
        raise logs_mod.LogError(f'{log.source or "log"}: {len(s.t)} LowStates; too short')
    dt = float(np.median(np.diff(s.t)))
    w = max(1, int(round(cfg.window / dt)))
    d = cfg.max_delay
    target, kp, kd = _command_rows(log)
    pos, quat, vel, seen = _base_track(log)
    act_q, act_v = np.asarray(sim.act_qpos), np.asarray(sim.act_dof)
    nq, nv = sim.mjx_model.nq, sim.mjx_model.nv
    qpos = np.zeros((len(s.t), nq))
    qpos[:, 0:3], qpos[:, 3:7], qpos[:, act_q] = pos, quat, s.q
    qvel = np.zeros((len(s.t), nv))
    qvel[:, 0:6], qvel[:, act_v] = vel, s.dq
    on_floor = contacts.feet(qpos)
    elsewhere = contacts.elsewhere(qpos)
    # The pelvis's vertical acceleration: below -5 m/s^2 it falls freely, held by nothing.
    acc_z = np.gradient(vel[:, 2], dt)
    held = ~on_floor & (acc_z > -5.0)
    step = max(1, int(round(cfg.stride / dt)))
    # Windows start at odometry samples (the pelvis's state is known there), a stride apart.
    odom_rows = np.flatnonzero(seen[:len(s.t) - w])
    odom_rows = odom_rows[odom_rows >= d]
    starts, last = [], -step
    for k in odom_rows:
        if k - last >= step:
            starts.append(int(k))
            last = k
    keep, hanging = [], []
    for k in starts:
        span = held[k:k + w + 1]
        if elsewhere[k:k + w + 1].any():
            continue
        if span.all() or not span.any():
            keep.append(k)
            hanging.append(float(span.all()))
    if not keep:
        raise logs_mod.LogError(f'{log.source or "log"}: no window of {cfg.window} s that '
                                'is either wholly on the floor or wholly held, with no '
                                'contact but the feet\'s')
    ks = np.asarray(keep)
    cmd = ks[:, None] + np.arange(-d, w)[None, :]
    now = ks[:, None] + np.arange(0, w)[None, :]
    obs = now + 1
    name = log.source or 'log'
    gantry = np.concatenate([pos, quat, vel], -1)[now]
    return Windows(qpos0=qpos[ks], qvel0=qvel[ks], target=target[cmd], kp=kp[cmd], kd=kd[cmd],
                   q=s.q[obs], base_pos=pos[obs], base_quat=quat[obs], gantry=gantry,
                   base_seen=seen[obs], hanging=np.asarray(hanging),
                   source=tuple(f'{name}@{s.t[k]:.2f}s' for k in ks))


def concat(windows: Sequence[Windows]) -> Windows:
    """Windows of several logs as one set."""
    out = {}
    for f in dataclasses.fields(Windows):
        parts = [getattr(w, f.name) for w in windows]
        out[f.name] = (sum(parts, ()) if f.name == 'source' else np.concatenate(parts))
    return Windows(**out)


# --- the parameters on the simulator -------------------------------------------------

@dataclass(frozen=True)
class Problem:
    """The simulator at the LowState period and what maps parameters onto it."""

    sim: object
    """:class:`bcg_ros.core.sim.Sim` at ``dt`` (one substep per control step)."""
    body_ids: np.ndarray
    """MuJoCo ids of :data:`bcg_ros.robot.g1.TRACK_BODIES`."""
    ground_friction: float
    """The model file's ground friction (the factor's reference)."""
    dt: float


def make_problem(dt: float, model_path: str = '') -> Problem:
    """The project's G1 (or ``model_path``) in the differentiable simulator at step ``dt``."""
    from bcg_ros.core import sim as simulator

    sim = simulator.build_g1(simulator.SimConfig(control_dt=dt, substeps=1, remat=False),
                             model_path or None)
    return _problem(sim, model_path)


def _problem(sim, model_path: str = '') -> Problem:
    """``sim`` with the body ids and ground friction of its model file."""
    import mujoco

    from bcg_ros.robot import model as model_mod

    mj = model_mod.load(model_path or None).model
    ids = np.asarray([mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_BODY, b)
                      for b in g1.TRACK_BODIES])
    ground = physics.ground_geoms(mj)
    friction = float(mj.geom_friction[ground[0], 0]) if ground.size else 1.0
    return Problem(sim, ids, friction, sim.config.dt)


def on_sim(sim, params: physics.PhysicsParams, model_path: str = ''):
    """
    ``sim`` (a :class:`bcg_ros.core.sim.Sim`, any step) as the robot ``params`` describe.

    What MuJoCo reads from the same file reaches the training simulator: joint
    friction, damping and armature, link masses, inertias and centres of mass, the
    ground's friction (its softness is MuJoCo's own and stays the simulator's), and
    motor strength as a factor on the PD's kp, kd and torque limit. The latency does
    not: a few milliseconds are under one substep.
    """
    import jax
    import jax.numpy as jnp

    problem = _problem(sim, model_path)
    return apply(problem, jax.tree.map(lambda x: jnp.asarray(x, sim.dtype),
                                       from_physics(problem, params)))


def zero_theta() -> Dict[str, np.ndarray]:
    """The nominal parameters: every log-factor and offset 0."""
    nb = len(g1.TRACK_BODIES)
    out = {k: np.zeros(g1.NUM_JOINTS, np.float32) for k in JOINT_KEYS}
    out.update(mass=np.zeros(nb, np.float32), com=np.zeros((nb, 3), np.float32),
               ground_friction=np.zeros((), np.float32))
    return out


def prior_std(ranges: physics.PhysicsRanges) -> Dict[str, float]:
    """Prior standard deviation of each kind of parameter (log units; metres for com)."""
    def log_uniform(lo_hi):
        # The root mean square of the log of a factor uniform in [lo, hi] (about 0).
        lo, hi = np.log(lo_hi[0]), np.log(lo_hi[1])
        return float(np.sqrt((lo * lo + lo * hi + hi * hi) / 3.0))

    return {'frictionloss': log_uniform(ranges.frictionloss),
            'damping': log_uniform(ranges.damping), 'armature': log_uniform(ranges.armature),
            'strength': log_uniform(ranges.strength), 'mass': log_uniform(ranges.mass),
            'com': ranges.com / np.sqrt(3.0),
            'ground_friction': log_uniform(ranges.ground_friction)}


def apply(problem: Problem, theta):
    """
    The simulator with ``theta`` (log-factors; com offsets [m]) applied; traceable.

    Motor strength scales the PD's kp, kd and torque limit; :func:`window_rollout`,
    whose kp and kd come from the commands, scales those by it too.
    """
    import jax.numpy as jnp

    sim, dof, body = problem.sim, np.asarray(problem.sim.act_dof), problem.body_ids
    m = sim.mjx_model

    def factor(size, idx, log_factor):
        # exp(log_factor) at the listed entries, 1 elsewhere (multiplied in, it
        # differentiates where a scatter-multiply would not).
        return jnp.ones(size, log_factor.dtype).at[idx].set(jnp.exp(log_factor))

    mass = factor(m.nbody, body, theta['mass'])
    m = m.replace(
        body_mass=m.body_mass * mass, body_inertia=m.body_inertia * mass[:, None],
        body_ipos=m.body_ipos.at[body].add(theta['com']),
        dof_armature=m.dof_armature * factor(m.nv, dof, theta['armature']))
    contact = dataclasses.replace(sim.contact, friction=sim.contact.friction
                                  * jnp.exp(theta['ground_friction']))
    strength = jnp.exp(theta['strength'])
    return dataclasses.replace(
        sim, mjx_model=m, contact=contact, kp=sim.kp * strength, kd=sim.kd * strength,
        torque_limit=sim.torque_limit * strength,
        dof_damping=sim.dof_damping * factor(m.nv, dof, theta['damping']),
        dof_frictionloss=sim.dof_frictionloss * factor(m.nv, dof, theta['frictionloss']))


def to_physics(problem: Problem, theta, delay: int) -> physics.PhysicsParams:
    """``theta`` as :class:`~bcg_ros.robot.physics.PhysicsParams` (MuJoCo reads the same)."""
    def factors(x, names):
        return {n: round(float(np.exp(v)), 4) for n, v in zip(names, np.asarray(x))}

    joints = {f: factors(theta[k], g1.JOINT_NAMES)
              for f, k in zip(physics.JOINT_FIELDS, JOINT_KEYS)}
    com = {b: tuple(round(float(x), 5) for x in row)
           for b, row in zip(g1.TRACK_BODIES, np.asarray(theta['com']))}
    return physics.PhysicsParams(
        body_mass=factors(theta['mass'], g1.TRACK_BODIES), body_com=com,
        latency=round(delay * problem.dt, 4),
        ground_friction=round(problem.ground_friction
                              * float(np.exp(theta['ground_friction'])), 4), **joints)


def from_physics(problem: Problem, params: physics.PhysicsParams) -> Dict[str, np.ndarray]:
    """The log-factors and offsets of ``params`` (a file's, the truth's), as ``theta``."""
    theta = zero_theta()
    for f, k in zip(physics.JOINT_FIELDS, JOINT_KEYS):
        for name, value in getattr(params, f).items():
            theta[k][g1.JOINT_NAMES.index(name)] = np.log(value)
    for name, value in params.body_mass.items():
        theta['mass'][g1.TRACK_BODIES.index(name)] = np.log(value)
    for name, value in params.body_com.items():
        theta['com'][g1.TRACK_BODIES.index(name)] = value
    if params.ground_friction is not None:
        theta['ground_friction'] = np.float32(np.log(params.ground_friction
                                                     / problem.ground_friction))
    return theta


# --- the error of one window ---------------------------------------------------------

def _small_rotvec(q_err):
    """Rotation vector of a small rotation quaternion [4] (w x y z), the short way."""
    import jax.numpy as jnp

    return 2.0 * jnp.where(q_err[0] < 0, -1.0, 1.0) * q_err[1:4]


def window_rollout(problem: Problem, cfg: CalibrationConfig, theta, win: Dict, delay):
    """
    Simulate one window under ``theta`` and ``delay``.

    Returns joint angles [W, 29], pelvis position [W, 3] and quaternion [W, 4] after
    each step.

    ``win``: one window's arrays (the fields of :class:`Windows` but ``source``).
    """
    import jax
    import jax.numpy as jnp

    from bcg_ros.core import sim as simulator

    sim = apply(problem, theta)
    strength = jnp.exp(theta['strength'])
    n = win['q'].shape[0]
    start = cfg.max_delay - delay

    def cut(x):
        return jax.lax.dynamic_slice_in_dim(x, start, n)

    act_q = np.asarray(sim.act_qpos)
    kp_l, kd_l, kr, kw = GANTRY
    held = win['hanging']

    def body(state, x):
        tgt, kp, kd, ref = x
        s = dataclasses.replace(sim, kp=kp * strength, kd=kd * strength)
        qpos, qvel = state.qpos, state.qvel
        q_err = rotation.quat_mul(rotation.quat_conj(qpos[3:7], jnp), ref[3:7], jnp)
        wrench = jnp.concatenate([kp_l * (ref[0:3] - qpos[0:3]) + kd_l * (ref[7:10] - qvel[0:3]),
                                  kr * _small_rotvec(q_err) + kw * (ref[10:13] - qvel[3:6])])
        f = jnp.zeros_like(qvel).at[0:6].set(held * wrench)
        state, _ = simulator.substep(s, state, tgt, f)
        return state, (state.qpos[act_q], state.qpos[0:3], state.qpos[3:7])

    xs = (cut(win['target']), cut(win['kp']), cut(win['kd']), win['gantry'])
    _, out = jax.lax.scan(body, simulator.SimState(win['qpos0'], win['qvel0']), xs)
    return out


def window_errors(problem: Problem, cfg: CalibrationConfig, theta, win: Dict, delay):
    """
    Sums of squared errors of one window under ``theta`` and ``delay``.

    ``[3]``: joints [rad^2], pelvis position [m^2] and orientation [rad^2] (at
    odometry samples, unless a gantry holds it).
    """
    import jax
    import jax.numpy as jnp

    q, pos, quat = window_rollout(problem, cfg, theta, win, delay)
    rot = jax.vmap(lambda a, b: _small_rotvec(
        rotation.quat_mul(rotation.quat_conj(a, jnp), b, jnp)))(quat, win['base_quat'])
    # Where a gantry holds the pelvis, its pose error is the spring's, not the robot's.
    seen = win['base_seen'] * (1.0 - win['hanging'])
    return jnp.stack([jnp.sum((q - win['q']) ** 2),
                      jnp.sum(seen * jnp.sum((pos - win['base_pos']) ** 2, -1)),
                      jnp.sum(seen * jnp.sum(rot ** 2, -1))])


def window_cost(problem: Problem, cfg: CalibrationConfig, theta, win: Dict, delay):
    """Half the squared error of one window, each term over its sigma (the data term)."""
    e = window_errors(problem, cfg, theta, win, delay)
    return 0.5 * (e[0] / cfg.q_sigma ** 2 + e[1] / cfg.pos_sigma ** 2
                  + e[2] / cfg.rot_sigma ** 2)


# --- the fit ---------------------------------------------------------------------------

FLOOR_GAP = 0.02
"""A foot sphere nearer the floor than this [m] counts as support."""


class ContactCheck:
    """
    What touches in a logged pose: the feet on the floor, and anything else.

    The feet are the simulator's foot spheres (within FLOOR_GAP of the floor); the
    rest is MuJoCo's collision of the model with every link's shape (the G1's shape
    is known, only its physics is hidden): a hand on a thigh in a joint sweep, an
    upper arm on the torso, a knee on the floor after a fall.
    """

    def __init__(self, problem: Problem, model_path: str = ''):
        """Compile the checks for ``problem``'s robot (``model_path``: its MJCF)."""
        import jax
        import jax.numpy as jnp
        import mujoco

        from bcg_ros.core import sim as simulator
        from bcg_ros.robot import model as model_mod

        sim = problem.sim

        @jax.jit
        def depth(qpos):
            def one(q):
                state = simulator.SimState(q, jnp.zeros(sim.mjx_model.nv, q.dtype))
                return jnp.max(simulator.observe(sim, state, 0.0, 0.0).depth)
            return jax.vmap(one)(qpos)

        self._depth, self._dtype = depth, sim.dtype
        self._robot = model_mod.load(model_path or None, whole_body=True)
        self._data = mujoco.MjData(self._robot.model)
        m = self._robot.model
        feet = np.isin(m.geom_bodyid, self._robot.foot_bodies)
        self._fine = feet | (m.geom_bodyid == 0)      # a foot, or the world

    def feet(self, qpos: np.ndarray) -> np.ndarray:
        """``[M]``: whether any foot sphere is within FLOOR_GAP of the floor."""
        import jax.numpy as jnp

        return np.asarray(self._depth(jnp.asarray(qpos, self._dtype))) > -FLOOR_GAP

    def elsewhere(self, qpos: np.ndarray) -> np.ndarray:
        """``[M]``: whether two shapes touch other than a foot and the floor."""
        import mujoco

        m, d = self._robot.model, self._data
        out = np.zeros(len(qpos), bool)
        for i, q in enumerate(qpos):
            d.qpos[:] = q
            mujoco.mj_kinematics(m, d)
            mujoco.mj_collision(m, d)
            c = d.contact[:d.ncon]
            touching = c.dist < 0
            pair_fine = self._fine[c.geom1] & self._fine[c.geom2]
            out[i] = bool(np.any(touching & ~pair_fine))
        return out


def _arrays(w: Windows, dtype) -> Dict:
    import jax.numpy as jnp

    return {f.name: jnp.asarray(getattr(w, f.name), dtype)
            for f in dataclasses.fields(Windows) if f.name != 'source'}


def _prior_tree(theta: Dict, std: Dict[str, float]) -> Dict:
    return {k: np.full(np.shape(v), std[k], np.float32) for k, v in theta.items()}


def _errors_fn(problem: Problem, cfg: CalibrationConfig):
    import jax

    return jax.jit(jax.vmap(lambda th, w, d: window_errors(problem, cfg, th, w, d),
                            in_axes=(None, 0, None)))


def _rms(errors, theta, data: Dict, wins: Windows, delay: int, chunk: int = 64
         ) -> Dict[str, float]:
    """RMS joint [rad], pelvis position [m] and orientation [rad] errors over ``wins``."""
    import jax

    n = len(wins)
    tot = sum(np.asarray(errors(theta, jax.tree.map(lambda x: x[lo:lo + chunk], data), delay),
                         np.float64).sum(0) for lo in range(0, n, chunk))
    seen = max(float((wins.base_seen * (1.0 - wins.hanging[:, None])).sum()), 1.0)
    return {'q_rad': float(np.sqrt(tot[0] / wins.q.size)),
            'pos_m': float(np.sqrt(tot[1] / seen)), 'rot_rad': float(np.sqrt(tot[2] / seen))}


def trajectory_errors(robot_logs: Sequence[logs_mod.RobotLog],
                      params: Sequence[physics.PhysicsParams],
                      cfg: CalibrationConfig = CalibrationConfig(), model_path: str = ''
                      ) -> List[Dict[str, float]]:
    """
    Return the windows' RMS errors on ``robot_logs`` for each of ``params``.

    E.g. nominal and calibrated, on logs the calibration did not see; each at its
    own latency.
    """
    import jax
    import jax.numpy as jnp

    problem = make_problem(_log_dt(robot_logs), model_path)
    contacts = ContactCheck(problem, model_path)
    wins = concat([make_windows(r, cfg, problem.sim, contacts) for r in robot_logs])
    data = _arrays(wins, problem.sim.dtype)
    errors = _errors_fn(problem, cfg)
    out = []
    for p in params:
        theta = jax.tree.map(jnp.asarray, from_physics(problem, p))
        delay = min(physics.latency_steps(p.latency, problem.dt), cfg.max_delay)
        out.append(_rms(errors, theta, data, wins, delay))
    return out


def _log_dt(robot_logs: Sequence[logs_mod.RobotLog]) -> float:
    """The logs' common LowState period [s]."""
    if not robot_logs:
        raise logs_mod.LogError('no logs given')
    dts = [float(np.median(np.diff(r.lowstate.t))) for r in robot_logs]
    if max(dts) - min(dts) > 1e-6:
        raise logs_mod.LogError(f'logs at different LowState rates ({sorted(set(dts))} s)')
    return dts[0]


def calibrate(robot_logs: Sequence[logs_mod.RobotLog],
              cfg: CalibrationConfig = CalibrationConfig(), model_path: str = '',
              log: Callable[[str], None] = print) -> Calibration:
    """Fit the parameters to ``robot_logs`` (module docstring); return the estimate."""
    begin = time.monotonic()
    problem = make_problem(_log_dt(robot_logs), model_path)
    contacts = ContactCheck(problem, model_path)
    wins = concat([make_windows(r, cfg, problem.sim, contacts) for r in robot_logs])
    log(f'{len(wins)} windows of {cfg.window} s ({int(wins.hanging.sum())} held by a '
        f'gantry) from {len(robot_logs)} logs')
    return fit(problem, wins, cfg, log, begin)


def fit(problem: Problem, wins: Windows, cfg: CalibrationConfig = CalibrationConfig(),
        log: Callable[[str], None] = print, begin: float = 0.0) -> Calibration:
    """Fit the parameters to the windows ``wins`` (:func:`calibrate` without the logs)."""
    import jax
    import jax.numpy as jnp
    import optax

    begin = begin or time.monotonic()
    data = _arrays(wins, problem.sim.dtype)
    n_win = len(wins)
    std = prior_std(cfg.ranges)
    theta0 = jax.tree.map(jnp.asarray, zero_theta())
    prior = jax.tree.map(jnp.asarray, _prior_tree(zero_theta(), std))

    errors = _errors_fn(problem, cfg)
    costs = jax.vmap(lambda th, w, d: window_cost(problem, cfg, th, w, d),
                     in_axes=(None, 0, None))

    def rms(theta, delay) -> Dict[str, float]:
        return _rms(errors, theta, data, wins, delay)

    def best_delay(theta) -> int:
        probe = jax.tree.map(lambda x: x[::max(1, n_win // 64)], data)
        tot = [float(np.asarray(errors(theta, probe, d))[:, 0].sum())
               for d in range(cfg.max_delay + 1)]
        return int(np.argmin(tot))

    delay = best_delay(theta0)
    before = rms(theta0, delay)
    log(f'nominal: latency {delay} steps ({delay * problem.dt * 1e3:.0f} ms), RMS joint '
        f'{before["q_rad"]:.4f} rad, pelvis {before["pos_m"] * 100:.2f} cm, '
        f'{before["rot_rad"]:.4f} rad')
    n_res = n_win * wins.q.shape[1] * g1.NUM_JOINTS

    # The windows in chunks of ``batch`` (the last padded with weight 0); each chunk's
    # cost is recomputed in the backward pass, so memory holds one chunk's rollout.
    size = min(cfg.batch, n_win)
    n_chunks = -(-n_win // size)
    pad = n_chunks * size - n_win
    chunked = jax.tree.map(lambda x: jnp.concatenate([x, x[:pad]]).reshape(
        (n_chunks, size) + x.shape[1:]), data)
    weight = jnp.asarray(np.arange(n_chunks * size) < n_win, problem.sim.dtype).reshape(
        n_chunks, size)

    def objective(z, delay):
        # In units of each parameter's prior width: a centimetre of com offset and a
        # tenth of a log-factor weigh alike, and the prior is z^2 / 2.
        theta = _bounded(z, prior, cfg.bound)

        @jax.checkpoint
        def chunk_cost(c):
            win, wt = c
            return jnp.sum(wt * costs(theta, win, delay))

        data_term = jnp.sum(jax.lax.map(chunk_cost, (chunked, weight)))
        prior_term = 0.5 * sum(jnp.sum(a * a) for a in jax.tree.leaves(z))
        return (data_term + prior_term) / n_res

    # A few line-search steps at most: near the optimum the objective is flat to float32
    # and a zoom line search would spend dozens of passes over the windows on it.
    opt = optax.lbfgs(linesearch=optax.scale_by_zoom_linesearch(max_linesearch_steps=6))

    @jax.jit
    def update(z, opt_state, delay):
        def f(x):
            return objective(x, delay)
        value, grad = optax.value_and_grad_from_state(f)(z, state=opt_state)
        step, opt_state = opt.update(grad, opt_state, z, value=value, grad=grad, value_fn=f)
        return optax.apply_updates(z, step), opt_state, value

    z = jax.tree.map(jnp.zeros_like, theta0)
    opt_state = opt.init(z)
    for it in range(cfg.iterations):
        z, opt_state, value = update(z, opt_state, delay)
        if it % 10 == 0 or it == cfg.iterations - 1:
            log(f'iteration {it}: objective {float(value):.5f} '
                f'({time.monotonic() - begin:.0f} s)')
    theta = _bounded(z, prior, cfg.bound)
    delay = best_delay(theta)
    after = rms(theta, delay)
    log(f'estimate: latency {delay} steps, RMS joint {after["q_rad"]:.4f} rad, pelvis '
        f'{after["pos_m"] * 100:.2f} cm, {after["rot_rad"]:.4f} rad')
    sd = _posterior_std(theta, prior, data, n_win,
                        lambda th, w: window_cost(problem, cfg, th, w, delay))
    out_std = {}
    for f, k in zip(physics.JOINT_FIELDS, JOINT_KEYS):
        out_std[f] = dict(zip(g1.JOINT_NAMES, map(float, sd[k])))
    out_std['body_mass'] = dict(zip(g1.TRACK_BODIES, map(float, sd['mass'])))
    out_std['body_com'] = {b: [float(x) for x in row]
                           for b, row in zip(g1.TRACK_BODIES, np.asarray(sd['com']))}
    out_std['ground_friction'] = {'ground': float(sd['ground_friction'])}
    theta_np = jax.tree.map(np.asarray, theta)
    return Calibration(to_physics(problem, theta_np, delay), out_std,
                       {**{f: std[k] for f, k in zip(physics.JOINT_FIELDS, JOINT_KEYS)},
                        'body_mass': std['mass'], 'body_com': std['com'],
                        'ground_friction': std['ground_friction']},
                       delay, before, after, n_win, int(wins.hanging.sum()),
                       time.monotonic() - begin)


def _bounded(z, prior, bound: float):
    """``theta`` of the unbounded ``z``: ``bound * prior * tanh(z / bound)``, about z * prior."""
    import jax
    import jax.numpy as jnp

    return jax.tree.map(lambda a, s: bound * s * jnp.tanh(a / bound), z, prior)


def _posterior_std(theta, prior, data, n_win, cost) -> Dict[str, np.ndarray]:
    """Standard deviations from the per-window gradients (empirical Fisher) and the prior."""
    import jax
    import jax.flatten_util

    flat_theta, unravel = jax.flatten_util.ravel_pytree(theta)
    per_window = jax.jit(jax.vmap(jax.grad(lambda th, w: cost(unravel(th), w)),
                                  in_axes=(None, 0)))
    fisher = np.zeros((flat_theta.size, flat_theta.size))
    for lo in range(0, n_win, 64):
        g = np.asarray(per_window(flat_theta, jax.tree.map(lambda x: x[lo:lo + 64], data)),
                       np.float64)
        fisher += g.T @ g
    prior_flat = np.asarray(jax.flatten_util.ravel_pytree(prior)[0], np.float64)
    precision = fisher + np.diag(1.0 / prior_flat ** 2)
    cov = np.linalg.inv(precision)
    return jax.tree.map(np.asarray, unravel(np.sqrt(np.clip(np.diag(cov), 0, None))))


# --- files -----------------------------------------------------------------------------

IDENTIFIED = 0.5
"""A parameter is identified where its posterior std is under this share of its prior's."""


def std_path(params_path) -> pathlib.Path:
    """Where the standard deviations of ``params.yaml`` go: ``params.std.yaml``."""
    p = pathlib.Path(params_path)
    return p.with_name(p.stem + '.std' + (p.suffix or '.yaml'))


def identified(result: Calibration) -> Dict[str, List[str]]:
    """Per kind of parameter, the names whose std is under IDENTIFIED x the prior's."""
    out = {}
    for kind, per in result.std.items():
        limit = IDENTIFIED * result.prior_std[kind]
        out[kind] = [name for name, sd in per.items()
                     if max(np.atleast_1d(sd)) < limit]
    return out


def save_std(result: Calibration, path) -> None:
    """Write the standard deviations, the prior's, and the identified names as YAML."""
    data = {'units': 'log-factor for factors (0.1 ~ 10 %), metres for body_com',
            'prior_std': {k: round(float(v), 5) for k, v in result.prior_std.items()},
            'identified': identified(result),
            'std': {k: {n: (round(float(v), 5) if np.ndim(v) == 0
                            else [round(float(x), 5) for x in v]) for n, v in per.items()}
                    for k, per in result.std.items()},
            'latency_steps': result.delay,
            'rms_before': result.error_before, 'rms_after': result.error_after,
            'windows': result.windows, 'windows_held': result.hanging}
    pathlib.Path(path).write_text(physics.dump_yaml(data))
