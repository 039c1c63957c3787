"""
``bcg-eval``: judge a policy in MuJoCo, or regenerate the paper's Tables 1 and 2.

One policy (without POLICY.onnx: the package's shipped policy of --motion, run by
default; bcg_ros/policies)::

    bcg-eval [POLICY.onnx] [--deploy-yaml deploy.yaml] [--model MJCF]
             [--motion NAME_OR_PATH | --command VX VY WZ] [--runs 5] [--out DIR]
             [--video] [--no-filmstrip]

The report folder gets result.json, report.md, the plots and a
filmstrip_seed<N>.png of each run (run_seed<N>.mp4 with --video); the tables
film each policy's first run only.

The tables read trained policies from a directory laid out as::

    RUNS_DIR/<motion>/<method>_k<k>/policy.onnx    e.g. runs/cpu/jump/shac_bcg_k300/policy.onnx
    RUNS_DIR/<motion>/ppo/policy.onnx              the PPO baseline of Table 2

(one RUNS_DIR per training preset, e.g. runs/cpu here and runs/full where a GPU
trained them); each policy is evaluated on the motion named by its folder::

    bcg-eval table1 --runs-dir runs/cpu [--motions run jump fight dance] [--k 50 100 300]
                    [--method shac_bcg_s0 shac_bcg_s1 shac_bcg_s2]   (seeds pooled per cell)
    bcg-eval table2 --runs-dir runs/cpu [--methods shac_bcg_k300 ppo]
"""

import argparse
import json
import pathlib
import sys
from typing import List, Optional

import numpy as np

from bcg_ros import motion as motion_mod
from bcg_ros import policies
from bcg_ros.contract import ContractError
from bcg_ros.eval import report
from bcg_ros.eval.evaluator import EvalConfig, evaluate
from bcg_ros.eval.render import RenderConfig
from bcg_ros.eval.rollout import Baseline, RolloutConfig
from bcg_ros.robot.model import ModelError

MOTIONS = ('run', 'jump', 'fight', 'dance')
KS = (50, 100, 300)


def _common(p: argparse.ArgumentParser):
    p.add_argument('--model', default='', help='G1 MJCF to simulate (default: the project\'s)')
    p.add_argument('--physics-params', default='',
                   help='how the simulated robot differs from its model file: a PhysicsParams '
                        'YAML (bcg_ros.robot.physics) or seed:N (default: the file\'s robot)')
    p.add_argument('--runs', type=int, default=5, help='rollouts per policy (default 5)')
    p.add_argument('--seed', type=int, default=0, help='run i uses seed + i')
    p.add_argument('--duration', type=float, default=0.0,
                   help='simulated seconds per run (default: the motion, or 10 s)')
    p.add_argument('--hold', type=float, default=0.0,
                   help='seconds a run goes on past the end of its clip, the reference held '
                        'at its last frame as policy_node holds it (default 0)')
    p.add_argument('--push-interval', type=float, default=0.0,
                   help='seconds between random pushes (default: none)')
    p.add_argument('--push-velocity', type=float, default=0.5, help='push size [m/s]')
    p.add_argument('--stop-on-fall', action='store_true', help='end a run when it falls')
    p.add_argument('--sensor-noise', type=float, default=0.0,
                   help="noise on the encoders, their speeds, gyro and accelerometer the "
                        "policy and its estimator read, in units of a G1's (default 0: exact)")
    p.add_argument('--sim-dt', type=float, default=RolloutConfig.sim_dt,
                   help="physics step [s] (default: the training simulator's 0.005 on flat "
                        "ground, 0.001 on a --terrain; 0: the model file's own)")
    p.add_argument('--sim', choices=('mujoco', 'both'), default='mujoco',
                   help="'both': also roll the policy out in the training simulator (JAX) over "
                        'the whole clip from frame 0, randomisation off, side by side in the '
                        'report (compiles the G1 step once: minutes on a CPU)')
    p.add_argument('--baselines', nargs='*', default=list(Baseline.NAMES),
                   choices=list(Baseline.NAMES),
                   help='open-loop baselines judged beside the policy on the same model and '
                        'seeds (default: stand replay; give none to skip)')
    p.add_argument('--no-plots', action='store_true', help='skip the PNG plots')
    p.add_argument('--no-filmstrip', action='store_true',
                   help='skip the filmstrip PNG of each run (robot, reference ghost, contacts)')
    p.add_argument('--video', action='store_true',
                   help='also a video of each run (MP4 with imageio-ffmpeg, else GIF)')
    p.add_argument('--quiet', action='store_true', help='no progress bar')
    p.add_argument('--terrain', default='',
                   help='ground: flat, slope:DEG, steps:HEIGHT, rough:AMPLITUDE or a terrain '
                        '.npz (default: the one the policy was trained on, else flat)')


def _rollout(args) -> RolloutConfig:
    return RolloutConfig(duration=args.duration, hold=args.hold, push_interval=args.push_interval,
                         push_velocity=args.push_velocity, stop_on_fall=args.stop_on_fall,
                         sim_dt=args.sim_dt, seed=args.seed, sensor_noise=args.sensor_noise)


def _render(args, runs: int = 0) -> RenderConfig:
    """Pictures of the first ``runs`` runs (0: all)."""
    return RenderConfig(filmstrip=not args.no_filmstrip, video=args.video, runs=runs)


def _sims(args) -> tuple:
    return ('mujoco', 'jax') if args.sim == 'both' else ('mujoco',)


def _one(argv: List[str]) -> int:
    p = argparse.ArgumentParser(prog='bcg-eval', description=__doc__.splitlines()[0],
                                epilog='Subcommands: bcg-eval table1 --help, '
                                       'bcg-eval table2 --help')
    p.add_argument('policy', nargs='?', default='',
                   help='policy ONNX file (default: the shipped policy of --motion, or of '
                        f'{policies.DEFAULT_MOTION!r})')
    p.add_argument('--deploy-yaml', default='',
                   help='IsaacLab/unitree_rl_lab deploy.yaml (default: the ONNX metadata, '
                        'or deploy.yaml / ../params/deploy.yaml beside the policy)')
    what = p.add_mutually_exclusive_group()
    what.add_argument('--motion', default='', help='reference motion: built-in name or file')
    what.add_argument('--command', type=float, nargs=3, metavar=('VX', 'VY', 'WZ'),
                      default=(0.0, 0.0, 0.0), help='velocity command for velocity policies')
    p.add_argument('--motion-joint-order', choices=motion_mod.JOINT_ORDERS, default=None,
                   help='column order of a motion file that names no joints (BeyondMimic '
                        'npz: isaaclab)')
    p.add_argument('--out', default='', help='report folder (default: eval/<policy name>)')
    p.add_argument('--velocity-errors', default='', metavar='FILE.npz',
                   help="also write the state estimator's base-velocity error at every clip "
                        'frame of each run that stays up (training replays it: '
                        'g1.base_velocity_errors)')
    _common(p)
    args = p.parse_args(argv)
    if not args.policy:
        args.motion = args.motion or policies.DEFAULT_MOTION
        args.policy = str(policies.path(args.motion))
    cfg = EvalConfig(policy=args.policy, deploy_yaml=args.deploy_yaml, model=args.model,
                     motion=args.motion, motion_joint_order=args.motion_joint_order or '',
                     command=tuple(args.command), runs=args.runs,
                     rollout=_rollout(args), baselines=tuple(args.baselines),
                     sims=_sims(args), render=_render(args), terrain=args.terrain,
                     physics_params=args.physics_params)
    ev = evaluate(cfg, progress=not args.quiet)
    out = pathlib.Path(args.out or pathlib.Path('eval') / pathlib.Path(args.policy).stem)
    result = report.write(ev, out, plots=not args.no_plots)
    print(report.markdown(result))
    print(f'wrote {out}/result.json, {out}/report.md' + ('' if args.no_plots else ', plots'))
    print('summary: ' + json.dumps(result['summary']))
    if args.velocity_errors:
        _write_velocity_errors(ev, args.velocity_errors)
    return 0


def _write_velocity_errors(ev, path: str) -> None:
    """Write the estimator's velocity errors of ``ev``'s runs that ran the whole clip."""
    from bcg_ros import velocity_errors

    if ev.motion is None or not ev.policy.contract.uses_base_velocity:
        raise ValueError('--velocity-errors: needs a motion and a policy that observes its '
                         'base velocity')
    kept = [r for r, m in zip(ev.runs, ev.per_run) if not m['fell']]   # a divergence falls
    errors = velocity_errors.from_runs(kept, ev.motion.num_frames)
    if not len(errors):
        raise ValueError(f'--velocity-errors: no run ran the whole clip; {path} not written')
    velocity_errors.save(path, errors, ev.motion.name, ev.motion.fps)
    rms = np.sqrt(np.mean(errors ** 2, axis=(0, 1)))
    print(f'wrote {path}: {len(errors)} of {len(ev.runs)} runs, RMS error (x, y, z) '
          f'{rms[0]:.3f} {rms[1]:.3f} {rms[2]:.3f} m/s')


def _table(argv: List[str], which: str) -> int:
    p = argparse.ArgumentParser(prog=f'bcg-eval {which}',
                                description=('Table 1: falls and delta-d against k' if
                                             which == 'table1' else
                                             'Table 2: E_track, SHAC+BCG against PPO'))
    p.add_argument('--runs-dir', default='runs',
                   help='RUNS_DIR/<motion>/<method>_k<k>/policy.onnx (default: runs)')
    p.add_argument('--motions', nargs='+', default=list(MOTIONS))
    if which == 'table1':
        p.add_argument('--k', type=int, nargs='+', default=list(KS))
        p.add_argument('--method', nargs='+', default=['shac_bcg'],
                       help='folder prefix before _k<k>; several (one per training seed, '
                            'e.g. shac_bcg_s0 shac_bcg_s1) pool their runs in one cell')
    else:
        p.add_argument('--methods', nargs='+', default=['shac_bcg_k300', 'ppo'],
                       help='policy folders to compare')
    p.add_argument('--out', default='', help='report folder (default: RUNS_DIR/<table>)')
    _common(p)
    args = p.parse_args(argv)
    root = pathlib.Path(args.runs_dir)
    cols = ([(k, f'{m}_k{k}') for k in args.k for m in args.method] if which == 'table1'
            else [(m, m) for m in args.methods])
    out = pathlib.Path(args.out or root / which)
    cells, missing, all_results, training = {}, [], {}, {}
    for motion in args.motions:
        for key, folder in cols:
            path = root / motion / folder / 'policy.onnx'
            if not path.is_file():
                missing.append(str(path))
                cells.setdefault((motion, key), None)
                continue
            cfg = EvalConfig(policy=str(path), model=args.model, motion=motion,
                             runs=args.runs, rollout=_rollout(args),
                             baselines=tuple(args.baselines), sims=_sims(args),
                             render=_render(args, runs=1),
                             physics_params=args.physics_params)
            ev = evaluate(cfg, progress=not args.quiet)
            result = report.write(ev, out / motion / folder, plots=not args.no_plots)
            cells[(motion, key)] = report.pooled(cells.get((motion, key)), result['summary'])
            all_results[f'{motion}/{folder}'] = result['summary']
            trained = report.training_budget(path.parent / 'summary.json')
            if trained is not None:
                training[(motion, key)] = trained
                all_results[f'{motion}/{folder}']['training'] = trained
    md = (report.table1_markdown(cells, args.motions, args.k) if which == 'table1'
          else report.table2_markdown(cells, args.motions, args.methods, training))
    note = report.missing_note(missing)
    if note:
        md += '\n' + note + '\n'
    out.mkdir(parents=True, exist_ok=True)
    (out / f'{which}.md').write_text(md)
    (out / f'{which}.json').write_text(json.dumps(all_results, indent=2))
    print(md)
    print(f'wrote {out / (which + ".md")}')
    return 0 if len(missing) < len(args.motions) * len(cols) else 1


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``bcg-eval``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in ('table1', 'table2'):
            return _table(argv[1:], argv[0])
        return _one(argv)
    except (ContractError, ModelError, ValueError, policies.PolicyNotShipped) as exc:
        print(f'bcg-eval: error: {exc}', file=sys.stderr)
        return 2


if __name__ == '__main__':
    sys.exit(main())
