"""
Spin a node until Ctrl-C or SIGTERM, then let it end cleanly.

Left to themselves, rclpy's signal handlers shut the context down from inside the
signal, and Python's SIGINT handler raises KeyboardInterrupt wherever the main thread
is, also inside rclpy's C++ calls, where it surfaces as a RuntimeError ("Unable to
convert call argument ...") and the node dies with exit code 1 instead of finishing
(`ros2 launch` then reports "process has died"). Here a signal only sets an event;
the executor, woken every ``period`` seconds, finishes the callback it is in and
returns, with the context still valid, so that the node can send its last messages
(policy_node's damping command) before it is destroyed. Every node's ``main()``
is :func:`run`::

    def main(args=None) -> int:
        return spin.run('g1_sim_node', lambda stop: G1SimNode(), (ParameterError,), args)
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


def run(name: str, make_node: Callable[[threading.Event], Node],
        errors: Tuple[Type[Exception], ...] = (), args: Optional[List[str]] = None,
        executor: Callable[[], Executor] = SingleThreadedExecutor,
        start: Optional[Callable[[Node], None]] = None,
        done: Optional[Callable[[Node], bool]] = None,
        finish: Optional[Callable[[Node], int]] = None) -> int:
    """
    The whole ``main()`` of every bcg_ros node: the pattern above, with its hooks.

    ``make_node(stop)`` builds the node after rclpy starts (``stop`` is set on Ctrl-C
    or SIGTERM, for a node that checks it inside a long callback); ``start(node)``
    runs once it spins (policy_node's autostart). One of ``errors`` raised by either
    (a bad parameter) is logged under ``name`` and the exit code is 2. The node then
    spins on ``executor()`` until the signal, the end of the context, or
    ``done(node)``; ``finish(node)`` runs before the node is destroyed (its last
    messages, a checkpoint) and gives the exit code (0 without it).
    """
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    stop = stop_on_signals()
    try:
        node = make_node(stop)
    except errors as exc:
        get_logger(name).error(str(exc))
        rclpy.try_shutdown()
        return 2
    ex = executor()
    ex.add_node(node)
    rc = 0
    try:
        if start is not None:
            start(node)
        until(ex, stop, done=None if done is None else (lambda: done(node)))
    except errors as exc:
        node.get_logger().error(str(exc))
        rc = 2
    finally:
        if finish is not None:
            rc = finish(node) or rc
        node.destroy_node()
        shutdown()
    return rc
