"""
Spin a node until Ctrl-C or SIGTERM, then let it end cleanly.

Left to themselves, rclpy's signal handlers shut the context down from inside the
signal, and Python's SIGINT handler raises KeyboardInterrupt wherever the main thread
is, also inside rclpy's C++ calls, where it surfaces as a RuntimeError ("Unable to
convert call argument ...") and the node dies with exit code 1 instead of finishing
(`ros2 launch` then reports "process has died"). Here a signal only sets an event;
the executor, woken every ``period`` seconds, finishes the callback it is in and
returns, with the context still valid, so that the node can send its last messages
(policy_node's damping command) before it is destroyed.

    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    stop = spin.stop_on_signals()
    ...
    try:
        spin.until(executor, stop)
    finally:
        node.destroy_node()
        spin.shutdown()
"""

import signal
import threading
from typing import Callable, List, Optional, Tuple, Type

import rclpy
from rclpy.executors import Executor, SingleThreadedExecutor
from rclpy.logging import get_logger
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions


def stop_on_signals() -> threading.Event:
    """
    Make SIGINT and SIGTERM set the returned event instead of raising or killing.

    After the first, further SIGINTs are ignored: a terminal's Ctrl-C reaches every
    process of its group and `ros2 launch` then sends its own, and Python, as it exits,
    puts the default (killing) action back for a handled signal, though not for an
    ignored one. SIGTERM, launch's next step for a node that does not end, still kills.
    """
    stop = threading.Event()

    def handle(signum, frame):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handle)
    return stop


def until(executor: Executor, stop: threading.Event, period: float = 0.1,
          done: Optional[Callable[[], bool]] = None) -> None:
    """Spin ``executor`` until ``stop`` is set, the context shuts down, or ``done()``."""
    while not stop.is_set() and rclpy.ok(context=executor.context) \
            and not (done is not None and done()):
        executor.spin_once(timeout_sec=period)


def shutdown() -> None:
    """Shut rclpy down, leaving stop_on_signals' handlers in place (not rclpy's defaults)."""
    rclpy.try_shutdown(uninstall_handlers=False)


def run(name: str, make_node: Callable[[], Node], errors: Tuple[Type[Exception], ...] = (),
        args: Optional[List[str]] = None) -> int:
    """
    A whole node ``main()``: the pattern above, for a node that needs nothing else.

    ``make_node`` builds the node after rclpy starts; one of ``errors`` raised there
    (a bad parameter) is logged under ``name`` and returns exit code 2. Otherwise
    the node spins until Ctrl-C or SIGTERM, is destroyed (its ``destroy_node``
    finishing its work) and the exit code is 0.
    """
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    stop = stop_on_signals()
    try:
        node = make_node()
    except errors as exc:
        get_logger(name).error(str(exc))
        rclpy.try_shutdown()
        return 2
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        until(executor, stop)
    finally:
        node.destroy_node()
        shutdown()
    return 0
