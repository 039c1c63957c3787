"""
Networks of the learners: ELU + LayerNorm MLPs and a running mean-std normaliser.

Parameters are plain pytrees (lists of dicts of arrays) so that they
checkpoint as arrays and export to ONNX layer by layer. A hidden layer is
``elu(layer_norm(x @ w + b))``; the output layer is linear.
"""

from dataclasses import dataclass
from typing import Sequence

import jax
import jax.numpy as jnp

LN_EPS = 1e-5
"""LayerNorm epsilon (the ONNX export uses the same)."""


def mlp_init(key, sizes: Sequence[int], out_scale: float = 1.0, layer_norm: bool = True):
    """
    Return MLP parameters for layer sizes ``[in, h1, ..., out]``.

    Weights are scaled as ``sqrt(2 / fan_in)`` (He) in hidden layers and
    ``out_scale * sqrt(1 / fan_in)`` in the output layer, so that a small
    ``out_scale`` starts the policy near its mean action. ``layer_norm=False``
    leaves the LayerNorm out (the ADD discriminator: its positive sample is the
    zero vector, where a LayerNorm after the first layer is degenerate).
    """
    layers = []
    keys = jax.random.split(key, len(sizes) - 1)
    for i, (k, n_in, n_out) in enumerate(zip(keys, sizes[:-1], sizes[1:])):
        last = i == len(sizes) - 2
        std = (out_scale * (1.0 / n_in) ** 0.5) if last else (2.0 / n_in) ** 0.5
        layer = {'w': std * jax.random.normal(k, (n_in, n_out)), 'b': jnp.zeros((n_out,))}
        if not last and layer_norm:
            layer['ln_scale'] = jnp.ones((n_out,))
            layer['ln_bias'] = jnp.zeros((n_out,))
        layers.append(layer)
    return layers


def layer_norm(x, scale, bias):
    """Normalise the last axis to zero mean and unit variance, then scale and shift."""
    mean = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, -1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + LN_EPS) * scale + bias


def mlp_apply(params, x):
    """Apply an MLP made by :func:`mlp_init` to ``x [..., in]``."""
    for layer in params[:-1]:
        x = x @ layer['w'] + layer['b']
        if 'ln_scale' in layer:
            x = layer_norm(x, layer['ln_scale'], layer['ln_bias'])
        x = jax.nn.elu(x)
    return x @ params[-1]['w'] + params[-1]['b']


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Normalizer:
    """Running mean and variance of observations (parallel-update formula)."""

    mean: jax.Array
    var: jax.Array
    count: jax.Array
    """Samples seen so far (float, starts at a small epsilon)."""


def normalizer_init(size: int) -> Normalizer:
    """Return a normaliser that leaves inputs unchanged until it sees data."""
    return Normalizer(jnp.zeros((size,)), jnp.ones((size,)), jnp.asarray(1e-4, jnp.float32))


def normalizer_update(n: Normalizer, x) -> Normalizer:
    """Fold a batch ``x [..., size]`` into the running statistics."""
    x = jax.lax.stop_gradient(x).reshape((-1, n.mean.shape[0]))
    b_count = x.shape[0]
    b_mean = jnp.mean(x, 0)
    b_var = jnp.var(x, 0)
    delta = b_mean - n.mean
    total = n.count + b_count
    mean = n.mean + delta * b_count / total
    m2 = n.var * n.count + b_var * b_count + delta ** 2 * n.count * b_count / total
    return Normalizer(mean, m2 / total, total)


def normalize(n: Normalizer, x, clip: float = 5.0):
    """Return ``clip((x - mean) / sqrt(var + 1e-8))``; statistics are constants for grads."""
    mean = jax.lax.stop_gradient(n.mean)
    std = jnp.sqrt(jax.lax.stop_gradient(n.var) + 1e-8)
    return jnp.clip((x - mean) / std, -clip, clip)


def policy_init(key, obs_size: int, action_size: int, hidden: Sequence[int],
                init_log_std: float, out_scale: float = 0.1):
    """Return Gaussian policy parameters: an MLP for the mean and a state-free log std."""
    return {'mlp': mlp_init(key, (obs_size,) + tuple(hidden) + (action_size,), out_scale),
            'log_std': jnp.full((action_size,), init_log_std, jnp.float32)}


def policy_mean(params, norm: Normalizer, obs, obs_clip: float = 5.0):
    """Return the mean action of raw observations ``obs [..., obs_size]``."""
    return mlp_apply(params['mlp'], normalize(norm, obs, obs_clip))


def gaussian_log_prob(mean, log_std, x):
    """Return the log density of ``x`` under a diagonal Gaussian, summed over the last axis."""
    z = (x - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * z ** 2 - log_std - 0.5 * jnp.log(2 * jnp.pi), -1)


def critic_init(key, obs_size: int, hidden: Sequence[int], ensemble: int):
    """Return an ensemble of value MLPs stacked along a leading axis of size ``ensemble``."""
    keys = jax.random.split(key, ensemble)
    return jax.vmap(lambda k: mlp_init(k, (obs_size,) + tuple(hidden) + (1,)))(keys)


def critic_values(params, norm: Normalizer, obs, obs_clip: float = 5.0):
    """Return each ensemble member's value, ``[ensemble, ...]``."""
    x = normalize(norm, obs, obs_clip)
    return jax.vmap(lambda p: mlp_apply(p, x)[..., 0])(params)


def critic_value(params, norm: Normalizer, obs, obs_clip: float = 5.0):
    """Return the ensemble mean value of raw observations ``obs [..., obs_size]``."""
    return jnp.mean(critic_values(params, norm, obs, obs_clip), 0)
