"""
ROS parameters <-> typed config dataclasses.

A node declares one parameter per field of its config dataclasses, with the
default from the code and the field's docstring as description, and builds the
config from the values once at startup. A value of the wrong type (checked by
:func:`bcg_ros.config_types.coerce`, the rule ``bcg-train``'s config follows
too), or one the config rejects, fails there with the parameter's name.
"""

import ast
import dataclasses
import inspect
import textwrap
import typing
from typing import Dict, Type, TypeVar

from rcl_interfaces.msg import ParameterDescriptor

from bcg_ros.config_types import coerce

T = TypeVar('T')


class ParameterError(ValueError):
    """A ROS parameter whose value does not fit its config field."""


def field_docs(cls) -> Dict[str, str]:
    """The attribute docstrings of a dataclass, field name -> text."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    docs, body = {}, tree.body[0].body
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) \
                and isinstance(nxt.value.value, str):
            docs[node.target.id] = ' '.join(nxt.value.value.split())
    return docs


def declare(node, cls: Type[T]) -> None:
    """Declare a parameter for every field of ``cls`` with the code's default."""
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        if node.has_parameter(f.name):
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if isinstance(default, tuple):
            default = list(default)
        node.declare_parameter(f.name, default, ParameterDescriptor(
            description=docs.get(f.name, ''), dynamic_typing=True))


def read(node, cls: Type[T]) -> T:
    """Build ``cls`` from the node's parameters; errors name the node and the parameter."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        value = node.get_parameter(f.name).value
        values[f.name] = coerce(value, hints[f.name],
                                f'{node.get_name()}: parameter {f.name!r}', ParameterError)
    try:
        return cls(**values)
    except ValueError as exc:
        raise ParameterError(f'{node.get_name()}: {exc}') from exc
