"""
The impure shell of training: :class:`Trainer` steps, times, logs, saves and exports.

The pure training step is in :mod:`bcg_ros.core` (``make_iterate`` of the
learner); the Trainer jits it with the environments sharded over the local
devices, and around it keeps the run's folder up to date: history.jsonl and
TensorBoard every iteration, checkpoint.npz and curves.png every few, and at
the end policy.onnx, summary.json and the MuJoCo evaluation. Shared by
``bcg-train`` (:mod:`bcg_ros.train.cli`) and the trainer node.
"""

import contextlib
import dataclasses
import json
import math
import pathlib
import signal
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from bcg_ros import contract as ct
from bcg_ros.core import ppo as ppo_mod
from bcg_ros.core import shac as shac_mod
from bcg_ros.train import checkpoint, report
from bcg_ros.train.config import (ConfigError, TrainConfig, config_diff, config_to_dict,
                                  with_defaults)

CHECKPOINT = 'checkpoint.npz'
RESUMABLE_CHANGES = ('run.iterations', 'run.max_minutes', 'run.progress_bar', 'run.evaluate',
                     'run.export', 'run.tensorboard', 'run.eval_runs', 'run.checkpoint_every',
                     'run.curves_every', 'run.keep_checkpoints', 'g1.bcg.max_bundled',
                     'g1.base_velocity_noise', 'g1.base_velocity_bias',
                     'g1.base_velocity_errors', 'g1.hold_end',
                     'g1.dr.push_prob', 'g1.dr.push_velocity', 'g1.dr.latency_prob',
                     'g1.dr.latency_max', 'g1.sim.terrain',
                     'g1.sim.whole_body', 'g1.adaptive_start', 'g1.adaptive_bin',
                     'g1.adaptive_kernel', 'g1.adaptive_decay', 'g1.imitation.root_pos_scale',
                     'g1.imitation.key_weight', 'g1.imitation.key_scale', 'shac.actor_lr',
                     'shac.critic_lr', 'shac.lr_end')
"""Fields a resumed run may change: how long it runs (and the learning rates, which decay
linearly from their initial values over ``run.iterations``: a run taken on over a longer
length restarts at a higher rate unless they are lowered), how it reports, where BCG's branch
work runs (``g1.bcg.max_bundled`` changes the gradient only for a bundle dropped for want of
a slot, which the history counts), how noisy the observed base velocity is (a policy
taken on with more noise, or with the estimator's recorded errors, to stand them, keeps its
network and state), how long an episode runs on at the clip's end, how often and how hard
the envs are pushed (a policy taken on with harder pushes, to recover from a stride off its
clip), how late its actions reach the motors (taken on to stand a robot's latency),
the ground and what collides with it (a policy taken on from flat ground to a terrain, with
whole-body contacts: its observations and actions are the same), where episodes start
(``g1.adaptive_*``: the failure counts start afresh, as the env state does), and how the
root's and key points' positions are rewarded (a policy taken on to drift less from its
clip)."""


def compiling_message() -> str:
    """Return what the log says while the training step compiles."""
    import jax

    cache = jax.config.jax_compilation_cache_dir
    if not cache:
        return 'compiling the training step (no persistent compilation cache)...'
    home = str(pathlib.Path.home())
    shown = '~' + cache[len(home):] if cache.startswith(home + '/') else cache
    return f'compiling the training step (first run; cached in {shown} afterwards)...'


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


@contextlib.contextmanager
def _signals_held():
    """Hold SIGINT and SIGTERM in the main thread until the block ends (a no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def split_devices(devices: Sequence, num_envs: int, requested: int = 0,
                  env_name: str = 'env') -> list:
    """
    The first devices of ``devices`` that ``num_envs`` envs are split over (``run.devices``).

    ``requested`` 0: as many as there are, or the most that divide the envs evenly (15
    envs on 2 devices run on one); otherwise exactly that many, or a ConfigError.
    """
    n = requested or max(k for k in range(1, len(devices) + 1) if num_envs % k == 0)
    if n > len(devices):
        raise ConfigError(f'run.devices: {n} requested, JAX has {len(devices)} '
                          f'({devices[0].platform})')
    if num_envs % n:
        raise ConfigError(f'{env_name}.num_envs: {num_envs} envs do not split over {n} devices')
    return list(devices[:n])


class Trainer:
    """
    One training run in one output folder: step, log, checkpoint, export.

    NOT pure: it times, writes files and holds the current state. The state it
    holds is replaced as a whole after each iteration under a lock, so another
    thread (the trainer node's services) may save or export at any time.
    """

    def __init__(self, cfg: TrainConfig, out_dir: Union[str, pathlib.Path], resume: bool = True,
                 log: Callable[[str], None] = print, command: Optional[List[str]] = None):
        """
        Build env and learner, and resume from ``out_dir``'s checkpoint when it has one.

        ``command``: the command line that started the run, recorded in the exported
        policy's metadata beside the configuration, so the policy can be retrained (a
        resumed run keeps the command of its checkpoint).
        """
        import jax

        self.cfg = cfg
        self.out = pathlib.Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.log = log
        self.command = list(command) if command else None
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
        self.compile_s: Optional[float] = None
        ck = self.out / CHECKPOINT
        if resume and ck.is_file():
            meta = checkpoint.read_meta(ck)
            written = with_defaults(meta.get('config', {}), config_to_dict(TrainConfig()))
            diff = [d for d in config_diff(written, config_to_dict(cfg))
                    if d not in RESUMABLE_CHANGES]
            if diff:
                raise ConfigError(f'{ck}: the checkpoint was written with another '
                                  f'configuration (differs in {", ".join(diff)}); use another '
                                  'output folder or --fresh')
            # The envs' state is transient: a checkpoint of a version whose episodes
            # carry another layout resumes its learner with fresh episodes.
            state, meta = checkpoint.load(ck, state, transient=('env_state',))
            if meta['fresh']:
                log(f'{ck}: the environments\' state has another layout in this version; '
                    'their episodes start afresh')
            key = np.asarray(meta['key'], np.uint32)
            self.history = meta.get('history', [])
            self.wall_before = float(meta.get('wall_s', 0.0))
            # The command that started the run stays the one recorded, across resumes.
            self.command = meta.get('command') or self.command
            log(f'resumed from {ck} at iteration {meta["iteration"]}')
        # history.jsonl restarts from what the checkpoint knows: iterations run after the
        # last checkpoint of a killed run are run again and must not appear twice.
        report.write_history(self.out / report.HISTORY, self.history)
        self.state_shardings = self._shardings(state)
        self.state = jax.device_put(state, self.state_shardings)
        self.key = jax.device_put(key, self._replicated)
        # The run's length is an argument of the step, not a constant in it: a run taken
        # on to more iterations, or another preset's length, reuses the cached executable.
        self._total = jax.device_put(np.int32(cfg.run.iterations), self._replicated)
        self._iterate = jax.jit(self.algo.make_iterate(self.algo_cfg, cfg.add, self.env),
                                in_shardings=(self.state_shardings, self._replicated,
                                              self._replicated),
                                out_shardings=(self.state_shardings, self._replicated))
        self.t_start = time.time()
        self.writer = None
        if cfg.run.tensorboard:
            from tensorboardX import SummaryWriter
            self.writer = SummaryWriter(str(self.out / 'tb'))

    def _devices(self):
        """Return the local devices the envs are sharded over."""
        import jax

        return split_devices(jax.local_devices(), self.env.num_envs, self.cfg.run.devices,
                             self.cfg.run.env)

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

    def compile(self, log: Optional[Callable[[str], None]] = None) -> float:
        """
        Compile the training step for the current state, once; return the seconds it took.

        The first run on a machine compiles with XLA for minutes (the G1); later runs
        load the executable from the persistent cache (:mod:`bcg_ros.jax_cache`). The
        message before and the time after go to ``log`` (default: the Trainer's);
        :meth:`step` compiles on its first call if this was not called.
        """
        if self.compile_s is not None:
            return self.compile_s
        import jax

        log = log or self.log
        log(compiling_message())
        t0 = time.perf_counter()
        # The same arguments as step() passes: jit's call reuses this executable.
        self._iterate.lower(self.state, jax.random.split(self.key)[1], self._total).compile()
        self.compile_s = time.perf_counter() - t0
        log(f'compiled in {self.compile_s:.1f} s')
        return self.compile_s

    def step(self) -> Dict[str, float]:
        """Run one iteration; record and log its metrics; return them."""
        import jax

        self.compile()
        if self.iteration == 0 and 0 in self.kept_iterations():
            self.save_checkpoint(self.out / 'checkpoint_0.npz')
        key, k = jax.random.split(self.key)
        state, metrics = self._iterate(self.state, k, self._total)
        metrics = {name: float(v) for name, v in jax.device_get(metrics).items()}
        # The state and its history line move together: a Ctrl-C or SIGTERM arriving in
        # between is held until both are written, so a checkpoint never has one without
        # the other.
        with _signals_held(), self.lock:
            self.state, self.key = state, key
            it = self.iteration
            metrics.update(iteration=it, samples=it * self.samples_per_iteration,
                           wall_s=self.wall_s)
            self.history.append(metrics)
            report.append_history(self.out / report.HISTORY, metrics)
        if self.writer is not None:
            for name, v in metrics.items():
                if name != 'iteration' and math.isfinite(v):
                    self.writer.add_scalar(f'train/{name}', v, it)
        if it % self.cfg.run.checkpoint_every == 0:
            self.save_checkpoint()
        if it in self.kept_iterations():
            self.save_checkpoint(self.out / f'checkpoint_{it}.npz')
        if it % self.cfg.run.curves_every == 0:
            self.write_curves()
        return metrics

    def kept_iterations(self) -> Tuple[int, ...]:
        """The iterations whose checkpoint is kept (RunConfig.keep_checkpoints)."""
        n = self.cfg.run.iterations
        return tuple(sorted({int(round(f * n)) for f in self.cfg.run.keep_checkpoints}))

    def save_checkpoint(self, path: Optional[pathlib.Path] = None) -> pathlib.Path:
        """Write the current state to ``path`` (checkpoint.npz) atomically; return it."""
        with self.lock:
            state, key, history = self.state, self.key, list(self.history)
        meta = {'iteration': int(state.iteration), 'key': np.asarray(key).tolist(),
                'config': config_to_dict(self.cfg), 'history': history, 'wall_s': self.wall_s,
                'samples': int(state.iteration) * self.samples_per_iteration,
                'command': self.command}
        return checkpoint.save(path or self.out / CHECKPOINT, state, meta)

    def train_penetration_mm(self) -> float:
        """Return the mean foot penetration of the training simulator over the last iterations."""
        return report.train_penetration_mm(self.history)

    def export(self, path: Optional[Union[str, pathlib.Path]] = None) -> pathlib.Path:
        """Write the current deterministic actor as ONNX (policy.onnx by default)."""
        from bcg_ros.train.export import export_policy

        with self.lock:
            actor, norm = self.algo.policy(self.state)
        return export_policy(path or self.out / 'policy.onnx', actor, norm,
                             self.env.contract(), self.algo_cfg.obs_clip,
                             self.train_penetration_mm(),
                             {'bcg_ros.algorithm': self.cfg.run.algo,
                              'bcg_ros.iteration': str(self.iteration),
                              'bcg_ros.env': self.cfg.run.env,
                              'bcg_ros.samples': str(self.iteration * self.samples_per_iteration),
                              ct.CONTACT_K_KEY: repr(float(self.cfg.g1.sim.contact.k)),
                              ct.TRAIN_CONFIG_KEY: json.dumps(config_to_dict(self.cfg),
                                                              sort_keys=True),
                              ct.TRAIN_COMMAND_KEY: json.dumps(self.command or [])})

    def write_curves(self) -> Optional[pathlib.Path]:
        """Write curves.png: reward and E_track against iterations, samples and wall-clock."""
        if not self.history:
            return None
        return report.write_curves(self.history, self.out / 'curves.png',
                                   f'{self.cfg.run.algo} on {self.cfg.run.env}')

    def summary(self) -> Dict:
        """Return the run's summary (written to summary.json)."""
        return {'algo': self.cfg.run.algo, 'env': self.cfg.run.env,
                'iterations': self.iteration,
                'samples': self.iteration * self.samples_per_iteration,
                'wall_s': self.wall_s, 'devices': len(self.mesh_devices),
                **report.history_summary(self.history),
                'compile_s': self.compile_s,
                'config': config_to_dict(self.cfg)}

    def run(self, should_stop: Callable[[], bool] = lambda: False,
            on_iteration: Optional[Callable[[Dict[str, float]], None]] = None) -> bool:
        """
        Train until ``run.iterations``, ``run.max_minutes`` or ``should_stop()``.

        Return whether it finished (all iterations, or the time budget spent). A
        KeyboardInterrupt saves a checkpoint before it propagates.
        """
        total = self.cfg.run.iterations
        bar = None
        if self.cfg.run.progress_bar:
            from tqdm import tqdm
            bar = tqdm(total=total, initial=min(self.iteration, total), unit='it',
                       dynamic_ncols=True)
        try:
            if self.iteration < total and not should_stop() and self.compile_s is None:
                self._compile_with_bar(bar)
            while self.iteration < total and not should_stop() and not self.out_of_time():
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
        if self.out_of_time() and self.iteration < total:
            self.log(f'run.max_minutes ({self.cfg.run.max_minutes:g}) reached at iteration '
                     f'{self.iteration} of {total}')
        self.save_checkpoint()
        self.write_curves()
        return self.iteration >= total or self.out_of_time()

    def out_of_time(self) -> bool:
        """Whether the run's wall-clock has reached ``run.max_minutes`` (never when 0)."""
        budget = self.cfg.run.max_minutes
        return budget > 0 and self.wall_s >= 60.0 * budget

    def _compile_with_bar(self, bar: Optional[Any]) -> None:
        """Compile with 'compiling' on the progress bar, the log printed around it."""
        if bar is None:
            self.compile()
            return

        def log_over_bar(msg: str) -> None:
            with bar.external_write_mode():
                self.log(msg)

        bar.set_description_str('compiling')
        try:
            self.compile(log_over_bar)
        finally:
            bar.set_description_str('')

    def finish(self) -> Dict:
        """Export, evaluate (G1, when the evaluator exists) and write summary.json."""
        summary = self.summary()
        if self.cfg.run.export:
            summary['policy'] = str(self.export())
            if self.cfg.run.evaluate and self.cfg.run.env == 'g1':
                summary['evaluation'] = self._evaluate(pathlib.Path(summary['policy']))
        report.write_summary(self.out / report.SUMMARY, summary)
        if self.writer is not None:
            self.writer.close()
        return summary

    def _evaluate(self, policy: pathlib.Path) -> Optional[Dict]:
        """Run the MuJoCo evaluator on ``policy``; None (and a note) when it is absent."""
        try:
            from bcg_ros.eval import evaluator
            from bcg_ros.eval import report as eval_report
        except ImportError as exc:
            self.log(f'no evaluation: bcg_ros.eval is not available ({exc})')
            return None
        # MuJoCo and the training simulator side by side: a learning or a transfer problem.
        cfg = evaluator.EvalConfig(policy=str(policy), motion=self.cfg.g1.motion,
                                   runs=self.cfg.run.eval_runs, sims=('mujoco', 'jax'))
        ev = evaluator.evaluate(cfg)
        eval_report.write(ev, self.out / 'eval')
        return ev.summary
