"""
bag_recorder_node: record the robot's topics into a rosbag2, as ``ros2 bag record`` does.

So that g1_sim_node sessions and robot sessions give the same kind of file, and
:func:`bcg_ros.real2sim.logs.read_log` reads both. Each topic in ``topics`` is
subscribed once a publisher shows its type (the node looks every
``DISCOVERY_PERIOD_S``, so it may start before the robot or the simulator), with
``raw=True``: the bag gets the CDR bytes as DDS delivered them, the bytes
``ros2 bag record`` would store. Each message is stamped with its receive time
on the node's clock (simulated time under ``use_sim_time``).

The subscription's QoS follows the publishers, as ``ros2 bag record``'s does:
best effort when any of them offers only that (a reliable subscription would not
match it), else reliable, so that no message is dropped on the way; transient
local when all of them are (latched topics), else volatile.

Ctrl-C or SIGTERM closes the bag (its metadata.yaml and, in MCAP, its index);
a recorder killed any other way leaves a file that does not read.

Parameters are the fields of :class:`BagRecorderConfig`::

    bag_recorder_node --ros-args -p output:=bags/stand_01 -p storage:=sqlite3
"""

import dataclasses
import functools
import time
from dataclasses import dataclass
from typing import Dict, Set, Tuple

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosidl_runtime_py.utilities import get_message

from bcg_ros.nodes import params, spin
from bcg_ros.real2sim import logs

DISCOVERY_PERIOD_S = 0.5
"""How often topics without a subscription yet are looked for [s]."""
QUEUE_DEPTH = 1000
"""Messages a subscription holds while a write is in progress (2 s of LowState)."""


@dataclass(frozen=True)
class BagRecorderConfig:
    """Where to record, in which format, which topics."""

    output: str = ''
    """Bag directory to create (it must not exist); empty: g1_log_<date>_<time> here."""
    storage: str = 'mcap'
    """'mcap' or 'sqlite3' (ros2 bag's default on Humble)."""
    topics: Tuple[str, ...] = dataclasses.astuple(logs.LogTopics())
    """Topics to record, absolute names; the default: the robot's LowState and LowCmd and
    g1_sim_node's ground-truth odometry (absent on the robot)."""

    def __post_init__(self):
        """Reject an unknown storage or topic names that are not absolute, naming the field."""
        if self.storage not in logs.STORAGES:
            raise ValueError(f'field storage: {self.storage!r} is not one of {logs.STORAGES}')
        if not self.topics:
            raise ValueError('field topics: empty; name at least one topic')
        for topic in self.topics:
            if not topic.startswith('/'):
                raise ValueError(f'field topics: {topic!r} is not an absolute name (/...)')
        if len(set(self.topics)) != len(self.topics):
            raise ValueError(f'field topics: a topic repeats in {list(self.topics)}')


def default_output() -> str:
    """g1_log_<YYYYmmdd>_<HHMMSS> in the working directory."""
    return time.strftime('g1_log_%Y%m%d_%H%M%S')


class BagRecorderNode(Node):
    """Subscribes to the configured topics as they appear and writes what comes to one bag."""

    def __init__(self, name: str = 'bag_recorder_node', **kwargs):
        """Read the parameters, create the bag, subscribe to the topics already published."""
        self._open = False  # until the bag is: a node that fails to start is destroyed too
        super().__init__(name, **kwargs)
        params.declare(self, BagRecorderConfig)
        self.cfg = params.read(self, BagRecorderConfig)
        self.recording: Dict[str, str] = {}
        """Topic -> message type, for the topics subscribed so far."""
        self._refused: Set[str] = set()
        self._subs = []
        self.bag = logs.BagWriter(self.cfg.output or default_output(), self.cfg.storage)
        self._open = True
        self.discover()
        self._timer = self.create_timer(DISCOVERY_PERIOD_S, self.discover)
        self.get_logger().info(f'recording {list(self.cfg.topics)} into {self.bag.path} '
                               f'({self.cfg.storage})')

    def discover(self) -> None:
        """Subscribe to each configured topic whose publishers now show its type."""
        for topic in self.cfg.topics:
            if topic in self.recording or topic in self._refused:
                continue
            pubs = self.get_publishers_info_by_topic(topic)
            types = {p.topic_type for p in pubs}
            if not types:
                continue
            if len(types) > 1:
                self.get_logger().error(f'{topic}: publishers of several types {sorted(types)}; '
                                        'not recorded')
                self._refused.add(topic)
                continue
            msgtype = types.pop()
            try:
                msg_class = get_message(msgtype)
                self.bag.add_topic(topic, msgtype)
            except (logs.LogError, AttributeError, ModuleNotFoundError, ValueError) as exc:
                self.get_logger().error(f'{topic}: not recorded: {exc}')
                self._refused.add(topic)
                continue
            profiles = [p.qos_profile for p in pubs]
            best_effort = any(q.reliability == ReliabilityPolicy.BEST_EFFORT for q in profiles)
            latched = all(q.durability == DurabilityPolicy.TRANSIENT_LOCAL for q in profiles)
            qos = QoSProfile(
                depth=QUEUE_DEPTH,
                reliability=ReliabilityPolicy.BEST_EFFORT if best_effort
                else ReliabilityPolicy.RELIABLE,
                durability=DurabilityPolicy.TRANSIENT_LOCAL if latched
                else DurabilityPolicy.VOLATILE)
            self._subs.append(self.create_subscription(
                msg_class, topic, functools.partial(self._on_message, topic), qos, raw=True))
            self.recording[topic] = msgtype
            self.get_logger().info(f'{topic}: recording {msgtype}')

    def _on_message(self, topic: str, data: bytes) -> None:
        self.bag.write(topic, self.get_clock().now().nanoseconds, data)

    def close(self) -> None:
        """Stop recording and close the bag (metadata.yaml, MCAP index); safe to repeat."""
        if not self._open:
            return
        self._open = False
        for sub in self._subs:
            self.destroy_subscription(sub)
        self._subs = []
        self.bag.close()
        missing = [t for t in self.cfg.topics if t not in self.recording]
        counts = ', '.join(f'{t}: {n}' for t, n in self.bag.counts.items()) or 'nothing'
        self.get_logger().info(f'closed {self.bag.path}: {counts}'
                               + (f'; never published: {missing}' if missing else ''))

    def destroy_node(self):
        """Close the bag first."""
        self.close()
        return super().destroy_node()


def main(args=None) -> int:
    """Record until Ctrl-C or SIGTERM, then close the bag."""
    return spin.run('bag_recorder_node', lambda stop: BagRecorderNode(),
                    (params.ParameterError, logs.LogError), args)


if __name__ == '__main__':
    raise SystemExit(main())
