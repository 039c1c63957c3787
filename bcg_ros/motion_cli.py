"""
``bcg-motion info [NAME_OR_PATH ...]``: how the reference motions move.

Prints a Markdown table of :func:`bcg_ros.motion.motion_stats` (one column a
motion; the four built-in clips when no motion is named) for the motions as
training loads them, at the control rate, and the content digest of each file.
A file that does not load is an error: ``bcg-motion: error: ...``, exit status 2.
"""

import argparse
import hashlib
import pathlib
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from bcg_ros import motion as motion_lib
from bcg_ros.robot import model as g1_model

ROWS: Tuple[Tuple[str, str, float, str], ...] = (
    ('duration_s', 'duration [s]', 1.0, '.2f'),
    ('root_travel_m', 'root travel (horizontal path) [m]', 1.0, '.2f'),
    ('net_displacement_m', 'net displacement [m]', 1.0, '.2f'),
    ('max_root_rise_m', 'root rise above frame 0 [cm]', 100.0, '.1f'),
    ('flight_phases', 'flight phases (both feet off)', 1.0, '.0f'),
    ('longest_flight_s', 'longest flight [s]', 1.0, '.2f'),
    ('shortest_flight_s', 'shortest flight [s]', 1.0, '.2f'),
    ('total_flight_s', 'total flight [s]', 1.0, '.2f'),
    ('max_foot_height_m', 'highest foot (lowest sphere point) [cm]', 100.0, '.1f'),
    ('touchdowns', 'foot touch-downs (steps, landings)', 1.0, '.0f'),
    ('yaw_accumulated_deg', 'yaw turned, accumulated [deg]', 1.0, '.0f'),
    ('yaw_net_deg', 'yaw turned, net [deg]', 1.0, '.0f'),
    ('peak_joint_speed', 'peak joint speed [of rated]', 1.0, '.2f'),
    ('peak_joint_acc', 'peak joint acceleration [rad/s^2]', 1.0, '.0f'),
    ('stand_still_cm', 'stand-still E_track (frame 0 held) [cm]', 1.0, '.1f'),
    ('cop_outside_share', 'stance frames with the CoP > 2 cm off the feet [%]', 100.0, '.0f'),
    ('cop_outside_max_cm', 'farthest CoP off the feet [cm]', 1.0, '.1f'),
)
"""Table rows: (motion_stats key, label, scale, format spec)."""


def content_digest(path: pathlib.Path) -> str:
    """
    Return the sha256 of a motion file's content (hex).

    For an npz, of its arrays: each key in sorted order with its dtype, shape and
    bytes, so the digest does not change with the zip's timestamps; for any
    other file, of its bytes.
    """
    digest = hashlib.sha256()
    if path.suffix.lower() != '.npz':
        digest.update(path.read_bytes())
        return digest.hexdigest()
    with np.load(path, allow_pickle=False) as npz:
        for key in sorted(npz.files):
            arr = np.ascontiguousarray(npz[key])
            digest.update(f'{key}:{arr.dtype.str}:{arr.shape}:'.encode())
            digest.update(arr.tobytes())
    return digest.hexdigest()


def _source(name_or_path: str) -> pathlib.Path:
    """Return the file a name (built-in clip) or path stands for."""
    if name_or_path in motion_lib.BUILTIN:
        return motion_lib.builtin_path(name_or_path)
    return pathlib.Path(name_or_path)


def info_table(names: Sequence[str], robot=None) -> str:
    """
    Return the Markdown table of the motions' statistics, a column a motion.

    ``robot`` is a :class:`bcg_ros.robot.model.G1Model` (the project's model
    when None); a motion that does not load raises MotionError.
    """
    robot = robot if robot is not None else g1_model.load()
    columns: List[Tuple[str, Dict[str, float], str]] = []
    for name in names:
        motion = motion_lib.load_motion(name, robot=robot)
        columns.append((motion.name, motion_lib.motion_stats(motion, robot),
                        content_digest(_source(name))[:12]))
    lines = ['| | ' + ' | '.join(c[0] for c in columns) + ' |',
             '|---|' + '---:|' * len(columns)]
    for key, label, scale, spec in ROWS:
        cells = [format(stats[key] * scale, spec) for _, stats, _ in columns]
        lines.append(f'| {label} | ' + ' | '.join(cells) + ' |')
    lines.append('| content sha256 | ' + ' | '.join(c[2] for c in columns) + ' |')
    return '\n'.join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``bcg-motion``."""
    parser = argparse.ArgumentParser(prog='bcg-motion', description=__doc__.splitlines()[1])
    sub = parser.add_subparsers(dest='command', required=True)
    info = sub.add_parser('info', help='print the statistics of motions as a table',
                          description='Print the motion_stats of motions as a Markdown table.')
    info.add_argument('motions', nargs='*', default=list(motion_lib.BUILTIN),
                      metavar='NAME_OR_PATH',
                      help='built-in clip names or motion files (.npz, .csv); default: '
                           + ', '.join(motion_lib.BUILTIN))
    args = parser.parse_args(argv)
    try:
        print(info_table(args.motions))
    except motion_lib.MotionError as exc:
        print(f'bcg-motion: error: {exc}', file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
