"""
Sim2sim evaluator speed: simulated seconds per wall second, on one core.

A policy of the trainer's size (MLP [512, 256, 128], the imitation contract)
holds the standing pose on the project's G1 model and, when
../shared/reference/g1_official is present, on Unitree's official model (its
mesh collision), both loaded as the evaluator loads them (whole-body
collision, the PD under implicitfast) at the evaluator's 5 ms step. The figure
is the slower of the two.
"""

import os
import pathlib
import tempfile
import time

from bcg_ros.robot import model as g1_model

OFFICIAL = (pathlib.Path(__file__).resolve().parents[2].parent / 'shared' / 'reference'
            / 'g1_official' / 'scene_29dof.xml')


def add_arguments(parser):
    """Options of ``bcg-bench evaluator``."""
    parser.add_argument('--seconds', type=float, default=20.0,
                        help='simulated seconds per model (--quick: 4)')
    parser.add_argument('--official', default=str(OFFICIAL),
                        help='official G1 scene MJCF (skipped when absent)')


def _one_core():
    """Pin this process to one CPU and keep the math libraries single-threaded."""
    for var in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'OPENBLAS_NUM_THREADS'):
        os.environ[var] = '1'
    if hasattr(os, 'sched_setaffinity'):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})


def run(args) -> int:
    """Time one rollout per model and print ``evaluator_realtime_factor: X`` last."""
    _one_core()
    from bcg_ros import contract as ct
    from bcg_ros.eval import synthetic
    from bcg_ros.runtime.policy import load_policy
    from bcg_ros.eval.rollout import RolloutConfig, run_once

    seconds = 4.0 if args.quick else args.seconds
    models = [('project', None)]
    if pathlib.Path(args.official).is_file():
        models.append(('official', args.official))
    else:
        print(f'official model {args.official} absent: timing the project model only')
    factors = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, path in models:
            g = g1_model.load(path, whole_body=True)   # as the evaluator loads it
            motion = synthetic.held_pose_motion(g, seconds=seconds)
            c = ct.imitation_contract('stand', motion.num_frames)
            pol = load_policy(synthetic.save_policy(pathlib.Path(tmp) / f'{label}.onnx', c,
                                                    hidden=(512, 256, 128), weight_scale=1e-3),
                              threads=1)
            run_once(pol, g, 0, RolloutConfig(duration=0.2), motion)  # warm-up
            t0 = time.perf_counter()
            r = run_once(pol, g, 0, RolloutConfig(), motion)
            wall = time.perf_counter() - t0
            sim = float(r.time[-1])
            factors.append(sim / wall)
            print(f'{label}: {sim:.1f} s simulated in {wall:.2f} s wall, physics step '
                  f'{r.sim_dt * 1e3:.1f} ms, realtime factor {sim / wall:.1f}')
    print(f'evaluator_realtime_factor: {min(factors):.1f}')
    return 0
