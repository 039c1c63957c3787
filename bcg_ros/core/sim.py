"""
Differentiable simulator: MJX rigid-body dynamics with the project's own contact.

MJX computes the smooth part (kinematics, mass matrix, bias forces); its own
collision and constraint solver are switched off (``opt.disableflags``), since
reverse-mode gradients through them fail beyond one solver iteration and their
contact switch is a hard ``pos < 0``. Instead, every substep applies, as
generalised forces:

- contact: each foot sphere's force from :mod:`bcg_ros.core.contact`, ``J^T f``;
- joint limits: a smooth one-sided spring, ``K softplus(beta x) / beta`` past a limit;
- PD actuation ``clip(kp (target - q) - kd qdot, -limit, limit)`` on the actuated joints;
- passive joint damping and a smoothed dry friction (``frictionloss tanh(qdot / eps)``).

It then solves ``(M - dt df/dqdot) qacc = f - bias`` (linearly implicit in
velocity, like MuJoCo's implicitfast: friction, contact damping and the PD's kd
are stiff in qdot) and integrates velocity first, then position.

API (all pure, jittable; vmap over a leading env axis with :func:`step_batch`)::

    sim = build_g1(SimConfig())           # or build(mj_model, spheres, ...)
    state = reset(sim, qpos, qvel)
    state, info = step(sim, state, action)     # one control step (substeps physics steps)
    state, infos = rollout(sim, state, actions)  # [T, ...] actions, scan

``action`` is the vector of joint position targets [rad] of the actuated joints
(motor order for the G1). ``info`` (:class:`StepInfo`) carries per-sphere depth,
normal force, normal impulse and contact point, and per-step body and key-point
positions. The control step is wrapped in ``jax.checkpoint``
(``SimConfig.remat``) so a backward pass over T steps keeps one state per step.
"""

import contextlib
import io
from dataclasses import dataclass, field
from typing import Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

with contextlib.redirect_stdout(io.StringIO()):
    # MJX prints "Failed to import warp" to stdout when its optional GPU backend is
    # absent, which would corrupt output such as `bcg-train --print-config`.
    from mujoco import mjx

from bcg_ros import rotation
from bcg_ros.core import collide
from bcg_ros.core import contact as ct
from bcg_ros.core import rigid
from bcg_ros.robot import g1

Vec3 = Tuple[float, float, float]
_HINGE_SLIDE = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))


@dataclass(frozen=True)
class SimConfig:
    """Everything that sets how the simulator behaves; defaults are the training setup."""

    contact: ct.ContactConfig = field(default_factory=ct.ContactConfig)
    """Smooth contact parameters, stiffness k among them."""
    control_dt: float = g1.CONTROL_DT
    """Control period [s]: one call of :func:`step`."""
    substeps: int = 4
    """Physics steps per control step (0.02 s / 4 = 0.005 s)."""
    dtype: str = 'float32'
    """'float32' (training) or 'float64' (checks; needs jax_enable_x64)."""
    limit_stiffness: float = 500.0
    """K [N m/rad or N/m] of the joint-limit spring."""
    limit_sharpness: float = 200.0
    """beta [1/rad]: the limit spring fades in over about 1/beta."""
    frictionloss_eps: float = 0.1
    """eps [rad/s]: dry friction is smoothed below this joint speed."""
    exact_gradient: bool = False
    """Differentiate the implicit step's stiffness matrices too (see :func:`substep`)."""
    remat: bool = True
    """Rematerialise each control step in the backward pass (memory O(T), not O(T*substeps))."""
    terrain: str = 'flat'
    """The ground: flat, slope:DEG, steps:HEIGHT, rough:AMPLITUDE or a terrain .npz
    (:func:`bcg_ros.core.terrain.from_spec`)."""
    whole_body: bool = False
    """Collide every link (smooth SDFs, :mod:`bcg_ros.core.collide`) with the terrain and
    the legs with each other, beside the foot spheres; False: the foot spheres only."""
    collision: collide.CollideConfig = field(default_factory=collide.CollideConfig)
    """Sizes of the whole-body contact pipeline (``whole_body``)."""

    @property
    def dt(self) -> float:
        """Physics step [s]."""
        return self.control_dt / self.substeps


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class SimState:
    """Generalised position and velocity of one env (leading env axis when batched)."""

    qpos: jax.Array
    qvel: jax.Array


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class StepInfo:
    """What one control step exposes; S spheres, K key points, NB bodies."""

    depth: jax.Array
    """[S] penetration depth [m] after the step (positive inside the ground)."""
    normal_force: jax.Array
    """[S] largest normal force [N] over the step's substeps (BCG's trigger reads it)."""
    body_force: jax.Array
    """[C] largest weighted normal force [N] of each whole-body contact candidate over the
    substeps (``SimConfig.whole_body``; C = 0 without); BCG's trigger reads it too."""
    normal_impulse: jax.Array
    """[S] normal impulse [N s] summed over the step's substeps."""
    contact_point: jax.Array
    """[S, 3] lowest point of each sphere along the ground normal, after the step."""
    key_points: jax.Array
    """[K, 3] world positions of the key points (G1: g1.KEY_SITES) after the step."""
    body_pos: jax.Array
    """[NB, 3] world positions of all body origins after the step."""


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Sim:
    """A built simulator: MJX model, actuation and contact arrays, static index maps."""

    mjx_model: mjx.Model
    contact: ct.ContactParams
    terrain: ct.Terrain
    kp: jax.Array
    kd: jax.Array
    torque_limit: jax.Array
    limit_lower: jax.Array
    limit_upper: jax.Array
    dof_damping: jax.Array
    dof_frictionloss: jax.Array
    sphere_pos: jax.Array
    """[S, 3] sphere centres in their body's frame."""
    key_pos: jax.Array
    """[K, 3] key points in their body's frame."""
    config: SimConfig = field(metadata=dict(static=True))
    sphere_body: Tuple[int, ...] = field(metadata=dict(static=True))
    sphere_radius: float = field(metadata=dict(static=True))
    sphere_foot: Tuple[int, ...] = field(metadata=dict(static=True))
    """Which entry of foot_body each sphere belongs to."""
    foot_body: Tuple[int, ...] = field(metadata=dict(static=True))
    key_body: Tuple[int, ...] = field(metadata=dict(static=True))
    act_qpos: Tuple[int, ...] = field(metadata=dict(static=True))
    act_dof: Tuple[int, ...] = field(metadata=dict(static=True))
    limit_qpos: Tuple[int, ...] = field(metadata=dict(static=True))
    limit_dof: Tuple[int, ...] = field(metadata=dict(static=True))
    joints: Tuple[Tuple[int, int, int], ...] = field(metadata=dict(static=True))
    """(type, qpos address, dof address) of every joint, for integration."""
    body_dof_mask: Tuple[Tuple[bool, ...], ...] = field(metadata=dict(static=True))
    """[NB][nv]: dof moves body (the dof's body is the body or one of its ancestors)."""
    body_root: Tuple[int, ...] = field(metadata=dict(static=True))
    geometry: Optional[collide.Geometry] = None
    """Whole-body collision geometry (``SimConfig.whole_body``), or None."""

    @property
    def dtype(self):
        """Floating dtype of every array of the simulator."""
        return jnp.dtype(self.config.dtype)

    @property
    def nv(self) -> int:
        """Degrees of freedom."""
        return self.mjx_model.nv

    @property
    def num_actions(self) -> int:
        """Length of an action (number of actuated joints)."""
        return len(self.act_dof)


def _check_dtype(cfg: SimConfig):
    if cfg.dtype not in ('float32', 'float64'):
        raise ValueError(f'SimConfig.dtype: expected float32 or float64, got {cfg.dtype!r}')
    if cfg.dtype == 'float64' and not jax.config.jax_enable_x64:
        raise ValueError("SimConfig.dtype='float64' needs jax.config.update('jax_enable_x64', "
                         'True) before any JAX array is made')


def build(mj_model: mujoco.MjModel, cfg: SimConfig,
          spheres: Sequence[Tuple[str, Vec3]], sphere_radius: float,
          actuated: Sequence[str], kp: Sequence[float], kd: Sequence[float],
          torque_limit: Sequence[float], key_points: Sequence[Tuple[str, Vec3]] = (),
          terrain: Optional[ct.Terrain] = None,
          geometry: Optional[collide.Geometry] = None) -> Sim:
    """
    Build a simulator of any MJCF model.

    spheres: (body name, centre in body frame) of each contact sphere; the bodies
    they sit on are the "feet" (BCG's Jacobians). actuated: joint names, in
    action order, with their PD gains and torque limits. key_points: (body name,
    point in body frame) reported per step. terrain: the ground (default: the one
    ``cfg.terrain`` names). geometry: whole-body collision bodies (required and used
    only with ``cfg.whole_body``).
    """
    from bcg_ros.core import terrain as terrain_mod

    _check_dtype(cfg)
    if cfg.whole_body and geometry is None:
        raise ValueError('build: SimConfig.whole_body needs the collision geometry '
                         '(collide.geometry); build_g1 makes the G1\'s')
    if not spheres:
        raise ValueError('build: spheres is empty; the contact model needs at least one sphere')
    if not (len(actuated) == len(kp) == len(kd) == len(torque_limit)):
        raise ValueError('build: actuated, kp, kd and torque_limit must have one entry per joint')
    m = _copy(mj_model)
    m.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
                              | mujoco.mjtDisableBit.mjDSBL_CONTACT)
    m.opt.timestep = cfg.dt
    dtype = jnp.dtype(cfg.dtype)

    def body_id(name):
        b = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, name)
        if b < 0:
            raise ValueError(f'build: model has no body {name!r}')
        return b

    def joint_id(name):
        j = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, name)
        if j < 0:
            raise ValueError(f'build: model has no joint {name!r}')
        if int(m.jnt_type[j]) not in _HINGE_SLIDE:
            raise ValueError(f'build: actuated joint {name!r} is not a hinge or slide')
        return j

    sphere_body = tuple(body_id(b) for b, _ in spheres)
    foot_body = tuple(dict.fromkeys(sphere_body))
    act = [joint_id(n) for n in actuated]
    limited = [j for j in range(m.njnt) if m.jnt_limited[j] and int(m.jnt_type[j]) in _HINGE_SLIDE]
    # Ancestor mask, once, in numpy: dof i moves body b iff dof i's body is b or above it.
    mask = np.zeros((m.nbody, m.nv), bool)
    for b in range(m.nbody):
        a = b
        while a > 0:
            mask[b] |= m.dof_bodyid == a
            a = m.body_parentid[a]
    mjx_model = mjx.put_model(m, impl='jax')
    mjx_model = jax.tree.map(
        lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, mjx_model)

    def arr(x):
        return jnp.asarray(np.asarray(x, np.float64), dtype)

    return Sim(
        mjx_model=mjx_model,
        contact=ct.ContactParams.from_config(cfg.contact, dtype),
        terrain=jax.tree.map(lambda x: x.astype(dtype),
                             terrain if terrain is not None else terrain_mod.from_spec(
                                 cfg.terrain)),
        kp=arr(kp), kd=arr(kd), torque_limit=arr(torque_limit),
        limit_lower=arr(m.jnt_range[limited, 0]) if limited else arr(np.zeros(0)),
        limit_upper=arr(m.jnt_range[limited, 1]) if limited else arr(np.zeros(0)),
        dof_damping=arr(m.dof_damping), dof_frictionloss=arr(m.dof_frictionloss),
        sphere_pos=arr([p for _, p in spheres]),
        key_pos=arr([p for _, p in key_points]).reshape(-1, 3),
        config=cfg,
        sphere_body=sphere_body,
        sphere_radius=float(sphere_radius),
        sphere_foot=tuple(foot_body.index(b) for b in sphere_body),
        foot_body=foot_body,
        key_body=tuple(body_id(b) for b, _ in key_points),
        act_qpos=tuple(int(m.jnt_qposadr[j]) for j in act),
        act_dof=tuple(int(m.jnt_dofadr[j]) for j in act),
        limit_qpos=tuple(int(m.jnt_qposadr[j]) for j in limited),
        limit_dof=tuple(int(m.jnt_dofadr[j]) for j in limited),
        joints=tuple((int(m.jnt_type[j]), int(m.jnt_qposadr[j]), int(m.jnt_dofadr[j]))
                     for j in range(m.njnt)),
        body_dof_mask=tuple(tuple(bool(v) for v in row) for row in mask),
        body_root=tuple(int(r) for r in m.body_rootid),
        geometry=(jax.tree.map(lambda x: x.astype(dtype), geometry)
                  if cfg.whole_body else None),
    )


def _copy(m: mujoco.MjModel) -> mujoco.MjModel:
    """A private copy of the model, so the caller's flags and timestep stay as they were."""
    import copy
    return copy.deepcopy(m)


def build_g1(cfg: Optional[SimConfig] = None, path=None) -> Sim:
    """The G1 simulator: the default MJCF (or ``path``), g1's gains, spheres and key points."""
    from bcg_ros.robot import model as g1_model

    cfg = cfg or SimConfig()
    loaded = g1_model.load(path)
    geometry = g1_geometry(loaded.model, cfg.collision) if cfg.whole_body else None
    return build(loaded.model, cfg, g1.FOOT_SPHERES, g1.FOOT_SPHERE_RADIUS,
                 g1.JOINT_NAMES, g1.DEFAULT_KP, g1.DEFAULT_KD, g1.TORQUE_LIMIT,
                 key_points=[(b, p) for _, b, p in g1.KEY_POINTS], geometry=geometry)


_GEOMETRY_CACHE = {}


def g1_geometry(model: mujoco.MjModel, cfg: collide.CollideConfig) -> collide.Geometry:
    """The G1's whole-body collision geometry (its fitted SDFs), made once per process."""
    from bcg_ros.robot import g1_sdf

    if cfg not in _GEOMETRY_CACHE:
        names, shapes = g1_sdf.load()
        ids = []
        for n in names:
            b = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, n)
            if b < 0:
                raise ValueError(f'build_g1: the model has no body {n!r} of {g1_sdf.DATA_PATH}')
            ids.append(b)
        _GEOMETRY_CACHE[cfg] = collide.geometry(names, shapes, ids, cfg,
                                                collide.g1_leg_pairs(cfg.exclude))
    return _GEOMETRY_CACHE[cfg]


def reset(sim: Sim, qpos, qvel=None) -> SimState:
    """State at ``qpos`` (nq) with velocity ``qvel`` (nv, default zero)."""
    qpos = jnp.asarray(qpos, sim.dtype)
    qvel = jnp.zeros(qpos.shape[:-1] + (sim.nv,), sim.dtype) if qvel is None \
        else jnp.asarray(qvel, sim.dtype)
    return SimState(qpos, qvel)


# --- small named terms -------------------------------------------------------------


def _quat_integrate(q, w, dt):
    """Rotate q by body-frame angular velocity w over dt (MuJoCo's free/ball convention)."""
    # sqrt(|w|^2 + tiny) keeps the gradient finite at w = 0.
    norm = jnp.sqrt(jnp.sum(w * w) + jnp.finfo(w.dtype).tiny)
    half = 0.5 * dt * norm
    dq = jnp.concatenate([jnp.cos(half)[None], jnp.sin(half) * w / norm])
    q = rotation.quat_mul(q, dq, jnp)
    return q / jnp.linalg.norm(q)


def integrate_qpos(sim: Sim, qpos: jax.Array, qvel: jax.Array, dt) -> jax.Array:
    """qpos advanced by qvel over dt (quaternions on the unit sphere)."""
    lin_q = [q for t, q, _ in sim.joints if t in (2, 3)]
    lin_v = [v for t, _, v in sim.joints if t in (2, 3)]
    out = qpos
    if lin_q:
        out = rigid.put(out, lin_q, dt * rigid.take(qvel, lin_v), add=True)
    for t, q, v in sim.joints:
        if t == 0:  # free: position then body-frame rotation
            out = out.at[q:q + 3].add(dt * qvel[v:v + 3])
            quat = _quat_integrate(qpos[q + 3:q + 7], qvel[v + 3:v + 6], dt)
            out = out.at[q + 3:q + 7].set(quat)
        elif t == 1:  # ball
            out = out.at[q:q + 4].set(_quat_integrate(qpos[q:q + 4], qvel[v:v + 3], dt))
    return out


def body_points(d: mjx.Data, bodies, local) -> jax.Array:
    """World positions of points given in their bodies' frames."""
    return (rigid.take(d.xpos, bodies)
            + jnp.einsum('sij,sj->si', rigid.take(d.xmat, bodies), local))


def point_jacobians(sim: Sim, d: mjx.Data, bodies, points) -> jax.Array:
    """
    Translational Jacobians [P, nv, 3] of world points rigidly attached to ``bodies``.

    ``bodies`` [P]: body ids, static (a sequence) or traced (an integer array).
    """
    mask = jnp.asarray(rigid.take(np.asarray(sim.body_dof_mask, bool), bodies), sim.dtype)
    root_com = rigid.take(d.subtree_com, rigid.take(np.asarray(sim.body_root, int), bodies))
    offset = points - root_com
    ang, lin = d.cdof[:, :3], d.cdof[:, 3:]
    jac = lin[None] + jnp.cross(ang[None], offset[:, None, :])
    return jac * mask[..., None]


def smooth_dynamics(sim: Sim, qpos, qvel) -> Tuple[mjx.Data, jax.Array]:
    """
    Kinematics, bias forces and the dense mass matrix at (qpos, qvel): (data, M [nv, nv]).

    :mod:`bcg_ros.core.rigid` computes them (``d.qfrc_bias``, ``d.cdof``,
    ``d.subtree_com``, the bodies' frames), with MuJoCo's algorithms and conventions.
    """
    m = sim.mjx_model
    d = _empty_data(sim).replace(qpos=qpos, qvel=qvel)
    d, mass = rigid.dynamics(m, rigid.com_pos(m, rigid.kinematics(m, d)))
    return d, mass.astype(sim.dtype)


def _empty_data(sim: Sim) -> mjx.Data:
    d = mjx.make_data(sim.mjx_model, impl='jax')
    return jax.tree.map(
        lambda x: x.astype(sim.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, d)


def pd_torque(sim: Sim, qpos, qvel, target):
    """Clipped PD torques [A] of the actuated joints, and d tau / d qdot [A]."""
    q = rigid.take(qpos, sim.act_qpos)
    qd = rigid.take(qvel, sim.act_dof)
    tau = sim.kp * (target - q) - sim.kd * qd
    inside = jnp.abs(tau) < sim.torque_limit
    return jnp.clip(tau, -sim.torque_limit, sim.torque_limit), -sim.kd * inside


def limit_force(sim: Sim, qpos):
    """
    Smooth one-sided springs [L] pushing limited joints back inside their range.

    Also returns their stiffness d force / d q [L] (<= 0), which :func:`substep`
    treats implicitly.
    """
    q = rigid.take(qpos, sim.limit_qpos)
    beta = sim.config.limit_sharpness
    below = jax.nn.softplus(beta * (sim.limit_lower - q)) / beta
    above = jax.nn.softplus(beta * (q - sim.limit_upper)) / beta
    slope = (jax.nn.sigmoid(beta * (sim.limit_lower - q))
             + jax.nn.sigmoid(beta * (q - sim.limit_upper)))
    k = sim.config.limit_stiffness
    return k * (below - above), -k * slope


def passive_force(sim: Sim, qvel):
    """Joint damping and smoothed dry friction [nv], and their d / d qdot [nv]."""
    th = jnp.tanh(qvel / sim.config.frictionloss_eps)
    force = -sim.dof_damping * qvel - sim.dof_frictionloss * th
    slope = -sim.dof_damping - sim.dof_frictionloss * (1.0 - th * th) / sim.config.frictionloss_eps
    return force, slope


def _point_contacts(sim: Sim, jac, depth, normal, qvel, weight=None):
    """
    The contact law at points: normal forces [C], generalised force [nv], d / d qdot.

    ``jac`` [C, nv, 3]: each point's (relative) velocity Jacobian; ``weight`` [C]
    scales each contact (default 1).
    """
    vel = jnp.einsum('cnk,n->ck', jac, qvel)
    force, f_n = ct.sphere_forces(depth, normal, vel, sim.contact)
    dforce = jax.vmap(jax.jacfwd(lambda dd, n, v: ct.sphere_forces(dd, n, v, sim.contact)[0],
                                 argnums=2))(depth, normal, vel)       # [C, 3, 3]
    if weight is not None:
        f_n, force, dforce = f_n * weight, force * weight[:, None], dforce * weight[:, None, None]
    qfrc = jnp.einsum('cnk,ck->n', jac, force)
    return f_n, qfrc, jnp.einsum('cnk,ckl,cml->nm', jac, dforce, jac)


def contact_terms(sim: Sim, d: mjx.Data, qvel):
    """Sphere normal forces [S], generalised contact force [nv], and its d / d qdot [nv, nv]."""
    centers = body_points(d, sim.sphere_body, sim.sphere_pos)
    jac = point_jacobians(sim, d, sim.sphere_body, centers)             # [S, nv, 3]
    depth, normal, _ = ct.sphere_depth(centers, sim.sphere_radius, sim.terrain)
    return _point_contacts(sim, jac, depth, normal, qvel)


def body_contacts(sim: Sim, qpos: jax.Array) -> collide.Contacts:
    """The whole-body contact candidates of one env at ``qpos`` (``SimConfig.whole_body``)."""
    if sim.geometry is None:
        raise ValueError('body_contacts: the simulator was built without SimConfig.whole_body')
    d = rigid.kinematics(sim.mjx_model, _empty_data(sim).replace(qpos=qpos))
    return collide.whole_body(sim.geometry, d.xpos, d.xmat, sim.terrain)


def body_contact_terms(sim: Sim, d: mjx.Data, qvel):
    """
    Whole-body contacts' weighted normal forces [C], generalised force [nv] and d / d qdot.

    The contacts of :func:`bcg_ros.core.collide.whole_body` under the foot spheres' force
    law, each scaled by its broad-phase weight; a self-contact acts on both bodies.
    """
    c = collide.whole_body(sim.geometry, d.xpos, d.xmat, sim.terrain)
    jac = (point_jacobians(sim, d, c.body_a, c.point)
           - point_jacobians(sim, d, c.body_b, c.point))                  # [C, nv, 3]
    return _point_contacts(sim, jac, c.depth, c.normal, qvel, c.weight)


def substep(sim: Sim, state: SimState, target: jax.Array,
            qfrc_applied: Optional[jax.Array] = None):
    """
    One physics step under joint targets; returns the new state and sphere normal forces.

    ``qfrc_applied`` [nv]: an external generalised force (a hand, a gantry), explicit.

    The normal forces are the spheres' [S], then the whole-body contacts' [C] when
    ``sim.geometry`` is set.

    Linearly implicit in velocity: ``(M - dt df/dqdot - dt^2 K) qacc = f - bias + dt K
    qdot``, K the joint-limit springs' d f / d q. The contact's friction and damping, the
    PD's kd and the joint damping are stiff in qdot, the limit springs in q; treated
    explicitly they would need a far smaller dt than 5 ms at the feet's small inertias.

    The backward pass treats ``dt df/dqdot`` and ``dt K`` as constants (unless
    ``SimConfig.exact_gradient``). They are the integrator's correction, O(dt), not
    part of the dynamics; but differentiating them brings in second derivatives of the
    sharp contact activation, the friction smoothing and the limit springs (of order
    k^2 and 1/eps^2), which made G1 policy gradients explode: per-env norms with a
    heavy tail up to 1e5-1e7 times the median through a touch-down. Without them the
    gradient is that of the forces themselves, ``M^-1 (df/dx)`` solved with the same
    implicit matrix. The forward step is the same either way.
    """
    qpos, qvel = state.qpos, state.qvel
    dt = sim.config.dt
    act = np.asarray(sim.act_dof, int)
    d, mass = smooth_dynamics(sim, qpos, qvel)
    f_n, qfrc, dqfrc = contact_terms(sim, d, qvel)
    if sim.geometry is not None:
        f_body, qfrc_body, dq_body = body_contact_terms(sim, d, qvel)
        qfrc, dqfrc = qfrc + qfrc_body, dqfrc + dq_body
        f_n = jnp.concatenate([f_n, f_body])
    passive, dpassive = passive_force(sim, qvel)
    tau, dtau = pd_torque(sim, qpos, qvel, target)
    qfrc = rigid.put(qfrc + passive, act, tau, add=True)
    if qfrc_applied is not None:
        qfrc = qfrc + qfrc_applied
    slope = rigid.put(dpassive, act, dtau, add=True)
    stiff = jnp.zeros_like(qvel)
    if sim.limit_dof:
        lim = np.asarray(sim.limit_dof, int)
        f_lim, k_lim = limit_force(sim, qpos)
        qfrc = rigid.put(qfrc, lim, f_lim, add=True)
        stiff = rigid.put(stiff, lim, k_lim, add=True)
    # The limit springs are implicit in position too: f(q + dt qdot') ~ f + K dt (qdot + dt
    # qacc). Explicit, they are unstable (dt sqrt(K beta / 4 I) up to 8 at the G1's wrists
    # and ankles), in the forward step and, worse, in its gradient.
    damp, stiff = dt * (dqfrc + jnp.diag(slope)), dt * stiff
    if not sim.config.exact_gradient:
        damp, stiff = jax.lax.stop_gradient(damp), jax.lax.stop_gradient(stiff)
    lhs = mass - damp - dt * jnp.diag(stiff)
    qacc = jnp.linalg.solve(lhs, qfrc - d.qfrc_bias + stiff * qvel)
    qvel = qvel + dt * qacc
    return SimState(integrate_qpos(sim, qpos, qvel, dt), qvel), f_n


def observe(sim: Sim, state: SimState, normal_force, normal_impulse,
            body_force: Optional[jax.Array] = None) -> StepInfo:
    """
    StepInfo of a state (kinematics only) and the step's contact forces.

    ``normal_force``, ``normal_impulse``: the spheres' [S]; ``body_force``: the
    whole-body contacts' [C] (zeros when not given).
    """
    d = _empty_data(sim).replace(qpos=state.qpos, qvel=state.qvel)
    d = rigid.kinematics(sim.mjx_model, d)
    centers = body_points(d, sim.sphere_body, sim.sphere_pos)
    depth, _, point = ct.sphere_depth(centers, sim.sphere_radius, sim.terrain)
    keys = body_points(d, sim.key_body, sim.key_pos) if sim.key_body \
        else jnp.zeros((0, 3), sim.dtype)
    if body_force is None:
        body_force = jnp.zeros((collide.count(sim.geometry),), sim.dtype)
    return StepInfo(depth, normal_force, body_force, normal_impulse, point, keys, d.xpos)


def _control_step(sim: Sim, state: SimState, action: jax.Array):
    action = jnp.asarray(action, sim.dtype)
    if action.ndim == 1:
        action = jnp.broadcast_to(action, (sim.config.substeps,) + action.shape)

    def body(carry, target):
        s, f_max, imp = carry
        s, f_n = substep(sim, s, target)
        return (s, jnp.maximum(f_max, f_n), imp + f_n * sim.config.dt), None

    zeros = jnp.zeros(len(sim.sphere_body) + collide.count(sim.geometry), sim.dtype)
    (state, f_max, imp), _ = jax.lax.scan(body, (state, zeros, zeros), action)
    s = len(sim.sphere_body)
    return state, observe(sim, state, f_max[:s], imp[:s], f_max[s:])


def step(sim: Sim, state: SimState, action: jax.Array):
    """
    One control step (``substeps`` physics steps) of one env: (state, StepInfo).

    ``action``: the PD targets [A] of the whole step, or [substeps, A], one row per
    physics step (a command that reaches the motors part-way through the step).
    """
    fn = jax.checkpoint(_control_step) if sim.config.remat else _control_step
    return fn(sim, state, action)


step_batch = jax.vmap(step, in_axes=(None, 0, 0))
""":func:`step` over a leading env axis of state and action."""


def rollout(sim: Sim, state: SimState, actions: jax.Array):
    """Run T control steps under ``actions`` [T, A]: (final state, StepInfo stacked [T])."""
    return jax.lax.scan(lambda s, a: step(sim, s, a), state, actions)


def foot_frames(sim: Sim, qpos: jax.Array) -> Tuple[jax.Array, jax.Array, jax.Array]:
    """
    Foot origins [F, 3], orientations [F, 3, 3] and spatial Jacobians [F, 6, nv] at qpos.

    A Jacobian's rows 0-2 give the foot origin's world velocity, rows 3-5 the foot's
    world angular velocity, from qvel.
    """
    d = _empty_data(sim).replace(qpos=qpos)
    d = rigid.com_pos(sim.mjx_model, rigid.kinematics(sim.mjx_model, d))
    feet = np.asarray(sim.foot_body, int)
    pos = d.xpos[feet]
    lin = point_jacobians(sim, d, sim.foot_body, pos)                   # [F, nv, 3]
    mask = jnp.asarray(np.asarray(sim.body_dof_mask, bool)[feet], sim.dtype)
    ang = d.cdof[None, :, :3] * mask[..., None]                          # [F, nv, 3]
    return pos, d.xmat[feet], jnp.swapaxes(jnp.concatenate([lin, ang], axis=-1), -1, -2)
