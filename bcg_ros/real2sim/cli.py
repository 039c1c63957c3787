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

``calibrate`` (also ``bcg-calibrate``) fits the differentiable simulator's
physical parameters to logs (:mod:`bcg_ros.real2sim.calibrate`)::

    bcg-calibrate LOG... --out params.yaml [--iterations 300] [--window 0.1] [--quick]

``params.yaml`` is a PhysicsParams file (g1_sim_node's ``physics_params``,
``bcg-eval --physics-params``); ``params.std.yaml`` beside it holds each
parameter's standard deviation and which the logs identify.
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


QUICK_ITERATIONS = 5
"""Adam steps with --quick."""


def _calibrate(argv: List[str], prog: str = 'bcg-real2sim calibrate') -> int:
    from bcg_ros.jax_cache import enable_compilation_cache
    from bcg_ros.real2sim import calibrate
    from bcg_ros.robot import physics

    defaults = calibrate.CalibrationConfig()
    p = argparse.ArgumentParser(prog=prog, description='Fit the simulator\'s physical '
                                'parameters to robot logs (rosbag2 folders).')
    p.add_argument('logs', nargs='+', help='rosbag2 folders with LowState, LowCmd, odometry')
    p.add_argument('--out', required=True, help='PhysicsParams YAML to write')
    p.add_argument('--iterations', type=int, default=defaults.iterations,
                   help=f'Adam steps (default {defaults.iterations})')
    p.add_argument('--window', type=float, default=defaults.window,
                   help=f'shooting window [s] (default {defaults.window:g})')
    p.add_argument('--batch', type=int, default=defaults.batch,
                   help=f'windows per step (default {defaults.batch})')
    p.add_argument('--model', default='', help='G1 MJCF (default: the project\'s)')
    p.add_argument('--quick', action='store_true',
                   help=f'{QUICK_ITERATIONS} steps (for tests)')
    args = p.parse_args(argv)
    cfg = dataclasses.replace(defaults, window=args.window, batch=args.batch,
                              iterations=QUICK_ITERATIONS if args.quick else args.iterations)
    enable_compilation_cache()
    robot_logs = [logs.read_log(path, require_odom=True) for path in args.logs]
    result = calibrate.calibrate(robot_logs, cfg, args.model)
    out = pathlib.Path(args.out)
    header = (f'bcg-calibrate: fitted to {", ".join(args.logs)}\n'
              f'{result.windows} windows of {cfg.window:g} s, {cfg.iterations} steps; RMS '
              f'joint error {result.error_before["q_rad"]:.4f} rad with the nominal model, '
              f'{result.error_after["q_rad"]:.4f} rad with these\n'
              f'standard deviations: {calibrate.std_path(out).name}')
    physics.save(result.params, out, header)
    calibrate.save_std(result, calibrate.std_path(out))
    ident = calibrate.identified(result)
    print(f'wrote {out} and {calibrate.std_path(out)} ({result.seconds:.0f} s): latency '
          f'{result.params.latency * 1e3:.0f} ms; RMS joint {result.error_before["q_rad"]:.4f}'
          f' -> {result.error_after["q_rad"]:.4f} rad, pelvis '
          f'{result.error_before["pos_m"] * 100:.2f} -> {result.error_after["pos_m"] * 100:.2f}'
          f' cm; identified: ' + ', '.join(f'{k} {len(v)}' for k, v in ident.items()))
    return 0


def calibrate_main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``bcg-calibrate`` (``bcg-real2sim calibrate``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _calibrate(argv, 'bcg-calibrate')
    except (ValueError, OSError) as exc:
        print(f'bcg-calibrate: error: {exc}', file=sys.stderr)
        return 2


COMMANDS = {'make-logs': _make_logs, 'calibrate': _calibrate}


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
