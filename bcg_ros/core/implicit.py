"""
Hard contact by a non-smooth Newton method, with implicit-function-theorem gradients.

A second backend beside :mod:`bcg_ros.core.sim`'s penalty contact, on the same
:class:`~bcg_ros.core.sim.Sim` (MJX smooth dynamics, foot spheres against the terrain,
PD actuation, joint limits). Contact is hard: no stiffness, no penetration by design,
exact Coulomb friction, at timesteps up to about 0.1 s.

Per step of length h, from (q, v) under PD targets u, the unknowns are
``z = (v+, lambda_n [S], lambda_t [S, 2], lambda_l [2L])``: the next generalised
velocities and the impulses [N s] of each sphere's contact (normal, two tangents)
and of each joint limit (a lower and an upper side per limited joint, one-sided
contacts in joint space). ``R(z) = 0`` is:

- momentum, semi-implicit: ``M (v+ - v) - h (tau(v+) - c) - J^T lambda = 0``, with M,
  the bias c and the Jacobians J at (q, v), and ``tau(v+)`` the PD torques at
  ``(q + h v+, v+)`` plus joint damping and dry friction at v+: implicit in the
  stiff terms, as :func:`bcg_ros.core.sim.substep` treats them (the PD's kp here too,
  which explicit would need h < 2 sqrt(I / kp));
- normal: ``0 <= lambda_n  _|_  phi(q) / h + J_n v+ >= 0``, phi the signed gap
  (minus the penetration depth). This is the linearisation of ``phi(q + h v+) >= 0``:
  a body stops exactly on the surface in the step it would reach it (no speculative
  gap is left, no penetration is made up later), and a penetration left by the
  linearisation's error (rotations, curved ground) is removed in one step, with the
  speed ``-phi / h`` it needs (the only way this form can add energy);
- joint limits: the same, with ``phi = q - lower`` and ``upper - q``;
- friction, maximum dissipation: ``lambda_t`` maximises dissipation
  ``-lambda_t . v_t`` over the disk ``|lambda_t| <= mu lambda_n``, whose optimality
  condition is ``lambda_t = P(lambda_t - m v_t)``, P the projection onto that disk
  (the cone's natural-map NCP function; exact isotropic Coulomb cone, sticking and
  sliding alike). A polyhedral cone with Fischer-Burmeister pairs (Stewart and
  Trinkle) has a slack multiplier that is undetermined at every separated contact,
  and both members of every unloaded direction pair are zero when sticking, so its
  Newton matrix is singular exactly where contacts are most common;
- each scalar complementarity ``0 <= a _|_ b >= 0`` is written with the smoothed
  Fischer-Burmeister function ``a + b - sqrt(a^2 + b^2 + eps^2) = 0`` (``a b = eps^2 / 2``
  at the solution; ``ImplicitConfig.fb_smoothing``), with b scaled by the contact's
  effective mass m (``1 / (J M^-1 J^T)``) so both sides are impulses.

Solver: damped non-smooth Newton on ``R``. The generalised Jacobian is ``jax.jacfwd``
of R (the kinks of max, min and the projection pick a side), plus ``rho`` on the
impulse diagonal (``ImplicitConfig.regularization``): a box on four corners has more
contact impulses than its constraints determine, and rho picks the step of least
change among them without changing the solution. Each step is ``dz = -(G + rho
I_lambda)^-1 R``, then an Armijo backtracking line search on ``|R|^2`` over the steps
``2^-i dz`` (all evaluated at once), warm-started from the previous step's impulses,
at most ``max_iterations`` in a ``lax.while_loop`` (fixed shapes: jit and vmap). The
step reports whether ``|R| <= tolerance`` and ``|R|``.

Gradient: :func:`solve` is a ``jax.custom_vjp``. At the solution ``R(z*, theta) = 0``,
so ``dz*/dtheta = -G^-1 dR/dtheta``: the backward pass solves ``G^T w = g`` with the
last Newton matrix's LU factors (computed at z* for the convergence test, saved as the
only residuals beside z*) and returns ``-w^T dR/dtheta`` for theta = (q, v, u, and
every float of the model: masses via the MJX model, kp, kd, mu, terrain, h). The
iterations are never differentiated, so a step's backward memory is one LU
(``n^2``, or nothing with ``save_factorization=False``) whatever the iteration count.
``ImplicitConfig.unroll`` instead runs ``max_iterations`` masked iterations in a scan
and lets JAX differentiate through them (a check of the implicit gradient, with
memory that grows with the iteration count).

API (pure, jittable, vmappable)::

    isim = build(sim, ImplicitConfig(dt=0.05))     # sim from sim.build / sim.build_g1
    state = reset(isim, qpos, qvel)
    state, info = step(isim, state, action)        # one step of h = isim.dt
    state, infos = rollout(isim, state, actions)   # [T, A] actions, scan
"""

from dataclasses import dataclass, field
from typing import Optional, Tuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from bcg_ros.core import contact as ct
from bcg_ros.core import sim as simulator


@dataclass(frozen=True)
class ImplicitConfig:
    """How the implicit backend steps and solves; fields other than dt are static."""

    dt: float = 0.02
    """Timestep h [s] (traced: one compiled step serves every h)."""
    max_iterations: int = 20
    """Newton iterations at most per step."""
    tolerance: float = 1e-6
    """Converged when the residual's Euclidean norm is at most this [N s]."""
    line_search_steps: int = 8
    """Backtracking candidates: step fractions 1, 1/2, ..., 2^-(n-1)."""
    armijo: float = 1e-4
    """Sufficient decrease: accept if |R(z + a dz)|^2 <= (1 - 2 c a) |R(z)|^2."""
    fb_smoothing: float = 1e-8
    """eps [N s] of the smoothed Fischer-Burmeister function (a b = eps^2 / 2 at a solution)."""
    regularization: float = 1e-9
    """rho added to the Newton matrix's impulse diagonal (redundant contacts)."""
    unroll: bool = False
    """Differentiate through max_iterations masked iterations instead of the custom VJP."""
    save_factorization: bool = True
    """Keep the final LU factors for the backward pass (else refactorise there: O(n) memory)."""


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class ImplicitSim:
    """A simulator model stepped by the implicit backend."""

    sim: simulator.Sim
    """Model, actuation, contact spheres, terrain and friction (``sim.contact.friction``)."""
    dt: jax.Array
    """Timestep h [s]."""
    config: ImplicitConfig = field(metadata=dict(static=True))

    @property
    def nv(self) -> int:
        """Degrees of freedom."""
        return self.sim.nv

    @property
    def num_spheres(self) -> int:
        """Contact spheres S (three impulses each)."""
        return len(self.sim.sphere_body)

    @property
    def num_limits(self) -> int:
        """Joint-limit sides 2L (a lower and an upper one per limited joint)."""
        return 2 * len(self.sim.limit_dof)

    @property
    def num_impulses(self) -> int:
        """Impulse unknowns: 3 S + 2 L."""
        return 3 * self.num_spheres + self.num_limits

    @property
    def size(self) -> int:
        """Unknowns per step: nv + 3 S + 2 L."""
        return self.nv + self.num_impulses


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class ImplicitState:
    """Generalised position and velocity, and the last step's impulses (the warm start)."""

    qpos: jax.Array
    qvel: jax.Array
    impulse: jax.Array
    """[3 S + 2 L] (lambda_n, lambda_t, lambda_l) of the previous step [N s]."""


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class ImplicitInfo:
    """What one step exposes: the penalty simulator's StepInfo and the solver's report."""

    contact: simulator.StepInfo
    """Depth, normal force (lambda_n / h), normal impulse, points after the step."""
    friction_impulse: jax.Array
    """[S, 2] tangential impulses [N s] in each contact's (t1, t2) frame."""
    limit_impulse: jax.Array
    """[2 L] joint-limit impulses [N s or N m s]: lower sides, then upper sides."""
    converged: jax.Array
    """|R| <= tolerance at the end of the solve."""
    residual: jax.Array
    """|R| [N s] at the end of the solve."""
    iterations: jax.Array
    """Newton iterations taken."""


def build(sim: simulator.Sim, cfg: Optional[ImplicitConfig] = None) -> ImplicitSim:
    """The implicit backend on a built simulator (its dtype, spheres, gains, terrain)."""
    cfg = cfg or ImplicitConfig()
    if not 0.0 < cfg.dt <= 0.2:
        raise ValueError(f'ImplicitConfig.dt: expected 0 < dt <= 0.2 s, got {cfg.dt}')
    if cfg.max_iterations < 1 or cfg.line_search_steps < 1:
        raise ValueError('ImplicitConfig: max_iterations and line_search_steps must be >= 1, '
                         f'got {cfg.max_iterations} and {cfg.line_search_steps}')
    return ImplicitSim(sim, jnp.asarray(cfg.dt, sim.dtype), cfg)


def reset(isim: ImplicitSim, qpos, qvel=None) -> ImplicitState:
    """State at ``qpos`` with velocity ``qvel`` (default zero) and no impulse history."""
    s = simulator.reset(isim.sim, qpos, qvel)
    impulse = jnp.zeros(s.qpos.shape[:-1] + (isim.num_impulses,), isim.sim.dtype)
    return ImplicitState(s.qpos, s.qvel, impulse)


# --- the step's fixed quantities and its residual ----------------------------------


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Frame:
    """Everything of a step that depends on (q, v) only: fixed during the Newton solve."""

    mass: jax.Array
    """[nv, nv] joint-space inertia M(q)."""
    bias: jax.Array
    """[nv] Coriolis, centrifugal and gravity forces c(q, v)."""
    jac: jax.Array
    """[S, 3, nv] contact-point Jacobians along (normal, t1, t2)."""
    gap: jax.Array
    """[S] signed distance of each sphere to the ground (negative: penetrating) [m]."""
    mass_contact: jax.Array
    """[S] effective mass 3 / trace(J_s M^-1 J_s^T) of each contact [kg]."""
    limit_gap: jax.Array
    """[2L] distance to the lower limits, then to the upper limits."""
    limit_mass: jax.Array
    """[2L] effective inertia 1 / (M^-1)_dd of each limit side."""


def contact_basis(normal: jax.Array) -> jax.Array:
    """Orthonormal frames [..., 3, 3], rows (n, t1, t2); on flat ground t1 = x, t2 = y."""
    ref = jnp.where(jnp.abs(normal[..., 1:2]) < 0.9, jnp.array([0.0, 1.0, 0.0], normal.dtype),
                    jnp.array([1.0, 0.0, 0.0], normal.dtype))
    t1 = jnp.cross(ref, normal)
    t1 = t1 / jnp.linalg.norm(t1, axis=-1, keepdims=True)
    t2 = jnp.cross(normal, t1)
    return jnp.stack([normal, t1, t2], axis=-2)


def frame(isim: ImplicitSim, qpos: jax.Array, qvel: jax.Array) -> Frame:
    """Dynamics, contact Jacobians and gaps at the start of a step."""
    sim = isim.sim
    d, mass = simulator.smooth_dynamics(sim, qpos, qvel)
    centers = simulator.body_points(d, sim.sphere_body, sim.sphere_pos)
    depth, normal, point = ct.sphere_depth(centers, sim.sphere_radius, sim.terrain)
    jac_point = simulator.point_jacobians(sim, d, sim.sphere_body, point)      # [S, nv, 3]
    jac = jnp.einsum('sij,snj->sin', contact_basis(normal), jac_point)
    inv_mass = jsl.cho_solve(jsl.cho_factor(mass), jnp.eye(sim.nv, dtype=sim.dtype))
    delassus = jnp.einsum('sin,nm,sim->s', jac, inv_mass, jac)
    lim_q = qpos[np.asarray(sim.limit_qpos, int)]
    lim_dof = np.asarray(sim.limit_dof, int)
    inv_diag = jnp.diagonal(inv_mass)[lim_dof]
    return Frame(mass=mass, bias=d.qfrc_bias, jac=jac, gap=-depth,
                 mass_contact=3.0 / delassus,
                 limit_gap=jnp.concatenate([lim_q - sim.limit_lower, sim.limit_upper - lim_q]),
                 limit_mass=jnp.concatenate([1.0 / inv_diag, 1.0 / inv_diag]))


def fischer_burmeister(a: jax.Array, b: jax.Array, eps) -> jax.Array:
    """Smoothed FB function: zero iff a >= 0, b >= 0, a b = eps^2 / 2 (a _|_ b when eps = 0)."""
    return a + b - jnp.sqrt(a * a + b * b + eps * eps)


def project_disk(x: jax.Array, radius: jax.Array) -> jax.Array:
    """Nearest points [..., 2] to ``x`` in the disks of ``radius`` [...] (>= 0) at the origin."""
    norm = jnp.sqrt(jnp.sum(x * x, axis=-1) + jnp.finfo(x.dtype).tiny)
    return x * jnp.minimum(1.0, radius / norm)[..., None]


def split(isim: ImplicitSim, z: jax.Array):
    """(v+, lambda_n [S], lambda_t [S, 2], lambda_l [2L]) of an unknown vector z."""
    nv, s = isim.nv, isim.num_spheres
    return (z[:nv], z[nv:nv + s], z[nv + s:nv + 3 * s].reshape(s, 2), z[nv + 3 * s:])


def smooth_forces(sim: simulator.Sim, qpos, qvel_next, action, dt) -> jax.Array:
    """Generalised PD, damping and dry-friction forces [nv] at (q + h v+, v+), all implicit."""
    act = np.asarray(sim.act_dof, int)
    q_next = qpos.at[np.asarray(sim.act_qpos, int)].add(dt * qvel_next[act])
    tau, _ = simulator.pd_torque(sim, q_next, qvel_next, action)
    passive, _ = simulator.passive_force(sim, qvel_next)
    return passive.at[act].add(tau)


def residual_at(isim: ImplicitSim, fr: Frame, qpos, qvel, action, z) -> jax.Array:
    """R(z) [nv + 3 S + 2 L] of one step from its frame (module docstring)."""
    sim, h, cfg = isim.sim, isim.dt, isim.config
    v_next, lam_n, lam_t, lam_l = split(isim, z)
    lim = np.asarray(sim.limit_dof, int)
    side = jnp.concatenate([jnp.ones(len(lim)), -jnp.ones(len(lim))]).astype(z.dtype)
    impulse = (jnp.einsum('sn,s->n', fr.jac[:, 0], lam_n)
               + jnp.einsum('skn,sk->n', fr.jac[:, 1:], lam_t))
    impulse = impulse.at[np.concatenate([lim, lim])].add(side * lam_l)
    forces = smooth_forces(sim, qpos, v_next, action, h)
    momentum = fr.mass @ (v_next - qvel) - h * (forces - fr.bias) - impulse
    vel = jnp.einsum('sin,n->si', fr.jac, v_next)                        # [S, 3]
    normal = fischer_burmeister(lam_n, fr.mass_contact * (fr.gap / h + vel[:, 0]),
                                cfg.fb_smoothing)
    radius = sim.contact.friction * jnp.maximum(lam_n, 0.0)
    friction = lam_t - project_disk(lam_t - fr.mass_contact[:, None] * vel[:, 1:], radius)
    limit_vel = side * jnp.concatenate([v_next[lim], v_next[lim]])
    limits = fischer_burmeister(lam_l, fr.limit_mass * (fr.limit_gap / h + limit_vel),
                                cfg.fb_smoothing)
    return jnp.concatenate([momentum, normal, friction.reshape(-1), limits])


def residual(isim: ImplicitSim, qpos, qvel, action, z) -> jax.Array:
    """R(z; q, v, u, model): the step's residual as a function of everything it depends on."""
    return residual_at(isim, frame(isim, qpos, qvel), qpos, qvel, action, z)


# --- the solver ----------------------------------------------------------------------


def _newton_matrix(isim: ImplicitSim, fun, z):
    """R(z) and the LU factors of its regularised generalised Jacobian."""
    jac, r = jax.jacfwd(lambda x: (fun(x), fun(x)), has_aux=True)(z)
    reg = jnp.concatenate([jnp.zeros(isim.nv, z.dtype),
                           jnp.full(isim.num_impulses, isim.config.regularization, z.dtype)])
    return r, jsl.lu_factor(jac + jnp.diag(reg))


def _newton_update(isim: ImplicitSim, fun, z, r, lu):
    """One damped Newton step with Armijo backtracking: (z, R(z)) after it."""
    cfg = isim.config
    dz = -jsl.lu_solve(lu, r)
    alpha = 0.5 ** jnp.arange(cfg.line_search_steps, dtype=z.dtype)
    cand = z[None] + alpha[:, None] * dz[None]
    r_cand = jax.vmap(fun)(cand)
    merit = jnp.sum(r_cand * r_cand, axis=-1)
    ok = merit <= (1.0 - 2.0 * cfg.armijo * alpha) * jnp.sum(r * r)
    # The first sufficient decrease; failing that, the least residual among the candidates.
    pick = jnp.where(jnp.any(ok), jnp.argmax(ok), jnp.argmin(merit))
    return cand[pick], r_cand[pick]


def _newton(isim: ImplicitSim, fun, z0):
    """Solve fun(z) = 0 from z0: (z, |R|, iterations, LU factors at z)."""
    cfg = isim.config
    r0, lu0 = _newton_matrix(isim, fun, z0)

    def done(r):
        return jnp.linalg.norm(r) <= cfg.tolerance

    def body(carry):
        k, z, r, _ = carry
        z, r = _newton_update(isim, fun, z, r, carry[3])
        _, lu = _newton_matrix(isim, fun, z)
        return k + 1, z, r, lu

    if cfg.unroll:
        def masked(carry, _):
            new = body(carry)
            keep = done(carry[2])
            return jax.tree.map(lambda a, b: jnp.where(keep, a, b), carry, new), None

        carry, _ = jax.lax.scan(masked, (jnp.zeros((), jnp.int32), z0, r0, lu0), None,
                                length=cfg.max_iterations)
    else:
        carry = jax.lax.while_loop(
            lambda c: (c[0] < cfg.max_iterations) & ~done(c[2]), body,
            (jnp.zeros((), jnp.int32), z0, r0, lu0))
    k, z, r, lu = carry
    return z, jnp.linalg.norm(r), k, lu


def _solve_forward(isim: ImplicitSim, qpos, qvel, action, z0):
    fr = frame(isim, qpos, qvel)
    z, norm, k, lu = _newton(isim, lambda x: residual_at(isim, fr, qpos, qvel, action, x), z0)
    return z, (norm, k), lu


@jax.custom_vjp
def _solve_implicit(isim: ImplicitSim, qpos, qvel, action, z0):
    z, stats, _ = _solve_forward(isim, qpos, qvel, action, z0)
    return z, stats


def _solve_fwd(isim, qpos, qvel, action, z0):
    z, stats, lu = _solve_forward(isim, qpos, qvel, action, z0)
    saved = lu if isim.config.save_factorization else None
    return (z, stats), (isim, qpos, qvel, action, z, saved)


def _solve_bwd(res, cotangent):
    isim, qpos, qvel, action, z, lu = res
    g = cotangent[0]
    if lu is None:
        _, lu = _newton_matrix(isim, lambda x: residual(isim, qpos, qvel, action, x), z)
    # R(z*(theta), theta) = 0  =>  dz*/dtheta = -G^-1 dR/dtheta; G^T w = g gives the VJP.
    w = jsl.lu_solve(lu, g, trans=1)
    _, vjp = jax.vjp(lambda s, q, v, u: residual(s, q, v, u, z), isim, qpos, qvel, action)
    return (*vjp(-w), jnp.zeros_like(z))


_solve_implicit.defvjp(_solve_fwd, _solve_bwd)


def solve(isim: ImplicitSim, qpos, qvel, action, z0) -> Tuple[jax.Array, Tuple]:
    """
    The step's unknowns z* from the guess z0, and (|R|, iterations).

    Differentiable in every float input but z0 (the solution does not depend on its
    guess): by the implicit function theorem, or through the iterations with
    ``ImplicitConfig.unroll``.
    """
    if isim.config.unroll:
        z, stats, _ = _solve_forward(isim, qpos, qvel, action, z0)
        return z, stats
    return _solve_implicit(isim, qpos, qvel, action, z0)


def step(isim: ImplicitSim, state: ImplicitState, action: jax.Array):
    """One step of h = ``isim.dt`` under PD targets ``action``: (state, ImplicitInfo)."""
    sim = isim.sim
    action = jnp.asarray(action, sim.dtype)
    z0 = jnp.concatenate([state.qvel, state.impulse])
    z, (norm, k) = solve(isim, state.qpos, state.qvel, action, z0)
    v_next, lam_n, lam_t, lam_l = split(isim, z)
    q_next = simulator.integrate_qpos(sim, state.qpos, v_next, isim.dt)
    info = simulator.observe(sim, simulator.SimState(q_next, v_next), lam_n / isim.dt, lam_n)
    return (ImplicitState(q_next, v_next, z[isim.nv:]),
            ImplicitInfo(info, lam_t, lam_l, norm <= isim.config.tolerance, norm, k))


step_batch = jax.vmap(step, in_axes=(None, 0, 0))
""":func:`step` over a leading env axis of state and action."""


def rollout(isim: ImplicitSim, state: ImplicitState, actions: jax.Array):
    """Run T steps under ``actions`` [T, A]: (final state, ImplicitInfo stacked [T])."""
    return jax.lax.scan(lambda s, a: step(isim, s, a), state, actions)
