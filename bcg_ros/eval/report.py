"""Evaluation reports: JSON, a Markdown table, PNG plots (matplotlib, Agg backend)."""

import json
import pathlib
from typing import Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from bcg_ros.eval import metrics
from bcg_ros.motion import body_positions, tracking_error

PLOTS = ('root_height.png', 'tracking_error.png', 'penetration_hist.png')


def _fmt(v, digits: int = 2) -> str:
    if v is None:
        return '—'
    if isinstance(v, bool):
        return 'yes' if v else 'no'
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return f'{float(v):.{digits}f}'


def _media_lines(result: Mapping) -> List[str]:
    """Return the report's pictures of the runs: a filmstrip per run, links to the videos."""
    media = result.get('media')
    if not media:
        return []
    render = (result.get('config') or {}).get('render') or {}
    lines = ['', '## Motion']
    if media.get('filmstrips'):
        legend = ['Each run at evenly spaced times, the camera on the pelvis']
        if render.get('ghost', True) and result.get('motion'):
            legend.append('translucent blue: the reference pose of that frame')
        if render.get('contacts', True):
            legend.append('yellow discs and red arrows: MuJoCo\'s contact points and contact '
                          f'forces (an arrow {render.get("force_scale", 1.0):g} m long is the '
                          'robot\'s weight)')
        lines += ['', '; '.join(legend) + '.']
        for name in media['filmstrips']:
            lines += ['', f'![{name}]({name})']
    if media.get('videos'):
        lines += ['', 'Videos: ' + ', '.join(f'[{v}]({v})' for v in media['videos'])]
    if media.get('note'):
        lines += ['', f'Not drawn: {media["note"]}']
    return lines


def markdown(result: Mapping) -> str:
    """Render a Markdown report of one evaluation's JSON form (``Evaluation.to_dict()``)."""
    s = result['summary']
    what = (f'motion `{result["motion"]}`' if result['motion']
            else f'velocity command {result["command"]}')
    lines = [f'# sim2sim: `{pathlib.Path(result["policy"]).name}`', '',
             f'- policy: `{result["policy"]}` (contract from {result["contract_source"]})',
             f'- model: `{result["model"]}`, physics step {result["sim_dt"]} s, '
             f'policy period {result["control_dt"]} s',
             f'- {what}, {s["runs"]} runs']
    if result.get('terrain', 'flat') != 'flat':
        lines.append(f'- terrain `{result["terrain"]}` (a heightfield in the training '
                     'simulator, tiles of its tangent planes in MuJoCo; the reference motion '
                     'follows the ground under its pelvis)')
    if result.get('physics_params'):
        lines.append(f'- physical parameters `{result["physics_params"]}` (MuJoCo\'s robot '
                     'differs from the model file: bcg_ros.robot.physics)')
    rollout = (result.get('config') or {}).get('rollout', {})
    if rollout.get('hold'):
        lines.append(f"- each run goes on {rollout['hold']:g} s past the clip's end, the "
                     'reference held at its last frame')
    noise = rollout.get('sensor_noise', 0.0)
    if noise:
        lines.append(f"- sensor noise {noise:g} x a G1's on what the policy and its estimator "
                     'read (bcg_ros.robot.sensors)')
    if result.get('added_floor'):
        lines.append('- the model file has no ground plane: the evaluator added one at z = 0')
    lines += ['', '| controller | falls | diverged | penetration [mm] | delta-d [mm] '
              '| E_track [cm] | anchor-rel. [cm] | joint [rad] | lin. vel. err [m/s] '
              '| yaw rate err [rad/s] |', '|---|---|---|---|---|---|---|---|---|---|']
    rows = [('policy', s)]
    if result.get('jax'):
        rows.append((f'policy, training simulator (JAX, k = {result["jax"]["contact_k"]:g}, '
                     'no randomisation)', result['jax']['summary']))
    rows += [(f'baseline `{k}`', v) for k, v in (result.get('baselines') or {}).items()]
    for label, v in rows:
        lines.append(f'| {label} | {v["falls"]}/{v["runs"]} | {v.get("diverged", 0)} '
                     f'| {_fmt(v.get("penetration_mm"))} | {_fmt(v.get("delta_d_mm"))} '
                     f'| {_fmt(v.get("e_track_cm"))} | {_fmt(v.get("anchor_error_cm"))} '
                     f'| {_fmt(v.get("joint_error_rad"), 3)} | {_fmt(v.get("lin_vel_error"), 3)} '
                     f'| {_fmt(v.get("ang_vel_error"), 3)} |')
    if result.get('baselines'):
        lines += ['', 'Baselines on the same model, seeds and gains: `stand` holds the '
                  'default pose under the PD, `replay` feeds the reference joint angles to '
                  'the PD open loop.']
    if result.get('motion') and not result.get('command'):
        lines += ['', 'Velocity errors against the clip\'s: planar speed (each in its own '
                  'base frame) and yaw rate, up to a fall.']
    lines += ['', '## Runs', '',
              '| seed | fell | fall time [s] | min root height [m] | penetration [mm] '
              '| E_track [cm] | friction scale | pushes |',
              '|---|---|---|---|---|---|---|---|']
    for r in result['runs']:
        fell = _fmt(r['fell']) + (f' (diverged: {r["diverged"]})' if r.get('diverged') else '')
        lines.append(f'| {r["seed"]} | {fell} | {_fmt(r["fall_time"])} '
                     f'| {_fmt(r["min_root_height"], 3)} | {_fmt(r["penetration_mm"])} '
                     f'| {_fmt(r.get("e_track_cm"))} | {_fmt(r["friction_scale"])} '
                     f'| {r["pushes"]} |')
    if s.get('train_penetration_mm') is None:
        lines += ['', 'delta-d needs the training simulator\'s penetration depth '
                  '(ONNX metadata `bcg_ros.train_penetration_mm`); this policy has none.']
    lines += _media_lines(result)
    lines += ['', 'Plots: ' + ', '.join(f'![{p}]({p})' for p in PLOTS), '']
    return '\n'.join(lines)


def plot(evaluation, out_dir: pathlib.Path) -> List[pathlib.Path]:
    """Root height, tracking error over time, penetration histogram: one PNG each."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    out_dir = pathlib.Path(out_dir)
    fall_h = evaluation.config.rollout.fall_height
    paths = []
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for r in evaluation.runs:
        ax.plot(r.time, r.root_pos[:, 2], label=f'seed {r.seed}')
    ax.axhline(fall_h, color='k', ls='--', lw=1, label=f'fall ({fall_h} m)')
    ax.set(xlabel='time [s]', ylabel='root height [m]', title='Root height')
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out_dir / PLOTS[0])
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    mot = evaluation.motion
    ref_body = body_positions(mot) if mot is not None else None
    for r in evaluation.runs:
        if mot is not None:
            e = tracking_error(r.body_pos, ref_body[r.frame]) * 100.0
            ax.plot(r.time, e, label=f'seed {r.seed}')
        else:
            ach = metrics.base_velocity(r.root_quat, r.root_lin_vel, r.root_ang_vel)
            ax.plot(r.time, np.linalg.norm(r.command[:, :2] - ach[:, :2], axis=-1),
                    label=f'seed {r.seed}')
    ax.set(xlabel='time [s]',
           ylabel='body position error [cm]' if mot is not None else 'velocity error [m/s]',
           title='Tracking error')
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out_dir / PLOTS[1])
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    depths = [r.penetration * 1e3 for r in evaluation.runs]
    if any(d.size for d in depths):
        ax.hist([d for d in depths if d.size], bins=40, stacked=True,
                label=[f'seed {r.seed}' for r, d in zip(evaluation.runs, depths) if d.size])
        ax.legend(fontsize=7)
    ax.set(xlabel='foot penetration depth [mm]', ylabel='contacts x physics steps',
           title='Foot penetration in MuJoCo')
    fig.tight_layout()
    paths.append(out_dir / PLOTS[2])
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    return paths


def write(evaluation, out_dir: Union[str, pathlib.Path], plots: bool = True) -> Dict:
    """Write ``result.json``, ``report.md``, plots and pictures to ``out_dir``; return the JSON."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = evaluation.to_dict()
    (out_dir / 'result.json').write_text(json.dumps(result, indent=2, default=_json_default))
    (out_dir / 'report.md').write_text(markdown(result))
    if plots:
        plot(evaluation, out_dir)
    if getattr(evaluation, 'media', None) is not None:
        evaluation.media.save(out_dir)
    return result


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f'not JSON serialisable: {type(o).__name__}')


def pooled(a: Optional[Mapping], b: Mapping) -> Dict:
    """
    Pool two policies' summaries (training seeds of one k) into one Table 1 cell.

    Falls and runs add up; delta-d is the runs-weighted mean of those that have one.
    """
    if a is None:
        return dict(b)
    out = {'falls': a['falls'] + b['falls'], 'runs': a['runs'] + b['runs']}
    dd = [(s['delta_d_mm'], s['runs']) for s in (a, b) if s.get('delta_d_mm') is not None]
    out['delta_d_mm'] = (sum(d * n for d, n in dd) / sum(n for _, n in dd)) if dd else None
    return out


def table1_markdown(cells: Mapping, motions: Sequence[str], ks: Sequence[int]) -> str:
    """
    Table 1: falls and delta-d per motion and contact stiffness k.

    ``cells[(motion, k)]`` is a summary dict or None (no policy found).
    """
    head = '| k | ' + ' | '.join(motions) + ' |'
    lines = ['# Table 1: falls / delta-d [mm] in MuJoCo (SHAC+BCG)', '', head,
             '|---|' + '---|' * len(motions)]
    for k in ks:
        row = []
        for m in motions:
            s = cells.get((m, k))
            row.append('—' if s is None else
                       f'{s["falls"]}/{s["runs"]} / {_fmt(s.get("delta_d_mm"), 1)}')
        lines.append(f'| {k} | ' + ' | '.join(row) + ' |')
    return '\n'.join(lines) + '\n'


def training_budget(summary_path: pathlib.Path) -> Optional[Dict[str, float]]:
    """Iterations, samples and wall-clock of the run that trained a policy (its summary.json)."""
    try:
        s = json.loads(pathlib.Path(summary_path).read_text())
        return {k: float(s[k]) for k in ('iterations', 'samples', 'wall_s')}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def table2_markdown(cells: Mapping, motions: Sequence[str], methods: Sequence[str],
                    training: Optional[Mapping] = None) -> str:
    """
    Table 2: E_track [cm] per motion and method; ``cells[(motion, method)]`` as above.

    ``training[(motion, method)]`` (:func:`training_budget`) adds what each policy was
    trained with, so that equal wall-clock can be read off the table.
    """
    lines = ['# Table 2: E_track [cm] in MuJoCo', '',
             '| method | ' + ' | '.join(motions) + ' |', '|---|' + '---|' * len(motions)]
    for meth in methods:
        row = []
        for m in motions:
            s = cells.get((m, meth))
            row.append('—' if s is None else
                       f'{_fmt(s.get("e_track_cm"), 1)} ({s["falls"]}/{s["runs"]} falls)')
        lines.append(f'| {meth} | ' + ' | '.join(row) + ' |')
    if training:
        lines += ['', 'Trained with:', '', '| motion | method | iterations | samples | '
                  'wall-clock [min] |', '|---|---|---|---|---|']
        for m in motions:
            for meth in methods:
                t = training.get((m, meth))
                if t is not None:
                    lines.append(f'| {m} | {meth} | {t["iterations"]:.0f} | '
                                 f'{t["samples"]:.0f} | {t["wall_s"] / 60.0:.1f} |')
    return '\n'.join(lines) + '\n'


def missing_note(missing: Sequence[str]) -> Optional[str]:
    """Return a line listing the policies a table expected and did not find."""
    if not missing:
        return None
    return 'Not found (cells marked —): ' + ', '.join(f'`{m}`' for m in missing)
