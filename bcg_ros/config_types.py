"""
Values for the fields of config dataclasses, checked against the field's type.

One rule for every configuration of the project: ``bcg-train``'s presets,
YAML files and ``--set`` overrides, and the ROS parameters of the nodes. The
caller names the field (``shac.actor_lr``, ``policy_node: parameter 'kp'``)
and the error class its users catch, so every message says which value is
wrong. No JAX, no ROS: the nodes import it as cheaply as the trainer.
"""

import dataclasses
import typing
from typing import Any, Type


def coerce(value: Any, tp: Any, name: str, error: Type[Exception] = ValueError) -> Any:
    """
    Return ``value`` as the field type ``tp``, or raise ``error`` naming the field ``name``.

    bool, int and str take only their own type (True is not 1, 3.5 is not an integer).
    float takes ints and numeric strings: YAML 1.1 reads ``1e-3`` (no dot) as a string.
    ``Tuple[T, ...]``, ``Tuple[A, B]`` and ``tuple`` take a list or tuple, each item
    checked as its own field (``name[i]``). A dataclass is a section, not a value.
    """
    if dataclasses.is_dataclass(tp):
        raise error(f'{name}: is a section; set its fields ({name}.<field>=...)')
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise error(f'{name}: expected true or false, got {value!r}')
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise error(f'{name}: expected an integer, got {value!r}')
        return value
    if tp is float:
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise error(f'{name}: expected a number, got {value!r}')
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise error(f'{name}: expected a string, got {value!r}')
        return value
    if tp is tuple or typing.get_origin(tp) is tuple:
        if not isinstance(value, (list, tuple)):
            raise error(f'{name}: expected a list, got {value!r}')
        args = typing.get_args(tp)
        if not args:
            return tuple(value)
        if args[-1] is Ellipsis:
            args = (args[0],) * len(value)
        elif len(args) != len(value):
            raise error(f'{name}: expected {len(args)} values, got {value!r}')
        return tuple(coerce(v, a, f'{name}[{i}]', error)
                     for i, (v, a) in enumerate(zip(value, args)))
    raise error(f'{name}: unsupported field type {tp!r}')
