"""
The project's tf2_msgs is ROS 2's on the wire: same fields, same type hashes, /tf over DDS.

rviz2 and tf2_ros match a /tf publisher by the DDS type name
(tf2_msgs::msg::dds_::TFMessage_) and check its RIHS01 type hash; both come
from the package name, the message names and the fields, so the built type
must give ROS 2's hashes. Skipped when tf2_msgs is not importable (not built:
scripts/build_interfaces.sh).
"""

import json
import pathlib
import time

import pytest

from test_unitree_hg_interfaces import parse_msg

REPO = pathlib.Path(__file__).resolve().parents[1]
MSG_DIR = REPO / 'interfaces' / 'tf2_msgs' / 'msg'
ROS2_TYPE_HASHES = {
    'TFMessage': 'RIHS01_e369d0f05a23ae52508854b66f6aa0437f3449d652e8cbf22d5abe85d020f087',
    'TF2Error': 'RIHS01_db2485e7d6a0ec75bf087e058ee45df682acc3a621ca7780503d10aac141809a',
}
"""The hashes ROS 2 (Jazzy, Kilted) publishes for its tf2_msgs messages."""


def test_project_messages():
    """TFMessage is a sequence of TransformStamped; TF2Error an error code and text."""
    assert sorted(p.stem for p in MSG_DIR.glob('*.msg')) == sorted(ROS2_TYPE_HASHES)
    assert parse_msg((MSG_DIR / 'TFMessage.msg').read_text()) == [
        ('transforms', 'geometry_msgs/TransformStamped', 'unbounded')]
    fields = [line for line in (MSG_DIR / 'TF2Error.msg').read_text().splitlines()
              if line.strip() and '=' not in line]
    assert parse_msg('\n'.join(fields)) == [('error', 'uint8', None),
                                            ('error_string', 'string', None)]


@pytest.fixture(scope='module')
def tf2_msgs():
    """Import the built tf2_msgs package, or skip when it is not importable."""
    try:
        import tf2_msgs.msg
        tf2_msgs.msg.TFMessage()
    except Exception as exc:  # ImportError, or type support that fails to load
        pytest.skip(f'tf2_msgs is not importable ({exc!r}); '
                    'build it with scripts/build_interfaces.sh')
    return tf2_msgs


def test_built_types(tf2_msgs):
    """The built types have ROS 2's fields and constants."""
    msg = tf2_msgs.msg
    assert msg.TFMessage.get_fields_and_field_types() == {
        'transforms': 'sequence<geometry_msgs/TransformStamped>'}
    assert msg.TF2Error.get_fields_and_field_types() == {
        'error': 'uint8', 'error_string': 'string'}
    assert (msg.TF2Error.NO_ERROR, msg.TF2Error.LOOKUP_ERROR,
            msg.TF2Error.TRANSFORM_ERROR) == (0, 1, 6)


@pytest.mark.parametrize('name', sorted(ROS2_TYPE_HASHES))
def test_type_hash_is_ros2s(tf2_msgs, name):
    """The generated type description hashes to ROS 2's RIHS01."""
    prefix = pathlib.Path(tf2_msgs.__file__).resolve().parents[4]
    path = prefix / 'share' / 'tf2_msgs' / 'msg' / f'{name}.json'
    if not path.is_file():
        pytest.skip(f'{path} is not installed with this tf2_msgs')
    hashes = {h['type_name']: h['hash_string']
              for h in json.loads(path.read_text())['type_hashes']}
    assert hashes[f'tf2_msgs/msg/{name}'] == ROS2_TYPE_HASHES[name]


@pytest.mark.ros
def test_tf_message_round_trips_over_dds(tf2_msgs):
    """A TFMessage published on /tf arrives whole; the graph names ROS 2's type and hash."""
    rclpy = pytest.importorskip('rclpy')
    from geometry_msgs.msg import TransformStamped
    from rclpy.serialization import deserialize_message, serialize_message

    TFMessage = tf2_msgs.msg.TFMessage
    sent = TFMessage()
    for k, (parent, child) in enumerate((('odom', 'pelvis'), ('pelvis', 'imu_link'))):
        t = TransformStamped()
        t.header.stamp.sec, t.header.stamp.nanosec = 12, 345 + k
        t.header.frame_id, t.child_frame_id = parent, child
        t.transform.translation.x, t.transform.translation.z = 0.1 * k, 0.757
        t.transform.rotation.w = 1.0
        sent.transforms.append(t)
    assert deserialize_message(serialize_message(sent), TFMessage) == sent

    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        node = rclpy.create_node('tf2_msgs_probe', context=context)
        got = []
        node.create_subscription(TFMessage, '/tf', got.append, 10)
        pub = node.create_publisher(TFMessage, '/tf', 10)
        executor = rclpy.executors.SingleThreadedExecutor(context=context)
        executor.add_node(node)
        deadline = time.monotonic() + 20.0
        while not got and time.monotonic() < deadline:
            pub.publish(sent)
            executor.spin_once(timeout_sec=0.05)
        assert got, 'no TFMessage came back on /tf within 20 s'
        assert got[0] == sent
        info = node.get_publishers_info_by_topic('/tf')
        assert [i.topic_type for i in info] == ['tf2_msgs/msg/TFMessage']
        assert str(info[0].topic_type_hash) == ROS2_TYPE_HASHES['TFMessage']
        executor.shutdown()
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
