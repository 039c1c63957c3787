"""
Whole-body G1 contacts from smooth SDFs: speed against MJX's collision, and their Hessians.

Per terrain (flat, a 15 degree slope, 10 cm steps, 5 cm rough ground): a batch of
random fallen-robot poses (pelvis 15-35 cm up and tipped 35-80 degrees, joints
anywhere within 80 % of their ranges, so several links touch the ground), the
candidate contacts of :func:`bcg_ros.core.sim.body_contacts` per second, forward and
forward+backward (the gradient of the summed weighted depth with respect to qpos),
median of repeats. Beside it, MJX's collision (after its kinematics) on the same
geometry: each link's surface points as a convex mesh, against a plane or the same
terrain as an hfield, and the same leg pairs as explicit contact pairs.

Hessians: in float64, at a few such poses per terrain, the second directional
derivative of every contact's depth, normal and weight along a random direction of
the pelvis position and the joints, against central differences of the first
(step 1e-5), relative to the largest entry. Last line ``sdf_hessian_fd_rel_err: X``.
"""

import dataclasses
import statistics
import time
from typing import Callable, Dict, List

import numpy as np

TERRAINS = ('flat', 'slope:15', 'steps:0.1', 'rough:0.05')


def add_arguments(parser):
    """Options of ``bcg-bench sdf``."""
    parser.add_argument('--envs', type=int, default=256, help='batch size (--quick: 16)')
    parser.add_argument('--repeats', type=int, default=5, help='timed calls (--quick: 3)')
    parser.add_argument('--poses', type=int, default=3,
                        help='poses per terrain for the Hessian check (--quick: 1)')
    parser.add_argument('--terrains', default=','.join(TERRAINS))
    parser.add_argument('--no-mjx', action='store_true', help="skip MJX's collision")


def lying_poses(sim, n: int, seed: int, depth: float = 0.005) -> np.ndarray:
    """
    ``n`` random fallen-G1 qpos [n, nq] on ``sim``'s terrain.

    The pelvis tipped 35-80 degrees, the joints anywhere within 80 % of their ranges,
    and the whole robot lowered until its deepest link is ``depth`` into the ground.
    """
    import jax
    import jax.numpy as jnp

    from bcg_ros.core import sim as simulator

    rng = np.random.default_rng(seed)
    m = sim.mjx_model
    lo, hi = np.asarray(m.jnt_range[1:, 0]), np.asarray(m.jnt_range[1:, 1])
    out = np.zeros((n, m.nq))
    for q in out:
        q[:2] = rng.uniform(0.5, 2.5), rng.uniform(-0.3, 0.3)
        q[2] = float(sim.terrain.height(np.asarray(q[:2], np.float32))) + 0.3
        axis = np.r_[rng.normal(size=2), 0.0]
        angle = rng.uniform(0.6, 1.4)
        q[3:7] = np.r_[np.cos(angle / 2), np.sin(angle / 2) * axis / np.linalg.norm(axis)]
        q[7:] = rng.uniform(0.8 * lo, 0.8 * hi)
    deepest = jax.jit(jax.vmap(lambda q: jnp.max(simulator.body_contacts(sim, q).depth)))
    for _ in range(3):     # depth is along the ground normal: converges on slopes too
        out[:, 2] += np.asarray(deepest(jnp.asarray(out, sim.dtype)), np.float64) - depth
    return out


def _features(sim) -> Callable:
    """qpos -> depth, normal and weight of every candidate contact, as one vector."""
    import jax.numpy as jnp

    from bcg_ros.core import sim as simulator

    def f(q):
        c = simulator.body_contacts(sim, q)
        return jnp.concatenate([c.depth, c.normal.reshape(-1), c.weight])
    return f


def hessian_errors(sim, qs: np.ndarray, directions: np.ndarray, h: float = 1e-5) -> np.ndarray:
    """
    Per pose [N], the second directional derivative of the contacts against FD, relative.

    ``qs`` [N, nq] poses, ``directions`` [N, nq]: automatic (a JVP of a JVP) against
    central differences of the first JVP, over the largest entry (or 1). One compile
    serves all poses.
    """
    import jax
    import jax.numpy as jnp

    f = _features(sim)

    def first(q, u):
        return jax.jvp(f, (q,), (u,))[1]

    def both(q, u):
        ad = jax.jvp(lambda x: first(x, u), (q,), (u,))[1]
        fd = (first(q + h * u, u) - first(q - h * u, u)) / (2 * h)
        return ad, fd

    out = jax.jit(jax.vmap(both))(jnp.asarray(qs), jnp.asarray(directions))
    ad, fd = (np.asarray(x) for x in out)
    err = np.abs(ad - fd).max(1) / np.maximum(np.abs(ad).max(1), 1.0)
    return np.where(np.all(np.isfinite(ad), 1), err, np.inf)


def random_directions(qs: np.ndarray, rng) -> np.ndarray:
    """Unit directions [N, nq] of the pelvis position and the joints (quaternions held)."""
    u = rng.normal(size=qs.shape)
    u[:, 3:7] = 0.0
    return u / np.linalg.norm(u, axis=1, keepdims=True)


def _median_s(fn, args, repeats: int) -> float:
    import jax
    jax.block_until_ready(fn(*args))                     # compile and warm
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _mjx_model(sim, spec: str):
    """The project's G1 with each collision body's surface points as a convex mesh."""
    import mujoco

    from bcg_ros.core import terrain as terrain_mod
    from bcg_ros.robot import model as g1_model

    mj = mujoco.MjSpec.from_file(str(g1_model.DEFAULT_MJCF))
    for g in mj.geoms:
        g.contype, g.conaffinity = 0, 0
    names = []
    ids = {b.name: b for b in mj.bodies}
    model = g1_model.load().model
    for i, b in enumerate(sim.geometry.body):
        body = ids[mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b)]
        mj.add_mesh(name=f'sdf_hull_{i}', uservert=np.asarray(
            sim.geometry.vertices[i], np.float64).ravel().tolist())
        body.add_geom(name=f'sdf_{i}', type=mujoco.mjtGeom.mjGEOM_MESH,
                      meshname=f'sdf_hull_{i}', contype=2, conaffinity=0, density=0.0)
        names.append(f'sdf_{i}')
    if spec == 'flat':
        mj.worldbody.add_geom(name='sdf_floor', type=mujoco.mjtGeom.mjGEOM_PLANE,
                              size=[0.0, 0.0, 0.05], contype=0, conaffinity=2)
    else:
        g1_model.add_ground(mj, terrain_mod.mujoco_hfield(terrain_mod.from_spec(spec)))
        mj.geom('terrain').contype, mj.geom('terrain').conaffinity = 0, 2
    for a, b in sim.geometry.pairs:
        mj.add_pair(geomname1=names[a], geomname2=names[b])
    return mj.compile()


def _mjx_rates(sim, spec: str, qpos: np.ndarray, repeats: int) -> Dict[str, float]:
    """MJX collision: contacts per second, forward and forward+backward, on ``qpos`` [N, nq]."""
    import jax
    import jax.numpy as jnp
    from mujoco import mjx

    m = mjx.put_model(_mjx_model(sim, spec), impl='jax')
    d0 = mjx.make_data(m, impl='jax')

    def collide(q):
        d = mjx.collision(m, mjx.kinematics(m, d0.replace(qpos=q)))
        return d._impl.contact if hasattr(d, '_impl') else d.contact

    def loss(q):
        c = collide(q)
        return jnp.sum(jnp.minimum(c.dist, 0.0))

    q = jnp.asarray(qpos, jnp.float32)
    ncon = int(jax.eval_shape(jax.vmap(collide), q).dist.shape[-1])
    fwd = _median_s(jax.jit(jax.vmap(collide)), (q,), repeats)
    bwd = _median_s(jax.jit(jax.vmap(jax.grad(loss))), (q,), repeats)
    return {'contacts': ncon, 'fwd': len(q) * ncon / fwd, 'bwd': len(q) * ncon / bwd}


def run(args) -> int:
    """Rates per terrain (ours and MJX's), then the Hessian check; last line the error."""
    import jax
    import jax.numpy as jnp

    from bcg_ros.core import collide
    from bcg_ros.core import sim as simulator
    from bcg_ros.jax_cache import enable_compilation_cache

    enable_compilation_cache()
    if args.quick:
        args.envs, args.repeats, args.poses = 16, 3, 1
    terrains = [t for t in args.terrains.split(',') if t]
    cfg = simulator.SimConfig(whole_body=True)
    rows: List[dict] = []
    for spec in terrains:
        sim = simulator.build_g1(dataclasses.replace(cfg, terrain=spec))
        q = jnp.asarray(lying_poses(sim, args.envs, seed=0), jnp.float32)
        n = collide.count(sim.geometry)

        def loss(qq):
            c = simulator.body_contacts(sim, qq)
            return jnp.sum(c.weight * c.depth)

        contacts = jax.jit(jax.vmap(lambda qq: simulator.body_contacts(sim, qq)))
        touching = float(jnp.mean(jnp.sum(contacts(q).depth > 0, -1)))
        fwd = _median_s(contacts, (q,), args.repeats)
        bwd = _median_s(jax.jit(jax.vmap(jax.grad(loss))), (q,), args.repeats)
        row = dict(terrain=spec, contacts=n, touching=touching,
                   fwd=args.envs * n / fwd, bwd=args.envs * n / bwd)
        if not args.no_mjx:
            try:
                row['mjx'] = _mjx_rates(sim, spec, np.asarray(q), args.repeats)
            except Exception as exc:                      # an MJX without this collision
                row['mjx_error'] = f'{type(exc).__name__}: {str(exc).splitlines()[0][:80]}'
        rows.append(row)
        print(f'{spec}: done', flush=True)
    print(f'\n{args.envs} envs, median of {args.repeats}; contacts per second (candidates x '
          'envs / s)\n')
    print('| terrain | candidates / env | touching / env | SDF fwd | SDF fwd+bwd | '
          'MJX contacts / env | MJX fwd | MJX fwd+bwd |')
    print('|---|---|---|---|---|---|---|---|')
    for r in rows:
        mj = r.get('mjx')
        tail = (f"{mj['contacts']} | {mj['fwd']:.3g} | {mj['bwd']:.3g}" if mj
                else f"— | {r.get('mjx_error', 'skipped')} | —")
        print(f"| {r['terrain']} | {r['contacts']} | {r['touching']:.1f} | {r['fwd']:.3g} | "
              f"{r['bwd']:.3g} | {tail} |")
    worst = 0.0
    rng = np.random.default_rng(1)
    with jax.enable_x64(True):
        for spec in terrains:
            sim = simulator.build_g1(dataclasses.replace(cfg, terrain=spec, dtype='float64'))
            qs = lying_poses(sim, args.poses, seed=100)
            errs = hessian_errors(sim, qs, random_directions(qs, rng))
            print(f'{spec}: Hessian error {errs.max():.2e} over {len(errs)} poses')
            worst = max(worst, float(errs.max()))
    print(f'sdf_hessian_fd_rel_err: {worst:.3g}')
    return 0
