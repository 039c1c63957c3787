"""
A policy over DDS, as the robot runs it: g1_sim_node and policy_node as their own processes.

Each trial starts both nodes on a private ROS domain, on the simulator's clock
(``publish_clock``, ``use_sim_time``), and drives policy_node as an operator
does with the README's sim2sim commands: configure, activate, stand on the
gantry (the elastic band), the band off, start. It then watches the simulator's
ground truth (``~/odom``) and policy_node's mode for the clip and ``--hold``
seconds more: a trial falls when the pelvis goes below 0.3 m or policy_node
drops to damping (the reason is printed: a tilt past ``max_tilt`` is a fall the
robot's executor caught). Unlike ``bcg-eval``, which steps MuJoCo and the
policy in one process, here the state reaches the policy, and its command the
motors, through DDS and the executor's threads, with their latency.

policy_node's ``stale_timeout`` and ``policy_timeout`` are ``--timeout-scale``
times the shipped ones by default, as in the sim2sim launch test: on a loaded
machine a Python simulator's LowState stream can pause longer than 20 ms, which
would be reported as a stale-state e-stop, not as the policy's doing.
"""

import os
import subprocess
import sys
import threading
import time
from typing import List, Optional

import numpy as np


def add_arguments(parser):
    """Benchmark options."""
    parser.add_argument('policy', nargs='?', default='',
                        help='policy ONNX file (default: the shipped default policy)')
    parser.add_argument('--trials', type=int, default=5, help='trials, one process pair each')
    parser.add_argument('--seed', type=int, default=0,
                        help="trial i uses seed + i (the simulator's sensor noise; with "
                             '--physics-seeds its perturbed robot too)')
    parser.add_argument('--physics-seeds', action='store_true',
                        help='simulate a perturbed robot per trial (physics_params seed:N: '
                             'frictions, masses, motor strength, ground, control latency)')
    parser.add_argument('--model', default='', help='G1 MJCF (default: the project\'s)')
    parser.add_argument('--real-time-factor', type=float, default=0.5,
                        help='simulated seconds per wall second')
    parser.add_argument('--hold', type=float, default=1.6,
                        help='seconds watched past the end of the clip')
    parser.add_argument('--timeout-scale', type=float, default=5.0,
                        help="factor on policy_node's stale_timeout and policy_timeout")
    parser.add_argument('--param', action='append', default=[], metavar='NAME:=VALUE',
                        help='extra policy_node parameter (repeatable)')


def _clip_seconds(policy: str) -> float:
    """Length of the clip the policy runs [s] (0 for a policy without one)."""
    from bcg_ros.runtime.runner import PolicyRunner
    runner = PolicyRunner(policy)
    if runner.motion is None:
        return 0.0
    return runner.motion.num_frames * runner.contract.control_dt


class _Watcher:
    """The simulator's clock and odometry, policy_node's mode and its reason."""

    def __init__(self, node):
        from diagnostic_msgs.msg import DiagnosticStatus
        from nav_msgs.msg import Odometry
        from rosgraph_msgs.msg import Clock
        self.node = node
        self.lock = threading.Lock()
        self.clock = 0.0
        self.odom: List[tuple] = []
        self.mode, self.reason = '', ''
        self.action_age = (float('nan'), float('nan'))
        node.create_subscription(Clock, '/clock', self._on_clock, 10)
        node.create_subscription(Odometry, '/g1_sim_node/odom', self._on_odom, 10)
        node.create_subscription(DiagnosticStatus, '/policy_node/status', self._on_status, 10)

    def _on_clock(self, msg):
        self.clock = msg.clock.sec + msg.clock.nanosec * 1e-9

    def _on_odom(self, msg):
        p = msg.pose.pose.position
        with self.lock:
            self.odom.append((self.clock, p.x, p.y, p.z))

    def _on_status(self, msg):
        values = {v.key: v.value for v in msg.values}
        self.mode, self.reason = values.get('mode', ''), values.get('reason', '')
        if values.get('action_age_ms_p50'):
            self.action_age = (float(values['action_age_ms_p50']),
                               float(values['action_age_ms_p99']))

    def wait_clock(self, until: float, wall_timeout: float) -> bool:
        deadline = time.monotonic() + wall_timeout
        while self.clock < until:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def call(self, srv_type, name: str, request, timeout: float = 30.0):
        client = self.node.create_client(srv_type, name)
        try:
            if not client.wait_for_service(timeout_sec=timeout):
                raise RuntimeError(f'{name}: no service within {timeout:.0f} s')
            future = client.call_async(request)
            deadline = time.monotonic() + timeout
            while not future.done():
                if time.monotonic() > deadline:
                    raise RuntimeError(f'{name}: no answer within {timeout:.0f} s')
                time.sleep(0.01)
            return future.result()
        finally:
            self.node.destroy_client(client)


def _trial(watcher: _Watcher, seconds: float, rtf: float) -> dict:
    """Drive one started pair of nodes; return what happened."""
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState
    from std_srvs.srv import SetBool, Trigger
    for transition in (Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE):
        request = ChangeState.Request()
        request.transition.id = transition
        if not watcher.call(ChangeState, '/policy_node/change_state', request).success:
            raise RuntimeError(f'policy_node refused lifecycle transition {transition}')
    deadline = time.monotonic() + 60.0
    while not watcher.call(Trigger, '/policy_node/stand', Trigger.Request()).success:
        if time.monotonic() > deadline:
            raise RuntimeError('policy_node received no LowState within 60 s')
        time.sleep(0.2)
    from bcg_ros.runtime.modes import ExecutorConfig
    stand = ExecutorConfig().stand_duration
    watcher.wait_clock(watcher.clock + stand + 0.3, 10.0 * (stand + 0.3) / rtf + 30.0)
    if not watcher.call(SetBool, '/g1_sim_node/elastic_band', SetBool.Request(data=False)).success:
        raise RuntimeError('g1_sim_node did not release the elastic band')
    watcher.wait_clock(watcher.clock + 0.5, 10.0 * 0.5 / rtf + 30.0)
    answer = watcher.call(Trigger, '/policy_node/start', Trigger.Request())
    if not answer.success:
        raise RuntimeError(f'policy_node did not start: {answer.message}')
    t0 = watcher.clock
    deadline = time.monotonic() + 10.0 * seconds / rtf + 60.0
    while watcher.clock < t0 + seconds and time.monotonic() < deadline:
        if watcher.mode == 'damping':
            break
        time.sleep(0.02)
    elapsed, damped, reason = watcher.clock - t0, watcher.mode == 'damping', watcher.reason
    age = watcher.action_age
    with watcher.lock:
        odom = np.array([o for o in watcher.odom if o[0] >= t0])
    watcher.call(Trigger, '/policy_node/stop', Trigger.Request())
    if not len(odom):
        raise RuntimeError('no odometry from g1_sim_node')
    from bcg_ros.eval.rollout import RolloutConfig
    low = odom[:, 3] < RolloutConfig().fall_height   # the evaluator's rule
    fell_at = float(odom[np.argmax(low), 0] - t0) if low.any() else None
    return {'seconds': float(elapsed), 'min_height': float(odom[:, 3].min()),
            'travel': float(np.hypot(*(odom[-1, 1:3] - odom[0, 1:3]))),
            'fell_at': fell_at, 'damping': reason if damped else '',
            'fell': fell_at is not None or damped, 'action_age_ms': age}


def _spawn(module: str, domain: int, params: List[str]) -> subprocess.Popen:
    """Run a node module on ``domain`` with its defaults and ``params`` (NAME:=VALUE)."""
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), PYTHONUNBUFFERED='1')
    args = [a for p in params for a in ('-p', p)]
    return subprocess.Popen([sys.executable, '-m', module, '--ros-args', *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def run(args) -> int:
    """Run the trials and print them; the last line is sim2sim_falls."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from bcg_ros import policies, testing
    from bcg_ros.runtime.modes import ExecutorConfig
    policy = args.policy or str(policies.path())
    trials = 2 if args.quick else args.trials
    seconds = _clip_seconds(policy) + args.hold
    if seconds <= 0:
        print(f'{policy}: no clip to run; give --hold seconds')
        return 1
    defaults = ExecutorConfig()
    scale = args.timeout_scale
    domain = 100 + os.getpid() % 100
    rclpy.init(domain_id=domain)
    node = rclpy.create_node('bench_sim2sim')
    watcher = _Watcher(node)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    results: List[Optional[dict]] = []
    load_before = os.getloadavg()[0]
    try:
        for i in range(trials):
            seed = args.seed + i
            sim_params = [f'real_time_factor:={args.real_time_factor}', 'publish_clock:=true',
                          'use_sim_time:=true', 'elastic_band:=true', f'seed:={seed}']
            if args.physics_seeds:
                sim_params.append(f'physics_params:=seed:{seed}')
            if args.model:
                sim_params.append(f'model_path:={args.model}')
            sim = _spawn('bcg_ros.nodes.g1_sim_node', domain, sim_params)
            pol = _spawn('bcg_ros.nodes.policy_node', domain, [
                f'policy_path:={policy}', 'use_sim_time:=true',
                f'stale_timeout:={scale * defaults.stale_timeout}',
                f'policy_timeout:={scale * defaults.policy_timeout}', *args.param])
            with watcher.lock:
                watcher.odom.clear()
            watcher.clock, watcher.mode, watcher.reason = 0.0, '', ''
            watcher.action_age = (float('nan'), float('nan'))
            try:
                r = _trial(watcher, seconds, args.real_time_factor)
            except RuntimeError as exc:
                print(f'trial {i} (seed {seed}): not run: {exc}', flush=True)
                r = None
            finally:
                testing.stop_process(pol, 10.0)
                testing.stop_process(sim, 10.0)
            results.append(r)
            if r is not None:
                what = (f'damping ({r["damping"]}) at {r["seconds"]:.2f} s' if r['damping']
                        else f'fell at {r["fell_at"]:.2f} s' if r['fell_at'] is not None
                        else f'up for {r["seconds"]:.2f} s')
                print(f'trial {i} (seed {seed}): {what}; pelvis down to {r["min_height"]:.2f} m, '
                      f'travelled {r["travel"]:.2f} m; action age p50 '
                      f'{r["action_age_ms"][0]:.1f} ms, p99 {r["action_age_ms"][1]:.1f} ms',
                      flush=True)
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown()
    done = [r for r in results if r is not None]
    load = os.getloadavg()
    print(f'policy {policy}, {seconds:.1f} s per trial at real-time factor '
          f'{args.real_time_factor}; machine: {os.cpu_count()} CPUs, load average '
          f'{load_before:.2f} before, {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} after')
    if not done:
        print('no trial ran')
        return 1
    ages = np.array([r['action_age_ms'] for r in done if np.isfinite(r['action_age_ms'][0])])
    if len(ages):
        print(f'action age (LowState acted on to the LowCmd with its targets, simulated ms): '
              f'median over trials p50 {np.median(ages[:, 0]):.1f}, '
              f'p99 {np.median(ages[:, 1]):.1f}')
    print(f'sim2sim_falls: {sum(r["fell"] for r in done)}/{len(done)}')
    return 0
