"""
The /tf publisher of bcg_ros's nodes: tf2_msgs/TFMessage, as tf2_ros and rviz2 read it.

tf2_msgs comes from a ROS 2 install or, without one, from the project's
wire-identical copy (interfaces/tf2_msgs, built by scripts/build_interfaces.sh):
the same DDS type name and type hash, so rviz2 and tf2_ros on another machine
read it. Only when neither is importable does a node run without /tf; it says
so once at startup, and its other topics (/odom) carry the same pose.
"""

from typing import Iterable, Optional

from geometry_msgs.msg import TransformStamped
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

TF_TOPIC = '/tf'
TF_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100,
                    reliability=ReliabilityPolicy.RELIABLE,
                    durability=DurabilityPolicy.VOLATILE)
"""The QoS of tf2_ros's TransformBroadcaster (and its listeners)."""
MISSING = ('tf2_msgs is not importable: /tf is not published. Build the project\'s copy '
           '(bash scripts/build_interfaces.sh) or source a ROS 2 install.')


def tf_message_type() -> Optional[type]:
    """Return tf2_msgs/msg/TFMessage, or None when no tf2_msgs is importable."""
    try:
        from tf2_msgs.msg import TFMessage
    except ImportError:
        return None
    return TFMessage


class TfPublisher:
    """Publishes transforms on /tf as tf2_msgs/TFMessage; a no-op without tf2_msgs."""

    def __init__(self, node: Node, topic: str = TF_TOPIC):
        """Create the publisher, or log the error and stay unavailable."""
        self.msg_type = tf_message_type()
        self.pub = None
        if self.msg_type is None:
            node.get_logger().error(MISSING)
            return
        self.pub = node.create_publisher(self.msg_type, topic, TF_QOS)

    @property
    def available(self) -> bool:
        """Whether transforms go out."""
        return self.pub is not None

    def send(self, transforms: Iterable[TransformStamped]):
        """Publish the transforms in one TFMessage."""
        if self.pub is not None:
            self.pub.publish(self.msg_type(transforms=list(transforms)))
