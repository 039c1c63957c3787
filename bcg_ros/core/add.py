"""
ADD, the adversarial differential discriminator: the imitation reward.

The discriminator sees the difference ``delta`` of reference and simulated
motion features, divided per dimension by a running mean of its magnitude.
The only positive sample is the zero vector (perfect tracking); negatives are
the current differences and a replay buffer of earlier ones. Loss::

    0.5 * (BCE(D(0), 1) + BCE(D(delta), 0))
      + logit_reg * |w_out|^2 + grad_penalty * |dD/dx (0)|^2

Reward ``r = -2 log(max(1 - sigmoid(D(delta)), 1e-4))``, written as
``2 min(softplus(D), log 1e4)`` (the same function, numerically stable). It is
differentiable with respect to ``delta`` and so, through the features, with
respect to the simulated state: SHAC's gradient flows through it into the
dynamics. The discriminator's parameters and the normaliser are constants for
that gradient.
"""

from dataclasses import dataclass
from typing import Tuple

import jax
import jax.numpy as jnp
import optax

from bcg_ros.core import networks

REWARD_FLOOR = 1e-4
"""The ``max(1 - sigmoid(D), 1e-4)`` floor of the reward."""


@dataclass(frozen=True)
class ADDConfig:
    """Configuration of the ADD discriminator and reward."""

    enabled: bool = True
    """Add the ADD reward to the environment's own reward."""
    reward_weight: float = 1.0
    """Weight of the ADD reward in the learner's reward."""
    hidden: Tuple[int, ...] = (256, 256)
    """Discriminator hidden layers (ELU; no LayerNorm, which is degenerate at zero)."""
    lr: float = 1e-3
    """Discriminator Adam learning rate."""
    betas: Tuple[float, float] = (0.9, 0.999)
    """Discriminator Adam betas."""
    grad_clip: float = 10.0
    """Global-norm gradient clip of the discriminator update."""
    steps: int = 8
    """Discriminator Adam steps per training iteration."""
    batch_size: int = 512
    """Negatives per discriminator step (half current, half from the replay buffer)."""
    buffer_size: int = 16384
    """Replay buffer capacity (negatives)."""
    logit_reg: float = 0.05
    """Weight of the squared output-layer weights (keeps logits bounded)."""
    grad_penalty: float = 5.0
    """Weight of the squared input gradient of D at the positive (zero) sample."""
    grad_penalty_negatives: bool = False
    """Penalise the input gradient at the negatives too (their mean squared norm): keeps
    D smooth where the policy's samples are, so its reward keeps a usable gradient."""
    weight_decay: float = 1e-4
    """Weight of the squared weights of all layers."""
    norm_eps: float = 1e-3
    """Floor of the running mean magnitude a feature is divided by."""


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class ADDState:
    """Discriminator parameters, optimiser, feature normaliser and replay buffer."""

    params: list
    opt_state: optax.OptState
    mean_abs: jax.Array
    """[add_size] running mean of |delta| per feature."""
    count: jax.Array
    """Samples folded into ``mean_abs``."""
    buffer: jax.Array
    """[buffer_size, add_size] earlier (raw) negatives."""
    buffer_fill: jax.Array
    """Valid rows in ``buffer``."""
    buffer_ptr: jax.Array
    """Next row to overwrite."""


def _optimizer(cfg: ADDConfig):
    """Return the discriminator's optimiser."""
    return optax.chain(optax.clip_by_global_norm(cfg.grad_clip),
                       optax.adam(cfg.lr, b1=cfg.betas[0], b2=cfg.betas[1]))


def init(cfg: ADDConfig, add_size: int, key) -> ADDState:
    """Return a fresh discriminator for features of length ``add_size``."""
    params = networks.mlp_init(key, (add_size,) + tuple(cfg.hidden) + (1,), layer_norm=False)
    return ADDState(params, _optimizer(cfg).init(params), jnp.ones((add_size,)),
                    jnp.asarray(0.0, jnp.float32), jnp.zeros((cfg.buffer_size, add_size)),
                    jnp.asarray(0, jnp.int32), jnp.asarray(0, jnp.int32))


def normalize_delta(cfg: ADDConfig, st: ADDState, delta):
    """Divide ``delta`` by the running mean magnitude (a constant for gradients)."""
    scale = jnp.maximum(jax.lax.stop_gradient(st.mean_abs), cfg.norm_eps)
    return delta / scale


def logits(params, x):
    """Return the discriminator logit of normalised differences ``x [..., add_size]``."""
    return networks.mlp_apply(params, x)[..., 0]


def reward_from_logit(logit):
    """Return ``-2 log(max(1 - sigmoid(logit), 1e-4))``."""
    return 2.0 * jnp.minimum(jax.nn.softplus(logit), -jnp.log(REWARD_FLOOR))


def reward(cfg: ADDConfig, st: ADDState, delta):
    """Return the ADD reward of raw differences ``delta [..., add_size]``, differentiable."""
    params = jax.lax.stop_gradient(st.params)
    return reward_from_logit(logits(params, normalize_delta(cfg, st, delta)))


def loss(cfg: ADDConfig, params, negatives):
    """Return the discriminator loss and its terms, ``negatives`` already normalised."""
    zero = jnp.zeros((negatives.shape[-1],))
    d_pos, g_pos = jax.value_and_grad(lambda x: logits(params, x))(zero)
    d_neg = logits(params, negatives)
    bce = 0.5 * (jax.nn.softplus(-d_pos) + jnp.mean(jax.nn.softplus(d_neg)))
    logit_reg = jnp.sum(params[-1]['w'] ** 2)
    gp = jnp.sum(g_pos ** 2)
    if cfg.grad_penalty_negatives:
        g_neg = jax.vmap(jax.grad(lambda x: logits(params, x)))(negatives)
        gp = gp + jnp.mean(jnp.sum(g_neg ** 2, -1))
    wd = sum(jnp.sum(layer['w'] ** 2) for layer in params)
    total = bce + cfg.logit_reg * logit_reg + cfg.grad_penalty * gp + cfg.weight_decay * wd
    return total, {'disc_bce': bce, 'disc_grad_penalty': gp, 'disc_logit_pos': d_pos,
                   'disc_logit_neg': jnp.mean(d_neg)}


def _push(cfg: ADDConfig, st: ADDState, rows):
    """Write ``rows`` into the ring buffer."""
    n = rows.shape[0]
    idx = (st.buffer_ptr + jnp.arange(n)) % cfg.buffer_size
    buf = st.buffer.at[idx].set(rows)
    return buf, jnp.minimum(st.buffer_fill + n, cfg.buffer_size), \
        (st.buffer_ptr + n) % cfg.buffer_size


def update(cfg: ADDConfig, st: ADDState, deltas, key):
    """
    Train the discriminator on this iteration's ``deltas [..., add_size]``.

    The normaliser first folds in the new magnitudes; each step draws half its
    negatives from ``deltas`` and half from the replay buffer (from ``deltas``
    again while the buffer is empty); then ``deltas`` enter the buffer.
    """
    deltas = jax.lax.stop_gradient(deltas).reshape((-1, st.mean_abs.shape[0]))
    n = deltas.shape[0]
    count = st.count + n
    mean_abs = st.mean_abs + (jnp.mean(jnp.abs(deltas), 0) - st.mean_abs) * n / count
    mean_abs = jnp.where(st.count > 0, mean_abs, jnp.mean(jnp.abs(deltas), 0))
    st = ADDState(st.params, st.opt_state, mean_abs, count, st.buffer, st.buffer_fill,
                  st.buffer_ptr)
    opt = _optimizer(cfg)
    half = cfg.batch_size // 2

    def one(carry, k):
        params, opt_state = carry
        k_cur, k_buf = jax.random.split(k)
        cur = deltas[jax.random.randint(k_cur, (half,), 0, n)]
        fill = jnp.maximum(st.buffer_fill, 1)
        old = st.buffer[jax.random.randint(k_buf, (half,), 0, fill)]
        old = jnp.where(st.buffer_fill > 0, old, cur)
        neg = normalize_delta(cfg, st, jnp.concatenate([cur, old]))
        (_, terms), g = jax.value_and_grad(lambda p: loss(cfg, p, neg), has_aux=True)(params)
        upd, opt_state = opt.update(g, opt_state, params)
        return (optax.apply_updates(params, upd), opt_state), terms

    (params, opt_state), terms = jax.lax.scan(one, (st.params, st.opt_state),
                                              jax.random.split(key, cfg.steps))
    take = min(n, cfg.buffer_size)
    rows = deltas[jax.random.permutation(key, n)[:take]]
    buf, fill, ptr = _push(cfg, st, rows)
    new = ADDState(params, opt_state, st.mean_abs, st.count, buf, fill, ptr)
    return new, jax.tree.map(lambda x: x[-1], terms)


def total_reward(cfg: ADDConfig, st: ADDState, env_reward, delta):
    """Return the learner's reward: the environment's terms plus the weighted ADD reward."""
    if not cfg.enabled:
        return env_reward, jnp.zeros_like(env_reward)
    r_add = reward(cfg, st, delta)
    return env_reward + cfg.reward_weight * r_add, r_add
