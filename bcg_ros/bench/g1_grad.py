"""
Per-env policy gradients of G1 rollouts, shared by ``bcg-bench variance`` and ``throughput``.

A policy (MLP, random init) reads the G1's state (pelvis height, orientation,
joint positions, all velocities) and sets joint targets ``default pose + 0.25
a``; the PD runs in the simulator. The return of one env is the discounted
sum over the horizon of a standing reward (pelvis height, pose, velocities),
fully differentiable, so its gradient with respect to the policy parameters
goes through the dynamics at every step, as SHAC's does.

Every env holds its own copy of the parameters, so one backward pass of the
summed return gives every env's own gradient ([N, ...] per leaf).

Envs start from the standing pose dropped from 1 to 5 cm, with joint noise
and a small horizontal velocity: the horizon has a touch-down in every env.
"""

import dataclasses
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bcg_ros.core import bcg
from bcg_ros.core import contact
from bcg_ros.core import networks
from bcg_ros.core import sim as simulator
from bcg_ros.robot import g1

GAMMA = 0.99
ACTION_SCALE = 0.25
HIDDEN = (256, 128)


class Setup(NamedTuple):
    """The G1 simulator, its MuJoCo model and index maps, and the policy's sizes."""

    sim: simulator.Sim
    robot: object
    qpos_adr: np.ndarray
    qvel_adr: np.ndarray
    stand: np.ndarray
    obs_size: int


def make_setup(cfg: simulator.SimConfig = None) -> Setup:
    """Build the G1 simulator (outside jit)."""
    from bcg_ros.robot import model as g1_model

    robot = g1_model.load()
    sim = simulator.build_g1(cfg or simulator.SimConfig())
    obs_size = 1 + 4 + len(robot.qpos_adr) + sim.nv
    return Setup(sim, robot, np.asarray(robot.qpos_adr), np.asarray(robot.qvel_adr),
                 robot.standing_qpos(), obs_size)


def with_k(sim: simulator.Sim, k: float) -> simulator.Sim:
    """Return the simulator with contact stiffness ``k`` (one compile serves every k)."""
    return dataclasses.replace(
        sim, contact=contact.ContactParams.from_config(contact.ContactConfig(k=k), sim.dtype))


def initial_states(s: Setup, n: int, seed: int) -> simulator.SimState:
    """``n`` standing G1 states dropped from 1-5 cm, joint noise 0.05 rad, 0.2 m/s sideways."""
    rng = np.random.default_rng(seed)
    q = np.tile(s.stand, (n, 1))
    q[:, 2] += rng.uniform(0.01, 0.05, n)
    q[:, s.qpos_adr] += rng.normal(0.0, 0.05, (n, len(s.qpos_adr)))
    v = np.zeros((n, s.sim.nv))
    v[:, 0:2] = rng.uniform(-0.2, 0.2, (n, 2))
    return simulator.reset(s.sim, q, v)


def init_policy(s: Setup, key, n: int):
    """Random policy parameters, one copy per env (leading axis n)."""
    params = networks.mlp_init(key, [s.obs_size, *HIDDEN, g1.NUM_JOINTS], out_scale=0.1)
    return jax.tree.map(lambda x: jnp.broadcast_to(x.astype(s.sim.dtype), (n,) + x.shape),
                        params)


def observe(s: Setup, qpos, qvel):
    """Return the policy input of one env."""
    return jnp.concatenate([qpos[2:3], qpos[3:7], qpos[s.qpos_adr], qvel])


def targets(s: Setup, action):
    """Return joint targets [rad] (motor order) from a raw action."""
    return jnp.asarray(g1.DEFAULT_POSE, action.dtype) + ACTION_SCALE * action


def reward(s: Setup, qpos, qvel):
    """Return the standing reward of one env (pelvis height, pose, velocity penalties)."""
    z0 = float(s.stand[2])
    pose = qpos[s.qpos_adr] - jnp.asarray(g1.DEFAULT_POSE, qpos.dtype)
    return (-10.0 * (qpos[2] - z0) ** 2 - 0.1 * jnp.sum(pose ** 2)
            - 0.001 * jnp.sum(qvel ** 2))


def _policy_actions(s, params, qpos, qvel):
    obs = jax.vmap(lambda q, v: observe(s, q, v))(qpos, qvel)
    return jax.vmap(networks.mlp_apply)(params, obs)


def bcg_grad_fn(s: Setup, cfg: bcg.BCGConfig, horizon: int):
    """
    Jitted ``(sim, params, state, key) -> (per-env grads, returns [N], bundle rate, f_max)``.

    ``cfg.enabled = False`` is the plain simulator.
    """
    def returns(sim, params, state, key):
        keys = jax.random.split(key, horizon)

        def body(b, xs):
            k, disc = xs
            a = _policy_actions(s, params, b.sim.qpos, b.sim.qvel)
            b, info = bcg.step_batch(sim, cfg, b, jax.vmap(lambda x: targets(s, x))(a), k)
            r = jax.vmap(lambda q, v: reward(s, q, v))(b.sim.qpos, b.sim.qvel)
            return b, (disc * r, info.bundled, jnp.max(info.step.normal_force))

        disc = GAMMA ** jnp.arange(horizon, dtype=sim.dtype)
        _, (r, bundled, fmax) = jax.lax.scan(body, bcg.init_batch(sim, cfg, state), (keys, disc))
        return jnp.sum(r, 0), (jnp.mean(bundled), jnp.max(fmax))

    def fn(sim, params, state, key):
        def total(p):
            ret, aux = returns(sim, p, state, key)
            return jnp.sum(ret), (ret, aux)

        g, (ret, (rate, fmax)) = jax.grad(total, has_aux=True)(params)
        return g, ret, rate, fmax

    return jax.jit(fn)


def mjx_grad_fn(s: Setup, horizon: int, iterations: int = 1):
    """
    The same rollout and gradient through ``mjx.step`` with MJX's own contacts.

    MJX's constraint solver is a while_loop: reverse mode needs ``opt.iterations
    = 1`` (and one line-search iteration). PD torques go in as ``ctrl`` of the
    model's motors. Returns ``(jitted fn(params, qpos, qvel), mjx_model)``.
    """
    import mujoco
    from mujoco import mjx

    m = simulator._copy(s.robot.model)
    m.opt.iterations = iterations
    m.opt.ls_iterations = 1
    m.opt.timestep = s.sim.config.dt
    mm = mjx.put_model(m, impl='jax')
    act = np.asarray(s.robot.actuator_ids)
    if np.any(act < 0):
        raise ValueError('mjx_grad_fn: a joint of the G1 model has no motor')
    order = np.argsort(act)  # ctrl index -> joint (motor order)
    kp = jnp.asarray(g1.DEFAULT_KP, jnp.float32)
    kd = jnp.asarray(g1.DEFAULT_KD, jnp.float32)
    lim = jnp.asarray(g1.TORQUE_LIMIT, jnp.float32)
    substeps = s.sim.config.substeps
    del mujoco

    def one_step(d, target):
        def sub(d, _):
            tau = kp * (target - d.qpos[s.qpos_adr]) - kd * d.qvel[s.qvel_adr]
            d = d.replace(ctrl=jnp.clip(tau, -lim, lim)[order])
            return mjx.step(mm, d), None

        d, _ = jax.lax.scan(sub, d, None, length=substeps)
        return d

    def returns(params, qpos, qvel):
        d0 = jax.vmap(lambda q, v: mjx.make_data(mm, impl='jax').replace(qpos=q, qvel=v))(
            qpos, qvel)
        disc = GAMMA ** jnp.arange(horizon, dtype=jnp.float32)

        def body(d, dsc):
            a = _policy_actions(s, params, d.qpos, d.qvel)
            d = jax.vmap(one_step)(d, jax.vmap(lambda x: targets(s, x))(a))
            r = jax.vmap(lambda q, v: reward(s, q, v))(d.qpos, d.qvel)
            return d, dsc * r

        _, r = jax.lax.scan(body, d0, disc)
        return jnp.sum(r, 0)

    def fn(params, qpos, qvel):
        def total(p):
            ret = returns(p, qpos, qvel)
            return jnp.sum(ret), ret

        return jax.grad(total, has_aux=True)(params)

    return jax.jit(fn), mm


def flat(grads) -> np.ndarray:
    """Per-env gradients as one [N, P] float64 array."""
    leaves = [np.asarray(x, np.float64).reshape(x.shape[0], -1) for x in jax.tree.leaves(grads)]
    return np.concatenate(leaves, axis=1)


def timed(fn, *args, repeats: int = 2):
    """
    Compile a jitted ``fn`` for ``args`` and time it.

    Returns (compile [s], median of ``repeats`` calls [s], output). Compile time
    includes tracing and lowering; with the persistent cache warm it is the
    time to load the executable.
    """
    t0 = time.perf_counter()
    compiled = fn.lower(*args).compile()
    compile_s = time.perf_counter() - t0
    out = jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
    return compile_s, float(np.median(times)), out, compiled
