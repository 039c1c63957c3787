"""
Cold compile of the training step: what the first ``bcg-train`` run waits for.

A fresh Python process with an empty temporary JAX compilation cache builds
the :class:`bcg_ros.train.Trainer` of ``--preset cpu --motion run`` (``--quick``:
the toy preset) and times :meth:`~bcg_ros.train.Trainer.compile`: tracing,
lowering and XLA compilation of the jitted training iteration, the same
function every iteration of the run calls. Later runs load it from the
persistent cache (:mod:`bcg_ros.jax_cache`); this is the time before that.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from typing import Any, Dict, Optional, Sequence

RESULT = 'train_step_compile_s'
REPO = pathlib.Path(__file__).resolve().parents[2]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bcg-bench compile``."""
    parser.add_argument('--preset', default='cpu',
                        help='bcg-train preset whose training step is compiled (--quick: toy)')
    parser.add_argument('--motion', default='run',
                        help='reference motion of the G1 presets (as bcg-train --motion)')
    parser.add_argument('--set', dest='overrides', action='append', default=[],
                        metavar='SECTION.FIELD=VALUE', help='bcg-train override (repeatable)')


def measure(preset: str, motion: Optional[str], overrides: Sequence[str], out_dir: str) -> float:
    """Build the Trainer of this configuration in ``out_dir``; return its step's compile [s]."""
    from bcg_ros import train
    from bcg_ros.jax_cache import cpu_cores, enable_compilation_cache

    items = dict(train.parse_set(overrides), **{'run.progress_bar': False,
                                                'run.tensorboard': False})
    cfg = train.make_config(preset, None, items)
    if motion and cfg.run.env == 'g1':
        cfg = train.apply_overrides(cfg, {'g1.motion': motion})
    enable_compilation_cache(host_devices=cpu_cores())     # as bcg-train
    trainer = train.Trainer(cfg, out_dir, resume=False)
    return trainer.compile()


def run_fresh(preset: str, motion: Optional[str], overrides: Sequence[str] = (),
              timeout: Optional[float] = None) -> Dict[str, Any]:
    """
    Measure in a new process whose JAX cache folder is empty.

    Returns ``{'train_step_compile_s': seconds, 'log': the process's other output lines}``.
    """
    with tempfile.TemporaryDirectory(prefix='bcg_bench_compile_') as tmp:
        env = dict(os.environ, BCG_ROS_CACHE=str(pathlib.Path(tmp) / 'cache'),
                   BCG_ROS_JAX_CACHE='1')
        env['PYTHONPATH'] = os.pathsep.join(p for p in (str(REPO), env.get('PYTHONPATH'))
                                            if p)
        cmd = [sys.executable, '-m', 'bcg_ros.bench.compile', '--child',
               json.dumps({'preset': preset, 'motion': motion, 'overrides': list(overrides),
                           'out_dir': str(pathlib.Path(tmp) / 'run')})]
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, timeout=timeout)
    lines = proc.stdout.splitlines()
    results = [line for line in lines if line.startswith('{')]
    if proc.returncode != 0 or not results:
        raise RuntimeError(f'the compile process failed (exit {proc.returncode}):\n'
                           f'{proc.stdout}')
    return dict(json.loads(results[-1]), log=[line for line in lines if line not in results])


def run(args: argparse.Namespace) -> int:
    """Time one cold compile of the training step; print ``train_step_compile_s: X`` last."""
    preset = 'toy' if args.quick else args.preset
    print(f'compiling the training step of --preset {preset} in a fresh process with an '
          'empty JAX compilation cache ...', flush=True)
    result = run_fresh(preset, args.motion, args.overrides)
    for line in result['log']:
        print(f'  {line}')
    print(f'{RESULT}: {result[RESULT]:.2f}')
    return 0


def _child(spec: str) -> None:
    """Measure as ``spec`` (JSON) asks, printing the result as one JSON line."""
    s = json.loads(spec)
    seconds = measure(s['preset'], s['motion'], s['overrides'], s['out_dir'])
    print(json.dumps({RESULT: seconds}), flush=True)


if __name__ == '__main__':
    if len(sys.argv) == 3 and sys.argv[1] == '--child':
        _child(sys.argv[2])
    else:
        sys.exit('usage: bcg-bench compile [--quick] [--preset P] [--motion M]')
