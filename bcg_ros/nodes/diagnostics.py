"""
Health on ``/diagnostics``, one status per node.

The DiagnosticArray there is what rqt_robot_monitor and the diagnostic aggregator read.

    pub = diagnostics.Publisher(node)
    pub.publish(diagnostics.status('bcg_ros/policy_node', OK, 'policy: running', 'g1',
                                   {'mode': 'policy'}))
"""

from typing import Any, Mapping

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

TOPIC = '/diagnostics'
"""Where every node's health goes (ROS convention)."""
OK, WARN, ERROR, STALE = (DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR,
                          DiagnosticStatus.STALE)


def _text(v: Any) -> str:
    return f'{v:.6g}' if isinstance(v, float) else str(v)


def status(name: str, level: bytes, message: str, hardware_id: str,
           values: Mapping[str, Any]) -> DiagnosticStatus:
    """One DiagnosticStatus; values become KeyValues (floats to 6 significant digits)."""
    return DiagnosticStatus(level=level, name=name, message=message, hardware_id=hardware_id,
                            values=[KeyValue(key=str(k), value=_text(v))
                                    for k, v in values.items()])


class Publisher:
    """Publishes statuses on /diagnostics, stamped with the node's clock."""

    def __init__(self, node, topic: str = TOPIC):
        """Create the /diagnostics publisher of ``node``."""
        self._node = node
        self._pub = node.create_publisher(DiagnosticArray, topic, 10)

    def publish(self, *statuses: DiagnosticStatus) -> DiagnosticArray:
        """Publish ``statuses`` as one DiagnosticArray and return it."""
        msg = DiagnosticArray(status=list(statuses))
        msg.header.stamp = self._node.get_clock().now().to_msg()
        self._pub.publish(msg)
        return msg
