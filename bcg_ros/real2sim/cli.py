"""
``bcg-real2sim``: the real-to-sim tools.

``make-logs`` makes "real" robot logs with a hidden truth
(:mod:`bcg_ros.real2sim.groundtruth`)::

    bcg-real2sim make-logs --seed S --out DIR [--quick] [--duration 10]
                           [--scenarios stand push policy drop sweep] [--storage mcap]

``DIR/<scenario>/`` is a rosbag2 per scenario (LowState, LowCmd, odometry),
``DIR/hidden/truth.yaml`` the robot's physical parameters and
``DIR/hidden/scenarios.yaml`` each log's initial state, band and pushes;
calibration never reads ``DIR/hidden``.
"""

import argparse
import dataclasses
import pathlib
import sys
import time
from typing import List, Optional

from bcg_ros.real2sim import groundtruth, logs

QUICK_DURATION = 1.0
"""Seconds per log with --quick."""


def _make_logs(argv: List[str]) -> int:
    defaults = groundtruth.GeneratorConfig()
    p = argparse.ArgumentParser(prog='bcg-real2sim make-logs',
                                description='Robot logs of a G1 with hidden physical '
                                            'parameters drawn by a seed (the truth apart, in '
                                            'DIR/hidden).')
    p.add_argument('--seed', type=int, default=defaults.seed,
                   help='draws the hidden robot, the pushes and the sensor noise (default 0)')
    p.add_argument('--out', required=True, help='folder for the logs (new, or without them)')
    p.add_argument('--quick', action='store_true',
                   help=f'{QUICK_DURATION:g} s per log instead of --duration (for tests)')
    p.add_argument('--duration', type=float, default=defaults.duration,
                   help=f'seconds per log (default {defaults.duration:g})')
    p.add_argument('--scenarios', nargs='+', default=list(defaults.scenarios),
                   choices=groundtruth.SCENARIOS, help='logs to make (default: all)')
    p.add_argument('--policy', default=defaults.policy,
                   help=f'shipped policy of the policy log (default {defaults.policy})')
    p.add_argument('--storage', choices=logs.STORAGES, default=defaults.storage,
                   help=f'bag storage (default {defaults.storage})')
    p.add_argument('--model', default='', help='G1 MJCF (default: the project\'s)')
    p.add_argument('--no-noise', action='store_true', help='exact sensors')
    args = p.parse_args(argv)
    cfg = dataclasses.replace(
        defaults, seed=args.seed, duration=QUICK_DURATION if args.quick else args.duration,
        scenarios=tuple(args.scenarios), policy=args.policy, storage=args.storage,
        model_path=args.model, noise=None if args.no_noise else defaults.noise)
    out = pathlib.Path(args.out)
    start = time.monotonic()

    def told(name: str, log: logs.RobotLog) -> None:
        n_cmd = len(log.lowcmd.t) if log.lowcmd is not None else 0
        print(f'{out / name}: {log.lowstate.t[-1]:.1f} s, {len(log.lowstate.t)} LowState, '
              f'{n_cmd} LowCmd, {len(log.odom.t)} odometry '
              f'({time.monotonic() - start:.1f} s)', flush=True)

    made = groundtruth.make_logs(out, cfg, told)
    size = sum(f.stat().st_size for d in made.logs for f in d.iterdir())
    print(f'wrote {len(made.logs)} bags ({size / 2**20:.1f} MiB, {cfg.storage}) in '
          f'{time.monotonic() - start:.1f} s; the truth, which calibration never reads: '
          f'{made.truth}, {made.scenarios}')
    return 0


COMMANDS = {'make-logs': _make_logs}


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``bcg-real2sim``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print(__doc__.strip(), file=sys.stderr)
        print(f'\nbcg-real2sim: give a command: {", ".join(COMMANDS)}', file=sys.stderr)
        return 2
    try:
        return COMMANDS[argv[0]](argv[1:])
    except (ValueError, OSError) as exc:
        # Config, model, parameter and log errors all name their file or field.
        print(f'bcg-real2sim: error: {exc}', file=sys.stderr)
        return 2


if __name__ == '__main__':
    sys.exit(main())
