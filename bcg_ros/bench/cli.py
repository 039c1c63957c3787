"""
``bcg-bench <name> [--quick]``: run one benchmark; its last line is ``name: value``.

Each benchmark is a module ``bcg_ros.bench.<name>`` (a '-' in the name is '_' in the
module's) with ``add_arguments(parser)`` and ``run(args) -> int``, listed in BENCHMARKS.
"""

import argparse
import importlib
import sys

BENCHMARKS = {
    'variance': 'Gradient variance with and without BCG at k = 50, 100, 300 (Fig. 3).',
    'throughput': 'Forward+backward env-substeps/s: plain, BCG, and MJX with its contacts.',
    'ascent': 'Gradient ascent on a G1 rollout: frozen vs exact implicit-step gradient.',
    'evaluator': 'MuJoCo sim2sim evaluator: simulated seconds per wall second.',
    'executor': 'policy_node /lowstate-to-/lowcmd latency and 500 Hz period error over DDS.',
    'sim2sim': 'A policy over DDS through g1_sim_node and policy_node: stand, off the gantry, '
               'start; falls and e-stops per trial.',
    'estimator': 'state_bridge_node estimator against g1_sim_node ground truth.',
    'compile': 'Cold XLA compile of the training step of bcg-train --preset cpu --motion run.',
    'bcg-cost': 'A SHAC + BCG training iteration over a plain one, same batch and clip.',
    'sensitivity': 'Where the gradient variance comes from: |dL/ds_t| per env-step vs events.',
    'ostrich': 'Implicit hard contact vs penalty and MJX on a box and a step: accuracy against '
               'timestep, trajectory optimisation, speed, gradient memory.',
    'real2sim': 'Calibration against a hidden robot: parameter recovery, held-out trajectory '
                'error, data efficiency.',
    'sdf': 'Whole-body G1 contacts from smooth SDFs: contacts/s against MJX, Hessian error.',
    'gnn': 'Few-shot real-to-sim on a box scene: calibration, a learned GNN simulator, '
           'held-out error and control through it.',
}


def available():
    """Return the benchmarks whose module is installed, name -> module."""
    found = {}
    for name in BENCHMARKS:
        module = f'bcg_ros.bench.{name.replace("-", "_")}'
        try:
            found[name] = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
    return found


def main(argv=None) -> int:
    """Parse the benchmark name and its options, and run it."""
    mods = available()
    parser = argparse.ArgumentParser(prog='bcg-bench', description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='name', required=True)
    for name, mod in mods.items():
        p = sub.add_parser(name, help=BENCHMARKS[name], description=BENCHMARKS[name])
        p.add_argument('--quick', action='store_true',
                       help='reduced version, same last line')
        mod.add_arguments(p)
    args = parser.parse_args(argv)
    return int(mods[args.name].run(args) or 0)


if __name__ == '__main__':
    sys.exit(main())
