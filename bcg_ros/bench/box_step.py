"""
A box over a step in four simulators, and open-loop trajectory optimisation through three.

The scene: a 1 kg box (20 x 20 x 10 cm) on a horizontal and a vertical slide (it moves
in the x-z plane and does not turn), touching the ground through two spheres of 1 cm
radius at its bottom front and rear edges, friction mu = 0.5, on ground with a single
10 cm step up at x = 0.5 m. The step is the project's smooth heightfield
(:func:`bcg_ros.core.terrain.steps`: a bicubic B-spline, its edge rounded over +-4 cm),
which the JAX simulators use directly; MuJoCo and MJX collide the same spheres with
the same surface sampled as an ``hfield`` geom. (Neither JAX simulator collides with
triangle meshes yet, so the obstacle is a heightfield for all four.) Two motors drive
the slides under PD, ``clip(kp (target - q) - kd qdot, +-limit)``: a gantry of limited
strength, whose open-loop targets, held for ``CONTROL_DT`` each, are the controls.

Backends (:func:`backend`), one signature: ``rollout(qpos0 [2], qvel0 [2], targets [K, 2])
-> qpos [K, 2]``, the box's (x, z) at the end of each control interval:

- ``implicit``: :mod:`bcg_ros.core.implicit`, hard contact by non-smooth Newton,
  gradients by the implicit function theorem;
- ``penalty``: :mod:`bcg_ros.core.sim`, the training simulator's smooth penalty contact
  (k = 300), gradients by autodiff through its linearly implicit step;
- ``mjx``: ``mjx.step`` with MuJoCo's soft contacts, gradients by autodiff through it,
  its constraint solver at one iteration (reverse mode cannot pass its while loop
  otherwise) and MuJoCo's default pyramidal friction cone (through the elliptic one
  its gradient is NaN); optionally ``jax.checkpoint`` per control interval;
- ``mujoco``: MuJoCo in C (NumPy in and out, no gradient): the reference.

Forward only (:func:`simulate`), MuJoCo and MJX use the elliptic cone, the round Coulomb
cone the JAX simulators have, and MJX's solver runs to convergence.

:func:`optimise` runs Adam on the targets from several random initialisations at once
(one batch; Adam works per element, so each run is independent) through any of the
three differentiable backends, minimising :func:`goal_loss`.
"""

import dataclasses
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from bcg_ros.core import contact
from bcg_ros.core import implicit
from bcg_ros.core import sim as simulator
from bcg_ros.core import terrain

HALF = (0.1, 0.1, 0.05)
"""Half extents of the box [m]."""
RADIUS = 0.01
"""Contact spheres' radius [m]."""
SPHERES = (('box', (HALF[0], 0.0, -HALF[2])), ('box', (-HALF[0], 0.0, -HALF[2])))
"""(body, centre in the box frame) of the front and rear contact spheres."""
MU = 0.5
"""Coulomb friction of the spheres on the ground (the spheres' priority sets it in MuJoCo)."""
STEP_HEIGHT = 0.1
"""Height of the step [m]."""
STEP_X = 0.5
"""Where the step rises [m] (the middle of its rounded edge)."""
KP, KD, LIMIT = 300.0, 30.0, 30.0
"""PD gains [N/m, N s/m] and force limit [N] of both slides (damping ratio 0.87)."""
CONTROL_DT = 0.1
"""Each target is held this long [s]; rollouts report the box's position at this rate."""
REST_Z = HALF[2] + RADIUS
"""Height of the box's centre resting on flat ground [m]."""
START = np.array([0.0, REST_Z])
"""Trajectory optimisation: the box starts at rest here (x, z) [m]."""
GOAL = np.array([1.0, STEP_HEIGHT + REST_Z])
"""... and should end here: on top of the step, 0.5 m past its edge."""
SUCCESS_TOLERANCE = 0.03
"""A run succeeds when its final position is within this distance of GOAL [m]."""

HFIELD_RESOLUTION = 0.02
"""Sample spacing [m] of MuJoCo's hfield: the spline's control spacing. MuJoCo in C makes a
contact for each hfield prism a sphere overlaps; at finer samples a 1 cm sphere gets
several, the box hops along as they come and go, and the 2 ms reference is further
from MuJoCo at 0.5 ms and from MJX (one contact per sphere)."""

MJCF = f"""
<mujoco model="box_step">
  <option timestep="0.002"/>
  <worldbody>
    <body name="box">
      <joint name="x" type="slide" axis="1 0 0"/>
      <joint name="z" type="slide" axis="0 0 1"/>
      <geom type="box" size="{HALF[0]} {HALF[1]} {HALF[2]}" mass="1" contype="0"
            conaffinity="0"/>
      <geom type="sphere" size="{RADIUS}" pos="{HALF[0]} 0 {-HALF[2]}" mass="0"
            priority="1" friction="{MU} 0.005 0.0001"/>
      <geom type="sphere" size="{RADIUS}" pos="{-HALF[0]} 0 {-HALF[2]}" mass="0"
            priority="1" friction="{MU} 0.005 0.0001"/>
    </body>
  </worldbody>
  <actuator>
    <motor joint="x"/>
    <motor joint="z"/>
  </actuator>
</mujoco>
"""
"""The box on its slides; qpos = qvel index = (x, z). The ground is added by :func:`mj_model`."""


def step_terrain() -> terrain.HeightField:
    """The ground: flat, then one STEP_HEIGHT step up at STEP_X, over a 4 x 1 m patch."""
    return terrain.steps(STEP_HEIGHT, length=10.0, start=STEP_X,
                         extent=((-1.0, 3.0), (-0.5, 0.5)))


def mj_model(timestep: float = 0.002, elliptic: bool = True) -> mujoco.MjModel:
    """MuJoCo's model of the scene: the box and the step as an hfield of the same surface."""
    from bcg_ros.robot import model as model_mod

    spec = mujoco.MjSpec.from_string(MJCF)
    model_mod.add_ground(spec, terrain.mujoco_hfield(step_terrain(), 'step', HFIELD_RESOLUTION))
    m = spec.compile()
    m.opt.timestep = timestep
    m.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC if elliptic else mujoco.mjtCone.mjCONE_PYRAMIDAL
    return m


@dataclass(frozen=True)
class Backend:
    """One simulator of the scene at one timestep, behind one rollout signature."""

    name: str
    dt: float
    """Physics timestep [s]."""
    steps_per_knot: int
    """Physics steps per held target."""
    rollout: Callable
    """(qpos0 [2], qvel0 [2], targets [K, 2]) -> qpos [K, 2] after each target's interval."""


def _hold(step: Callable, carry, targets: jax.Array, n) -> jax.Array:
    """Hold each target for ``n`` steps of ``step(carry, target)``: qpos after each [K, 2]."""
    def knot(c, u):
        c = jax.lax.fori_loop(0, n, lambda _, s: step(s, u), c)
        return c, c.qpos
    return jax.lax.scan(knot, carry, targets)[1]


def penalty_sim(dt: float, actuated: bool = True, dtype: str = 'float64') -> simulator.Sim:
    """The penalty simulator of the scene, one physics step of ``dt`` per :func:`sim.step`."""
    cfg = simulator.SimConfig(contact=contact.ContactConfig(friction=MU), control_dt=dt,
                              substeps=1, dtype=dtype)
    gain = 1.0 if actuated else 0.0
    return simulator.build(mj_model(), cfg, SPHERES, RADIUS, ['x', 'z'], [gain * KP] * 2,
                           [gain * KD] * 2, [LIMIT] * 2, terrain=step_terrain())


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class MjxScene:
    """MJX's model of the scene and its PD gains (a pytree: timestep and gains are traced)."""

    model: object
    kp: jax.Array
    kd: jax.Array


def mjx_scene(dt: float, actuated: bool = True, iterations: int = 1,
              elliptic: bool = False) -> MjxScene:
    """MJX's model at timestep ``dt``; solver ``iterations`` (reverse mode: 1)."""
    from mujoco import mjx

    m = mj_model(dt, elliptic)
    m.opt.iterations = iterations
    m.opt.ls_iterations = max(1, min(iterations, 50))
    gain = 1.0 if actuated else 0.0
    dtype = jnp.asarray(0.0).dtype
    return MjxScene(mjx.put_model(m, impl='jax'), jnp.full(2, gain * KP, dtype),
                    jnp.full(2, gain * KD, dtype))


def _mjx_step(scene: MjxScene, d, target):
    """One mjx.step under the PD's force towards ``target``, computed at the step's start."""
    from mujoco import mjx

    force = scene.kp * (target - d.qpos) - scene.kd * d.qvel
    return mjx.step(scene.model, d.replace(ctrl=jnp.clip(force, -LIMIT, LIMIT)))


def mjx_data(scene: MjxScene, qpos, qvel):
    """MJX's state of the box at (qpos, qvel)."""
    from mujoco import mjx

    return mjx.make_data(scene.model, impl='jax').replace(qpos=qpos, qvel=qvel)


def run_implicit(isim: implicit.ImplicitSim, qpos0, qvel0, targets, n) -> jax.Array:
    """The implicit backend's rollout (``n`` steps per target; traced n: forward only)."""
    return _hold(lambda s, u: implicit.step(isim, s, u)[0], implicit.reset(isim, qpos0, qvel0),
                 targets, n)


def run_penalty(sim: simulator.Sim, qpos0, qvel0, targets, n) -> jax.Array:
    """The penalty simulator's rollout (``n`` steps per target)."""
    return _hold(lambda s, u: simulator.step(sim, s, u)[0], simulator.reset(sim, qpos0, qvel0),
                 targets, n)


def run_mjx(scene: MjxScene, qpos0, qvel0, targets, n, checkpoint: bool = False) -> jax.Array:
    """MJX's rollout (``n`` steps per target); ``checkpoint``: rematerialise each interval."""
    def knot(c, u):
        return jax.lax.fori_loop(0, n, lambda _, s: _mjx_step(scene, s, u), c)

    knot = jax.checkpoint(knot) if checkpoint else knot
    return jax.lax.scan(lambda c, u: (knot(c, u),) * 2, mjx_data(scene, qpos0, qvel0),
                        targets)[1].qpos


def run_mujoco(m: mujoco.MjModel, qpos0, qvel0, targets, n: int,
               actuated: bool = True) -> np.ndarray:
    """MuJoCo in C: qpos [K, 2] after each target held for ``n`` steps of ``m.opt.timestep``."""
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = qpos0, qvel0
    gain = 1.0 if actuated else 0.0
    out = []
    for u in np.asarray(targets, np.float64):
        for _ in range(n):
            d.ctrl[:] = np.clip(gain * (KP * (u - d.qpos) - KD * d.qvel), -LIMIT, LIMIT)
            mujoco.mj_step(m, d)
        out.append(d.qpos.copy())
    return np.array(out)


def steps_per_knot(dt: float, interval: float = CONTROL_DT) -> int:
    """Physics steps of ``dt`` in one control interval (``dt`` must divide it)."""
    n = int(round(interval / dt))
    if n < 1 or abs(n * dt - interval) > 1e-9:
        raise ValueError(f'timestep {dt} s does not divide the control interval {interval} s')
    return n


def backend(name: str, dt: float, actuated: bool = True, n: Optional[int] = None,
            checkpoint: bool = False, implicit_cfg: Optional[implicit.ImplicitConfig] = None,
            mjx_iterations: int = 1) -> Backend:
    """
    The scene in simulator ``name`` (module docstring) at timestep ``dt``.

    ``n``: steps per held target (default: a control interval's worth). ``actuated=False``
    zeroes the PD gains (a passive box). ``checkpoint`` applies to MJX.
    """
    n = steps_per_knot(dt) if n is None else n
    if name == 'implicit':
        cfg = implicit_cfg or implicit.ImplicitConfig(dt=dt)
        isim = implicit.build(penalty_sim(CONTROL_DT, actuated), dataclasses.replace(cfg, dt=dt))
        fn = lambda q, v, u: run_implicit(isim, q, v, u, n)  # noqa: E731
    elif name == 'penalty':
        sim = penalty_sim(dt, actuated)
        fn = lambda q, v, u: run_penalty(sim, q, v, u, n)  # noqa: E731
    elif name == 'mjx':
        scene = mjx_scene(dt, actuated, mjx_iterations)
        fn = lambda q, v, u: run_mjx(scene, q, v, u, n, checkpoint)  # noqa: E731
    elif name == 'mujoco':
        m = mj_model(dt)
        fn = lambda q, v, u: run_mujoco(m, q, v, u, n, actuated)  # noqa: E731
    else:
        raise ValueError(f'backend {name!r}: expected implicit, penalty, mjx or mujoco')
    return Backend(name, dt, n, fn)


def simulate(name: str, dt: float, qpos0, qvel0, targets, actuated: bool = True) -> np.ndarray:
    """
    Forward only: qpos [K, 2] of backend ``name`` at ``dt``, each target held CONTROL_DT.

    The implicit backend and MJX take dt and the step count as traced values here, so
    one compiled rollout serves every timestep (the penalty simulator's dt is static).
    """
    n = steps_per_knot(dt)
    if name == 'implicit':
        isim = implicit.build(penalty_sim(CONTROL_DT, actuated), implicit.ImplicitConfig(dt=dt))
        out = _forward_implicit(isim, qpos0, qvel0, targets, n)
    elif name == 'mjx':
        out = _forward_mjx(mjx_scene(dt, actuated, iterations=100, elliptic=True), qpos0, qvel0,
                           targets, n)
    elif name == 'penalty':
        out = jax.jit(backend(name, dt, actuated).rollout)(qpos0, qvel0, targets)
    else:
        out = backend(name, dt, actuated).rollout(qpos0, qvel0, targets)
    return np.asarray(out)


_forward_implicit = jax.jit(run_implicit)
_forward_mjx = jax.jit(run_mjx)


# --- trajectory optimisation ---------------------------------------------------------


def goal_loss(qpos: jax.Array) -> jax.Array:
    """Squared distance [m^2] of the box's final position from GOAL."""
    return jnp.sum((qpos[-1] - jnp.asarray(GOAL, qpos.dtype)) ** 2)


def initial_targets(num: int, knots: int, seed: int) -> np.ndarray:
    """
    ``num`` random target sequences [num, knots, 2] around the start.

    Each target uniform in x within +-0.25 m of the start and z from the start to
    25 cm above it: some intervals press the box down, some lift it a little; none
    knows about the step.
    """
    rng = np.random.default_rng(seed)
    low, high = START + np.array([-0.25, 0.0]), START + np.array([0.25, 0.25])
    return rng.uniform(low, high, (num, knots, 2))


def grad_fn(b: Backend) -> Callable:
    """Jitted ``targets [N, K, 2] -> (losses [N], d loss / d targets [N, K, 2])`` from START."""
    def one(u):
        z = jnp.zeros(2, u.dtype)
        return goal_loss(b.rollout(jnp.asarray(START, u.dtype), z, u))

    return jax.jit(jax.vmap(jax.value_and_grad(one)))


@dataclass(frozen=True)
class TrajoptResult:
    """What :func:`optimise` found."""

    losses: np.ndarray
    """[iterations + 1, N] loss of each run before each update and at the end."""
    targets: np.ndarray
    """[N, K, 2] final targets."""
    final_qpos: np.ndarray
    """[N, 2] final position of each run."""
    seconds: float
    """Wall time of the iterations (after the first, compiling call)."""

    @property
    def success(self) -> np.ndarray:
        """[N] runs whose final position is within SUCCESS_TOLERANCE of GOAL."""
        return np.linalg.norm(self.final_qpos - GOAL, axis=-1) <= SUCCESS_TOLERANCE


def optimise(b: Backend, targets0: np.ndarray, iterations: int,
             learning_rate: float = 0.02, grad: Optional[Callable] = None) -> TrajoptResult:
    """
    Adam on the targets of all runs at once (each run's loss depends on its own targets).

    A non-finite gradient entry is replaced by zero, so one run that breaks its
    simulator does not stop the others (it shows in its loss).
    """
    import time

    import optax

    grad = grad or grad_fn(b)
    opt = optax.adam(learning_rate)

    @jax.jit
    def update(u, state, g):
        g = jnp.where(jnp.isfinite(g), g, 0.0)
        delta, state = opt.update(g, state, u)
        return optax.apply_updates(u, delta), state

    u = jnp.asarray(targets0)
    state = opt.init(u)
    losses = []
    loss, g = grad(u)
    t0 = time.perf_counter()
    for _ in range(iterations):
        losses.append(np.asarray(loss))
        u, state = update(u, state, g)
        loss, g = grad(u)
    jax.block_until_ready(g)
    seconds = time.perf_counter() - t0
    losses.append(np.asarray(loss))
    start = jnp.broadcast_to(jnp.asarray(START, u.dtype), u.shape[:1] + (2,))
    final = jax.jit(jax.vmap(b.rollout))(start, jnp.zeros_like(start), u)[:, -1]
    return TrajoptResult(np.array(losses), np.asarray(u), np.asarray(final), seconds)


def summary(results: Dict[str, TrajoptResult]) -> Tuple[str, ...]:
    """Table lines: per backend, final loss (median, best, worst) and success count."""
    lines = [f'{"backend":10} {"loss start":>11} {"final median":>13} {"best":>10} '
             f'{"worst":>10} {"success":>8} {"s/iter":>8}']
    for name, r in results.items():
        last = r.losses[-1]
        iters = max(len(r.losses) - 1, 1)
        lines.append(f'{name:10} {np.median(r.losses[0]):11.4f} {np.median(last):13.2e} '
                     f'{np.min(last):10.2e} {np.max(last):10.2e} '
                     f'{int(r.success.sum()):>4}/{len(last):<3} {r.seconds / iters:8.3f}')
    return tuple(lines)
