"""
Bundled Contact Gradients: a drop-in wrapper of the control step.

At a control step where some contact's normal force exceeds ``tau`` at any substep (a
stiff contact: a foot sphere's, or a whole-body contact's), the env's state is split
into B branches. Each contacting foot gets its own position and velocity offsets,
uniform in balls of radius sigma_p and sigma_v, realised through that foot's own leg
(:func:`perturb_feet`): the floating base and every other limb stay as they are, and
the foot's orientation is held. The offsets are constants of the backward pass
(stop_gradient). The branches advance H control steps under the actions the rollout
gives (the same for all branches); the state the caller sees, which drives policy,
reward and critic, is the arithmetic mean of the branches, and after H steps the
branches collapse into that mean. The backward pass therefore averages the branches'
sensitivities across the stiff contact, while the forward rollout stays stiff.

Per env: only envs that triggered (or are inside a bundle) take the bundle. The
batched step (:func:`step_envs`) runs the envs' plain step and their branches through
one traced simulator step, so BCG adds no second copy of the simulator to compile, and
its branch work follows the number of envs that bundle (none: no branch work). With
``BCGConfig.max_bundled`` at most that many envs bundle at a step. With
``BCGConfig.enabled = False`` the wrapper is exactly :func:`sim.step`.

Usage::

    state = bcg.init(sim, cfg, sim_state)            # or init_batch
    state, info = bcg.step_batch(sim, cfg, state, actions, key)
    state.sim                                         # what the policy observes
"""

from dataclasses import dataclass
from typing import Any, Callable, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from bcg_ros.core import sim as simulator


@dataclass(frozen=True)
class BCGConfig:
    """Every parameter of the bundle; defaults are the paper's."""

    enabled: bool = True
    """False: the wrapper is the plain control step, bit for bit."""
    tau: float = 400.0
    """Trigger [N]: bundle when any sphere's normal force in the step exceeds it."""
    branches: int = 10
    """B: number of branches."""
    sigma_p: float = 0.01
    """Radius [m] of the ball the contacting foot's position offset is drawn from."""
    sigma_v: float = 0.02
    """Radius [m/s] of the ball the contacting foot's velocity offset is drawn from."""
    damping: float = 1e-4
    """lambda: damping of the leg Jacobian's least-squares inverse (near a straight knee)."""
    horizon: int = 2
    """H: control steps a bundle lasts before it collapses to its mean."""
    max_bundled: int = 0
    """Most envs of a batch that run a bundle at one control step; 0: no limit. With
    0 < M < N the branch work runs for M envs gathered from the batch (open bundles
    first, then new triggers, in env order) instead of for all N, so its cost follows
    the bundle rate; a trigger that finds no free slot runs plain (BCGInfo.dropped)."""
    antithetic: bool = True
    """Draw offsets in opposite pairs (+e, -e), so the branches' mean starts at the
    unperturbed state up to O(sigma^2): the forward rollout stays the stiff one and the
    mean adds no sampling noise of its own (odd B: the last branch has no offset)."""

    def __post_init__(self):
        """Reject values the bundle cannot run with, naming the field."""
        for name in ('branches', 'horizon'):
            if int(getattr(self, name)) < 1:
                raise ValueError(f'BCGConfig.{name}: must be >= 1, got {getattr(self, name)}')
        if int(self.max_bundled) < 0:
            raise ValueError(f'BCGConfig.max_bundled: must be >= 0, got {self.max_bundled}')
        for name in ('tau', 'sigma_p', 'sigma_v', 'damping'):
            if getattr(self, name) < 0:
                raise ValueError(f'BCGConfig.{name}: must be >= 0, got {getattr(self, name)}')


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class BCGState:
    """One env's state under BCG (leading env axis when batched)."""

    sim: simulator.SimState
    """The state the rollout continues from: the plain state, or the branch mean."""
    branches: simulator.SimState
    """[B, ...] branch states while a bundle is open (unused otherwise)."""
    left: jax.Array
    """Control steps the open bundle still has to run (0: no bundle open)."""


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class BCGInfo:
    """StepInfo of the step (the branch mean where bundled) and what BCG did."""

    step: simulator.StepInfo
    triggered: jax.Array
    """A bundle started at this step."""
    bundled: jax.Array
    """The step ran as a bundle (started now or still open)."""
    dropped: jax.Array
    """A stiff contact that started no bundle: every slot (BCGConfig.max_bundled) was taken."""


def init(sim: simulator.Sim, cfg: BCGConfig, state: simulator.SimState) -> BCGState:
    """Return a BCGState of one env with no bundle open."""
    branches = jax.tree.map(lambda x: jnp.broadcast_to(x, (cfg.branches,) + x.shape), state)
    return BCGState(state, branches, jnp.zeros((), jnp.int32))


init_batch = jax.vmap(init, in_axes=(None, None, 0))
""":func:`init` over a leading env axis."""


def normalize_quats(sim: simulator.Sim, qpos: jax.Array) -> jax.Array:
    """Put the quaternions of free and ball joints back on the unit sphere."""
    for t, q, _ in sim.joints:
        if t in (0, 1):
            a = q + 3 if t == 0 else q
            quat = qpos[..., a:a + 4]
            qpos = qpos.at[..., a:a + 4].set(quat / jnp.linalg.norm(quat, axis=-1, keepdims=True))
    return qpos


def leg_chains(sim: simulator.Sim) -> Tuple[Tuple[Tuple[int, ...], Tuple[int, ...]], ...]:
    """
    Per foot, the (dof, qpos address) of the joints between it and the floating base.

    These are the joints a foot perturbation moves: the root body's own joints (the
    G1's free joint) and every other limb stay put. Each must be a hinge or slide;
    the chains of two feet may not share a joint.
    """
    qadr = {v: q for t, q, v in sim.joints if t in (2, 3)}
    mask = np.asarray(sim.body_dof_mask, bool)
    chains, owner = [], {}
    for f, body in enumerate(sim.foot_body):
        dofs = np.flatnonzero(mask[body] & ~mask[sim.body_root[body]])
        for dof in dofs:
            if int(dof) not in qadr:
                raise ValueError(f'BCG: dof {dof} on the chain of foot body {body} is not a '
                                 'hinge or slide joint; a foot perturbation cannot move it')
            if int(dof) in owner:
                raise ValueError(f'BCG: foot bodies {sim.foot_body[owner[int(dof)]]} and '
                                 f'{body} share dof {dof}; their perturbations would collide')
            owner[int(dof)] = f
        chains.append((tuple(int(v) for v in dofs), tuple(qadr[int(v)] for v in dofs)))
    return tuple(chains)


def ball(cfg: BCGConfig, key: jax.Array, shape, radius: float, dtype) -> jax.Array:
    """
    [B, *shape, 3] points uniform in a ball of ``radius``.

    Direction uniform on the sphere, distance ``radius * u^(1/3)``; in opposite pairs
    (+e, -e) when ``cfg.antithetic`` (odd B: the last point is 0).
    """
    half = cfg.branches // 2 if cfg.antithetic else cfg.branches
    key_d, key_r = jax.random.split(key)
    direction = jax.random.normal(key_d, (half,) + tuple(shape) + (3,), dtype)
    direction = direction / jnp.linalg.norm(direction, axis=-1, keepdims=True)
    u = jax.random.uniform(key_r, (half,) + tuple(shape) + (1,), dtype)
    e = radius * jnp.cbrt(u) * direction
    if not cfg.antithetic:
        return e
    rest = jnp.zeros((cfg.branches % 2,) + tuple(shape) + (3,), dtype)
    return jnp.concatenate([e, -e, rest])


def _rotation_error(target: jax.Array, rot: jax.Array) -> jax.Array:
    """World rotation vector [..., 3] (small-angle) that takes ``rot`` to ``target``."""
    r = target @ jnp.swapaxes(rot, -1, -2)
    return 0.5 * jnp.stack([r[..., 2, 1] - r[..., 1, 2], r[..., 0, 2] - r[..., 2, 0],
                            r[..., 1, 0] - r[..., 0, 1]], axis=-1)


def perturb_feet(sim: simulator.Sim, cfg: BCGConfig, state: simulator.SimState,
                 dp: jax.Array, dv: jax.Array, moving: jax.Array,
                 iterations: int = 2) -> simulator.SimState:
    """
    ``state`` with each moving foot offset by ``dp`` [F, 3] and ``dv`` [F, 3], through its leg.

    Only the joints of :func:`leg_chains` change; the foot's orientation and angular
    velocity are held. Position: ``iterations`` damped Gauss-Newton steps on the foot's
    6-D pose error (one linear step leaves an error of order |dp|^2 / leg length).
    Velocity: the leg's joint speeds that give the foot its velocity plus ``dv`` at the
    offset pose. A foot whose ``moving`` is False, or whose chain is empty, stays put.
    """
    chains = leg_chains(sim)
    eye = cfg.damping * jnp.eye(6, dtype=sim.dtype)
    nfeet = len(sim.foot_body)

    def solve(j, rhs):                                               # damped least squares
        return j.T @ jnp.linalg.solve(j @ j.T + eye, rhs)

    def legs(fn, x):
        for f, (dofs, adrs) in enumerate(chains):
            if dofs:
                x = fn(f, np.asarray(dofs), np.asarray(adrs), x)
        return x

    # One traced foot_frames for all iterations: pass 0 also sets the targets (the
    # foot frames at the unperturbed state), the last pass only gives the final Jacobian.
    def gauss_newton(carry, i):
        qpos, pos_target, rot_target, vel_target, _ = carry
        pos, rot, jac = simulator.foot_frames(sim, qpos)
        first = i == 0
        pos_target = jnp.where(first, pos + dp, pos_target)
        rot_target = jnp.where(first, rot, rot_target)
        vel = jnp.einsum('fkn,n->fk', jac, state.qvel).at[:, :3].add(dv)
        vel_target = jnp.where(first, vel, vel_target)
        err = jnp.concatenate([pos_target - pos, _rotation_error(rot_target, rot)], axis=-1)

        def move(f, dofs, adrs, q):
            step = solve(jac[f][:, dofs], err[f])
            return q.at[adrs].add(jnp.where(moving[f] & (i < iterations), step, 0.0))

        return (legs(move, qpos), pos_target, rot_target, vel_target, jac), None

    zeros = jnp.zeros((nfeet, 3), sim.dtype)
    init = (state.qpos, zeros, jnp.zeros((nfeet, 3, 3), sim.dtype),
            jnp.zeros((nfeet, 6), sim.dtype), jnp.zeros((nfeet, 6, sim.nv), sim.dtype))
    passes = jnp.arange(iterations + 1)
    (qpos, _, _, vel_target, jac), _ = jax.lax.scan(gauss_newton, init, passes)

    def speed(f, dofs, adrs, v):
        step = solve(jac[f][:, dofs], vel_target[f] - jac[f] @ state.qvel)
        return v.at[dofs].add(jnp.where(moving[f], step, 0.0))

    return simulator.SimState(qpos, legs(speed, state.qvel))


def branch_starts(sim: simulator.Sim, cfg: BCGConfig, state: simulator.SimState,
                  normal_force: jax.Array, key: jax.Array) -> simulator.SimState:
    """
    The B branch states [B, ...] a bundle starts from: :func:`perturb_feet` of ``state``.

    A foot is contacting when one of its spheres' normal force exceeds tau; each such
    foot gets its own offsets, uniform in balls of radius sigma_p and sigma_v. The
    offsets are constants of the backward pass (stop_gradient).
    """
    nfeet = len(sim.foot_body)
    foot_of = jnp.asarray(np.asarray(sim.sphere_foot))
    foot_force = jax.ops.segment_max(normal_force, foot_of, num_segments=nfeet)
    key_p, key_v = jax.random.split(key)
    dp = ball(cfg, key_p, (nfeet,), cfg.sigma_p, sim.dtype)
    dv = ball(cfg, key_v, (nfeet,), cfg.sigma_v, sim.dtype)
    frozen = jax.lax.stop_gradient(state)
    branches = jax.vmap(lambda p, v: perturb_feet(sim, cfg, frozen, p, v,
                                                  foot_force > cfg.tau))(dp, dv)
    # The branches are the state plus constant offsets: gradients flow through the state.
    offset = jax.tree.map(lambda b, s: jax.lax.stop_gradient(b - s[None]), branches, frozen)
    return jax.tree.map(lambda s, o: s[None] + o, state, offset)


def peak_force(info: simulator.StepInfo) -> jax.Array:
    """Largest normal force [N] of any contact in the step (spheres and whole-body) [...]."""
    peak = jnp.max(info.normal_force, axis=-1)
    if info.body_force.shape[-1]:
        peak = jnp.maximum(peak, jnp.max(info.body_force, axis=-1))
    return peak


def _branch_mean(sim, branches: simulator.SimState) -> simulator.SimState:
    qpos = normalize_quats(sim, jnp.mean(branches.qpos, axis=0))
    return simulator.SimState(qpos, jnp.mean(branches.qvel, axis=0))


def passthrough(plain, info, state: BCGState):
    """The BCG step of envs that run no bundle: the plain step, nothing open."""
    false = jnp.zeros(state.left.shape, bool)
    return (BCGState(plain, state.branches, jnp.zeros_like(state.left)),
            BCGInfo(info, false, false, false))


def _tree_where(cond: jax.Array, a, b):
    return jax.tree.map(lambda x, y: jnp.where(cond, x, y), a, b)


def _take(tree, idx: jax.Array):
    return jax.tree.map(lambda x: x[idx], tree)


def _rows(tree, start: jax.Array, size: int):
    return jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, start, size), tree)


StepSlots = Callable[[simulator.SimState, Any], Tuple[simulator.SimState, simulator.StepInfo]]
"""``(states [N], args [N]) -> (states, StepInfo)``: one control step of N slots."""
StartsOne = Callable[[simulator.SimState, jax.Array, Any, jax.Array], simulator.SimState]
"""``(state, normal_force, args, key) -> [B] states``: one env's :func:`branch_starts`."""


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class _Plan:
    """Which envs bundle at a step and where their branches start (the passes' carry)."""

    live: jax.Array
    """Branch slots in use: B for each env that bundles (they come first); a pass with
    none of them is skipped."""
    env: jax.Array
    """[M] the envs that hold a bundle slot, by priority (open, then new triggers)."""
    slot_env: jax.Array
    """[P N] the env each branch slot belongs to (slot = bundle slot * B + branch; the
    slots past M B pad the last pass)."""
    begin: simulator.SimState
    """[P N] the state each branch slot starts the step from."""


def step_envs(sim: simulator.Sim, cfg: BCGConfig, step_slots: StepSlots, starts_one: StartsOne,
              state: BCGState, args, key: jax.Array) -> Tuple[BCGState, BCGInfo]:
    """
    One BCG control step of N envs; one key for the batch.

    ``step_slots(states, args)`` advances N states one control step, slot j under
    ``args[j]`` (the env's action, or whatever else its physics takes: its simulator's
    randomised parameters) and returns ``(states, StepInfo)``; ``starts_one(state,
    normal_force, args, key)`` is one env's :func:`branch_starts` (``sim``: the model
    whose free and ball joints the branch mean renormalises). Every state goes
    through the one ``step_slots``: a scan whose first pass steps the N envs (the plain
    step, whose forces decide the triggers) and whose later passes step the branches of
    the bundled envs, N slots at a time. The simulator is traced and compiled once,
    forward and backward, not once for the envs and again for the branches, and the
    branch work follows the number of envs that bundle: a pass with no branch of a
    bundling env in it is skipped.

    At most ``cfg.max_bundled`` envs (0: all) hold a bundle at a step, by priority: open
    bundles, then new triggers, in env order; a trigger with no free slot runs plain
    (``BCGInfo.dropped``).
    """
    n = state.left.shape[0]
    b = cfg.branches
    m = int(cfg.max_bundled) if 0 < int(cfg.max_bundled) < n else n
    passes = -(-m * b // n)
    slots = passes * n
    keys = jax.random.split(key, n)
    open_ = state.left > 0
    no_info = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype),
                           jax.eval_shape(step_slots, state.sim, args)[1])
    init = _Plan(jnp.zeros((), jnp.int32), jnp.zeros((m,), jnp.int32),
                 jnp.zeros((slots,), jnp.int32),
                 jax.tree.map(lambda x: jnp.zeros((slots,) + x.shape[1:], x.dtype), state.sim))

    def plan(info) -> _Plan:
        """After the plain pass: who bundles, and the state each branch slot starts from."""
        trig = peak_force(info) > cfg.tau
        live = jnp.minimum(jnp.sum(open_ | trig), m).astype(jnp.int32) * b
        priority = 2 * open_.astype(jnp.int32) + trig.astype(jnp.int32)
        env = jnp.argsort(-priority, stable=True)[:m].astype(jnp.int32)

        def starts():
            new = jax.vmap(starts_one)(_take(state.sim, env), _take(info.normal_force, env),
                                       _take(args, env), keys[env])
            return jax.tree.map(
                lambda o, s: jnp.where(open_[env].reshape((m,) + (1,) * (o.ndim - 1)), o, s),
                _take(state.branches, env), new)

        def idle():
            return jax.tree.map(lambda x: jnp.broadcast_to(x[:, None], (m, b) + x.shape[1:]),
                                _take(state.sim, env))

        pad = slots - m * b
        begin = jax.tree.map(
            lambda x: jnp.concatenate([x.reshape((m * b,) + x.shape[2:]),
                                       jnp.broadcast_to(x[0, :1], (pad,) + x.shape[2:])]),
            jax.lax.cond(live > 0, starts, idle))
        slot_env = jnp.concatenate([jnp.repeat(env, b), jnp.full((pad,), env[0])])
        return _Plan(live, env, slot_env, begin)

    def body(c: _Plan, i):
        first = i == 0
        start = jnp.maximum(i - 1, 0) * n
        env = jnp.where(first, jnp.arange(n), jax.lax.dynamic_slice_in_dim(c.slot_env, start, n))
        x = _tree_where(first, state.sim, _rows(c.begin, start, n))
        y = jax.lax.cond(first | (start < c.live), step_slots, lambda s, _: (s, no_info), x,
                         _take(args, env))
        return jax.lax.cond(first, lambda: plan(y[1]), lambda: c), y

    c, (ys, ys_info) = jax.lax.scan(body, init, jnp.arange(1 + passes))
    first = lambda tree: jax.tree.map(lambda x: x[0], tree)           # noqa: E731
    plain, plain_info = first(ys), first(ys_info)
    # The M bundle slots: start, continue or skip, from their B branches.
    env = c.env
    trig = peak_force(plain_info) > cfg.tau
    per_slot = lambda tree: jax.tree.map(                             # noqa: E731
        lambda x: x[1:].reshape((slots,) + x.shape[2:])[:m * b].reshape((m, b) + x.shape[2:]),
        tree)
    branches, binfo = per_slot(ys), per_slot(ys_info)
    open_m = open_[env]
    triggered = ~open_m & trig[env]
    bundled = open_m | triggered
    mean = jax.vmap(lambda br: _branch_mean(sim, br))(branches)
    left = jnp.where(triggered, cfg.horizon - 1, jnp.maximum(state.left[env] - 1, 0))
    pick = lambda a, p: jnp.where(                                     # noqa: E731
        bundled.reshape((m,) + (1,) * (a.ndim - 1)), a, p)
    plain_m = _take(plain, env)
    part = (BCGState(jax.tree.map(pick, mean, plain_m), branches, left.astype(jnp.int32)),
            BCGInfo(jax.tree.map(pick, jax.tree.map(lambda x: jnp.mean(x, axis=1), binfo),
                                 _take(plain_info, env)),
                    triggered, bundled, jnp.zeros_like(triggered)))
    full = passthrough(plain, plain_info, state)
    new, info = jax.tree.map(lambda f, p: f.at[env].set(p), full, part)
    dropped = trig & ~open_ & ~info.triggered
    return new, BCGInfo(info.step, info.triggered, info.bundled, dropped)


def step_batch(sim: simulator.Sim, cfg: BCGConfig, state: BCGState, action: jax.Array,
               key: jax.Array) -> Tuple[BCGState, BCGInfo]:
    """One control step of a batch of envs sharing ``sim`` under BCG: (BCGState, BCGInfo)."""
    step_slots = jax.vmap(lambda st, a: simulator.step(sim, st, a))
    if not cfg.enabled:
        return passthrough(*step_slots(state.sim, action), state)
    return step_envs(sim, cfg, step_slots,
                     lambda st, force, _, k: branch_starts(sim, cfg, st, force, k),
                     state, action, key)


def rollout_batch(sim: simulator.Sim, cfg: BCGConfig, state: BCGState, actions, key):
    """T control steps of a batch under ``actions`` [T, N, A]: (state, BCGInfo [T])."""
    keys = jax.random.split(key, actions.shape[0])
    return jax.lax.scan(lambda s, x: step_batch(sim, cfg, s, x[0], x[1]), state, (actions, keys))
