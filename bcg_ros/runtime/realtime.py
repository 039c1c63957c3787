"""
Real-time scheduling for the command path: the command thread and the DDS threads under it.

The LowState reaches policy_node through the DDS middleware's own receive threads,
which then wake the command thread; under load both must run ahead of the machine's
other work, so both get SCHED_FIFO where the process may have it (root, or
``CAP_SYS_NICE``, or an rtprio limit in /etc/security/limits.conf). Everything here
fails soft: a setting that is refused comes back as a warning and the thread goes on
with normal scheduling.

The DDS threads are found by name (``/proc/self/task/*/comm``, at most 15
characters). Each middleware names its own:

- Fast DDS (rmw_fastrtps_cpp): ``dds.udp.<port>``, ``dds.shm.<port>`` (receive),
  ``dds.ev.<id>`` (events), ... -- all start with ``dds.``;
- CycloneDDS (rmw_cyclonedds_cpp, which the G1's guides use): ``recv``, ``recvUC``,
  ``recvMC`` (receive), ``dq.user``, ``dq.builtins`` (delivery queues), ``tev``
  (timed events: heartbeats and acknowledgements). Its ``gc`` and ``lease``
  threads are housekeeping and keep normal scheduling.
"""

import os
from typing import Dict, List, Mapping, Tuple

DDS_THREAD_PREFIXES: Dict[str, Tuple[str, ...]] = {
    'fastdds': ('dds.',),
    'cyclonedds': ('recv', 'dq.', 'tev'),
}
"""Name prefixes of the threads that receive and deliver DDS data, per middleware."""


def thread_names() -> Dict[int, str]:
    """This process's threads, id -> name (empty where /proc is not there)."""
    names = {}
    try:
        tids = os.listdir('/proc/self/task')
    except OSError:
        return names
    for tid in tids:
        try:
            with open(f'/proc/self/task/{tid}/comm') as f:
                names[int(tid)] = f.read().strip()
        except (OSError, ValueError):
            continue   # the thread ended meanwhile
    return names


def dds_threads(names: Mapping[int, str],
                prefixes: Tuple[str, ...] = sum(DDS_THREAD_PREFIXES.values(), ())
                ) -> Dict[int, str]:
    """The threads among ``names`` (id -> name) whose name starts with one of ``prefixes``."""
    return {tid: name for tid, name in names.items() if name.startswith(prefixes)}


def schedule_thread(priority: int, cpu: int = -1) -> List[str]:
    """
    Give the calling thread SCHED_FIFO ``priority`` (0: leave it) and pin it to ``cpu`` (-1: any).

    Returns one warning per setting the process may not make (or the platform
    lacks); the thread goes on as it was for that setting.
    """
    warnings = []
    if priority > 0:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        except (AttributeError, OSError) as exc:
            warnings.append(f'command thread: SCHED_FIFO priority {priority} not permitted '
                            f'({exc}); running with normal scheduling')
    if cpu >= 0:
        try:
            os.sched_setaffinity(0, {cpu})
        except (AttributeError, OSError) as exc:
            warnings.append(f'command thread: cannot pin to CPU {cpu} ({exc})')
    return warnings


def schedule_dds_threads(priority: int, names: Mapping[int, str] = None
                         ) -> Tuple[List[str], List[str]]:
    """
    Give this process's DDS threads (:func:`dds_threads`) SCHED_FIFO ``priority``.

    ``names`` defaults to :func:`thread_names`. Returns the threads that got it
    (``name/id``) and the warnings: one for all that were refused, one when no DDS
    thread is found (a middleware that names its threads otherwise). 0 does nothing.
    """
    if priority <= 0:
        return [], []
    found = dds_threads(thread_names() if names is None else names)
    if not found:
        return [], [f'DDS threads: none found by name (looked for '
                    f'{", ".join(sum(DDS_THREAD_PREFIXES.values(), ()))}); '
                    f'they run with normal scheduling']
    done, failed = [], []
    for tid, name in sorted(found.items()):
        try:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(priority))
            done.append(f'{name}/{tid}')
        except (AttributeError, OSError) as exc:
            failed.append(f'{name}/{tid} ({exc})')
    warnings = []
    if failed:
        warnings.append(f'DDS threads: SCHED_FIFO priority {priority} not permitted for '
                        f'{", ".join(failed[:3])}{"..." if len(failed) > 3 else ""}; '
                        f'they run with normal scheduling')
    return done, warnings
