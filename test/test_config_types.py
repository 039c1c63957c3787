"""One type rule for every config field: bcg-train's config and the nodes' ROS parameters."""

import dataclasses
import types
from typing import Tuple

import pytest

from bcg_ros.config_types import coerce


@dataclasses.dataclass(frozen=True)
class Section:
    """A config section with one field of each kind the project uses."""

    count: int = 1
    """An integer."""
    gain: float = 1.0
    """A number."""
    name: str = 'a'
    """A string."""
    on: bool = True
    """A flag."""
    pair: Tuple[float, float] = (0.0, 1.0)
    """Exactly two numbers."""
    sizes: Tuple[int, ...] = (8,)
    """Any number of integers."""


def test_values_of_the_fields_type_pass_and_numbers_widen():
    assert coerce(3, int, 'x') == 3
    assert coerce(3, float, 'x') == 3.0 and isinstance(coerce(3, float, 'x'), float)
    assert coerce('1e-3', float, 'x') == 1e-3   # YAML 1.1 reads 1e-3 as a string
    assert coerce([1, 2], Tuple[float, float], 'x') == (1.0, 2.0)
    assert coerce([64, 64, 32], Tuple[int, ...], 'x') == (64, 64, 32)
    assert coerce([1, 'a'], tuple, 'x') == (1, 'a')


@pytest.mark.parametrize('value, tp, words', [
    (True, int, ['expected an integer']),
    (3.5, int, ['expected an integer']),
    ('fast', float, ['expected a number']),
    (1, bool, ['true or false']),
    (1, str, ['a string']),
    ([1, 2, 3], Tuple[float, float], ['2 values']),
    ([1, 2.5], Tuple[int, ...], ['f[1]', 'integer']),
    ({'a': 1}, Section, ['section']),
    (1, dict, ['unsupported']),
])
def test_wrong_values_raise_the_callers_error_naming_the_field(value, tp, words):
    class Wrong(ValueError):
        pass

    with pytest.raises(Wrong) as exc:
        coerce(value, tp, 'f', Wrong)
    assert str(exc.value).startswith('f')
    for w in words:
        assert w in str(exc.value)


def test_ros_parameters_follow_the_same_rule():
    params = pytest.importorskip('bcg_ros.nodes.params')

    class Node:
        def __init__(self, **values):
            self.values = values

        def get_name(self):
            return 'some_node'

        def get_parameter(self, name):
            default = getattr(Section(), name)
            return types.SimpleNamespace(value=self.values.get(name, default))

    cfg = params.read(Node(gain=2, pair=[1, 2], sizes=[4, 4]), Section)
    assert cfg.gain == 2.0 and cfg.pair == (1.0, 2.0) and cfg.sizes == (4, 4)
    with pytest.raises(params.ParameterError, match="some_node: parameter 'count': expected an "
                                                    'integer, got 2.5'):
        params.read(Node(count=2.5), Section)
