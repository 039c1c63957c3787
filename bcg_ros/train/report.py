"""
What a run reports: its history, its summary, its curves, and runs side by side.

``history.jsonl`` holds one JSON line of metrics per iteration (with
``iteration``, ``samples`` and ``wall_s``); everything else is computed from
those rows: :func:`history_summary` (start, end and trend of each metric, the
env samples to reach each E_track level), :func:`write_curves` (curves.png)
and :func:`compare_table` (``bcg-train --compare``). The functions are pure
but for the files they are told to read or write; writes are atomic
(:func:`bcg_ros.train.checkpoint.atomic_write`).
"""

import json
import math
import pathlib
from typing import Any, Dict, List, Mapping, Sequence

import numpy as np

from bcg_ros.train.checkpoint import atomic_write
from bcg_ros.train.config import ConfigError

HISTORY = 'history.jsonl'
SUMMARY = 'summary.json'
E_TRACK_THRESHOLDS_CM = (40.0, 30.0, 20.0, 18.0, 17.0, 16.0, 15.0, 10.0, 5.0, 2.0, 1.0)
"""E_track levels at which the summary records the env samples needed to reach them."""
SUMMARY_KEYS = ('reward', 'add_reward', 'track_reward', 'e_track', 'bundle_rate', 'fall_rate',
                'bundle_dropped_rate', 'diverged_rate', 'penetration_mm')
"""Metrics the summary reports at the start, the end and by sixths of the run."""


def read_history(path) -> List[Dict[str, float]]:
    """Return the rows of a history.jsonl file."""
    return [json.loads(line) for line in pathlib.Path(path).read_text().splitlines() if line]


def write_history(path, rows: Sequence[Mapping[str, float]]) -> pathlib.Path:
    """Rewrite a history.jsonl file with ``rows``, atomically."""
    text = ''.join(json.dumps(dict(r)) + '\n' for r in rows)
    return atomic_write(path, lambda f: f.write(text.encode()))


def append_history(path, row: Mapping[str, float]) -> None:
    """Append one iteration's row to a history.jsonl file."""
    with open(path, 'a') as f:
        f.write(json.dumps(dict(row)) + '\n')


def train_penetration_mm(history: Sequence[Mapping[str, float]], last: int = 20) -> float:
    """
    Return the foot penetration of the training simulator over the last iterations [mm].

    The median of the per-iteration means: one iteration with a diverged env (its depth
    1e9 mm) must not become the policy's delta-d.
    """
    vals = [h['penetration_mm'] for h in history[-last:]
            if 'penetration_mm' in h and math.isfinite(h['penetration_mm'])]
    return float(np.median(vals)) if vals else 0.0


def history_summary(history: Sequence[Mapping[str, float]]) -> Dict[str, Any]:
    """
    Return the summary of a run's metrics: start, end, trend, best, samples to each level.

    ``first_10_iterations`` and ``last_10_iterations`` are means; ``median_by_sixth`` the
    medians over six equal parts of the run. Every episode starts at iteration 0 on the
    reference, so the first iterations track unusually well: the sixths show the trend.
    """
    def means(rows):
        return {k: float(np.mean([h[k] for h in rows])) for k in SUMMARY_KEYS
                if rows and k in rows[0]}

    parts = [p for p in np.array_split(np.arange(len(history)), 6) if p.size]
    sixths = {k: [float(np.median([history[i][k] for i in p])) for p in parts]
              for k in SUMMARY_KEYS if history and k in history[0]}
    return {'first_10_iterations': means(history[:10]),
            'last_10_iterations': means(history[-10:]),
            'median_by_sixth': sixths,
            'best_e_track': min((h['e_track'] for h in history), default=None),
            'samples_to_e_track': samples_to_reach(history),
            'train_penetration_mm': train_penetration_mm(history)}


def write_summary(path, summary: Mapping[str, Any]) -> pathlib.Path:
    """Write a run's summary as indented JSON, atomically."""
    text = json.dumps(summary, indent=2, default=str)
    return atomic_write(path, lambda f: f.write(text.encode()))


def trailing_mean(values: Sequence[float], window: int) -> np.ndarray:
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


def write_curves(history: Sequence[Mapping[str, float]], path, title: str = '') -> pathlib.Path:
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
    try:
        return atomic_write(path, lambda f: fig.savefig(f, dpi=80, format='png'))
    finally:
        plt.close(fig)


def compare_table(run_dirs: Sequence[Any]) -> str:
    """Return a text table: samples to reach each E_track level, one column per run."""
    runs = []
    for d in run_dirs:
        path = pathlib.Path(d) / SUMMARY
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f'{path}: cannot read the run summary: {exc}') from exc
        hist = pathlib.Path(d) / HISTORY
        if hist.is_file():   # recount with this version's levels and smoothing
            summary['samples_to_e_track'] = samples_to_reach(read_history(hist))
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
