"""
The configuration of a training run: typed sections, presets, files and overrides.

:class:`TrainConfig` holds one frozen dataclass per section (``run``, the
learners ``shac`` and ``ppo``, the ``add`` reward, the environments ``g1`` and
``toy``). :func:`make_config` resolves it in layers: the defaults in code,
then a preset (:data:`PRESETS`), then a YAML file (nested like the sections,
or dotted keys), then dotted overrides (``--set shac.actor_lr=1e-3``). Every
value is checked against its field's type by
:func:`bcg_ros.config_types.coerce`, and every error is a
:class:`ConfigError` that names the field.
"""

import dataclasses
import json
import pathlib
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from bcg_ros.config_types import coerce
from bcg_ros.core import add as add_mod
from bcg_ros.core import ppo as ppo_mod
from bcg_ros.core import shac as shac_mod
from bcg_ros.core.g1_env import G1EnvConfig
from bcg_ros.core.toy_env import ToyEnvConfig


class ConfigError(ValueError):
    """A configuration value that does not fit its field; the message names the field."""


@dataclass(frozen=True)
class RunConfig:
    """What to train and how the run is driven."""

    algo: str = 'shac'
    """Learner: 'shac' or 'ppo'."""
    env: str = 'g1'
    """Environment: 'g1' (imitation of a reference motion) or 'toy' (the test env)."""
    iterations: int = 3000
    """Training iterations (learning rates decay over these)."""
    max_minutes: float = 0.0
    """Stop once the run's wall-clock (``wall_s``: compiles included, summed over resumed
    sessions) reaches this many minutes, even short of ``iterations``; 0: no limit. Two
    learners given the same budget on one machine compare at equal wall-clock."""
    seed: int = 0
    """Seed of every random key of the run."""
    checkpoint_every: int = 50
    """Iterations between checkpoints (and one at the end, and on Ctrl-C)."""
    curves_every: int = 50
    """Iterations between rewrites of curves.png."""
    keep_checkpoints: Tuple[float, ...] = ()
    """Fractions of ``iterations`` (e.g. [0, 0.25, 0.5, 1]) at which a copy of the
    checkpoint stays as checkpoint_<iteration>.npz, for studies along the run
    (``bcg-bench variance`` during training)."""
    devices: int = 0
    """Local JAX devices to shard the envs over; 0: all of them (as many as divide the envs).
    On a CPU the training commands make one device per core
    (:func:`bcg_ros.jax_cache.cpu_cores`)."""
    export: bool = True
    """Write policy.onnx at the end."""
    evaluate: bool = True
    """Evaluate policy.onnx in MuJoCo at the end (G1 env, when bcg_ros.eval exists)."""
    eval_runs: int = 5
    """MuJoCo rollouts of the final evaluation."""
    progress_bar: bool = True
    """Show a tqdm progress bar."""
    tensorboard: bool = True
    """Write TensorBoard logs under tb/."""


@dataclass(frozen=True)
class TrainConfig:
    """The whole configuration of a training run."""

    run: RunConfig = field(default_factory=RunConfig)
    """The run itself."""
    shac: shac_mod.SHACConfig = field(default_factory=shac_mod.SHACConfig)
    """SHAC learner (run.algo = 'shac')."""
    ppo: ppo_mod.PPOConfig = field(default_factory=ppo_mod.PPOConfig)
    """PPO learner (run.algo = 'ppo')."""
    add: add_mod.ADDConfig = field(default_factory=add_mod.ADDConfig)
    """ADD discriminator and reward."""
    g1: G1EnvConfig = field(default_factory=G1EnvConfig)
    """G1 imitation environment (run.env = 'g1')."""
    toy: ToyEnvConfig = field(default_factory=ToyEnvConfig)
    """Point-mass test environment (run.env = 'toy')."""


def _paper() -> Dict[str, Any]:
    """The paper's full scale (a GPU): 64 envs with BCG, 3000 iterations, k = 300."""
    return {'run.iterations': 3000, 'g1.num_envs': 64}


def _cpu() -> Dict[str, Any]:
    """A run that learns something visible on a 2-core CPU in under 30 minutes."""
    # The discriminator trains 2 steps per iteration at lr 2e-4 with a gradient penalty
    # of 10: with the defaults (8 steps, 1e-3, 5) it wins within 20 iterations at this
    # scale (negative logits below -10), the ADD reward goes to 0 and with it its gradient.
    # Beside ADD: actions as residuals around the reference (a zero policy replays the
    # clip), DeepMimic's dense tracking terms, a privileged critic, and episodes that run
    # to the end of the clip from a random frame. BCG's branch work runs for at most 6 of
    # the 16 envs at a step (training bundles about a fifth of env-steps, so a trigger
    # rarely finds the slots full; a dropped one is counted in bundle_dropped_rate).
    return {'run.iterations': 300, 'run.checkpoint_every': 10, 'run.curves_every': 10,
            'run.eval_runs': 2,
            'g1.num_envs': 16, 'g1.episode_length': 0, 'g1.residual': True,
            'g1.privileged_critic': True, 'g1.bcg.max_bundled': 6,
            'g1.imitation.pose_weight': 0.5, 'g1.imitation.joint_vel_weight': 0.1,
            'g1.imitation.key_weight': 0.2, 'g1.imitation.root_weight': 0.3,
            'g1.imitation.root_vel_weight': 0.1,
            'shac.horizon': 16, 'shac.actor_hidden': (128, 64), 'shac.critic_hidden': (128, 64),
            'shac.critic_iterations': 8, 'shac.actor_lr': 2e-3,
            'ppo.horizon': 16, 'ppo.actor_hidden': (128, 64), 'ppo.critic_hidden': (128, 64),
            'add.hidden': (128, 64), 'add.batch_size': 256, 'add.buffer_size': 4096,
            'add.steps': 2, 'add.lr': 2e-4, 'add.grad_penalty': 10.0}


def _cpu_long() -> Dict[str, Any]:
    """The CPU preset for one long, resumable run per clip: about 2 hours on 2 cores."""
    return {**_cpu(), 'run.iterations': 1200, 'run.checkpoint_every': 20,
            'run.curves_every': 20, 'run.eval_runs': 5}


def _toy() -> Dict[str, Any]:
    """The test environment at test size: compiles in seconds, learns in tens of iterations."""
    return {'run.env': 'toy', 'run.iterations': 60, 'run.checkpoint_every': 10,
            'run.curves_every': 20, 'run.evaluate': False,
            'toy.num_envs': 16, 'shac.horizon': 16, 'shac.actor_hidden': (32, 32),
            'shac.critic_hidden': (32, 32), 'shac.critic_iterations': 4,
            'ppo.horizon': 16, 'ppo.actor_hidden': (32, 32), 'ppo.critic_hidden': (32, 32),
            'ppo.lr': 1e-3, 'ppo.lr_end': 1e-3,
            'add.hidden': (32, 32), 'add.batch_size': 64, 'add.buffer_size': 1024}


PRESETS: Dict[str, Callable[[], Dict[str, Any]]] = {'paper': _paper, 'cpu': _cpu,
                                                    'cpu-long': _cpu_long, 'toy': _toy}
"""Named sets of dotted overrides on the defaults in code."""


# --- configuration by dotted name ----------------------------------------------------

def _replace(obj, path: Sequence[str], value, full: str):
    """Return ``obj`` with the field at ``path`` set to ``value`` (type-checked)."""
    hints = typing.get_type_hints(type(obj))
    name = path[0]
    if name not in hints:
        known = ', '.join(f.name for f in dataclasses.fields(obj))
        raise ConfigError(f'{full}: {type(obj).__name__} has no field {name!r} '
                          f'(fields: {known})')
    if len(path) == 1:
        new = coerce(value, hints[name], full, ConfigError)
    else:
        sub = getattr(obj, name)
        if not dataclasses.is_dataclass(sub):
            raise ConfigError(f'{full}: {name!r} is a value, not a section')
        new = _replace(sub, path[1:], value, full)
    try:
        return dataclasses.replace(obj, **{name: new})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f'{full}: {exc}') from exc


def apply_overrides(cfg: TrainConfig, overrides: Mapping[str, Any]) -> TrainConfig:
    """Return ``cfg`` with dotted-name overrides (``'shac.actor_lr': 1e-3``) applied."""
    for key, value in overrides.items():
        cfg = _replace(cfg, key.split('.'), value, key)
    return cfg


def flatten_mapping(d: Mapping, prefix: str = '') -> Dict[str, Any]:
    """Return a nested mapping as dotted keys (dataclass sections become prefixes)."""
    out = {}
    for k, v in d.items():
        key = f'{prefix}{k}'
        if isinstance(v, Mapping):
            out.update(flatten_mapping(v, key + '.'))
        else:
            out[key] = v
    return out


def parse_set(items: Sequence[str]) -> Dict[str, Any]:
    """Parse ``section.field=value`` strings; values are YAML (1e-3, true, [64, 64])."""
    import yaml

    out = {}
    for item in items:
        if '=' not in item:
            raise ConfigError(f'--set {item!r}: expected section.field=value')
        key, raw = item.split('=', 1)
        try:
            out[key.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ConfigError(f'--set {key}: value {raw!r} is not valid YAML: {exc}') from exc
    return out


def load_config_file(path) -> Dict[str, Any]:
    """Return the dotted overrides of a YAML config file (``preset:`` is returned as is)."""
    import yaml

    path = pathlib.Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f'{path}: cannot read the config file: {exc}') from exc
    if not isinstance(data, Mapping):
        raise ConfigError(f'{path}: expected a mapping of sections, got {type(data).__name__}')
    return flatten_mapping(data)


def make_config(preset: Optional[str] = None, config_file=None,
                overrides: Optional[Mapping[str, Any]] = None) -> TrainConfig:
    """Return the configuration: defaults, then preset, then file, then overrides."""
    from_file = load_config_file(config_file) if config_file else {}
    preset = from_file.pop('preset', None) if preset is None else preset
    from_file.pop('preset', None)
    cfg = TrainConfig()
    if preset:
        if preset not in PRESETS:
            raise ConfigError(f'preset {preset!r}: unknown (presets: {", ".join(PRESETS)})')
        cfg = apply_overrides(cfg, PRESETS[preset]())
    try:
        cfg = apply_overrides(cfg, from_file)
    except ConfigError as exc:
        raise ConfigError(f'{config_file}: {exc}') from exc
    cfg = apply_overrides(cfg, overrides or {})
    check_config(cfg)
    return cfg


def check_config(cfg: TrainConfig):
    """Raise naming the field where values cannot work together."""
    if cfg.run.algo not in ('shac', 'ppo'):
        raise ConfigError(f"run.algo: expected 'shac' or 'ppo', got {cfg.run.algo!r}")
    if cfg.run.env not in ('g1', 'toy'):
        raise ConfigError(f"run.env: expected 'g1' or 'toy', got {cfg.run.env!r}")
    if cfg.run.iterations < 1:
        raise ConfigError(f'run.iterations: must be >= 1, got {cfg.run.iterations}')
    if not cfg.run.max_minutes >= 0.0:
        raise ConfigError(f'run.max_minutes: must be >= 0 (0: no limit), got '
                          f'{cfg.run.max_minutes}')
    if cfg.run.checkpoint_every < 1:
        raise ConfigError(f'run.checkpoint_every: must be >= 1, got {cfg.run.checkpoint_every}')
    for name in ('episode_length', 'hold_end'):
        if getattr(cfg.g1, name) < 0:
            raise ConfigError(f'g1.{name}: must be >= 0, got {getattr(cfg.g1, name)}')
    g = cfg.g1
    if not 0.0 <= g.adaptive_start <= 1.0:
        raise ConfigError(f'g1.adaptive_start: a share in [0, 1], got {g.adaptive_start}')
    if g.adaptive_bin < 1:
        raise ConfigError(f'g1.adaptive_bin: must be >= 1 frame, got {g.adaptive_bin}')
    if not 0.0 < g.adaptive_decay <= 1.0:
        raise ConfigError(f'g1.adaptive_decay: must be in (0, 1], got {g.adaptive_decay}')
    if not g.adaptive_kernel or min(g.adaptive_kernel) < 0:
        raise ConfigError(f'g1.adaptive_kernel: one or more weights >= 0, got '
                          f'{list(g.adaptive_kernel)}')
    bad = [f for f in cfg.run.keep_checkpoints if not 0.0 <= f <= 1.0]
    if bad:
        raise ConfigError(f'run.keep_checkpoints: fractions of run.iterations in [0, 1], got '
                          f'{bad}')


def config_to_dict(cfg) -> Dict:
    """Return the configuration as plain JSON-able data."""
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


def with_defaults(d: Mapping, defaults: Mapping) -> Dict:
    """
    Return ``d`` with the fields it lacks taken from ``defaults``.

    A config written before a field existed ran with that field's default.
    """
    out = dict(d)
    for k, v in defaults.items():
        if k not in out:
            out[k] = v
        elif isinstance(v, Mapping) and isinstance(out[k], Mapping):
            out[k] = with_defaults(out[k], v)
    return out


def config_diff(a: Mapping, b: Mapping, prefix: str = '') -> List[str]:
    """Return the dotted names whose values differ between two config dicts."""
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            out += config_diff(va, vb, f'{prefix}{k}.')
        elif va != vb:
            out.append(f'{prefix}{k}')
    return out
