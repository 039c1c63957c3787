"""
Running the launch files and the README's `ros2` commands for real, for the `launch` tests.

A ROS 2 install, or the venv after scripts/install.sh --ros-sources DIR, provides
`ros2` and the launch packages; without them the launch tests skip saying so. Each
test module works in a DDS domain of its own, passed to every command it runs and to
its in-process listener, and stops the `ros2` daemon it may have started.
"""

import os
import pathlib
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
README = REPO / 'README.md'
ROS2 = shutil.which('ros2', path=os.pathsep.join([os.path.dirname(sys.executable),
                                                  os.environ.get('PATH', '')]))
NO_LAUNCH = ('the ROS 2 launch system and command line are not installed (no PyPI wheels): '
             'scripts/install.sh --ros-sources DIR installs them from upstream sources, a '
             'ROS 2 install has them')
GRACE_S = 5.0
"""Seconds a stopped command's processes get to end after it did."""
NO_RSP_RVIZ = ('use_rviz:=false', 'robot_state_publisher:=false')
"""rviz2 and robot_state_publisher are C++ nodes with no PyPI wheel: the launch tests run
without them (test_launch_monitor checks the launch's message where they are missing)."""


def require_ros2() -> str:
    """The `ros2` executable, or skip the calling test with what to install."""
    import importlib.util
    if ROS2 is None or importlib.util.find_spec('launch_ros') is None:
        pytest.skip(NO_LAUNCH)
    return ROS2


def readme_commands(marker: str) -> List[str]:
    """Return the shell lines of the README's block after ``<!-- marker -->``, no comments."""
    text = README.read_text()
    match = re.search(rf'<!-- {re.escape(marker)} -->\s*```bash\n(.*?)```', text, re.S)
    assert match, f'README.md: no ```bash block after <!-- {marker} -->'
    lines = [line.split('  #')[0].strip() for line in match.group(1).splitlines()]
    return [line for line in lines if line and not line.startswith('#')]


class Domain:
    """One DDS domain: the environment of every command a test runs in it."""

    def __init__(self, tmp: pathlib.Path):
        # Away from conftest's session domain (100-200) and the node-set tests' (30-99,
        # 201-230), so parallel runs on one machine do not hear each other.
        self.id = random.randint(1, 29)
        self.env = dict(os.environ, ROS_DOMAIN_ID=str(self.id), PYTHONUNBUFFERED='1',
                        RCUTILS_COLORIZED_OUTPUT='0')
        self.tmp = tmp

    def ros2(self, command: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
        """Run a `ros2 ...` command line to its end; its stdout and stderr together."""
        argv = shlex.split(command)
        assert argv[0] == 'ros2', command
        try:
            return subprocess.run([require_ros2(), *argv[1:]], env=self.env, cwd=REPO,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            out = exc.output.decode() if isinstance(exc.output, bytes) else exc.output or ''
            return subprocess.CompletedProcess(argv, None, f'{out}[no end in {timeout} s]')

    def ros2_for(self, command: str, seconds: float, until: Optional[str] = None,
                 limit: float = 60.0) -> str:
        """
        Run a never-ending `ros2 ...` command (topic hz) for ``seconds``; what it printed.

        With ``until`` (a regex) it runs on past ``seconds`` until its output matches, at
        most ``limit`` seconds: under load the CLI alone can take seconds to start and to
        discover the publisher, so a fixed window may end before its first report.
        """
        argv = shlex.split(command)
        proc = subprocess.Popen([require_ros2(), *argv[1:]], env=self.env, cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: List[str] = []

        def read() -> None:
            for line in proc.stdout:
                lines.append(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        t0 = time.monotonic()
        time.sleep(seconds)
        while until and not re.search(until, ''.join(lines)) \
                and time.monotonic() - t0 < limit and proc.poll() is None:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=5.0)
        return ''.join(lines)

    def wait_listed(self, command: str, names, timeout: float) -> List[str]:
        """
        Run ``command`` (`ros2 node list`, `ros2 lifecycle nodes`) until it lists all ``names``.

        The `ros2` verbs that look a node up (lifecycle, param) ask the `ros2` daemon, which
        the first of them starts, and `ros2 lifecycle set` answers "Node not found" until
        the daemon's graph holds the node's lifecycle services: so an operator, and a test,
        first checks that the nodes are listed. Returns the names not listed in time.
        """
        deadline = time.monotonic() + timeout
        while True:
            listed = set(self.ros2(command).stdout.split())
            missing = sorted(set(names) - listed)
            if not missing or time.monotonic() > deadline:
                return missing
            time.sleep(0.5)

    def stop_daemon(self) -> None:
        """Stop the `ros2` daemon the CLI starts for this domain (it outlives the test)."""
        self.ros2('ros2 daemon stop', timeout=30.0)


class Launch:
    """
    A `ros2 launch ...` or `ros2 run ...` command line in the background, output in a file.

    ``extra`` arguments go at its end (launch arguments, ``-p name:=value``).
    """

    def __init__(self, domain: Domain, command: str, *extra: str):
        argv = shlex.split(command) + list(extra)
        assert argv[:2] in (['ros2', 'launch'], ['ros2', 'run']), command
        self.command = ' '.join(argv)
        self.stop_s = None
        """Seconds from Ctrl-C to the launch's end."""
        self.log_path = domain.tmp / f'{argv[1]}_{argv[3].split(".")[0]}.log'
        self._log = open(self.log_path, 'w')
        # A process group of its own, as a shell gives a command, so that stop() is Ctrl-C.
        self.proc = subprocess.Popen([require_ros2(), *argv[1:]], env=domain.env, cwd=REPO,
                                     stdout=self._log, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.left_running = None
        """After stop(): the processes of its group still running GRACE_S after it ended
        (then killed): what a Ctrl-C would have left behind."""

    def group(self) -> List[int]:
        """The processes of its process group that still run (not zombies)."""
        return [pid for pid, (state, group) in _processes().items()
                if group == self.proc.pid and state != 'Z']

    def log(self) -> str:
        """Everything the launch and its nodes printed so far."""
        return self.log_path.read_text()

    def pids(self) -> Dict[str, int]:
        """The processes the launch started, by launch name (e.g. policy_node-2)."""
        return {m.group(1): int(m.group(2)) for m in
                re.finditer(r'\[INFO\] \[(\S+)\]: process started with pid \[(\d+)\]',
                            self.log())}

    def wait_for(self, pattern: str, timeout: float) -> Optional[re.Match]:
        """Wait until the log matches ``pattern`` (or the launch ends, or ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.log())
            if match or self.proc.poll() is not None:
                return match
            time.sleep(0.2)
        return None

    def stop(self, timeout: float = 30.0) -> int:
        """
        Ctrl-C it as a terminal does (SIGINT to its process group); its exit code.

        SIGKILL to the group after ``timeout``. Whatever of the group still runs GRACE_S
        after it ended is noted in ``left_running`` and killed.
        """
        if self.proc.poll() is None:
            t0 = time.monotonic()
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self.stop_s = time.monotonic() - t0
        if self.left_running is None:
            deadline = time.monotonic() + GRACE_S
            while self.group() and time.monotonic() < deadline:
                time.sleep(0.1)
            self.left_running = self.group()
            for pid in self.left_running:
                os.kill(pid, signal.SIGKILL)
            self._log.close()
        return self.proc.returncode


def _processes() -> Dict[int, tuple]:
    """{pid: (state, process group)} of every process, from /proc."""
    out = {}
    for stat in pathlib.Path('/proc').glob('[0-9]*/stat'):
        try:
            fields = stat.read_text().rsplit(')', 1)[1].split()
        except OSError:
            continue
        out[int(stat.parent.name)] = (fields[0], int(fields[2]))
    return out


def running(pids: Dict[str, int]) -> List[str]:
    """The names of ``pids`` whose process still runs (not a zombie)."""
    processes = _processes()
    return [name for name, pid in pids.items() if processes.get(pid, ('Z',))[0] != 'Z']


class Listener:
    """Time-stamps the messages of some topics in this process; keeps the newest of each."""

    def __init__(self, domain_id: int, topics: Dict[str, tuple]):
        """``topics``: {key: (message type, topic, QoS or depth, raw)}."""
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        from bcg_ros import testing
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        self.node = rclpy.create_node('launch_test_listener', context=self.context)
        self.lock = threading.Lock()
        self.times = {key: [] for key in topics}
        self.last = {}
        for key, (msg_type, topic, qos, raw) in topics.items():
            self.node.create_subscription(msg_type, topic, self._keep(key), qos, raw=raw)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.spinner = testing.Spinner(self.executor)

    def _keep(self, key):
        def cb(msg):
            with self.lock:
                self.times[key].append(time.monotonic())
                self.last[key] = msg
        return cb

    def counts(self, since: float = 0.0) -> Dict[str, int]:
        """Messages of each topic received after ``since`` (time.monotonic())."""
        with self.lock:
            return {k: sum(1 for t in v if t >= since) for k, v in self.times.items()}

    def wait(self, keys, timeout: float, since: float = 0.0) -> List[str]:
        """Wait until each of ``keys`` got a message after ``since``; those that did not."""
        deadline = time.monotonic() + timeout
        while True:
            counts = self.counts(since)
            missing = sorted(k for k in keys if not counts[k])
            if not missing or time.monotonic() > deadline:
                return missing
            time.sleep(0.1)

    def wait_for_services(self, names, timeout: float) -> List[str]:
        """Wait until every service in ``names`` is on the graph; those that are not."""
        deadline = time.monotonic() + timeout
        while True:
            present = {name for name, _ in self.node.get_service_names_and_types()}
            missing = sorted(set(names) - present)
            if not missing or time.monotonic() > deadline:
                return missing
            time.sleep(0.2)

    def latest(self, key):
        """The newest message of ``key``, or None."""
        with self.lock:
            return self.last.get(key)

    def close(self) -> None:
        """Stop listening and leave the domain."""
        import rclpy
        self.spinner.stop()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)
