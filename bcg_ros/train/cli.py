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

Configuration (:mod:`bcg_ros.train.config`): a preset (``--preset cpu`` or
``paper``; ``toy`` is the test environment), then a YAML file (``--config
run.yaml``, nested like the config dataclasses, or dotted keys), then ``--set
section.field=value`` overrides, each checked against the field's type.

The first iteration of a run compiles the training step with XLA (minutes for
the G1 on a CPU); the log says so before and how long it took after, and the
persistent cache (:mod:`bcg_ros.jax_cache`) makes later runs start in seconds.
"""

import argparse
import json
import pathlib
import signal
import sys
import threading
from typing import Optional, Sequence

from bcg_ros.train import report
from bcg_ros.train.config import (ConfigError, PRESETS, config_to_dict, make_config,
                                  parse_set)
from bcg_ros.train.trainer import CHECKPOINT, Trainer


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
    p.add_argument('--export-only', action='store_true',
                   help='export (and evaluate) the checkpoint in --out as it stands, without '
                        'training; the configuration must be the one it was trained with')
    p.add_argument('--print-config', action='store_true',
                   help='print the resolved configuration as JSON and exit')
    p.add_argument('--compare', nargs='+', metavar='RUN_DIR', default=None,
                   help='print the env samples each finished run needed to reach each '
                        'E_track level, side by side, and exit')
    return p


def _error(exc) -> int:
    """Print ``bcg-train: error: ...`` to stderr; the exit status of a usage error."""
    print(f'bcg-train: error: {exc}', file=sys.stderr)
    return 2


def _stop_on_signals(stop: threading.Event) -> dict:
    """
    Make Ctrl-C and SIGTERM set ``stop``: the run ends after its iteration and saves.

    A shell starts background jobs (``bcg-train ... &``) with SIGINT ignored, and
    ``kill`` sends SIGTERM: either way the run writes its checkpoint before it ends.
    The handler only sets the event, because an exception raised from a signal
    handler lands wherever Python is, also in a garbage-collection callback
    (JAX registers one), where it is printed and dropped and the run goes on. A
    second signal raises KeyboardInterrupt, for a compile that should not finish.
    Returns the handlers it replaced.
    """
    def interrupt(signum, frame):
        if stop.is_set():
            raise KeyboardInterrupt(signal.Signals(signum).name)
        stop.set()

    return {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Train, then export and evaluate, as the command line asks."""
    args = build_parser().parse_args(argv)
    if args.compare:
        try:
            print(report.compare_table(args.compare))
        except ConfigError as exc:
            return _error(exc)
        return 0
    try:
        overrides = parse_set(args.overrides)
        if args.motion is not None:
            overrides['g1.motion'] = args.motion
        cfg = make_config(args.preset, args.config, overrides)
    except ConfigError as exc:
        return _error(exc)
    if args.print_config:
        print(json.dumps(config_to_dict(cfg), indent=2))
        return 0
    from bcg_ros.jax_cache import cpu_cores, enable_compilation_cache
    enable_compilation_cache(host_devices=cpu_cores())
    if args.export_only and not (pathlib.Path(args.out) / CHECKPOINT).is_file():
        return _error(f'{pathlib.Path(args.out) / CHECKPOINT}: no checkpoint to export')
    try:
        trainer = Trainer(cfg, args.out, resume=not args.fresh,
                          command=['bcg-train'] + list(sys.argv[1:] if argv is None else argv))
    except ValueError as exc:   # ConfigError, or a motion file that does not load
        return _error(exc)
    if not args.export_only:
        stop = threading.Event()
        main_thread = threading.current_thread() is threading.main_thread()
        replaced = _stop_on_signals(stop) if main_thread else {}
        try:
            trainer.run(should_stop=stop.is_set)
        except KeyboardInterrupt:
            return 130
        finally:
            for signum, handler in replaced.items():
                signal.signal(signum, handler)
        if stop.is_set():
            print(f'interrupted: checkpoint at iteration {trainer.iteration} -> '
                  f'{trainer.out / CHECKPOINT}')
            return 130
    summary = trainer.finish()
    last = summary['last_10_iterations']
    print(f'iterations {summary["iterations"]}, samples {summary["samples"]}, '
          f'wall {summary["wall_s"]:.0f} s, reward {last.get("reward", float("nan")):.3f}, '
          f'E_track {last.get("e_track", float("nan")):.2f} cm')
    written = ([summary['policy']] if 'policy' in summary else []) + [
        str(trainer.out / report.SUMMARY)]
    print('wrote ' + ' and '.join(written))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
