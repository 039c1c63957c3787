"""
``bcg-train``: train a policy with SHAC (+BCG) or PPO and the ADD reward, then export it.

A run lives in one output folder::

    checkpoint.npz     the whole learner state, rewritten atomically (resume reads it)
    history.jsonl      one line of metrics per iteration
    tb/                TensorBoard logs (tensorboardX)
    curves.png         learning curves against iterations, env samples and wall-clock
    policy.onnx        the actor with the deployment contract in its metadata
    summary.json       configuration, final and best metrics, samples to reach E_track
    eval/              the MuJoCo evaluation, when bcg_ros.eval is installed (G1 only)

Starting ``bcg-train`` again on a folder that holds a checkpoint continues from
it: same iteration count, same random key, same environments.

Configuration: a preset (``--preset cpu`` or ``paper``; ``toy`` is the test
environment), then a YAML file (``--config run.yaml``, nested like the
dataclasses below, or dotted keys), then ``--set section.field=value``
overrides, each checked against the field's type. The pure training step is
in :mod:`bcg_ros.core`; this module is the impure shell that times, logs,
saves and exports (:class:`Trainer`), shared by ``bcg-train`` and the trainer
node.
"""

import argparse
import dataclasses
import json
import math
import pathlib
import threading
import time
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from bcg_ros.core import add as add_mod
from bcg_ros.core import ppo as ppo_mod
from bcg_ros.core import shac as shac_mod
from bcg_ros.core.g1_env import G1EnvConfig
from bcg_ros.core.toy_env import ToyEnvConfig

CHECKPOINT = 'checkpoint.npz'
E_TRACK_THRESHOLDS_CM = (40.0, 30.0, 20.0, 18.0, 17.0, 16.0, 15.0, 10.0, 5.0, 2.0, 1.0)
"""E_track levels at which the summary records the env samples needed to reach them."""


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
    seed: int = 0
    """Seed of every random key of the run."""
    checkpoint_every: int = 50
    """Iterations between checkpoints (and one at the end, and on Ctrl-C)."""
    curves_every: int = 50
    """Iterations between rewrites of curves.png."""
    devices: int = 0
    """Local JAX devices to shard the envs over; 0: all of them."""
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
    """A run that learns something visible on a 2-core CPU in under 20 minutes."""
    # The discriminator trains 2 steps per iteration at lr 2e-4 with a gradient penalty
    # of 10: with the defaults (8 steps, 1e-3, 5) it wins within 20 iterations at this
    # scale (negative logits below -10), the ADD reward goes to 0 and with it its gradient.
    return {'run.iterations': 300, 'run.checkpoint_every': 10, 'run.curves_every': 10,
            'run.eval_runs': 2,
            'g1.num_envs': 8, 'g1.episode_length': 64,
            'shac.horizon': 16, 'shac.actor_hidden': (128, 64), 'shac.critic_hidden': (128, 64),
            'shac.critic_iterations': 8, 'shac.actor_lr': 2e-3,
            'ppo.horizon': 16, 'ppo.actor_hidden': (128, 64), 'ppo.critic_hidden': (128, 64),
            'add.hidden': (128, 64), 'add.batch_size': 256, 'add.buffer_size': 4096,
            'add.steps': 2, 'add.lr': 2e-4, 'add.grad_penalty': 10.0}


def _toy() -> Dict[str, Any]:
    """The test environment at test size: compiles in seconds, learns in tens of iterations."""
    return {'run.env': 'toy', 'run.iterations': 60, 'run.checkpoint_every': 10,
            'run.curves_every': 20, 'run.evaluate': False,
            'toy.num_envs': 16, 'shac.horizon': 16, 'shac.actor_hidden': (32, 32),
            'shac.critic_hidden': (32, 32), 'shac.critic_iterations': 4,
            'ppo.horizon': 16, 'ppo.actor_hidden': (32, 32), 'ppo.critic_hidden': (32, 32),
            'ppo.lr': 1e-3, 'ppo.lr_end': 1e-3,
            'add.hidden': (32, 32), 'add.batch_size': 64, 'add.buffer_size': 1024}


PRESETS: Dict[str, Callable[[], Dict[str, Any]]] = {'paper': _paper, 'cpu': _cpu, 'toy': _toy}
"""Named sets of dotted overrides on the defaults in code."""


# --- configuration by dotted name ----------------------------------------------------

def _coerce(value, tp, name: str):
    """Return ``value`` as type ``tp`` (from YAML or a preset), or raise naming the field."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        raise ConfigError(f'{name}: is a section; set its fields ({name}.<field>=...)')
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f'{name}: expected true or false, got {value!r}')
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f'{name}: expected an integer, got {value!r}')
        return value
    if tp is float:
        if isinstance(value, str):
            # YAML 1.1 reads 1e-3 (no dot) as a string.
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f'{name}: expected a number, got {value!r}')
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f'{name}: expected a string, got {value!r}')
        return value
    if origin is tuple or tp is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f'{name}: expected a list, got {value!r}')
        args = typing.get_args(tp)
        if args and args[-1] is Ellipsis:
            return tuple(_coerce(v, args[0], f'{name}[{i}]') for i, v in enumerate(value))
        if args:
            if len(args) != len(value):
                raise ConfigError(f'{name}: expected {len(args)} values, got {value!r}')
            return tuple(_coerce(v, a, f'{name}[{i}]') for i, (v, a) in enumerate(zip(args,
                                                                                      value)))
        return tuple(value)
    return value


def _replace(obj, path: Sequence[str], value, full: str):
    """Return ``obj`` with the field at ``path`` set to ``value`` (type-checked)."""
    hints = typing.get_type_hints(type(obj))
    name = path[0]
    if name not in hints:
        known = ', '.join(f.name for f in dataclasses.fields(obj))
        raise ConfigError(f'{full}: {type(obj).__name__} has no field {name!r} '
                          f'(fields: {known})')
    if len(path) == 1:
        new = _coerce(value, hints[name], full)
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
    if cfg.run.checkpoint_every < 1:
        raise ConfigError(f'run.checkpoint_every: must be >= 1, got {cfg.run.checkpoint_every}')


def config_to_dict(cfg) -> Dict:
    """Return the configuration as plain JSON-able data."""
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


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


# --- the impure shell ----------------------------------------------------------------

def make_env(cfg: TrainConfig):
    """Return the environment the configuration names."""
    if cfg.run.env == 'toy':
        from bcg_ros.core.toy_env import ToyEnv
        return ToyEnv(cfg.toy)
    from bcg_ros.core.g1_env import G1Env
    return G1Env(cfg.g1)


def learner(cfg: TrainConfig):
    """Return ``(module, its config)`` of the configured learner."""
    return (shac_mod, cfg.shac) if cfg.run.algo == 'shac' else (ppo_mod, cfg.ppo)


class Trainer:
    """
    One training run in one output folder: step, log, checkpoint, export.

    NOT pure: it times, writes files and holds the current state. The state it
    holds is replaced as a whole after each iteration under a lock, so another
    thread (the trainer node's services) may save or export at any time.
    """

    def __init__(self, cfg: TrainConfig, out_dir, resume: bool = True,
                 log: Callable[[str], None] = print):
        """Build env and learner, and resume from ``out_dir``'s checkpoint when it has one."""
        import jax

        from bcg_ros import checkpoint

        self.cfg = cfg
        self.out = pathlib.Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.log = log
        self.lock = threading.Lock()
        self.env = make_env(cfg)
        self.algo, self.algo_cfg = learner(cfg)
        self.mesh_devices = self._devices()
        self.samples_per_iteration = self.algo_cfg.horizon * self.env.num_envs
        key = jax.random.PRNGKey(cfg.run.seed)
        key, k_init = jax.random.split(key)
        state = self.algo.init(self.algo_cfg, cfg.add, self.env, k_init)
        self.history: List[Dict[str, float]] = []
        self.wall_before = 0.0
        ck = self.out / CHECKPOINT
        if resume and ck.is_file():
            meta = checkpoint.read_meta(ck)
            diff = [d for d in config_diff(meta.get('config', {}), config_to_dict(cfg))
                    if d not in ('run.iterations', 'run.progress_bar', 'run.evaluate',
                                 'run.export', 'run.tensorboard', 'run.eval_runs')]
            if diff:
                raise ConfigError(f'{ck}: the checkpoint was written with another '
                                  f'configuration (differs in {", ".join(diff)}); use another '
                                  'output folder or --fresh')
            state, meta = checkpoint.load(ck, state)
            key = np.asarray(meta['key'], np.uint32)
            self.history = meta.get('history', [])
            self.wall_before = float(meta.get('wall_s', 0.0))
            log(f'resumed from {ck} at iteration {meta["iteration"]}')
        # history.jsonl restarts from what the checkpoint knows: iterations run after the
        # last checkpoint of a killed run are run again and must not appear twice.
        with open(self.out / 'history.jsonl', 'w') as f:
            f.writelines(json.dumps(h) + '\n' for h in self.history)
        self.state_shardings = self._shardings(state)
        self.state = jax.device_put(state, self.state_shardings)
        self.key = jax.device_put(key, self._replicated)
        self._iterate = jax.jit(self.algo.make_iterate(self.algo_cfg, cfg.add, self.env,
                                                       cfg.run.iterations),
                                in_shardings=(self.state_shardings, self._replicated),
                                out_shardings=(self.state_shardings, self._replicated))
        self.t_start = time.time()
        self.writer = None
        if cfg.run.tensorboard:
            from tensorboardX import SummaryWriter
            self.writer = SummaryWriter(str(self.out / 'tb'))

    def _devices(self):
        """Return the local devices the envs are sharded over."""
        import jax

        devices = jax.local_devices()
        n = self.cfg.run.devices or len(devices)
        if n > len(devices):
            raise ConfigError(f'run.devices: {n} requested, JAX has {len(devices)} '
                              f'({devices[0].platform})')
        if self.env.num_envs % n:
            raise ConfigError(f'{self.cfg.run.env}.num_envs: {self.env.num_envs} envs do not '
                              f'split over {n} devices')
        return devices[:n]

    def _shardings(self, state):
        """Shard the environments' state over the devices' 'envs' axis; replicate the rest."""
        import jax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        mesh = Mesh(np.asarray(self.mesh_devices), ('envs',))
        self._replicated = NamedSharding(mesh, PartitionSpec())
        envs = NamedSharding(mesh, PartitionSpec('envs'))
        rep = jax.tree.map(lambda _: self._replicated, state)
        env_sh = jax.tree.map(lambda _: envs, state.env_state)
        return dataclasses.replace(rep, env_state=env_sh)

    @property
    def iteration(self) -> int:
        """Return the iterations done so far."""
        return int(self.state.iteration)

    @property
    def wall_s(self) -> float:
        """Return the training wall-clock so far, over all resumed sessions [s]."""
        return self.wall_before + time.time() - self.t_start

    def step(self) -> Dict[str, float]:
        """Run one iteration; record and log its metrics; return them."""
        import jax

        key, k = jax.random.split(self.key)
        state, metrics = self._iterate(self.state, k)
        metrics = {name: float(v) for name, v in jax.device_get(metrics).items()}
        with self.lock:
            self.state, self.key = state, key
        it = self.iteration
        metrics.update(iteration=it, samples=it * self.samples_per_iteration,
                       wall_s=self.wall_s)
        self.history.append(metrics)
        with open(self.out / 'history.jsonl', 'a') as f:
            f.write(json.dumps(metrics) + '\n')
        if self.writer is not None:
            for name, v in metrics.items():
                if name != 'iteration' and math.isfinite(v):
                    self.writer.add_scalar(f'train/{name}', v, it)
        if it % self.cfg.run.checkpoint_every == 0:
            self.save_checkpoint()
        if it % self.cfg.run.curves_every == 0:
            self.write_curves()
        return metrics

    def save_checkpoint(self) -> pathlib.Path:
        """Write the current state to checkpoint.npz atomically; return its path."""
        from bcg_ros import checkpoint

        with self.lock:
            state, key, history = self.state, self.key, list(self.history)
        meta = {'iteration': int(state.iteration), 'key': np.asarray(key).tolist(),
                'config': config_to_dict(self.cfg), 'history': history, 'wall_s': self.wall_s,
                'samples': int(state.iteration) * self.samples_per_iteration}
        return checkpoint.save(self.out / CHECKPOINT, state, meta)

    def train_penetration_mm(self) -> float:
        """Return the mean foot penetration of the training simulator over the last iterations."""
        vals = [h['penetration_mm'] for h in self.history[-20:] if 'penetration_mm' in h]
        return float(np.mean(vals)) if vals else 0.0

    def export(self, path=None) -> pathlib.Path:
        """Write the current deterministic actor as ONNX (policy.onnx by default)."""
        from bcg_ros.export import export_policy

        with self.lock:
            actor, norm = self.algo.policy(self.state)
        return export_policy(path or self.out / 'policy.onnx', actor, norm,
                             self.env.contract(), self.algo_cfg.obs_clip,
                             self.train_penetration_mm(),
                             {'bcg_ros.algorithm': self.cfg.run.algo,
                              'bcg_ros.iteration': str(self.iteration),
                              'bcg_ros.env': self.cfg.run.env})

    def write_curves(self) -> Optional[pathlib.Path]:
        """Write curves.png: reward and E_track against iterations, samples and wall-clock."""
        if not self.history:
            return None
        return write_curves(self.history, self.out / 'curves.png',
                            f'{self.cfg.run.algo} on {self.cfg.run.env}')

    def summary(self) -> Dict:
        """Return the run's summary (written to summary.json)."""
        keys = ('reward', 'add_reward', 'track_reward', 'e_track', 'bundle_rate', 'fall_rate',
                'diverged_rate', 'penetration_mm')

        def means(rows):
            return {k: float(np.mean([h[k] for h in rows])) for k in keys
                    if rows and k in rows[0]}

        start, mean = means(self.history[:10]), means(self.history[-10:])
        # Every episode starts at iteration 0 on the reference, so the first iterations
        # track unusually well; the medians over sixths of the run show the trend.
        parts = [p for p in np.array_split(np.arange(len(self.history)), 6) if p.size]
        sixths = {k: [float(np.median([self.history[i][k] for i in p])) for p in parts]
                  for k in keys if self.history and k in self.history[0]}
        return {'algo': self.cfg.run.algo, 'env': self.cfg.run.env,
                'iterations': self.iteration,
                'samples': self.iteration * self.samples_per_iteration,
                'wall_s': self.wall_s, 'devices': len(self.mesh_devices),
                'first_10_iterations': start, 'last_10_iterations': mean,
                'median_by_sixth': sixths,
                'best_e_track': min((h['e_track'] for h in self.history), default=None),
                'samples_to_e_track': samples_to_reach(self.history),
                'train_penetration_mm': self.train_penetration_mm(),
                'config': config_to_dict(self.cfg)}

    def run(self, should_stop: Callable[[], bool] = lambda: False,
            on_iteration: Optional[Callable[[Dict[str, float]], None]] = None) -> bool:
        """
        Train until ``run.iterations`` or ``should_stop()``; return whether it finished.

        A KeyboardInterrupt saves a checkpoint before it propagates.
        """
        total = self.cfg.run.iterations
        bar = None
        if self.cfg.run.progress_bar:
            from tqdm import tqdm
            bar = tqdm(total=total, initial=min(self.iteration, total), unit='it',
                       dynamic_ncols=True)
        try:
            while self.iteration < total and not should_stop():
                m = self.step()
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(reward=f'{m["reward"]:.3f}', E_track=f'{m["e_track"]:.2f}cm',
                                    bundle=f'{m["bundle_rate"]:.3f}', refresh=False)
                if on_iteration is not None:
                    on_iteration(m)
        except KeyboardInterrupt:
            self.log(f'interrupted: checkpoint at iteration {self.iteration} -> '
                     f'{self.save_checkpoint()}')
            raise
        finally:
            if bar is not None:
                bar.close()
        self.save_checkpoint()
        self.write_curves()
        return self.iteration >= total

    def finish(self) -> Dict:
        """Export, evaluate (G1, when the evaluator exists) and write summary.json."""
        summary = self.summary()
        if self.cfg.run.export:
            summary['policy'] = str(self.export())
            if self.cfg.run.evaluate and self.cfg.run.env == 'g1':
                summary['evaluation'] = self._evaluate(pathlib.Path(summary['policy']))
        path = self.out / 'summary.json'
        tmp = path.with_suffix('.json.tmp')
        tmp.write_text(json.dumps(summary, indent=2, default=str))
        tmp.replace(path)
        if self.writer is not None:
            self.writer.close()
        return summary

    def _evaluate(self, policy: pathlib.Path) -> Optional[Dict]:
        """Run the MuJoCo evaluator on ``policy``; None (and a note) when it is absent."""
        try:
            from bcg_ros.eval import evaluator, report
        except ImportError as exc:
            self.log(f'no evaluation: bcg_ros.eval is not available ({exc})')
            return None
        cfg = evaluator.EvalConfig(policy=str(policy), motion=self.cfg.g1.motion,
                                   runs=self.cfg.run.eval_runs)
        ev = evaluator.evaluate(cfg)
        report.write(ev, self.out / 'eval')
        return ev.summary


def trailing_mean(values, window: int) -> np.ndarray:
    """Return the means of ``values`` over each full trailing ``window`` (empty if too few)."""
    v = np.asarray(values, float)
    return np.convolve(v, np.ones(window) / window, mode='valid') if v.size >= window \
        else np.zeros(0)


def samples_to_reach(history: Sequence[Mapping[str, float]],
                     thresholds: Sequence[float] = E_TRACK_THRESHOLDS_CM,
                     window: int = 20) -> Dict[str, Any]:
    """
    Return, per E_track level [cm], the env samples of the first iteration at or below it.

    E_track is averaged over a trailing ``window`` of iterations, and the first ``window``
    iterations are left out: every episode starts on the reference at iteration 0, so the
    run's first iterations track well whatever the policy, and episodes that end together
    at the time limit restart together (E_track rises and falls with their period, 4
    iterations at the CPU preset). One lucky stretch is not a level reached.
    """
    # Fewer than 2 windows of iterations: no level is reached.
    smooth = trailing_mean([h['e_track'] for h in history[window:]], window)
    out = {}
    for th in thresholds:
        idx = np.flatnonzero(smooth <= th)
        out[f'{th:g}'] = (int(history[window + idx[0] + window - 1]['samples']) if idx.size
                          else None)
    return out


def write_curves(history: Sequence[Mapping[str, float]], path, title: str = ''):
    """Plot reward and E_track against iterations, env samples and wall-clock (Fig. 5)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    xs = (('iteration', 'iterations'), ('samples', 'env samples'), ('wall_s', 'wall-clock [s]'))
    ys = [(k, label) for k, label in (
        ('reward', 'reward per step'), ('add_reward', 'ADD reward per step'),
        ('track_reward', 'tracking reward per step'), ('e_track', 'E_track [cm]'))
        if history and k in history[0]]
    fig, axes = plt.subplots(len(ys), len(xs), figsize=(12, 2.6 * len(ys)), squeeze=False)
    for i, (yk, yl) in enumerate(ys):
        y = np.asarray([h[yk] for h in history], float)
        k = min(10, len(y))
        smooth = trailing_mean(y, k)
        for j, (xk, xl) in enumerate(xs):
            x = np.asarray([h[xk] for h in history], float)
            ax = axes[i][j]
            ax.plot(x, y, alpha=0.3, lw=0.8)
            ax.plot(x[k - 1:], smooth, lw=1.5)   # the k-iteration running mean
            ax.set_xlabel(xl)
            ax.set_ylabel(yl)
            ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = pathlib.Path(path)
    tmp = path.with_name(path.stem + '.tmp.png')
    fig.savefig(tmp, dpi=80)
    plt.close(fig)
    tmp.replace(path)
    return path


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser of ``bcg-train``."""
    p = argparse.ArgumentParser(prog='bcg-train', description=__doc__.splitlines()[1])
    p.add_argument('--preset', choices=sorted(PRESETS), default=None,
                   help='named configuration (cpu: this machine, paper: full scale on a GPU)')
    p.add_argument('--config', default=None, help='YAML file of config sections/fields')
    p.add_argument('--set', dest='overrides', action='append', default=[],
                   metavar='SECTION.FIELD=VALUE', help='override one field (repeatable)')
    p.add_argument('--motion', default=None, metavar='CLIP_OR_FILE',
                   help='reference motion: a built-in clip (run, jump, fight, dance) or a '
                        'motion file; the same as --set g1.motion=...')
    p.add_argument('--out', default='runs/train', help='output folder (default runs/train)')
    p.add_argument('--fresh', action='store_true',
                   help='ignore a checkpoint in the output folder and start over')
    p.add_argument('--print-config', action='store_true',
                   help='print the resolved configuration as JSON and exit')
    p.add_argument('--compare', nargs='+', metavar='RUN_DIR', default=None,
                   help='print the env samples each finished run needed to reach each '
                        'E_track level, side by side, and exit')
    return p


def compare_table(run_dirs: Sequence) -> str:
    """Return a text table: samples to reach each E_track level, one column per run."""
    runs = []
    for d in run_dirs:
        path = pathlib.Path(d) / 'summary.json'
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f'{path}: cannot read the run summary: {exc}') from exc
        hist = pathlib.Path(d) / 'history.jsonl'
        if hist.is_file():   # recount with this version's levels and smoothing
            rows = [json.loads(line) for line in hist.read_text().splitlines() if line]
            summary['samples_to_e_track'] = samples_to_reach(rows)
        runs.append((pathlib.Path(d).name, summary))
    head = ['E_track [cm]'] + [f'{n} ({s["algo"]})' for n, s in runs]
    rows = [head]
    levels = sorted({k for _, s in runs for k in s['samples_to_e_track']}, key=float,
                    reverse=True)
    for lv in levels:
        rows.append([lv] + [str(s['samples_to_e_track'].get(lv) or '-') for _, s in runs])
    rows.append(['final E_track'] + [f'{s["last_10_iterations"]["e_track"]:.2f}'
                                     for _, s in runs])
    rows.append(['samples'] + [str(s['samples']) for _, s in runs])
    width = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return '\n'.join('  '.join(c.rjust(w) for c, w in zip(r, width)) for r in rows)


def main(argv=None) -> int:
    """Train, then export and evaluate, as the command line asks."""
    args = build_parser().parse_args(argv)
    if args.compare:
        try:
            print(compare_table(args.compare))
        except ConfigError as exc:
            print(f'bcg-train: {exc}')
            return 2
        return 0
    try:
        overrides = parse_set(args.overrides)
        if args.motion is not None:
            overrides['g1.motion'] = args.motion
        cfg = make_config(args.preset, args.config, overrides)
    except ConfigError as exc:
        print(f'bcg-train: {exc}')
        return 2
    if args.print_config:
        print(json.dumps(config_to_dict(cfg), indent=2))
        return 0
    from bcg_ros.jax_cache import enable_compilation_cache
    enable_compilation_cache()
    try:
        trainer = Trainer(cfg, args.out, resume=not args.fresh)
    except ConfigError as exc:
        print(f'bcg-train: {exc}')
        return 2
    try:
        trainer.run()
    except KeyboardInterrupt:
        return 130
    summary = trainer.finish()
    last = summary['last_10_iterations']
    print(f'iterations {summary["iterations"]}, samples {summary["samples"]}, '
          f'wall {summary["wall_s"]:.0f} s, reward {last.get("reward", float("nan")):.3f}, '
          f'E_track {last.get("e_track", float("nan")):.2f} cm')
    print(f'wrote {trainer.out / "policy.onnx"} and {trainer.out / "summary.json"}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
