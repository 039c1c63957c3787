"""
The same policy in the training simulator: rollouts in :mod:`bcg_ros.core.sim`.

A policy that fails in MuJoCo either never learned its motion or does not
transfer. Rolling the exported ONNX file out in the differentiable simulator it
was trained in, over the whole clip from frame 0 with domain randomisation
off, tells the two apart: the runs come back as :class:`bcg_ros.eval.rollout.Run`
records, so :mod:`bcg_ros.eval.metrics` scores them exactly as MuJoCo's.

One env at a time: the policy runs in onnxruntime, the simulator step is jitted
once per process (the persistent JAX cache keeps it across processes).
"""

import functools
from typing import List, Optional, Sequence, Union

import numpy as np

from bcg_ros import contract as ct
from bcg_ros import motion as motion_mod
from bcg_ros import rotation
from bcg_ros.eval.rollout import (Baseline, Controller, make_run, MAX_SPEED, motor_gains,
                                  num_steps, ROW_SHAPES, RolloutConfig, Run)
from bcg_ros.motion import Motion
from bcg_ros.robot import g1
from bcg_ros.runtime.policy import Policy


@functools.lru_cache(maxsize=4)
def _simulator(k: float, terrain: str = 'flat'):
    """The G1 simulator at contact stiffness ``k`` on ``terrain``, its jitted step (built once)."""
    import jax

    from bcg_ros import jax_cache
    from bcg_ros.core import contact, sim as simulator
    from bcg_ros.robot import model as g1_model

    jax_cache.enable_compilation_cache()
    cfg = simulator.SimConfig(contact=contact.ContactConfig(k=k), terrain=terrain)
    sim = simulator.build_g1(cfg)
    robot = g1_model.load()
    track = np.array([robot.model.body(n).id for n in g1.TRACK_BODIES])
    return sim, jax.jit(simulator.step), robot, track


def contact_k(policy: Union[Policy, Baseline], default: float = 300.0) -> float:
    """The contact stiffness the policy was trained at (its metadata), else ``default``."""
    meta = getattr(policy, 'metadata', None) or {}
    try:
        return float(meta.get(ct.CONTACT_K_KEY, default))
    except ValueError:
        return default


def run_once(policy: Union[Policy, Baseline], seed: int, motion: Motion,
             config: RolloutConfig = RolloutConfig(), k: Optional[float] = None,
             terrain: str = 'flat') -> Run:
    """
    One rollout in the training simulator from ``motion``'s first frame.

    The PD uses the contract's gains on the joints the policy drives and the
    default gains elsewhere; ``config`` gives the duration and the fall height.
    Initial noise, friction draws and pushes are off: this is the simulator the
    policy was trained in, without its randomisation. ``terrain``: the ground (a
    :func:`bcg_ros.core.terrain.from_spec` spec); ``motion`` already follows it.
    """
    import dataclasses

    import jax.numpy as jnp

    from bcg_ros.core import sim as simulator

    c = policy.contract
    sim, step, robot, track = _simulator(contact_k(policy) if k is None else float(k),
                                         terrain)
    ids = policy.motor_ids
    kp, kd, q_target = motor_gains(policy)
    sim = dataclasses.replace(sim, kp=jnp.asarray(kp, sim.dtype), kd=jnp.asarray(kd, sim.dtype))
    motion = motion_mod.resample(motion, 1.0 / c.control_dt)
    n_steps = num_steps(c.control_dt, config, motion)
    qpos, qvel = motion_mod.reference_state(motion, robot)
    state = simulator.reset(sim, qpos[0], qvel[0])
    qadr, vadr = robot.qpos_adr, robot.qvel_adr
    rows = {k: [] for k in ROW_SHAPES}
    depths, diverged = [], ''
    actor = Controller(policy, motion)
    for t in range(n_steps):
        qp, qv = np.asarray(state.qpos, float), np.asarray(state.qvel, float)
        # The simulator's own base velocity: this is the policy in its training
        # simulator, without the estimator (and without its noise).
        q_pol = actor.targets(t, qp[3:7], qv[3:6], qp[qadr][ids], qv[vadr][ids],
                              rotation.quat_rotate_inverse(qp[3:7], qv[0:3]))
        if q_pol is None:
            diverged = f'non-finite policy output at t = {t * c.control_dt:.3f} s'
            break
        q_target[ids] = q_pol
        state, info = step(sim, state, jnp.asarray(q_target, sim.dtype))
        qp, qv = np.asarray(state.qpos, float), np.asarray(state.qvel, float)
        if not (np.all(np.isfinite(qp)) and np.all(np.isfinite(qv))):
            diverged = f'non-finite state at t = {(t + 1) * c.control_dt:.3f} s'
            break
        if np.max(np.abs(qv)) > MAX_SPEED:
            diverged = (f'speed {np.max(np.abs(qv)):.3g} above {MAX_SPEED:g} at '
                        f't = {(t + 1) * c.control_dt:.3f} s')
            break
        depth = np.asarray(info.depth, float)
        if np.any(depth > 0):
            depths.append(depth[depth > 0])
        rows['time'].append((t + 1) * c.control_dt)
        rows['frame'].append(min(t + 1, motion.num_frames - 1))
        rows['root_pos'].append(qp[:3])
        rows['root_quat'].append(qp[3:7])
        rows['root_lin_vel'].append(qv[:3])
        rows['root_ang_vel'].append(qv[3:6])
        rows['joint_pos'].append(qp[qadr])
        rows['key_pos'].append(np.asarray(info.key_points, float))
        rows['body_pos'].append(np.asarray(info.body_pos, float)[track])
        rows['command'].append(np.zeros(3))
        rows['foot_contacts'].append(depth > 0)
        rows['lin_vel_error'].append(np.zeros(3) if actor.needs_velocity else np.full(3, np.nan))
        if config.stop_on_fall and qp[2] < config.fall_height:
            break
    return make_run(rows, depths, seed=seed, friction_scale=1.0, pushes=0,
                    sim_dt=sim.config.dt, diverged=diverged)


def run_all(policy: Union[Policy, Baseline], motion: Motion, runs: int = 1,
            config: RolloutConfig = RolloutConfig(), seeds: Optional[Sequence[int]] = None,
            terrain: str = 'flat') -> List[Run]:
    """``runs`` rollouts; without randomisation they agree, so one is usually enough."""
    seeds = list(seeds) if seeds is not None else [config.seed + i for i in range(runs)]
    return [run_once(policy, s, motion, config, terrain=terrain) for s in seeds]
