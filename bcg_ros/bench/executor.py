"""
policy_node over DDS loopback: /lowstate-to-/lowcmd latency and 500 Hz period error.

policy_node runs as its own process with a zero policy, in STAND; this process
publishes LowState at 500 Hz (as the robot does) and receives every LowCmd.
Latency: from publishing a LowState to receiving the next LowCmd. Period
error: |interval between consecutive LowCmds - 2 ms|. The machine's load
average, the CPU time its hypervisor stole while measuring and the
benchmark's own publisher jitter are printed with the figures, since the tail
depends on them.

So that the figures are the node's rather than this process's, the LowState
publisher, the LowCmd receiver and the DDS threads run with SCHED_FIFO priority
``--bench-priority`` where the process may have it (the output says whether it
did), the publisher sleeps to 0.3 ms before each send time and polls from
there, and this process asks for the GIL to change hands every 0.5 ms.
"""

import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from bcg_ros import testing
from bcg_ros.robot import g1, lowlevel


def add_arguments(parser):
    """Benchmark options."""
    parser.add_argument('--seconds', type=float, default=20.0, help='measured duration [s]')
    parser.add_argument('--param', action='append', default=[], metavar='NAME:=VALUE',
                        help='extra policy_node parameter (repeatable), e.g. '
                             'command_priority:=0 to measure without real-time scheduling')
    parser.add_argument('--bench-priority', type=int, default=70,
                        help='SCHED_FIFO priority of the publisher and receiver threads of '
                             'the benchmark, where permitted; 0: normal scheduling')


def _realtime(priority: int, dds: bool = False) -> bool:
    """SCHED_FIFO ``priority`` for the calling thread (or the DDS threads): whether it took."""
    from bcg_ros.runtime import realtime

    if dds:
        scheduled, warnings = realtime.schedule_dds_threads(priority)
        return bool(scheduled) and not warnings
    return priority > 0 and not realtime.schedule_thread(priority)


def _cpu_times() -> np.ndarray:
    """The machine's CPU time counters (/proc/stat ``cpu`` line); empty where there is none."""
    try:
        with open('/proc/stat') as f:
            return np.array(f.readline().split()[1:], dtype=np.float64)
    except (OSError, ValueError):
        return np.zeros(0)


def steal_percent(before: np.ndarray, after: np.ndarray) -> float:
    """Share [%] of CPU time the hypervisor took between two :func:`_cpu_times` (nan: unknown)."""
    if len(before) < 8 or len(after) != len(before):
        return float('nan')
    d = after - before
    # user nice system idle iowait irq softirq steal [guest guest_nice, already in user]
    total = d[:8].sum()
    return float(100.0 * d[7] / total) if total > 0 else float('nan')


def run(args) -> int:
    """Measure and print the figures; the last line is executor_latency_p99_ms."""
    import rclpy
    from diagnostic_msgs.msg import DiagnosticStatus
    from rclpy.executors import SingleThreadedExecutor
    from std_srvs.srv import Trigger
    from unitree_hg.msg import LowCmd, LowState

    seconds = 5.0 if args.quick else args.seconds
    sys.setswitchinterval(0.0005)
    realtime = []
    os.environ.setdefault('ROS_DOMAIN_ID', str(150 + os.getpid() % 50))
    tmp = tempfile.mkdtemp(prefix='bcg_bench_executor_')
    policy = testing.constant_policy(os.path.join(tmp, 'zero.onnx'), 0.0)
    proc = subprocess.Popen(
        [sys.executable, '-m', 'bcg_ros.nodes.policy_node', '--ros-args',
         '-p', f'policy_path:={policy}', '-p', 'autostart:=true', '-p', 'stand_duration:=0.5',
         '-p', 'stale_timeout:=0.1', *(a for p in args.param for a in ('-p', p))],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    rclpy.init()
    node = rclpy.create_node('bench_executor')
    recv, lock = [], threading.Lock()
    node.create_subscription(LowCmd, '/lowcmd', lambda raw: recv.append(time.monotonic()), 100,
                             raw=True)
    pub = node.create_publisher(LowState, '/lowstate', 10)
    status = {}
    node.create_subscription(DiagnosticStatus, '/policy_node/status',
                             lambda m: status.update((v.key, v.value) for v in m.values), 10)
    realtime.append(_realtime(args.bench_priority, dds=True))
    ex = SingleThreadedExecutor()
    ex.add_node(node)

    def receive():
        realtime.append(_realtime(args.bench_priority))
        ex.spin()

    threading.Thread(target=receive, daemon=True).start()
    msg = LowState()
    msg.mode_machine = g1.MODE_MACHINE_29DOF
    for i, m in enumerate(msg.motor_state[:g1.NUM_JOINTS]):
        m.q = g1.DEFAULT_POSE[i]
    msg.imu_state.quaternion = [1.0, 0.0, 0.0, 0.0]
    msg.wireless_remote = list(lowlevel.encode_remote())
    stop = threading.Event()
    pub_times = []

    def publish_states():
        realtime.append(_realtime(args.bench_priority))
        period, tick, nxt = 1.0 / g1.LOWCMD_RATE_HZ, 0, time.monotonic()
        while not stop.is_set():
            nxt += period
            delay = nxt - time.monotonic() - 3e-4
            if delay > 0:
                time.sleep(delay)
            while time.monotonic() < nxt:
                time.sleep(0)   # poll, letting the receiver have the GIL
            tick += 2
            msg.tick = tick
            t = time.monotonic()
            pub.publish(msg)
            with lock:
                pub_times.append(t)

    threading.Thread(target=publish_states, daemon=True).start()
    try:
        client = node.create_client(Trigger, '/policy_node/stand')
        if not client.wait_for_service(timeout_sec=20.0):
            print('policy_node did not come up')
            return 1
        time.sleep(0.5)
        client.call_async(Trigger.Request())
        time.sleep(1.0)
        with lock:
            recv.clear()
            pub_times.clear()
        cpu_before = _cpu_times()
        time.sleep(seconds)
        cpu_after = _cpu_times()
        time.sleep(0.15)   # one more ~/status, with the node's path over the window
        node_path = {q: status.get(f'command_path_ms_p{q}', '') for q in (50, 99)}
        stop.set()
        time.sleep(0.05)
    finally:
        proc.send_signal(2)
        proc.wait(timeout=10)
        ex.shutdown()
        node.destroy_node()
        rclpy.shutdown()
    pubs, cmds = np.asarray(pub_times), np.asarray(recv)
    if len(cmds) < 10 or len(pubs) < 10:
        print(f'too few messages: {len(pubs)} LowState, {len(cmds)} LowCmd')
        return 1
    nxt = np.searchsorted(cmds, pubs)
    ok = nxt < len(cmds)
    latency = (cmds[nxt[ok]] - pubs[ok]) * 1e3
    period_err = np.abs(np.diff(cmds) - 1.0 / g1.LOWCMD_RATE_HZ) * 1e3
    state_err = np.abs(np.diff(pubs) - 1.0 / g1.LOWCMD_RATE_HZ) * 1e3
    load = os.getloadavg()
    print(f'machine: {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} '
          f'{load[2]:.2f}, CPU steal {steal_percent(cpu_before, cpu_after):.1f} % '
          f'while measuring')
    print(f'benchmark threads: {"SCHED_FIFO" if all(realtime) else "normal scheduling"}')
    print(f'{len(pubs)} LowState sent, {len(cmds)} LowCmd received in {seconds:.0f} s '
          f'({len(cmds) / seconds:.0f} Hz)')
    print(f'LowState publisher period error p99: {np.percentile(state_err, 99):.3f} ms '
          f'(the command loop follows it)')
    print(f'policy_node\'s own path, LowState taken to LowCmd published: p50 '
          f'{node_path[50] or "?"} ms, p99 {node_path[99] or "?"} ms (the rest is DDS and '
          f'waking up)')
    print(f'executor_latency_p50_ms: {np.percentile(latency, 50):.3f}')
    print(f'executor_period_error_p99_ms: {np.percentile(period_err, 99):.3f}')
    print(f'executor_latency_p99_ms: {np.percentile(latency, 99):.3f}')
    return 0
