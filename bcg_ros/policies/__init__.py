"""
Policies shipped with the package: ``<motion>.onnx``, each with its ``<motion>.md`` report.

    from bcg_ros import policies
    policies.path('run')          # the shipped run policy, or a PolicyNotShipped error
"""

import pathlib
from typing import Tuple

DIR = pathlib.Path(__file__).resolve().parent
"""Folder of the shipped policies."""
DEFAULT_MOTION = 'run'
"""The motion whose policy the tools and launch files run when given none: the one that
stays up on Unitree's official model and travels (see each ``<motion>.md``)."""


class PolicyNotShipped(FileNotFoundError):
    """No policy for that motion is shipped with the package."""


def shipped() -> Tuple[str, ...]:
    """Motions with a shipped policy, sorted."""
    return tuple(sorted(p.stem for p in DIR.glob('*.onnx')))


def path(motion: str = DEFAULT_MOTION) -> pathlib.Path:
    """The shipped policy of ``motion``; PolicyNotShipped naming what is shipped."""
    p = DIR / f'{motion}.onnx'
    if not p.is_file():
        raise PolicyNotShipped(f'no shipped policy for motion {motion!r} (shipped: '
                               f'{", ".join(shipped()) or "none"}); give a policy file')
    return p
