"""
A learned simulator: a graph network that steps the box scene, differentiable end to end.

Nodes are the scene's rigid bodies (:mod:`bcg_ros.real2sim.boxes`: three boxes and the
pusher), edges every ordered pair of them; the floor is a node feature. One step
(:data:`boxes.CONTROL_DT`) is encode, process, decode:

- **Node features**, each in the body's own frame, so nothing depends on where the
  scene is or which way it faces: the linear and angular velocity, the world's up
  vector, the height, the clearance of the body's lowest corner above the floor (a
  smooth absolute value), the half sizes, the log-mass and, on the pusher, its
  commanded velocity.
- **Edge features** (receiver i, sender j), in i's frame: j's offset, its distance,
  the relative linear and angular velocity and j's orientation relative to i (two
  columns of ``R_i^T R_j``), and the **collision surrogate** ``w = sigmoid((r_i + r_j +
  margin - |p_j - p_i|) / width)`` of the bodies' bounding spheres. Each message is
  multiplied by ``w``: far bodies do not interact, and the detector's gradient is
  smooth everywhere instead of a contact switch.
- **Processing:** ``steps`` rounds of message passing with residual updates, messages
  summed per receiver by ``jax.ops.segment_sum``; MLPs are the project's ELU + LayerNorm
  ones (:mod:`bcg_ros.core.networks`).
- **Decoding:** each body's linear and angular acceleration in its own frame,
  normalised by the training data's statistics; semi-implicit Euler and the quaternion
  exponential integrate them. The pusher's own joints (it slides in x and y only) are
  imposed, not learned.

Training (:func:`train`) is one-step regression of the accelerations on transitions of
many trajectories, with Gaussian noise added to the input positions and velocities (at
least a measured log's, whose states start its rollouts) and the target corrected to
still reach the true next velocity, so that the model learns to undo its own drift in
long rollouts. :func:`rollout` scans the step over an action sequence and
differentiates through it (``jax.grad`` of anything of the rollout).
"""

import json
import pathlib
import time
from dataclasses import asdict, dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import jax
import jax.numpy as jnp
import numpy as np
import optax

from bcg_ros import rotation
from bcg_ros.core import networks
from bcg_ros.real2sim import boxes

NODE_FEATURES = 19
EDGE_FEATURES = 17


@dataclass(frozen=True)
class GNNConfig:
    """Architecture and training of the learned simulator."""

    latent: int = 128
    hidden: int = 128
    """Width of the MLPs' hidden layer."""
    steps: int = 3
    """Rounds of message passing."""
    margin: float = 0.05
    """The collision surrogate's margin beyond the bounding spheres [m]."""
    width: float = 0.02
    """The collision surrogate's softness [m]."""
    noise_pos: float = 0.001
    """Std of the training noise on the input positions [m] (a measured log's order)."""
    noise_vel: float = 0.02
    """... on the input linear velocities [m/s], twice a measured log's."""
    noise_angvel: float = 0.1
    """... and on the input angular velocities [rad/s]."""
    pushforward: int = 0
    """Up to this many steps (drawn per sample) the learned simulator rolls a noisy training
    state on by itself, without gradient, before the one-step loss: it learns from the
    states its own rollouts reach, not only from logged ones (0: one-step training)."""
    batch: int = 256
    iterations: int = 20000
    learning_rate: float = 1e-3
    seed: int = 0


def _static(dtype=jnp.float32) -> Tuple[jax.Array, jax.Array, jax.Array]:
    """Return the bodies' half sizes [B, 3], log-masses [B] and pusher flags [B]."""
    half = np.vstack([boxes.HALF_SIZES,
                      [boxes.PUSHER_RADIUS, boxes.PUSHER_RADIUS,
                       boxes.PUSHER_HALF_LENGTH + boxes.PUSHER_RADIUS]])
    mass = np.append(boxes.NOMINAL_MASS, boxes.PUSHER_MASS)
    flag = np.append(np.zeros(len(boxes.HALF_SIZES)), 1.0)
    return (jnp.asarray(half, dtype), jnp.asarray(np.log(mass), dtype), jnp.asarray(flag, dtype))


def _edges() -> Tuple[np.ndarray, np.ndarray]:
    """Return the receivers and senders of every ordered pair of bodies."""
    n = boxes.NUM_BODIES
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


def _matrix(q: jax.Array) -> jax.Array:
    """Return rotation matrices [..., 3, 3] of unit quaternions [..., 4]."""
    c = rotation.quat_to_6d(q, jnp)
    c0, c1 = c[..., :3], c[..., 3:]
    return jnp.stack([c0, c1, jnp.cross(c0, c1)], axis=-1)


def _smooth_abs(x: jax.Array, eps: float = 1e-4) -> jax.Array:
    return jnp.sqrt(x * x + eps * eps)


def features(state: jax.Array, action: jax.Array, cfg: GNNConfig):
    """Return node features [B, NODE_FEATURES], edge features [E, EDGE_FEATURES], rotations."""
    half, logm, flag = _static(state.dtype)
    pos, quat, vel, angvel = state[:, :3], state[:, 3:7], state[:, 7:10], state[:, 10:13]
    rot = _matrix(quat)
    rt = jnp.swapaxes(rot, -1, -2)
    up = rt[:, :, 2]                                           # R^T e_z
    clearance = pos[:, 2] - jnp.sum(half * _smooth_abs(up), -1)
    cmd = jnp.concatenate([action, jnp.zeros((1,), action.dtype)])
    nodes = jnp.concatenate([
        jnp.einsum('bij,bj->bi', rt, vel), jnp.einsum('bij,bj->bi', rt, angvel), up,
        pos[:, 2:3], clearance[:, None], half, logm[:, None], flag[:, None],
        flag[:, None] * (rt @ cmd)], -1)
    recv, send = _edges()
    r_i = rt[recv]
    offset = pos[send] - pos[recv]
    dist = jnp.sqrt(jnp.sum(offset ** 2, -1) + 1e-8)
    reach = jnp.linalg.norm(half, axis=-1)
    gate = jax.nn.sigmoid((reach[recv] + reach[send] + cfg.margin - dist) / cfg.width)
    rel_rot = r_i @ rot[send]
    edges = jnp.concatenate([
        jnp.einsum('eij,ej->ei', r_i, offset), dist[:, None],
        jnp.einsum('eij,ej->ei', r_i, vel[send] - vel[recv]),
        jnp.einsum('eij,ej->ei', r_i, angvel[send] - angvel[recv]),
        rel_rot[:, :, 0], rel_rot[:, :, 1], gate[:, None]], -1)
    return nodes, edges, gate, rot


def init(key: jax.Array, cfg: GNNConfig) -> Dict:
    """Return the graph network's parameters."""
    k = jax.random.split(key, 3 + 2 * cfg.steps)
    h, L = cfg.hidden, cfg.latent
    return {
        'node_enc': networks.mlp_init(k[0], [NODE_FEATURES, h, L]),
        'edge_enc': networks.mlp_init(k[1], [EDGE_FEATURES, h, L]),
        'dec': networks.mlp_init(k[2], [L, h, 6], out_scale=0.1),
        'edge': [networks.mlp_init(k[3 + i], [3 * L, h, L]) for i in range(cfg.steps)],
        'node': [networks.mlp_init(k[3 + cfg.steps + i], [2 * L, h, L])
                 for i in range(cfg.steps)],
    }


@jax.tree_util.register_dataclass
@dataclass
class Stats:
    """Normalisation of the inputs and of the predicted accelerations."""

    node_mean: np.ndarray
    node_std: np.ndarray
    edge_mean: np.ndarray
    edge_std: np.ndarray
    acc_mean: np.ndarray
    acc_std: np.ndarray


def _network(params: Dict, stats: Stats, nodes, edges, gate) -> jax.Array:
    """Return the normalised body-frame accelerations [B, 6] of one graph."""
    recv, send = _edges()
    x = networks.mlp_apply(params['node_enc'], (nodes - stats.node_mean) / stats.node_std)
    e = networks.mlp_apply(params['edge_enc'], (edges - stats.edge_mean) / stats.edge_std)
    for pe, pn in zip(params['edge'], params['node']):
        e = e + networks.mlp_apply(pe, jnp.concatenate([e, x[recv], x[send]], -1))
        msg = jax.ops.segment_sum(e * gate[:, None], recv, num_segments=boxes.NUM_BODIES)
        x = x + networks.mlp_apply(pn, jnp.concatenate([x, msg], -1))
    return networks.mlp_apply(params['dec'], x)


def _rotvec_quat(v: jax.Array) -> jax.Array:
    """Return the unit quaternions [..., 4] of rotation vectors [..., 3] (smooth at 0)."""
    theta2 = jnp.sum(v * v, -1, keepdims=True)
    theta = jnp.sqrt(theta2 + 1e-12)
    half = 0.5 * theta
    small = theta2 < 1e-8
    s = jnp.where(small, 0.5 - theta2 / 48.0, jnp.sin(half) / theta)
    return jnp.concatenate([jnp.cos(half), s * v], -1)


def integrate(state: jax.Array, acc: jax.Array, rot: jax.Array, dt: float) -> jax.Array:
    """Return the next state [B, 13] of body-frame accelerations [B, 6] (semi-implicit)."""
    vel = state[:, 7:10] + dt * jnp.einsum('bij,bj->bi', rot, acc[:, :3])
    angvel = state[:, 10:13] + dt * jnp.einsum('bij,bj->bi', rot, acc[:, 3:])
    pos = state[:, :3] + dt * vel
    quat = rotation.quat_mul(_rotvec_quat(angvel * dt), state[:, 3:7], jnp)
    quat = quat / jnp.linalg.norm(quat, axis=-1, keepdims=True)
    nxt = jnp.concatenate([pos, quat, vel, angvel], -1)
    # The pusher slides in x and y only: its joints, imposed.
    pusher = jnp.concatenate([nxt[-1, :2], jnp.array([boxes.PUSHER_Z, 1.0, 0.0, 0.0, 0.0],
                                                     nxt.dtype),
                              nxt[-1, 7:9], jnp.zeros((4,), nxt.dtype)])
    return nxt.at[-1].set(pusher)


def step(params: Dict, stats: Stats, cfg: GNNConfig, state: jax.Array,
         action: jax.Array) -> jax.Array:
    """Return the scene's state [B, 13] one control step after ``state`` under ``action`` [2]."""
    nodes, edges, gate, rot = features(state, action, cfg)
    acc = _network(params, stats, nodes, edges, gate) * stats.acc_std + stats.acc_mean
    return integrate(state, acc, rot, boxes.CONTROL_DT)


def rollout(params: Dict, stats: Stats, cfg: GNNConfig, state0: jax.Array,
            actions: jax.Array) -> jax.Array:
    """Return the states [T + 1, B, 13] from ``state0`` under ``actions`` [T, 2]."""
    def body(s, a):
        n = step(params, stats, cfg, s, a)
        return n, n
    _, states = jax.lax.scan(body, state0, actions)
    return jnp.concatenate([state0[None], states], 0)


def _targets(state: jax.Array, nxt: jax.Array) -> jax.Array:
    """Return the body-frame accelerations [B, 6] that take ``state`` to ``nxt``'s velocities."""
    rt = jnp.swapaxes(_matrix(state[:, 3:7]), -1, -2)
    dv = (nxt[:, 7:13] - state[:, 7:13]) / boxes.CONTROL_DT
    return jnp.concatenate([jnp.einsum('bij,bj->bi', rt, dv[:, :3]),
                            jnp.einsum('bij,bj->bi', rt, dv[:, 3:])], -1)


def transitions(trajs: Sequence[boxes.Trajectory]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return every (state, action, next state) of the trajectories, float32."""
    s = np.concatenate([t.states()[:-1] for t in trajs]).astype(np.float32)
    a = np.concatenate([t.action for t in trajs]).astype(np.float32)
    n = np.concatenate([t.states()[1:] for t in trajs]).astype(np.float32)
    return s, a, n


def window_starts(trajs: Sequence[boxes.Trajectory], steps: int) -> np.ndarray:
    """Return the indices into :func:`transitions` whose next ``steps`` stay in their run."""
    starts, offset = [], 0
    for t in trajs:
        n = len(t.action)
        starts.append(offset + np.arange(max(n - steps, 0)))
        offset += n
    return np.concatenate(starts)


def _noisy(key: jax.Array, s: jax.Array, cfg: GNNConfig) -> jax.Array:
    """Return states with the training noise on positions and velocities (pusher: x, y)."""
    k = jax.random.split(key, 3)
    shape = s.shape[:-1] + (3,)
    noise = jnp.concatenate([cfg.noise_pos * jax.random.normal(k[0], shape),
                             jnp.zeros(s.shape[:-1] + (4,)),
                             cfg.noise_vel * jax.random.normal(k[1], shape),
                             cfg.noise_angvel * jax.random.normal(k[2], shape)], -1)
    noise = noise.at[..., -1, 2:].set(0.0)
    return s + noise


def fit_stats(s: np.ndarray, a: np.ndarray, n: np.ndarray, cfg: GNNConfig) -> Stats:
    """Return the normalisation of a data set's features and target accelerations."""
    take = np.random.default_rng(0).choice(len(s), min(len(s), 20000), replace=False)
    feats = jax.jit(jax.vmap(lambda x, u: features(x, u, cfg)[:2]))
    nodes, edges = (np.asarray(v) for v in feats(s[take], a[take]))
    acc = np.asarray(jax.jit(jax.vmap(_targets))(s[take], n[take]))

    def ms(x):
        x = x.reshape(-1, x.shape[-1])
        return x.mean(0), np.maximum(x.std(0), 1e-3)
    (nm, ns), (em, es), (am, ast) = ms(nodes), ms(edges), ms(acc)
    return Stats(nm, ns, em, es, am, ast)


@dataclass
class Trained:
    """A trained learned simulator."""

    params: Dict
    stats: Stats
    cfg: GNNConfig
    losses: List[float]
    """Training loss (normalised MSE), every 100 iterations."""
    seconds: float

    def simulate(self, state0: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Return states [T + 1, B, 13] (NumPy), the interface of ``boxes.simulate``."""
        return np.asarray(_rollout_jit(self.params, self.stats, self.cfg,
                                       jnp.asarray(state0, jnp.float32),
                                       jnp.asarray(actions, jnp.float32)))


_rollout_jit = jax.jit(rollout, static_argnums=(2,))


def train(trajs: Sequence[boxes.Trajectory], cfg: GNNConfig = GNNConfig(),
          log: Optional[Callable[[str], None]] = None,
          start: Optional[Trained] = None) -> Trained:
    """
    Train the learned simulator on trajectories' transitions (Adam, cosine decay).

    ``start``: go on from this simulator (its parameters and normalisation; its
    architecture must be ``cfg``'s) with a fresh schedule, instead of a new one.
    """
    t0 = time.time()
    s, a, n = transitions(trajs)
    key = jax.random.PRNGKey(cfg.seed)
    key, k_init = jax.random.split(key)
    if start is None:
        stats = fit_stats(s, a, n, cfg)
        stats_j = Stats(*(jnp.asarray(v, jnp.float32) for v in asdict(stats).values()))
        params = init(k_init, cfg)
    else:
        arch = ('latent', 'hidden', 'steps')
        if any(getattr(start.cfg, f) != getattr(cfg, f) for f in arch):
            raise ValueError(f'train: start has latent/hidden/steps '
                             f'{[getattr(start.cfg, f) for f in arch]}, cfg '
                             f'{[getattr(cfg, f) for f in arch]}')
        stats_j, params = start.stats, start.params
        key = jax.random.fold_in(key, len(start.losses))
    opt = optax.adam(optax.cosine_decay_schedule(cfg.learning_rate, cfg.iterations, 0.01))
    opt_state = opt.init(params)
    s_d, a_d, n_d = jnp.asarray(s), jnp.asarray(a), jnp.asarray(n)
    starts = jnp.asarray(window_starts(trajs, cfg.pushforward))

    def loss_fn(p, key):
        idx = starts[jax.random.randint(key, (cfg.batch,), 0, starts.shape[0])]
        x = _noisy(jax.random.fold_in(key, 1), s_d[idx], cfg)
        ahead = jax.random.randint(jax.random.fold_in(key, 2), (cfg.batch,), 0,
                                   cfg.pushforward + 1)
        frozen = jax.lax.stop_gradient(p)
        for j in range(cfg.pushforward):
            on = jax.vmap(lambda xi, ai: step(frozen, stats_j, cfg, xi, ai))(x, a_d[idx + j])
            x = jnp.where((j < ahead)[:, None, None], on, x)
        idx = idx + ahead
        target = (jax.vmap(_targets)(x, n_d[idx]) - stats_j.acc_mean) / stats_j.acc_std

        def one(xi, ai):
            nodes, edges, gate, _ = features(xi, ai, cfg)
            return _network(p, stats_j, nodes, edges, gate)
        pred = jax.vmap(one)(x, a_d[idx])
        return jnp.mean((pred - target) ** 2)

    @jax.jit
    def update(p, o, key):
        loss, g = jax.value_and_grad(loss_fn)(p, key)
        upd, o = opt.update(g, o, p)
        return optax.apply_updates(p, upd), o, loss

    losses = []
    running = []
    for it in range(cfg.iterations):
        key, k = jax.random.split(key)
        params, opt_state, loss = update(params, opt_state, k)
        running.append(loss)
        if (it + 1) % 100 == 0:
            losses.append(float(jnp.mean(jnp.stack(running))))
            running = []
            if log and (it + 1) % 1000 == 0:
                log(f'learned simulator: iteration {it + 1}/{cfg.iterations}, '
                    f'loss {losses[-1]:.4f}, {time.time() - t0:.0f} s')
    return Trained(params, stats_j, cfg, losses, time.time() - t0)


def save(trained: Trained, path: Union[str, pathlib.Path]) -> pathlib.Path:
    """Write a trained learned simulator to ``.npz`` (parameters, statistics, config)."""
    flat, _ = jax.tree_util.tree_flatten_with_path(trained.params)
    arrays = {'param/' + jax.tree_util.keystr(k): np.asarray(v) for k, v in flat}
    arrays.update({'stats/' + k: np.asarray(v) for k, v in asdict(trained.stats).items()})
    arrays['config'] = np.array(json.dumps(asdict(trained.cfg)))
    arrays['losses'] = np.asarray(trained.losses)
    path = pathlib.Path(path)
    np.savez(path, **arrays)
    return path


def load(path: Union[str, pathlib.Path]) -> Trained:
    """Read a learned simulator written by :func:`save`."""
    with np.load(path) as z:
        if 'config' not in z:
            raise ValueError(f'{path}: not a learned-simulator file (no config array)')
        cfg = GNNConfig(**json.loads(str(z['config'])))
        stats = Stats(*(jnp.asarray(z['stats/' + f]) for f in Stats.__dataclass_fields__))
        template = init(jax.random.PRNGKey(0), cfg)
        flat, tree = jax.tree_util.tree_flatten_with_path(template)
        leaves = []
        for k, v in flat:
            name = 'param/' + jax.tree_util.keystr(k)
            if name not in z or z[name].shape != v.shape:
                raise ValueError(f'{path}: parameter {name} missing or of the wrong shape')
            leaves.append(jnp.asarray(z[name]))
        losses = list(z['losses'])
    return Trained(jax.tree_util.tree_unflatten(tree, leaves), stats, cfg, losses, 0.0)
