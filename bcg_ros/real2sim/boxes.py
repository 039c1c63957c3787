"""
The multi-object scene: three boxes on a floor, pushed about by a pusher.

The scene of the learned simulator (:mod:`bcg_ros.real2sim.gnn`): three free boxes of
different sizes and masses on a floor, and a vertical capsule (the pusher) that slides
in x and y under a velocity servo, its commanded velocity the action, held for
:data:`CONTROL_DT`. Boxes collide with the floor, with each other and with the pusher;
the pusher does not touch the floor. MuJoCo (C, ``implicitfast`` at 2 ms, elliptic
friction cone) simulates it.

**Physical parameters** (:class:`BoxParams`): the floor's friction, the friction
between boxes, each box's mass (its inertia scaled with it), and the contact's
softness (MuJoCo's ``solref`` time constant). :func:`draw` draws a hidden set from
:class:`BoxRanges` by a seed; :func:`make_logs` records trajectories of that hidden
scene (the "real" data, a few of them); :func:`calibrate` fits the parameters to such
logs by multiple shooting (short windows, each from a logged state, under the logged
actions) with Nelder-Mead on the log-parameters; :func:`generate` then makes the large
synthetic data set from any parameters (the calibrated ones), with varied layouts,
drops and pushes.

**State** (:class:`Trajectory`): per body (boxes, then the pusher) the position, the
orientation (w, x, y, z), the linear and the angular velocity, both in the world frame,
at every control step.
"""

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import mujoco
import numpy as np
from scipy import optimize

from bcg_ros import rotation

CONTROL_DT = 0.02
"""Seconds per action and per recorded state."""
PHYSICS_DT = 0.002
"""MuJoCo's step [s]."""
HALF_SIZES = np.array([[0.10, 0.10, 0.10], [0.15, 0.10, 0.075], [0.075, 0.075, 0.075]])
"""Half sizes of the three boxes [m]."""
NOMINAL_MASS = np.array([2.0, 3.0, 1.0])
"""Their nominal masses [kg]."""
PUSHER_RADIUS = 0.04
PUSHER_HALF_LENGTH = 0.06
"""Half the length of the pusher capsule's cylinder [m]."""
PUSHER_Z = 0.12
"""The pusher's centre height [m]: its lower end is 2 cm above the floor."""
PUSHER_MASS = 2.0
PUSHER_KV = 100.0
"""The pusher's velocity servo gain [N s/m] (force limit :data:`PUSHER_FORCE`)."""
PUSHER_FORCE = 60.0
MAX_SPEED = 0.6
"""The largest commanded pusher speed per axis [m/s]."""
NUM_BODIES = len(HALF_SIZES) + 1
ARENA = 0.8
"""Boxes start within +-ARENA m of the origin in x and y."""


@dataclass(frozen=True)
class BoxParams:
    """The scene's physical parameters."""

    floor_friction: float = 0.6
    box_friction: float = 0.5
    """Between boxes (and between a box and the pusher)."""
    mass_scale: Tuple[float, float, float] = (1.0, 1.0, 1.0)
    """Per box, a factor on its mass and inertia."""
    timeconst: float = 0.02
    """MuJoCo's contact ``solref`` time constant [s]: larger is softer."""

    def vector(self) -> np.ndarray:
        """Return the log-parameters (the calibration's variables)."""
        return np.log([self.floor_friction, self.box_friction, *self.mass_scale, self.timeconst])

    @staticmethod
    def from_vector(x: Sequence[float]) -> 'BoxParams':
        """Return the parameters of log-parameters ``x`` (:meth:`vector`'s inverse)."""
        e = np.exp(np.asarray(x, dtype=np.float64))
        return BoxParams(float(e[0]), float(e[1]), tuple(float(v) for v in e[2:5]), float(e[5]))


NAMES = ('floor_friction', 'box_friction', 'mass_scale_0', 'mass_scale_1', 'mass_scale_2',
         'timeconst')
"""The entries of :meth:`BoxParams.vector`, in order."""


@dataclass(frozen=True)
class BoxRanges:
    """Where a hidden scene's parameters are drawn from (uniform, per parameter)."""

    floor_friction: Tuple[float, float] = (0.3, 1.0)
    box_friction: Tuple[float, float] = (0.2, 0.9)
    mass_scale: Tuple[float, float] = (0.5, 2.0)
    timeconst: Tuple[float, float] = (0.01, 0.04)


def draw(seed: int, ranges: BoxRanges = BoxRanges()) -> BoxParams:
    """Draw hidden parameters from ``ranges`` by ``seed``."""
    rng = np.random.default_rng(seed)
    return BoxParams(float(rng.uniform(*ranges.floor_friction)),
                     float(rng.uniform(*ranges.box_friction)),
                     tuple(float(v) for v in rng.uniform(*ranges.mass_scale, size=3)),
                     float(rng.uniform(*ranges.timeconst)))


def mjcf() -> str:
    """Return the scene's MJCF at nominal parameters (:func:`model` applies others)."""
    boxes = []
    for i, (half, mass) in enumerate(zip(HALF_SIZES, NOMINAL_MASS)):
        boxes.append(f'''
    <body name="box{i}" pos="{0.4 * i} 0 {half[2]}">
      <freejoint name="box{i}"/>
      <geom name="box{i}" type="box" size="{half[0]} {half[1]} {half[2]}" mass="{mass}"
            contype="3" conaffinity="3" friction="0.5 0.005 0.0001"/>
    </body>''')
    return f'''<mujoco model="bcg_boxes">
  <option timestep="{PHYSICS_DT}" integrator="implicitfast" cone="elliptic"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" contype="1" conaffinity="1" priority="1"
          friction="0.6 0.005 0.0001"/>{''.join(boxes)}
    <body name="pusher" pos="0 0 {PUSHER_Z}">
      <joint name="pusher_x" type="slide" axis="1 0 0"/>
      <joint name="pusher_y" type="slide" axis="0 1 0"/>
      <geom name="pusher" type="capsule" size="{PUSHER_RADIUS} {PUSHER_HALF_LENGTH}"
            mass="{PUSHER_MASS}" contype="2" conaffinity="2" friction="0.5 0.005 0.0001"/>
    </body>
  </worldbody>
  <actuator>
    <velocity name="pusher_x" joint="pusher_x" kv="{PUSHER_KV}" forcelimited="true"
              forcerange="-{PUSHER_FORCE} {PUSHER_FORCE}"/>
    <velocity name="pusher_y" joint="pusher_y" kv="{PUSHER_KV}" forcelimited="true"
              forcerange="-{PUSHER_FORCE} {PUSHER_FORCE}"/>
  </actuator>
</mujoco>
'''


def model(params: BoxParams = BoxParams()) -> mujoco.MjModel:
    """Return the scene's MuJoCo model with ``params`` applied."""
    m = mujoco.MjModel.from_xml_string(mjcf())
    floor = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, 'floor')
    m.geom_friction[floor, 0] = params.floor_friction
    for i, scale in enumerate(params.mass_scale):
        g = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, f'box{i}')
        b = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, f'box{i}')
        m.geom_friction[g, 0] = params.box_friction
        m.body_mass[b] *= scale
        m.body_inertia[b] *= scale
    m.geom_friction[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, 'pusher'), 0] = \
        params.box_friction
    m.geom_solref[:, 0] = params.timeconst
    return m


@dataclass
class Trajectory:
    """One recorded run of the scene (``T`` control steps, ``B`` = :data:`NUM_BODIES`)."""

    pos: np.ndarray
    """[T + 1, B, 3] positions."""
    quat: np.ndarray
    """[T + 1, B, 4] orientations (w, x, y, z)."""
    vel: np.ndarray
    """[T + 1, B, 3] linear velocities (world)."""
    angvel: np.ndarray
    """[T + 1, B, 3] angular velocities (world)."""
    action: np.ndarray
    """[T, 2] the pusher's commanded velocity during each step [m/s]."""

    def __len__(self) -> int:
        return len(self.action)

    def states(self) -> np.ndarray:
        """Return every state, [T + 1, B, 13]."""
        return np.concatenate([self.pos, self.quat, self.vel, self.angvel], -1)


def _get_state(m: mujoco.MjModel, d: mujoco.MjData) -> np.ndarray:
    """Return the current state [B, 13] from MuJoCo's qpos and qvel."""
    out = np.zeros((NUM_BODIES, 13))
    for i in range(NUM_BODIES - 1):
        q, v = d.qpos[7 * i:7 * i + 7], d.qvel[6 * i:6 * i + 6]
        out[i, :7] = q
        out[i, 7:10] = v[:3]
        out[i, 10:13] = rotation.quat_rotate(q[3:7], v[3:6])   # local to world
    j = 7 * (NUM_BODIES - 1)
    k = 6 * (NUM_BODIES - 1)
    out[-1, :3] = (d.qpos[j], d.qpos[j + 1], PUSHER_Z)
    out[-1, 3] = 1.0
    out[-1, 7:9] = d.qvel[k:k + 2]
    return out


def _set_state(m: mujoco.MjModel, d: mujoco.MjData, state: np.ndarray) -> None:
    """Set MuJoCo's qpos and qvel from a state [B, 13] and run its forward pass."""
    for i in range(NUM_BODIES - 1):
        s = state[i]
        quat = s[3:7] / np.linalg.norm(s[3:7])
        d.qpos[7 * i:7 * i + 7] = np.concatenate([s[:3], quat])
        d.qvel[6 * i:6 * i + 3] = s[7:10]
        d.qvel[6 * i + 3:6 * i + 6] = rotation.quat_rotate_inverse(quat, s[10:13])
    j, k = 7 * (NUM_BODIES - 1), 6 * (NUM_BODIES - 1)
    d.qpos[j:j + 2] = state[-1, :2]
    d.qvel[k:k + 2] = state[-1, 7:9]
    d.act[:] = 0.0
    mujoco.mj_forward(m, d)


def simulate(m: mujoco.MjModel, state0: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """Return the states [T + 1, B, 13] of the scene from ``state0`` under ``actions`` [T, 2]."""
    replay = iter(np.asarray(actions, dtype=np.float64))
    return run_controller(m, state0, lambda state: next(replay), len(actions)).states()


def trajectory(states: np.ndarray, actions: np.ndarray) -> Trajectory:
    """Return a :class:`Trajectory` of states [T + 1, B, 13] and actions [T, 2]."""
    return Trajectory(states[..., :3], states[..., 3:7], states[..., 7:10], states[..., 10:13],
                      np.asarray(actions, dtype=np.float64))


def random_layout(rng: np.random.Generator, drop: bool) -> np.ndarray:
    """
    Return a random initial state [B, 13]: boxes apart on the floor, or some in the air.

    With ``drop``, each box starts up to 30 cm above the floor with a random tilt and a
    random velocity (a drop, tumbling onto the floor or onto another box).
    """
    state = np.zeros((NUM_BODIES, 13))
    placed: List[np.ndarray] = []
    for i, half in enumerate(HALF_SIZES):
        for _ in range(100):
            xy = rng.uniform(-ARENA, ARENA, 2)
            if all(np.linalg.norm(xy - p) > 0.45 for p in placed):
                break
        placed.append(xy)
        yaw = rng.uniform(-np.pi, np.pi)
        rpy = np.array([0.0, 0.0, yaw])
        z = half[2]
        if drop and rng.random() < 0.6:
            rpy[:2] = rng.uniform(-0.6, 0.6, 2)
            z = 0.25 + rng.uniform(0.0, 0.3)
            state[i, 7:10] = rng.normal(0.0, 0.3, 3)
            state[i, 10:13] = rng.normal(0.0, 1.5, 3)
        state[i, :3] = (xy[0], xy[1], z)
        state[i, 3:7] = rotation.rpy_to_quat(rpy)
    for _ in range(100):
        xy = rng.uniform(-ARENA - 0.3, ARENA + 0.3, 2)
        if all(np.linalg.norm(xy - p) > 0.3 for p in placed):
            break
    state[-1, :3] = (xy[0], xy[1], PUSHER_Z)
    state[-1, 3] = 1.0
    return state


class ScriptedPusher:
    """
    A pusher controller for data: it seeks boxes and pushes them about.

    Segments of 0.3-1 s: half of them pick a box and a direction, go behind the box
    (seen in the current state) and push through it; the others move in a random
    direction or stand still. A smooth noise on top, within +-:data:`MAX_SPEED`.
    """

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.left = 0
        self.mode = 'still'
        self.box, self.direction, self.speed = 0, np.zeros(2), 0.0
        self.noise = np.zeros(2)
        self.pushing = False

    def _new_segment(self) -> None:
        r = self.rng
        self.left = int(r.integers(15, 50))
        u = r.random()
        self.mode = 'push' if u < 0.5 else ('move' if u < 0.9 else 'still')
        ang = r.uniform(-np.pi, np.pi)
        self.direction = np.array([np.cos(ang), np.sin(ang)])
        self.speed = r.uniform(0.15, MAX_SPEED)
        self.box = int(r.integers(0, NUM_BODIES - 1))
        self.pushing = False
        if self.mode == 'push':
            self.left += 40     # time to get behind the box

    def __call__(self, state: np.ndarray) -> np.ndarray:
        """Return the command [2] for the state [B, 13]."""
        if self.left <= 0:
            self._new_segment()
        self.left -= 1
        self.noise = 0.9 * self.noise + self.rng.normal(0.0, 0.03, 2)
        if self.mode == 'push':
            box = state[self.box, :2]
            behind = box - self.direction * (np.linalg.norm(HALF_SIZES[self.box, :2]) + 0.08)
            gap = behind - state[-1, :2]
            if self.pushing or np.linalg.norm(gap) < 0.05:
                self.pushing = True
                v = self.direction * self.speed
            else:
                dist = np.linalg.norm(gap)
                v = gap / max(dist, 1e-6) * min(MAX_SPEED, 4.0 * dist)
        elif self.mode == 'move':
            v = self.direction * self.speed
        else:
            v = np.zeros(2)
        return np.clip(v + self.noise, -MAX_SPEED, MAX_SPEED)


def run_controller(m: mujoco.MjModel, state0: np.ndarray, controller, steps: int) -> Trajectory:
    """Return a trajectory of ``steps`` control steps under ``controller(state) -> action``."""
    d = mujoco.MjData(m)
    _set_state(m, d, state0)
    substeps = int(round(CONTROL_DT / m.opt.timestep))
    states, actions = [_get_state(m, d)], []
    for _ in range(steps):
        a = controller(states[-1])
        d.ctrl[:] = a
        mujoco.mj_step(m, d, nstep=substeps)
        states.append(_get_state(m, d))
        actions.append(a)
    return trajectory(np.stack(states), np.stack(actions))


def generate(params: BoxParams, count: int, steps: int, seed: int,
             drop_fraction: float = 0.3) -> List[Trajectory]:
    """Return ``count`` trajectories of ``steps`` control steps of the scene at ``params``."""
    m = model(params)
    rng = np.random.default_rng(seed)
    return [run_controller(m, random_layout(rng, drop=rng.random() < drop_fraction),
                           ScriptedPusher(rng), steps) for _ in range(count)]


LOG_NOISE = (0.001, 0.01, 0.05)
"""Std of the "real" logs' measurement noise: position [m], velocity [m/s], angular
velocity [rad/s] (a motion-capture system's order)."""


def make_logs(hidden: BoxParams, count: int = 5, seconds: float = 10.0,
              seed: int = 0, noise: Tuple[float, float, float] = LOG_NOISE) -> List[Trajectory]:
    """Return the "real" logs: ``count`` runs of ``seconds`` of the hidden scene, measured."""
    out = generate(hidden, count, int(round(seconds / CONTROL_DT)), seed)
    rng = np.random.default_rng(seed + 7919)
    for t in out:
        t.pos = t.pos + rng.normal(0.0, noise[0], t.pos.shape)
        t.vel = t.vel + rng.normal(0.0, noise[1], t.vel.shape)
        t.angvel = t.angvel + rng.normal(0.0, noise[2], t.angvel.shape)
        t.pos[:, -1, 2], t.vel[:, -1, 2], t.angvel[:, -1] = PUSHER_Z, 0.0, 0.0
    return out


def save(trajs: Sequence[Trajectory], path) -> None:
    """Write trajectories of equal length to one ``.npz``."""
    np.savez_compressed(path, states=np.stack([t.states() for t in trajs]),
                        actions=np.stack([t.action for t in trajs]))


def load(path) -> List[Trajectory]:
    """Read trajectories written by :func:`save`."""
    with np.load(path) as z:
        if 'states' not in z or 'actions' not in z:
            raise ValueError(f'{path}: not a box-scene file (needs the arrays states, actions)')
        states, actions = z['states'], z['actions']
    if states.ndim != 4 or states.shape[2:] != (NUM_BODIES, 13):
        raise ValueError(f'{path}: states has shape {states.shape}, '
                         f'expected [N, T + 1, {NUM_BODIES}, 13]')
    return [trajectory(s, a) for s, a in zip(states, actions)]


def position_error(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Return the boxes' mean position error [m] per step of states [..., T, B, 13]."""
    return np.linalg.norm(pred[..., :-1, :3] - truth[..., :-1, :3], axis=-1).mean(-1)


def horizon_error(simulate_fn, logs: Sequence[Trajectory], horizon: int,
                  stride: Optional[int] = None) -> float:
    """
    Return the boxes' position error [m] after ``horizon`` steps, mean over windows.

    ``simulate_fn(state0 [B, 13], actions [T, 2]) -> states [T + 1, B, 13]``; windows
    start every ``stride`` steps (default ``horizon``) of each log, from its logged state.
    """
    stride = stride or horizon
    errs = []
    for log in logs:
        truth = log.states()
        for start in range(0, len(log) - horizon + 1, stride):
            pred = simulate_fn(truth[start], log.action[start:start + horizon])
            errs.append(position_error(pred[-1:], truth[start + horizon:start + horizon + 1]))
    return float(np.mean(errs))


@dataclass(frozen=True)
class CalibrationConfig:
    """Settings of :func:`calibrate`."""

    window: int = 25
    """Steps per shooting window (0.5 s)."""
    stride: int = 25
    """Steps between windows' starts."""
    prior_std: float = 1.0
    """Width of the Gaussian prior on each log-parameter around the nominal one."""
    max_evaluations: int = 400
    """Nelder-Mead's budget of objective evaluations."""


def window_error(params: BoxParams, logs: Sequence[Trajectory], cfg: CalibrationConfig) -> float:
    """Return the mean squared box position error [m^2] over all shooting windows."""
    m = model(params)
    total, n = 0.0, 0
    for log in logs:
        truth = log.states()
        for start in range(0, len(log) - cfg.window + 1, cfg.stride):
            pred = simulate(m, truth[start], log.action[start:start + cfg.window])
            e = position_error(pred, truth[start:start + cfg.window + 1])
            total += float(np.sum(e ** 2))
            n += len(e)
    return total / max(n, 1)


@dataclass
class Calibration:
    """What :func:`calibrate` found."""

    params: BoxParams
    error_before: float
    """RMS box position error over the windows at the nominal parameters [m]."""
    error_after: float
    evaluations: int


def calibrate(logs: Sequence[Trajectory], cfg: CalibrationConfig = CalibrationConfig(),
              nominal: BoxParams = BoxParams()) -> Calibration:
    """
    Fit :class:`BoxParams` to logs by multiple shooting (MAP, Nelder-Mead in log space).

    Each window starts from the logged state and runs under the logged actions; the
    objective is the windows' mean squared box position error, in units of 1 cm^2, plus
    a Gaussian prior of width ``cfg.prior_std`` on each log-parameter around ``nominal``.
    MuJoCo has no gradient, so the search is derivative-free.
    """
    x0 = nominal.vector()

    def objective(x):
        err = window_error(BoxParams.from_vector(x), logs, cfg) / 1e-4
        return err + 0.5 * float(np.sum(((x - x0) / cfg.prior_std) ** 2))

    before = window_error(nominal, logs, cfg)
    res = optimize.minimize(objective, x0, method='Nelder-Mead',
                            options={'maxfev': cfg.max_evaluations, 'xatol': 1e-3,
                                     'fatol': 1e-4, 'initial_simplex': _simplex(x0)})
    fitted = BoxParams.from_vector(res.x)
    return Calibration(fitted, float(np.sqrt(before)),
                       float(np.sqrt(window_error(fitted, logs, cfg))), int(res.nfev))


def _simplex(x0: np.ndarray, step: float = 0.4) -> np.ndarray:
    """Return Nelder-Mead's first simplex: ``x0`` and a step of ``step`` along each axis."""
    return np.vstack([x0] + [x0 + step * e for e in np.eye(len(x0))])


def mjx_rollout(params: BoxParams, iterations: int = 1):
    """
    Return MJX's differentiable rollout of the scene at ``params``: ``(state0, actions)``.

    ``run(state0 [B, 13], actions [T, 2]) -> states [T + 1, B, 13]`` in JAX, each control
    step rematerialised in the backward pass (``jax.checkpoint``). For reverse mode MJX's
    constraint solver runs ``iterations`` (1: its while loop cannot be differentiated
    otherwise) with the pyramidal friction cone (its gradient through the elliptic
    one is NaN).
    """
    import jax
    import jax.numpy as jnp
    from mujoco import mjx

    m = model(params)
    m.opt.cone = mujoco.mjtCone.mjCONE_PYRAMIDAL
    m.opt.iterations = iterations
    m.opt.ls_iterations = iterations
    mx = mjx.put_model(m, impl='jax')
    substeps = int(round(CONTROL_DT / m.opt.timestep))
    nb = NUM_BODIES - 1

    def to_mjx(state):
        qpos = jnp.concatenate([state[:nb, :7].reshape(-1), state[-1, :2]])
        local = rotation.quat_rotate_inverse(state[:nb, 3:7], state[:nb, 10:13], jnp)
        qvel = jnp.concatenate([jnp.concatenate([state[:nb, 7:10], local], -1).reshape(-1),
                                state[-1, 7:9]])
        return mjx.make_data(mx, impl='jax').replace(qpos=qpos, qvel=qvel)

    def from_mjx(d):
        q = d.qpos[:7 * nb].reshape(nb, 7)
        v = d.qvel[:6 * nb].reshape(nb, 6)
        boxes_ = jnp.concatenate([q, v[:, :3], rotation.quat_rotate(q[:, 3:7], v[:, 3:], jnp)],
                                 -1)
        z = jnp.zeros((), q.dtype)
        pusher = jnp.stack([d.qpos[-2], d.qpos[-1], z + PUSHER_Z, z + 1.0, z, z, z,
                            d.qvel[-2], d.qvel[-1], z, z, z, z])
        return jnp.concatenate([boxes_, pusher[None]], 0)

    def knot(d, a):
        d = jax.lax.fori_loop(0, substeps, lambda _, x: mjx.step(mx, x), d.replace(ctrl=a))
        return d, from_mjx(d)

    def run(state0, actions):
        _, states = jax.lax.scan(jax.checkpoint(knot), to_mjx(state0), actions)
        return jnp.concatenate([state0[None], states], 0)
    return run


@dataclass(frozen=True)
class PushTask:
    """Push box 0 to a goal: the control task through a differentiable simulator."""

    steps: int = 150
    """Control steps (3 s)."""
    distance: float = 0.4
    """How far the goal is from box 0's start [m]."""
    reach_weight: float = 0.1
    """Weight of the pusher's mean distance to box 0 (it draws the pusher to the box)."""
    effort_weight: float = 1e-3
    """Weight of the mean squared command."""
    success: float = 0.05
    """A run succeeds with box 0 within this of the goal at the end [m]."""


def push_start(rng: np.random.Generator, task: PushTask) -> Tuple[np.ndarray, np.ndarray]:
    """
    Return a start state [B, 13] (boxes on the floor) and box 0's goal [2].

    The pusher starts 0.3 m from box 0 in a random direction, the goal lies
    ``task.distance`` away from it in another: the pusher may have to go round the box.
    """
    state = random_layout(rng, drop=False)
    a, b = rng.uniform(-np.pi, np.pi, 2)
    state[-1, :2] = state[0, :2] + 0.3 * np.array([np.cos(a), np.sin(a)])
    goal = state[0, :2] + task.distance * np.array([np.cos(b), np.sin(b)])
    return state, goal


def push_loss(states, actions, goal, task: PushTask):
    """Return the task's loss of a rollout (JAX): final distance squared, reach, effort."""
    import jax.numpy as jnp
    final = jnp.sum((states[-1, 0, :2] - goal) ** 2)
    reach = jnp.mean(jnp.sqrt(jnp.sum((states[:, -1, :2] - states[:, 0, :2]) ** 2, -1) + 1e-6))
    return final + task.reach_weight * reach + task.effort_weight * jnp.mean(actions ** 2)


def optimise_push(rollout_fn, state0: np.ndarray, goal: np.ndarray, task: PushTask,
                  inits: int, iterations: int, seed: int = 0,
                  learning_rate: float = 0.05) -> Tuple[np.ndarray, np.ndarray]:
    """
    Return the best command sequence [steps, 2] found by Adam through ``rollout_fn``.

    ``inits`` runs from random small commands, each ``iterations`` Adam steps on
    :func:`push_loss` (commands kept within +-MAX_SPEED); returns the commands of the
    run of least loss (in ``rollout_fn``'s own simulator; the first where every loss is
    NaN) and every run's final loss.
    """
    import jax
    import jax.numpy as jnp
    import optax

    s0 = jnp.asarray(state0, jnp.float32)
    g = jnp.asarray(goal, jnp.float32)

    def loss(u):
        return push_loss(rollout_fn(s0, u), u, g, task)
    grad = jax.jit(jax.vmap(jax.value_and_grad(loss)))
    rng = np.random.default_rng(seed)
    u = jnp.asarray(rng.normal(0.0, 0.1, (inits, task.steps, 2)), jnp.float32)
    opt = optax.adam(learning_rate)
    state = opt.init(u)
    losses = None
    for _ in range(iterations):
        losses, gr = grad(u)
        gr = jnp.nan_to_num(gr)
        upd, state = opt.update(gr, state, u)
        u = jnp.clip(optax.apply_updates(u, upd), -MAX_SPEED, MAX_SPEED)
    losses, _ = grad(u)
    losses = np.asarray(losses)
    if np.all(np.isnan(losses)):      # every rollout diverged: nothing to choose from
        return np.asarray(u[0]), losses
    return np.asarray(u[int(np.nanargmin(losses))]), losses
