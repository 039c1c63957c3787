"""
Implicit hard-contact backend (bcg_ros.core.implicit) on tiny models, in float64.

Resting and dropped bodies at h = 0.01-0.1 s, Coulomb sliding and slopes, joint limits
as contacts, implicit-function-theorem gradients against central differences and
against autodiff through the unrolled Newton iterations, and the backward pass's
memory. Compiled functions are shared: one jitted rollout per model (h is traced).
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
import sim_models

from bcg_ros.core import contact as ct
from bcg_ros.core import implicit
from bcg_ros.core import sim as simulator
from bcg_ros.core import terrain

MU = 0.5
G = 9.81
TIGHT = dict(tolerance=1e-11, max_iterations=30)


@pytest.fixture(scope='module', autouse=True)
def x64():
    """Float64 for the whole module (gradient checks need it; one dtype, fewer compiles)."""
    with jax.enable_x64(True):
        yield


def config(**kw) -> simulator.SimConfig:
    return simulator.SimConfig(dtype='float64', contact=ct.ContactConfig(friction=MU), **kw)


@pytest.fixture(scope='module')
def box(x64):
    return sim_models.box(config())


@pytest.fixture(scope='module')
def ball(x64):
    return sim_models.ball(config())


def energy(m: mujoco.MjModel, qpos, qvel) -> np.ndarray:
    """Kinetic plus potential energy [J] of each state (MuJoCo's own, in C)."""
    m.opt.enableflags |= int(mujoco.mjtEnableBit.mjENBL_ENERGY)
    d = mujoco.MjData(m)
    out = []
    for q, v in zip(np.asarray(qpos), np.asarray(qvel)):
        d.qpos[:], d.qvel[:] = q, v
        mujoco.mj_forward(m, d)
        out.append(d.energy[0] + d.energy[1])
    return np.array(out)


def states(isim, state, actions):
    """All states of a rollout: qpos [T+1, nq], qvel [T+1, nv], infos."""
    def body(s, a):
        s2, info = implicit.step(isim, s, a)
        return s2, (s2.qpos, s2.qvel, info)
    _, (qp, qv, infos) = jax.lax.scan(body, state, actions)
    return (jnp.concatenate([state.qpos[None], qp]), jnp.concatenate([state.qvel[None], qv]),
            infos)


_states = jax.jit(states)


def STATES(isim, state, actions):
    """Jitted :func:`states`, as numpy arrays (h is traced: one compile per model)."""
    qp, qv, infos = _states(isim, state, actions)
    return np.asarray(qp), np.asarray(qv), infos


@pytest.mark.parametrize('h', [0.01, 0.05, 0.1])
@pytest.mark.parametrize('body', ['box', 'ball'])
def test_dropped_body_comes_to_rest_without_drift_or_energy_gain(request, body, h):
    # Dropped from 1 cm: the speculative normal condition stops it on the surface in the
    # step it arrives (no bounce), and it stays there for 200 steps.
    m, sim = request.getfixturevalue(body)
    rest = 0.06 if body == 'box' else 0.1
    qpos = np.array([0.0, 0.0, rest + 0.01, 1.0, 0.0, 0.0, 0.0])
    isim = implicit.build(sim, implicit.ImplicitConfig(dt=h, **TIGHT))
    qp, qv, infos = STATES(isim, implicit.reset(isim, qpos), jnp.zeros((200, 0)))
    e = energy(m, qp, qv)
    assert bool(np.all(infos.converged)), np.asarray(infos.residual).max()
    assert np.max(np.diff(e)) <= 1e-9, 'energy rose'
    assert float(np.max(infos.contact.depth)) < 1e-6          # penetration [m]
    assert abs(qp[-1, 2] - rest) < 1e-6                         # height after 200 steps
    assert np.max(np.abs(qv[-100:])) < 1e-6
    print(f'{body} h={h}: iterations max {int(infos.iterations.max())}, '
          f'first 5 {np.asarray(infos.iterations[:5]).tolist()}, '
          f'residual max {float(infos.residual.max()):.1e}, '
          f'depth max {float(np.max(infos.contact.depth)):.1e} m, '
          f'height error {abs(qp[-1, 2] - rest):.1e} m')


@pytest.mark.parametrize('h', [0.01, 0.05, 0.1])
def test_sliding_box_stops_where_coulomb_friction_says(box, h):
    # On the ground from the start, so friction decelerates it by exactly mu g h per step
    # until it stops (semi-implicit Euler: x advances by h v+ each step).
    _, sim = box
    v0 = 2.0
    steps = int(math.ceil(v0 / (MU * G * h))) + 20
    qpos = np.array([0.0, 0.0, 0.06, 1.0, 0.0, 0.0, 0.0])
    direction = np.array([1.0, 1.0]) / math.sqrt(2.0) if h == 0.01 else np.array([1.0, 0.0])
    isim = implicit.build(sim, implicit.ImplicitConfig(dt=h, **TIGHT))
    state = implicit.reset(isim, qpos, np.r_[v0 * direction, 0.0, 0.0, 0.0, 0.0])
    qp, qv, infos = STATES(isim, state, jnp.zeros((steps, 0)))
    assert bool(np.all(infos.converged))
    distance = float(np.hypot(qp[-1, 0], qp[-1, 1]))
    speeds = np.maximum(v0 - MU * G * h * np.arange(1, steps + 1), 0.0)
    discrete = h * float(np.sum(speeds))
    continuous = v0 ** 2 / (2 * MU * G)
    assert np.max(np.abs(qv[-5:])) < 1e-6
    assert distance == pytest.approx(discrete, abs=1e-6)
    if h == 0.01:   # along the diagonal: the friction cone is round
        assert distance == pytest.approx(continuous, rel=0.03)
    print(f'sliding h={h}: {distance:.5f} m, discrete {discrete:.5f}, '
          f'v0^2 / (2 mu g) {continuous:.5f}, iterations max {int(infos.iterations.max())}')


@pytest.fixture(scope='module')
def slope_box(x64):
    return {deg: sim_models.box(config(), terrain=terrain.slope(deg, start=-3.5))
            for deg in (20.0, 35.0)}


@pytest.mark.parametrize('deg', [20.0, 35.0])
def test_box_on_a_slope_sticks_below_and_slides_above_the_friction_angle(slope_box, deg):
    # Friction angle atan(0.5) = 26.6 deg. Sliding, the box accelerates down the slope at
    # g (sin - mu cos) exactly per step.
    _, sim = slope_box[deg]
    th = math.radians(deg)
    n = np.array([-math.sin(th), 0.0, math.cos(th)])
    ground = math.tan(th) * 3.5
    center = np.array([0.0, 0.0, ground]) + 0.06 * n
    quat = [math.cos(-th / 2), 0.0, math.sin(-th / 2), 0.0]
    h, steps = 0.05, 40
    isim = implicit.build(sim, implicit.ImplicitConfig(dt=h, **TIGHT))
    qp, qv, infos = STATES(isim, implicit.reset(isim, np.r_[center, quat]),
                           jnp.zeros((steps, 0)))
    assert bool(np.all(infos.converged))
    assert float(np.max(infos.contact.depth)) < 1e-5
    along = np.array([math.cos(th), 0.0, math.sin(th)])
    speed = float(qv[-1, :3] @ along)
    if deg < 26.0:
        assert np.max(np.abs(qp[:, :3] - qp[0, :3])) < 1e-5
    else:
        expected = -G * (math.sin(th) - MU * math.cos(th)) * h * steps
        assert speed == pytest.approx(expected, rel=0.01)
    print(f'slope {deg} deg: speed along slope {speed:.4f} m/s after {h * steps:.1f} s, '
          f'displacement {np.max(np.abs(qp[-1, :3] - qp[0, :3])):.2e} m, '
          f'iterations max {int(infos.iterations.max())}')


@pytest.fixture(scope='module')
def hopper(x64):
    return sim_models.hopper(config())


@pytest.mark.parametrize('target', [1.0, -1.0])
def test_joint_limit_holds_the_hopper_leg_inside_its_range(hopper, target):
    # The PD pushes the leg towards a target 0.95 m past a limit, at its 200 N torque
    # limit: up into the box, or down with twice the box's weight, lifting it. The limit
    # is a one-sided contact in joint space: the leg stops at +-0.05 m and stays there.
    _, sim = hopper
    h, steps = 0.05, 60
    isim = implicit.build(sim, implicit.ImplicitConfig(dt=h, **TIGHT))
    qp, _, infos = STATES(isim, implicit.reset(isim, np.array([0.0, -0.08, 0.0])),
                          jnp.full((steps, 1), target))
    assert bool(np.all(infos.converged))
    leg = qp[:, 2]
    assert np.all(np.abs(leg) <= 0.05 + 1e-6), np.abs(leg).max()
    assert abs(leg[-1] - math.copysign(0.05, target)) < 1e-6
    side = 1 if target > 0 else 0                       # upper sides follow the lower ones
    assert float(infos.limit_impulse[-1, side]) > 50.0 * h
    print(f'limit target {target}: leg {leg[-1]:+.7f} m, most outside '
          f'{max(0.0, np.abs(leg).max() - 0.05):.1e} m, limit impulse '
          f'{float(infos.limit_impulse[-1, side]):.3f} N s')


# --- gradients -----------------------------------------------------------------------

GRAD_STEPS, GRAD_H = 6, 0.02


def loss_fn(isim, weights):
    """Weighted sum of a rollout's states as a function of (q0, v0, actions, kp, h, masses)."""
    wq, wv = weights

    def loss(qpos, qvel, actions, kp, h, body_mass):
        sim = dataclasses.replace(isim.sim, kp=kp, mjx_model=isim.sim.mjx_model.replace(
            body_mass=body_mass))
        model = implicit.ImplicitSim(sim, h, isim.config)

        def body(st, a):
            st, info = implicit.step(model, st, a)
            return st, (jnp.sum(wq * st.qpos) + jnp.sum(wv * st.qvel), info)

        _, (terms, infos) = jax.lax.scan(body, implicit.reset(isim, qpos, qvel), actions)
        return jnp.sum(terms), infos
    return loss


def gradient_setup(name):
    """(sim, initial qpos, qvel, actions [T, A]) in loaded, sticking contact."""
    if name == 'hopper':
        # On its foot only, with a stiff leg compressed by about the box's weight over kp,
        # the foot 1 mm above the ground; friction stops the sideways 1 cm/s, then sticks.
        _, sim = sim_models.hopper(config(), kp=3000.0, kd=50.0, corners=False)
        actions = -0.01 + 0.01 * np.sin(np.arange(GRAD_STEPS))[:, None]
        return sim, [0.0, -0.1025, 0.0235], [0.01, 0.0, 0.0], actions
    # The ball 1 mm up, rolling at 0.5 m/s (spinning 5 rad/s about y) with a 1 cm/s slip
    # that friction removes in the first step: quaternions, rotation, a 3-D contact.
    _, sim = sim_models.ball(config())
    return (sim, [0.0, 0.0, 0.101, 1.0, 0.0, 0.0, 0.0], [0.51, 0.0, 0.0, 0.0, 5.0, 0.0],
            np.zeros((GRAD_STEPS, 0)))


@pytest.fixture(scope='module', params=['hopper', 'ball'])
def grad_case(request, x64):
    """A model, its loss, the arguments and the loss's implicit value and gradient."""
    sim, qpos, qvel, actions = gradient_setup(request.param)
    isim = implicit.build(sim, implicit.ImplicitConfig(dt=GRAD_H, **TIGHT))
    rng = np.random.default_rng(0)
    weights = (jnp.asarray(rng.normal(size=len(qpos))), jnp.asarray(rng.normal(size=len(qvel))))
    args = (jnp.asarray(qpos), jnp.asarray(qvel), jnp.asarray(actions), sim.kp, isim.dt,
            sim.mjx_model.body_mass)
    grad = jax.jit(jax.value_and_grad(loss_fn(isim, weights), argnums=tuple(range(6)),
                                      has_aux=True))
    return request.param, isim, weights, args, grad(*args)


def test_implicit_gradient_matches_central_differences(grad_case):
    # Smooth configuration: every contact loaded (lambda_n > 0) and sticking (friction
    # inside the cone), the limits unloaded, in every step; directions in all arguments.
    name, isim, weights, args, ((value, infos), grads) = grad_case
    lam_n = np.asarray(infos.contact.normal_impulse[:, 0])
    lam_t = np.linalg.norm(np.asarray(infos.friction_impulse[:, 0]), axis=-1)
    assert np.all(lam_n > 0.1) and np.all(lam_t < 0.9 * MU * lam_n), (lam_n, lam_t)
    assert np.all(np.asarray(infos.limit_impulse) < 1e-6)
    assert bool(np.all(infos.converged))
    forward = jax.jit(lambda *a: loss_fn(isim, weights)(*a)[0])
    rng = np.random.default_rng(1)
    eps, worst = 1e-6, 0.0
    for _ in range(3):
        dirs = [jnp.asarray(rng.normal(size=np.shape(a))) for a in args]
        analytic = sum(float(jnp.sum(g * d)) for g, d in zip(grads, dirs))
        plus = forward(*[a + eps * d for a, d in zip(args, dirs)])
        minus = forward(*[a - eps * d for a, d in zip(args, dirs)])
        numeric = float(plus - minus) / (2 * eps)
        rel = abs(analytic - numeric) / max(abs(numeric), 1e-12)
        worst = max(worst, rel)
        assert rel < 1e-5, (analytic, numeric)
    print(f'{name}: IFT vs central differences, worst relative error {worst:.1e} '
          f'(loss {float(value):.4f}, iterations max {int(infos.iterations.max())})')


def test_implicit_gradient_matches_autodiff_through_unrolled_newton(grad_case):
    name, isim, weights, args, (_, ift) = grad_case
    unrolled_sim = implicit.build(isim.sim, implicit.ImplicitConfig(
        dt=GRAD_H, **{**TIGHT, 'max_iterations': 12, 'unroll': True}))
    _, unrolled = jax.jit(jax.value_and_grad(loss_fn(unrolled_sim, weights),
                                             argnums=tuple(range(6)), has_aux=True))(*args)
    worst = 0.0
    for a, b in zip(ift, unrolled):
        rel = float(jnp.linalg.norm(a - b) / jnp.maximum(jnp.linalg.norm(b), 1e-12))
        worst = max(worst, rel)
        assert rel < 1e-6
    print(f'{name}: IFT vs unrolled Newton, worst relative difference {worst:.1e}')


def saved_bytes(sim, **kw) -> int:
    """Bytes of the residuals one step's VJP keeps for its backward pass."""
    isim = implicit.build(sim, implicit.ImplicitConfig(dt=GRAD_H, **kw))
    state = implicit.reset(isim, jnp.array([0.0, -0.045, 0.0]))

    def f(qpos, qvel, action):
        return implicit.step(isim, implicit.ImplicitState(qpos, qvel, state.impulse),
                             action)[0].qvel

    def residuals(qpos, qvel, action):
        return jax.tree.leaves(jax.vjp(f, qpos, qvel, action)[1])

    shapes = jax.eval_shape(residuals, state.qpos, state.qvel, jnp.zeros(1))
    return sum(int(np.prod(s.shape)) * s.dtype.itemsize for s in shapes)


@pytest.fixture(scope='module')
def stiff_hopper(x64):
    return gradient_setup('hopper')[0]


def test_backward_pass_keeps_no_iterations(stiff_hopper):
    few, many = (saved_bytes(stiff_hopper, max_iterations=n) for n in (5, 50))
    unrolled = [saved_bytes(stiff_hopper, max_iterations=n, unroll=True) for n in (5, 50)]
    lean = saved_bytes(stiff_hopper, max_iterations=50, save_factorization=False)
    assert few == many
    assert unrolled[1] > 5 * unrolled[0] > few
    assert lean < many
    print(f'VJP residuals per step: {many} B (LU kept), {lean} B (refactorised), '
          f'unrolled {unrolled[0]} B at 5 iterations, {unrolled[1]} B at 50')


def test_batched_steps_match_single_ones(ball):
    _, sim = ball
    isim = implicit.build(sim, implicit.ImplicitConfig(dt=0.05, **TIGHT))
    qpos = np.array([[0.0, 0.0, 0.11, 1.0, 0.0, 0.0, 0.0], [0.3, 0.0, 0.1, 1.0, 0.0, 0.0, 0.0]])
    qvel = np.array([[0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 5.0, 0.0]])
    batch = implicit.reset(isim, qpos, qvel)
    out, _ = jax.jit(implicit.step_batch)(isim, batch, jnp.zeros((2, 0)))
    for i in range(2):
        one, _ = jax.jit(implicit.step)(isim, jax.tree.map(lambda x: x[i], batch), jnp.zeros(0))
        np.testing.assert_allclose(out.qvel[i], one.qvel, atol=1e-12)
