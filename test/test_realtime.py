"""
Real-time scheduling of the command path: what it asks for, which DDS threads, failing soft.

Whether the process may have SCHED_FIFO depends on the machine (root, CAP_SYS_NICE,
rtprio limits), so the system calls are replaced here; ``bcg-bench executor`` measures
the timing that results.
"""

import ctypes
import ctypes.util
import os
import pathlib
import random
import subprocess
import sys
import threading
import time

import pytest

from bcg_ros import testing
from bcg_ros.runtime import realtime

REPO = pathlib.Path(__file__).resolve().parents[1]

FASTDDS = {100: 'python3', 101: 'dds.udp.7412', 102: 'dds.ev.0', 103: 'dds.shm.7413',
           104: 'python3'}
"""Thread names of an rclpy process on rmw_fastrtps_cpp."""
CYCLONEDDS = {200: 'python3', 201: 'gc', 202: 'dq.builtins', 203: 'dq.user', 204: 'tev',
              205: 'recv', 206: 'recvUC', 207: 'recvMC', 208: 'lease', 209: 'python3'}
"""Thread names of an rclpy process on rmw_cyclonedds_cpp (receive threads per socket)."""


def _refuse(*args):
    raise PermissionError(1, 'Operation not permitted')


def _record(monkeypatch):
    calls = []
    monkeypatch.setattr(os, 'sched_setscheduler', lambda pid, policy, param: calls.append(
        (pid, policy, param.sched_priority)))
    monkeypatch.setattr(os, 'sched_setaffinity', lambda pid, cpus: calls.append((pid, cpus)))
    return calls


def test_fast_dds_threads_are_its_dds_prefixed_ones():
    assert sorted(realtime.dds_threads(FASTDDS)) == [101, 102, 103]


def test_cyclonedds_receive_delivery_and_event_threads_are_picked_not_housekeeping():
    picked = realtime.dds_threads(CYCLONEDDS)
    assert sorted(picked.values()) == ['dq.builtins', 'dq.user', 'recv', 'recvMC', 'recvUC',
                                       'tev']
    assert 'gc' not in picked.values() and 'lease' not in picked.values()


def test_schedule_dds_threads_reports_what_got_priority(monkeypatch):
    calls = _record(monkeypatch)
    scheduled, warnings = realtime.schedule_dds_threads(70, CYCLONEDDS)
    assert warnings == []
    assert scheduled == ['dq.builtins/202', 'dq.user/203', 'tev/204', 'recv/205',
                         'recvUC/206', 'recvMC/207']
    assert calls == [(tid, os.SCHED_FIFO, 70) for tid in (202, 203, 204, 205, 206, 207)]
    assert realtime.schedule_dds_threads(0, CYCLONEDDS) == ([], [])
    assert len(calls) == 6


def test_schedule_dds_threads_refused_or_absent_warns(monkeypatch):
    monkeypatch.setattr(os, 'sched_setscheduler', _refuse)
    scheduled, warnings = realtime.schedule_dds_threads(70, FASTDDS)
    assert scheduled == [] and len(warnings) == 1
    assert 'not permitted' in warnings[0] and 'dds.udp.7412/101' in warnings[0]
    scheduled, warnings = realtime.schedule_dds_threads(70, {1: 'python3', 2: 'worker'})
    assert scheduled == [] and 'none found' in warnings[0]


def test_thread_names_finds_a_thread_named_as_cyclonedds_names_its_receive_thread():
    libc = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6', use_errno=True)
    if not os.path.isdir('/proc/self/task') or not hasattr(libc, 'prctl'):
        pytest.skip('needs Linux (/proc/self/task, prctl)')
    ready, done, tid = threading.Event(), threading.Event(), []

    def body():
        libc.prctl(15, b'recvUC', 0, 0, 0)   # PR_SET_NAME, as CycloneDDS names its thread
        tid.append(threading.get_native_id())
        ready.set()
        done.wait(5.0)

    t = threading.Thread(target=body)
    t.start()
    ready.wait(5.0)
    try:
        names = realtime.thread_names()
        assert names[tid[0]] == 'recvUC'
        assert realtime.dds_threads(names)[tid[0]] == 'recvUC'
    finally:
        done.set()
        t.join()


def test_schedule_thread_not_permitted_warns_and_goes_on(monkeypatch):
    monkeypatch.setattr(os, 'sched_setscheduler', _refuse)
    monkeypatch.setattr(os, 'sched_setaffinity', _refuse)
    warnings = realtime.schedule_thread(80, cpu=1)
    assert len(warnings) == 2
    assert 'SCHED_FIFO priority 80 not permitted' in warnings[0]
    assert 'normal scheduling' in warnings[0]
    assert 'CPU 1' in warnings[1]


def test_schedule_thread_asks_for_what_is_set(monkeypatch):
    calls = _record(monkeypatch)
    assert realtime.schedule_thread(0, -1) == []
    assert calls == []
    assert realtime.schedule_thread(42, 0) == []
    assert calls == [(0, os.SCHED_FIFO, 42), (0, {0})]


def test_schedule_thread_without_the_calls(monkeypatch):
    # A platform without sched_setscheduler (not Linux) also fails soft.
    monkeypatch.delattr(os, 'sched_setscheduler')
    assert 'not permitted' in realtime.schedule_thread(10)[0]


@pytest.mark.ros
@pytest.mark.parametrize('rmw', ['rmw_fastrtps_cpp', 'rmw_cyclonedds_cpp'])
def test_policy_node_logs_which_dds_threads_got_priority(rmw):
    pytest.importorskip('rclpy')
    pytest.importorskip('unitree_hg.msg', reason='unitree_hg is not built')
    from ament_index_python.packages import PackageNotFoundError, get_package_prefix
    try:
        get_package_prefix(rmw)
    except PackageNotFoundError:
        pytest.skip(f'{rmw} is not installed here (there is no PyPI wheel for it)')
    env = dict(os.environ, RMW_IMPLEMENTATION=rmw, PYTHONPATH=str(REPO),
               ROS_DOMAIN_ID=str(random.randint(31, 99)))
    proc = subprocess.Popen([sys.executable, '-m', 'bcg_ros.nodes.policy_node', '--ros-args',
                             '-p', 'autostart:=true', '-p', 'dds_priority:=70'],
                            env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30.0
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if 'DDS threads' in line:
            break
    log = ''.join(lines) + testing.stop_process(proc)
    if 'not permitted' in log:
        pytest.skip('this process may not have SCHED_FIFO; the warning names the threads')
    prefix = {'rmw_fastrtps_cpp': 'dds.', 'rmw_cyclonedds_cpp': 'recv'}[rmw]
    got = next(line for line in log.splitlines() if 'DDS threads at SCHED_FIFO 70' in line)
    assert prefix in got, got
