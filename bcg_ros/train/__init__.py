"""
Training: the configuration, the Trainer, its reports and files, ``bcg-train``.

The pure training step is in :mod:`bcg_ros.core`; this package is the shell
around it, shared by ``bcg-train`` and the trainer node:

- :mod:`bcg_ros.train.config`: :class:`TrainConfig` and its sections, presets,
  YAML files and dotted overrides (:func:`make_config`), :class:`ConfigError`.
- :mod:`bcg_ros.train.trainer`: :class:`Trainer`, one run in one folder (step,
  compile, log, checkpoint, export, finish).
- :mod:`bcg_ros.train.report`: history.jsonl, summary.json, curves.png, samples
  to reach each E_track level, ``--compare`` tables.
- :mod:`bcg_ros.train.checkpoint`: the learner state as one ``.npz``, and
  :func:`~bcg_ros.train.checkpoint.atomic_write`, through which every file of a
  run is written.
- :mod:`bcg_ros.train.export`: the actor as ONNX with its deployment contract.
- :mod:`bcg_ros.train.cli`: the ``bcg-train`` command (``python -m bcg_ros.train``).
"""

from bcg_ros.train.cli import build_parser, main
from bcg_ros.train.config import (ConfigError, PRESETS, RunConfig, TrainConfig,
                                  apply_overrides, check_config, config_diff, config_to_dict,
                                  flatten_mapping, load_config_file, make_config, parse_set)
from bcg_ros.train.report import (E_TRACK_THRESHOLDS_CM, compare_table, history_summary,
                                  samples_to_reach, trailing_mean, write_curves)
from bcg_ros.train.trainer import CHECKPOINT, Trainer, learner, make_env

__all__ = ['CHECKPOINT', 'ConfigError', 'E_TRACK_THRESHOLDS_CM', 'PRESETS', 'RunConfig',
           'TrainConfig', 'Trainer', 'apply_overrides', 'build_parser', 'check_config',
           'compare_table', 'config_diff', 'config_to_dict', 'flatten_mapping',
           'history_summary', 'learner', 'load_config_file', 'main', 'make_config', 'make_env',
           'parse_set', 'samples_to_reach', 'trailing_mean', 'write_curves']
