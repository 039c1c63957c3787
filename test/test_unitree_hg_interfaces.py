"""
The project's unitree_hg messages are field for field those of the robot.

Two independent checks: the project's .msg files against the reference
unitree_hg package (skipped without ../shared/reference), and the built Python
types against the project's .msg files (skipped when unitree_hg is not built).
"""

import importlib
import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
PROJECT_MSG_DIR = REPO / 'interfaces' / 'unitree_hg' / 'msg'
REFERENCE_MSG_DIR = REPO.parent / 'shared' / 'reference' / 'unitree_hg' / 'msg'

MESSAGES = (
    'BmsCmd', 'BmsState', 'HandCmd', 'HandState', 'IMUState', 'LowCmd', 'LowState',
    'MainBoardState', 'MotorCmd', 'MotorState', 'PressSensorState',
)

_FIELD_RE = re.compile(
    r'^(?P<type>[A-Za-z_][A-Za-z0-9_/]*)'
    r'(?P<array>\[(?P<bound><=)?(?P<size>[0-9]*)\])?'
    r'\s+(?P<name>[a-z][a-z0-9_]*)\s*$')


def parse_msg(text):
    """
    Return [(name, base_type, array)] from .msg text, in declaration order.

    ``array`` is None for a scalar, an int for a fixed-size array, 'unbounded'
    for a sequence and '<=N' for a bounded one. Constants and defaults are not
    used by unitree_hg and are rejected rather than silently ignored.
    """
    fields = []
    for raw in text.splitlines():
        line = raw.split('#', 1)[0].strip()
        if not line:
            continue
        match = _FIELD_RE.match(line)
        assert match, f'unsupported .msg line: {raw!r}'
        if match['array'] is None:
            array = None
        elif match['bound']:
            array = '<=' + match['size']
        elif match['size']:
            array = int(match['size'])
        else:
            array = 'unbounded'
        fields.append((match['name'], match['type'], array))
    return fields


def load_dir(msg_dir):
    """Parse every .msg file in ``msg_dir`` into {message name: fields}."""
    return {path.stem: parse_msg(path.read_text()) for path in sorted(msg_dir.glob('*.msg'))}


def test_parse_msg_reads_types_arrays_and_comments():
    """The parser itself: scalars, fixed and unbounded arrays, comments."""
    text = '# header\nuint8 a  # trailing\n\nMotorCmd[35] b\nMotorState[] c\nint16[<=3] d\n'
    assert parse_msg(text) == [
        ('a', 'uint8', None), ('b', 'MotorCmd', 35), ('c', 'MotorState', 'unbounded'),
        ('d', 'int16', '<=3')]


def test_project_has_all_messages():
    """The project defines exactly the 11 unitree_hg message types."""
    assert sorted(p.stem for p in PROJECT_MSG_DIR.glob('*.msg')) == sorted(MESSAGES)


def test_project_lowcmd_matches_crc_layout():
    """Declare LowCmd and MotorCmd fields in the order the CRC packs them."""
    from bcg_ros.robot import crc

    project = load_dir(PROJECT_MSG_DIR)
    struct_fields = [n for n in crc.LOWCMD_DTYPE.names if not n.startswith('_')]
    assert [f[0] for f in project['LowCmd']] == struct_fields
    motor_fields = [n for n in crc.MOTOR_CMD_DTYPE.names if not n.startswith('_')]
    assert [f[0] for f in project['MotorCmd']] == motor_fields
    assert ('motor_cmd', 'MotorCmd', crc.NUM_MOTORS) in project['LowCmd']


@pytest.fixture(scope='module')
def reference():
    """Parse the reference messages, or skip when ../shared/reference is absent."""
    if not REFERENCE_MSG_DIR.is_dir():
        pytest.skip(f'reference unitree_hg not found at {REFERENCE_MSG_DIR} '
                    '(only present next to the project checkout)')
    return load_dir(REFERENCE_MSG_DIR)


def test_reference_has_the_same_messages(reference):
    """The reference defines the same set of message types as the project."""
    assert sorted(reference) == sorted(MESSAGES)


@pytest.mark.parametrize('name', MESSAGES)
def test_message_matches_reference(reference, name):
    """Names, types, array sizes and order equal the reference's, field by field."""
    project = load_dir(PROJECT_MSG_DIR)[name]
    assert project == reference[name]


_ROSIDL_PRIMITIVE = {'float32': 'float', 'float64': 'double'}


def rosidl_type_string(base_type, array):
    """Return the type string rosidl_generator_py reports for a .msg field."""
    if base_type in _ROSIDL_PRIMITIVE:
        base = _ROSIDL_PRIMITIVE[base_type]
    elif base_type[0].isupper():
        base = f'unitree_hg/{base_type}'
    else:
        base = base_type
    if array is None:
        return base
    if array == 'unbounded':
        return f'sequence<{base}>'
    if isinstance(array, str):
        return f'sequence<{base}, {array[2:]}>'
    return f'{base}[{array}]'


@pytest.fixture(scope='module')
def built_msgs():
    """Import the built unitree_hg.msg module, or skip when it is not importable."""
    try:
        module = importlib.import_module('unitree_hg.msg')
        module.LowCmd()
    except Exception as exc:  # ImportError, or type support that fails to load
        pytest.skip(f'unitree_hg is not importable ({exc!r}); '
                    'build it with scripts/build_interfaces.sh')
    return module


@pytest.mark.parametrize('name', MESSAGES)
def test_built_type_matches_project_msg(built_msgs, name):
    """The importable unitree_hg type has the project's fields, types and order."""
    expected = [(field, rosidl_type_string(base, array))
                for field, base, array in load_dir(PROJECT_MSG_DIR)[name]]
    built = list(getattr(built_msgs, name).get_fields_and_field_types().items())
    assert built == expected


def test_built_lowcmd_has_35_motor_slots(built_msgs):
    """A default LowCmd carries 35 MotorCmd and 4 reserve words."""
    msg = built_msgs.LowCmd()
    assert len(msg.motor_cmd) == 35
    assert len(msg.reserve) == 4
