"""
policy_node: runs an ONNX policy on the G1 over unitree_hg LowState/LowCmd.

A lifecycle node. configure loads the policy and checks its contract against
the G1; activate refuses while another node publishes on /lowcmd, then starts
the 500 Hz command thread and the 50 Hz policy thread. Modes, safety rules and
commands are those of :mod:`bcg_ros.runtime.modes`; this node only moves messages.

Interfaces (names relative to the node, ``~``):

- subscribes ``/lowstate`` (unitree_hg/LowState), publishes ``/lowcmd``
  (unitree_hg/LowCmd, crc stamped) while active;
- services ``~/stand``, ``~/start``, ``~/stop`` (e-stop), ``~/reset``
  (std_srvs/Trigger);
- ``~/mode`` (std_msgs/String, transient local): the mode, on every change;
- ``~/status`` (diagnostic_msgs/DiagnosticStatus, 10 Hz and on every change):
  message ``"<mode>: <why it entered it>"``, level OK, or WARN in passive with
  a failing rule, or ERROR in damping; values mode, previous, reason, fault,
  tick_faults, lowstate_age_ms, commands_sent, policy, command_path_ms_p50 and
  _p99 (the node's own time from a LowState taken to its LowCmd published, over the
  last 1000 answered), action_age_ms_p50 and _p99 (from the LowState a policy step
  acted on to the first LowCmd carrying its targets, over the last 500 steps: the
  latency the policy has to stand, in simulated time on sim time);
- ``~/mode_marker`` (visualization_msgs/MarkerArray, with ``~/status``): the mode
  and its reason as text above the pelvis, for rviz.

The command thread wakes on each LowState and sends at once (so the command
follows the state by one hop), and falls back to its own 500 Hz clock when
the state stream pauses, so damping keeps going out when the robot goes quiet.
While active, the command thread takes the LowState messages itself: it waits
on the /lowstate subscription directly (the executor leaves that subscription
alone then), reads the serialized message, and publishes the LowCmd as bytes
it serializes with numpy, so that nothing on the way from a LowState to its
LowCmd passes through the executor or another thread. It runs with real-time
priority (``command_priority``, SCHED_FIFO) where the process may have it, and
so do the process's DDS threads (``dds_priority``); the process asks a thread
holding the GIL to hand it over every ``switch_interval`` (Python's default is
5 ms). On its own clock it sleeps until ``spin_margin`` before the deadline
and polls from there. While the node is inactive the executor takes the
LowState messages instead.

Time is the monotonic wall clock, or with ``use_sim_time`` the ROS clock that
follows /clock (g1_sim_node ``publish_clock``): every duration of the rules
(stale_timeout, stand_duration, policy_timeout), the policy period and the
command fallback period are then simulated seconds, so a simulator running
slower or faster than real time sees the robot's timing. A clock that goes
back (a simulator reset) restarts the schedules from the new time.
"""

import sys
import collections
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.clock import JumpThreshold
from rclpy.duration import Duration
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.qos import (DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy)
from std_msgs.msg import String
from std_srvs.srv import Trigger
from visualization_msgs.msg import Marker, MarkerArray

from bcg_ros.nodes import diagnostics, params, spin
from bcg_ros.robot import g1, lowlevel
from bcg_ros.runtime import modes, realtime
from bcg_ros.runtime.runner import PolicyRunner, clip_command, stick_command


@dataclass(frozen=True)
class PolicyNodeConfig:
    """What policy_node runs and where it talks; the executor's rules are ExecutorConfig."""

    policy_path: str = ''
    """ONNX policy file; empty: stand and damping only (start is refused)."""
    motion: str = ''
    """Reference motion (file or built-in name) for policies that observe one; empty: the
    built-in clip the policy's contract names."""
    motion_joint_order: str = ''
    """Column order of a motion file that names no joints ('isaaclab' for BeyondMimic
    npz files, or 'motor'); empty: the file must name them."""
    velocity_source: str = 'remote'
    """Velocity command of a velocity policy: 'remote' (the wireless remote's sticks in
    LowState, scaled into the policy's trained ranges) or 'cmd_vel' (a
    geometry_msgs/Twist on cmd_vel_topic, clipped to them)."""
    cmd_vel_topic: str = '/cmd_vel'
    """Twist topic read when velocity_source is 'cmd_vel'."""
    cmd_vel_timeout: float = 0.5
    """A Twist older than this commands zero [s]."""
    stick_dead_band: float = 0.1
    """Stick deflection read as zero (of a full deflection of 1)."""
    lowstate_topic: str = '/lowstate'
    """Robot state topic (unitree_hg/LowState)."""
    lowcmd_topic: str = '/lowcmd'
    """Robot command topic (unitree_hg/LowCmd)."""
    command_rate_hz: float = g1.LOWCMD_RATE_HZ
    """LowCmd rate when the state stream does not pace it [Hz]."""
    policy_threads: int = 1
    """onnxruntime intra-op threads."""
    autostart: bool = False
    """Configure and activate at startup (otherwise wait for lifecycle transitions)."""
    command_priority: int = 80
    """SCHED_FIFO priority of the command thread (1..99); 0: normal scheduling.
    Where the process may not have it, a warning is logged and the thread runs normally."""
    dds_priority: int = 70
    """SCHED_FIFO priority of the process's DDS threads, which receive the LowState
    (1..99); 0: normal scheduling. Fails soft like command_priority."""
    command_cpu: int = -1
    """CPU to pin the command thread to; -1: any."""
    switch_interval: float = 0.0005
    """How often Python asks the thread holding the GIL to let a waiting one run
    (sys.setswitchinterval, process-wide) [s]; 0 keeps Python's default (5 ms)."""
    spin_margin: float = 0.0003
    """On its own clock the command thread sleeps until this long before the
    deadline, then polls until it [s]; 0: sleep the whole way."""

    def __post_init__(self):
        """Reject a rate, thread count or scheduling setting that cannot work, naming the field."""
        if self.motion_joint_order not in ('', 'isaaclab', 'motor'):
            raise ValueError(f"field motion_joint_order: '', 'isaaclab' or 'motor', got "
                             f'{self.motion_joint_order!r}')
        if self.velocity_source not in ('remote', 'cmd_vel'):
            raise ValueError(f"field velocity_source: 'remote' or 'cmd_vel', got "
                             f'{self.velocity_source!r}')
        if not self.cmd_vel_timeout > 0:
            raise ValueError(f'field cmd_vel_timeout: must be > 0, got {self.cmd_vel_timeout}')
        if not 0 <= self.stick_dead_band < 1:
            raise ValueError(f'field stick_dead_band: must be in [0, 1), '
                             f'got {self.stick_dead_band}')
        if not self.command_rate_hz > 0:
            raise ValueError(f'field command_rate_hz: must be > 0, got {self.command_rate_hz}')
        if self.policy_threads < 1:
            raise ValueError(f'field policy_threads: must be >= 1, got {self.policy_threads}')
        if not 0 <= self.command_priority <= 99:
            raise ValueError(f'field command_priority: must be in 0..99, '
                             f'got {self.command_priority}')
        if not 0 <= self.dds_priority <= 99:
            raise ValueError(f'field dds_priority: must be in 0..99, got {self.dds_priority}')
        if self.command_cpu < -1:
            raise ValueError(f'field command_cpu: must be >= -1, got {self.command_cpu}')
        if self.switch_interval < 0:
            raise ValueError(f'field switch_interval: must be >= 0, got {self.switch_interval}')
        if not 0 <= self.spin_margin < 1.0 / self.command_rate_hz:
            raise ValueError(f'field spin_margin: must be in [0, command period), '
                             f'got {self.spin_margin}')


class _HeldGroup(ReentrantCallbackGroup):
    """A callback group the executor runs only while no thread holds it."""

    def __init__(self):
        super().__init__()
        self.held = False

    def can_execute(self, entity) -> bool:
        return not self.held and super().can_execute(entity)


class _StateReader:
    """Waits on one raw subscription outside the executor and takes its messages."""

    def __init__(self, sub, context):
        self._sub, self._context = sub, context
        with sub.handle, context.handle:
            self._wait_set = _rclpy.WaitSet(1, 0, 0, 0, 0, 0, context.handle)

    def take(self, timeout: float) -> Optional[bytes]:
        """The newest serialized message, waiting up to ``timeout`` seconds for one; or None."""
        with self._sub.handle, self._context.handle:
            if timeout > 0:
                self._wait_set.clear_entities()
                self._wait_set.add_subscription(self._sub.handle)
                self._wait_set.wait(int(timeout * 1e9))
            taken = self._sub.handle.take_message(self._sub.msg_type, True)
        return None if taken is None else taken[0]


LATE_STATE_PERIODS = 2.5
"""Command periods after the last command the loop waits for a LowState before it sends on
its own clock. The stream's arrival jitter over DDS reaches a millisecond on a loaded
machine; at 1.5 periods such a late LowState met an own-clock command just sent, was
skipped and answered a period later, which made the tail of ``bcg-bench executor``."""
FRESH_STATE_WAIT_S = 0.05
"""Wall seconds a policy step waits for its period's first LowState before it acts on the
newest it has (the stream has paused: the stale rule decides on damping, not this wait)."""
STATE_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1,
                       reliability=ReliabilityPolicy.BEST_EFFORT)
"""LowState: only the newest matters; best effort also matches a reliable publisher."""
CMD_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1,
                     reliability=ReliabilityPolicy.RELIABLE)
LATCHED_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1,
                         reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
MODE_COLOURS = {modes.Mode.PASSIVE: (0.7, 0.7, 0.7), modes.Mode.STAND: (0.2, 0.6, 1.0),
                modes.Mode.POLICY: (0.1, 0.9, 0.1), modes.Mode.DAMPING: (1.0, 0.2, 0.1)}


def mode_marker(mode: modes.Mode, reason: str, stamp) -> MarkerArray:
    """The mode and why, as text 0.6 m above the pelvis (rviz's 'Policy mode' display)."""
    m = Marker()
    m.header.stamp = stamp
    m.header.frame_id = g1.ROOT_BODY
    m.ns, m.id, m.type, m.action = 'policy_mode', 0, Marker.TEXT_VIEW_FACING, Marker.ADD
    m.pose.position.z = 0.6
    m.pose.orientation.w = 1.0
    m.scale.z = 0.08   # text height [m]
    m.color.a = 1.0
    m.color.r, m.color.g, m.color.b = MODE_COLOURS[mode]
    m.text = f'{mode.value}: {reason}' if reason else mode.value
    return MarkerArray(markers=[m])


class PolicyNode(LifecycleNode):
    """The lifecycle shell around :mod:`bcg_ros.runtime.modes`."""

    def __init__(self, name: str = 'policy_node', **kwargs):
        """Declare the parameters; everything else happens in on_configure."""
        super().__init__(name, **kwargs)
        params.declare(self, PolicyNodeConfig)
        params.declare(self, modes.ExecutorConfig)
        self._lock = threading.Lock()
        self._state_group = _HeldGroup()
        self._state_sub = None
        self._stop = threading.Event()
        self._threads = []
        self._state = modes.ExecState()
        self._policy_out: Optional[modes.PolicyOutput] = None
        self._runner: Optional[PolicyRunner] = None
        self._cmd_pub = None
        self._entities = []
        self._twist = None
        self._published_mode = None
        self.commands_sent = 0
        self._path_s = collections.deque(maxlen=1000)
        """Seconds from a LowState taken to its LowCmd published, the latest answered."""
        self._action_age_s = collections.deque(maxlen=500)
        """Seconds (node clock) from the LowState a policy step acted on to the first LowCmd
        that carried its targets: the latency the policy sees, the latest steps."""
        self._sent_out: Optional[modes.PolicyOutput] = None
        self._sim_time = bool(self.get_parameter('use_sim_time').value)
        self._clock_moved = threading.Condition()
        self._state_taken = threading.Condition()
        """Notified by the command thread after each LowState it takes in."""
        if self._sim_time:
            # Every /clock message moves the ROS clock forward: wake the sleepers then.
            self._clock_jump = self.get_clock().create_jump_callback(
                JumpThreshold(min_forward=Duration(nanoseconds=1), min_backward=None,
                              on_clock_change=True), post_callback=self._on_clock_jump)

    # --- time --------------------------------------------------------------

    def _now(self) -> float:
        """Seconds on this node's clock: monotonic wall time, or /clock with use_sim_time."""
        if self._sim_time:
            return self.get_clock().now().nanoseconds * 1e-9
        return time.monotonic()

    def _on_clock_jump(self, jump):
        with self._clock_moved:
            self._clock_moved.notify_all()

    def _sleep_until(self, t: float, between: Optional[Callable[[], None]] = None) -> bool:
        """
        Sleep until ``t`` on this node's clock; False when stopped or the clock went back.

        ``between`` runs on each wake-up: after each LowState in real time, each /clock
        message on sim time.
        """
        start = t - self._now()
        while not self._stop.is_set():
            if between is not None:
                between()
            remaining = t - self._now()
            if remaining <= 0:
                return True
            if remaining > start + 1e-3:
                return False   # the clock jumped back
            if not self._sim_time:
                with self._state_taken:
                    self._state_taken.wait(remaining)
                continue
            with self._clock_moved:
                # Woken by the next /clock message; the timeout only rechecks _stop.
                self._clock_moved.wait(0.05)
        return False

    def _await_state(self, t: float) -> None:
        """Wait for a LowState taken at ``t`` or later (at most FRESH_STATE_WAIT_S)."""
        def fresh():
            sample = self._state.sample
            return self._stop.is_set() or (sample is not None and sample.stamp >= t)
        with self._state_taken:
            self._state_taken.wait_for(fresh, FRESH_STATE_WAIT_S)

    def _feed_estimator(self) -> None:
        """Feed the LowStates taken since the last call to the policy's state estimator."""
        try:
            while self._velocity_samples:
                self._runner.observe_state(self._velocity_samples.popleft())
        except Exception as exc:  # noqa: B902 - a failing estimator must damp, not crash
            self._velocity_samples.clear()
            with self._lock:
                self._state = modes.fault(self._state, f'state estimator raised: {exc}',
                                          self._now())

    # --- lifecycle ---------------------------------------------------------

    def on_configure(self, state) -> TransitionCallbackReturn:
        """Read the parameters, load and check the policy, create the interfaces."""
        try:
            self.cfg = params.read(self, PolicyNodeConfig)
            self.ecfg = params.read(self, modes.ExecutorConfig)
            self._runner = self._load_policy() if self.cfg.policy_path else None
            # LowStates since the last policy step (500 Hz; a policy step comes every 20 ms).
            self._velocity_samples = collections.deque(maxlen=64)
        except Exception as exc:  # noqa: B902 - any load error refuses the transition
            self.get_logger().error(f'configure refused: {exc}')
            return TransitionCallbackReturn.FAILURE
        if self._runner is None:
            self.get_logger().warning('no policy_path: stand and damping only')
        else:
            c = self._runner.contract
            self.get_logger().info(f'policy {self.cfg.policy_path}: {c.num_joints} joints, '
                                   f'obs {c.obs_size}, dt {c.control_dt} s')
        if self.cfg.switch_interval > 0:
            sys.setswitchinterval(self.cfg.switch_interval)
        from unitree_hg.msg import LowState
        self._state = modes.ExecState(since=self._now())
        # Raw: the fields are read from the bytes (see lowlevel.read_lowstate_cdr).
        # While active the command thread holds its group and takes the messages.
        self._state_sub = self.create_subscription(
            LowState, self.cfg.lowstate_topic, self._on_lowstate, STATE_QOS, raw=True,
            callback_group=self._state_group)
        self._entities = [
            self._state_sub,
            self.create_service(Trigger, '~/stand', self._service(modes.Request.STAND)),
            self.create_service(Trigger, '~/start', self._service(modes.Request.START)),
            self.create_service(Trigger, '~/stop', self._service(modes.Request.STOP)),
            self.create_service(Trigger, '~/reset', self._service(modes.Request.RESET)),
        ]
        self._twist = None
        if self._runner is not None and self._runner.is_velocity_policy:
            self.get_logger().info(f'velocity command from {self.cfg.velocity_source}, ranges '
                                   f'{self._runner.command_ranges}')
            if self.cfg.velocity_source == 'cmd_vel':
                from geometry_msgs.msg import Twist
                self._entities.append(self.create_subscription(
                    Twist, self.cfg.cmd_vel_topic, self._on_twist, 10))
        self._mode_pub = self.create_publisher(String, '~/mode', LATCHED_QOS)
        self._status_pub = self.create_publisher(DiagnosticStatus, '~/status', 10)
        self._mode_marker_pub = self.create_publisher(MarkerArray, '~/mode_marker', 10)
        self._diagnostics = diagnostics.Publisher(self)
        self._status_timer = self.create_timer(0.1, self._publish_status)
        self._publish_status()
        return TransitionCallbackReturn.SUCCESS

    def _on_twist(self, msg):
        v = (msg.linear.x, msg.linear.y, msg.angular.z)
        with self._lock:
            self._twist = (v, self._now())

    def velocity_command(self, sample: lowlevel.LowStateSample, now: float):
        """The policy's (vx, vy, wz) now, from the configured source; None for other policies."""
        r = self._runner
        if r is None or not r.is_velocity_policy:
            return None
        if self.cfg.velocity_source == 'cmd_vel':
            with self._lock:
                twist = self._twist
            if twist is None or now - twist[1] > self.cfg.cmd_vel_timeout:
                return np.zeros(3)
            return clip_command(twist[0], r.command_ranges)
        try:
            remote = lowlevel.decode_remote(sample.remote)
        except lowlevel.CommandError:
            return np.zeros(3)
        return stick_command(remote, r.command_ranges, self.cfg.stick_dead_band)

    def _load_policy(self) -> PolicyRunner:
        motion = None
        if self.cfg.motion:
            from bcg_ros.motion import load_motion
            motion = load_motion(self.cfg.motion, control_dt=g1.CONTROL_DT,
                                 joint_order=self.cfg.motion_joint_order or None)
        return PolicyRunner(self.cfg.policy_path, motion=motion,
                            threads=self.cfg.policy_threads)

    def on_activate(self, state) -> TransitionCallbackReturn:
        """Refuse if /lowcmd has a publisher already; else start the command threads."""
        from unitree_hg.msg import LowCmd
        others = self.get_publishers_info_by_topic(self.cfg.lowcmd_topic)
        if others:
            names = sorted({f'{i.node_namespace.rstrip("/")}/{i.node_name}' for i in others})
            self.get_logger().error(f'activate refused: {self.cfg.lowcmd_topic} already has '
                                    f'publisher(s) {names}; only one node may command the robot')
            return TransitionCallbackReturn.FAILURE
        self._cmd_pub = self.create_publisher(LowCmd, self.cfg.lowcmd_topic, CMD_QOS)
        self._stop.clear()
        self._state_group.held = True
        self._threads = [threading.Thread(target=self._command_loop, name='lowcmd', daemon=True),
                         threading.Thread(target=self._policy_loop, name='policy', daemon=True)]
        for t in self._threads:
            t.start()
        self.get_logger().info(f'active: commanding {self.cfg.lowcmd_topic}')
        return super().on_activate(state)

    def on_deactivate(self, state) -> TransitionCallbackReturn:
        """Send damping, stop the threads and the /lowcmd publisher."""
        self._halt()
        return super().on_deactivate(state)

    def on_cleanup(self, state) -> TransitionCallbackReturn:
        """Drop the subscription, the services and the policy."""
        self._halt()
        for e in self._entities:
            if hasattr(e, 'topic_name'):
                self.destroy_subscription(e)
            else:
                self.destroy_service(e)
        self._entities = []
        self._state_sub = None
        self.destroy_timer(self._status_timer)
        self._runner = None
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state) -> TransitionCallbackReturn:
        """Leave the robot damping."""
        self._halt()
        return TransitionCallbackReturn.SUCCESS

    def _halt(self):
        if not self._threads:
            return
        self._stop.set()
        for t in self._threads:
            t.join(timeout=1.0)
        self._threads = []
        self._state_group.held = False
        if self.executor is not None:
            self.executor.wake()   # to wait on /lowstate again
        with self._lock:
            self._state = modes.request(self.ecfg, self._state, modes.Request.STOP, self._now(),
                                        source='deactivate')[0]
            sample = self._state.sample
        if sample is not None and self._cmd_pub is not None:
            # The robot holds its last command: make that one damping.
            cmd = lowlevel.damping_command(self.ecfg.damping_kd, sample.mode_machine,
                                           self.ecfg.mode_pr)
            self._cmd_pub.publish(lowlevel.serialize_lowcmd(cmd))
        if self._cmd_pub is not None:
            self.destroy_publisher(self._cmd_pub)
            self._cmd_pub = None
        self._publish_status()

    # --- callbacks ---------------------------------------------------------

    def _on_lowstate(self, raw):
        self._take_state(raw, self._now())

    def _take_state(self, raw: bytes, now: float):
        """Take in one serialized LowState received at ``now``."""
        try:
            sample = lowlevel.read_lowstate_cdr(raw, now)
        except lowlevel.CommandError as exc:
            self.get_logger().error(f'{self.cfg.lowstate_topic}: {exc}', throttle_duration_sec=1)
            return
        runner = self._runner
        if runner is not None and runner.velocity is not None:
            self._velocity_samples.append(sample)   # the policy thread feeds its estimator
        with self._lock:
            st, requests = modes.on_lowstate(self.ecfg, self._state, sample)
            for req in requests:
                st, ok, text = modes.request(
                    self.ecfg, st, req, sample.stamp, policy_ready=self._runner is not None,
                    source='remote')
                self.get_logger().info(f'remote {req.value}: {text}')
            self._state = st
        with self._state_taken:
            self._state_taken.notify_all()
        self._mode_changed()

    def _service(self, req: modes.Request):
        def handle(request, response):
            with self._lock:
                self._state, ok, text = modes.request(
                    self.ecfg, self._state, req, self._now(),
                    policy_ready=self._runner is not None, source='service')
            response.success, response.message = ok, text
            self.get_logger().info(f'{req.value}: {text}')
            self._mode_changed()
            return response
        return handle

    # --- threads -----------------------------------------------------------

    def _command_loop(self):
        """Send a LowCmd on each new LowState, or every period when none comes."""
        log = self.get_logger()
        warnings = realtime.schedule_thread(self.cfg.command_priority, self.cfg.command_cpu)
        scheduled, dds_warnings = realtime.schedule_dds_threads(self.cfg.dds_priority)
        for warning in warnings + dds_warnings:
            log.warning(warning)
        if self.cfg.command_priority > 0 and not any('SCHED_FIFO' in w for w in warnings):
            log.info(f'command thread at SCHED_FIFO {self.cfg.command_priority}')
        if scheduled:
            log.info(f'DDS threads at SCHED_FIFO {self.cfg.dds_priority}: '
                     f'{", ".join(scheduled)}')
        period = 1.0 / self.cfg.command_rate_hz
        # On sim time the waits are in wall seconds and a LowState wakes them
        # anyway: polling up to a deadline on the simulated clock makes no sense.
        margin = 0.0 if self._sim_time else self.cfg.spin_margin
        reader = _StateReader(self._state_sub, self.context)
        # The own clock counts from ``anchor``: the last send, or a LowState
        # that came too soon after it (so the clock follows the stream's phase
        # instead of locking half a period off it after a late LowState).
        last_send, synced = self._now(), False
        anchor = last_send
        while not self._stop.is_set():
            # While the state stream paces the loop, allow it LATE_STATE_PERIODS - 1
            # periods of lateness before the own clock takes over, so that a late
            # LowState is answered at once instead of skipped as too soon after an
            # own-clock command (and answered a period later).
            deadline = anchor + (LATE_STATE_PERIODS * period if synced else period)
            wait = min(max(0.0, deadline - self._now()), LATE_STATE_PERIODS * period)
            raw = reader.take(wait - margin)
            while raw is None and margin and self._now() < deadline \
                    and not self._stop.is_set():
                raw = reader.take(0.0)   # the last stretch: poll, not sleep
            if self._stop.is_set():
                break
            taken = time.monotonic()
            now = self._now()
            got = raw is not None
            if got:
                self._take_state(raw, now)
            if now < last_send:
                last_send = anchor = now   # the clock went back (a simulator reset)
            if not got and now < deadline:
                continue   # sim time runs slower than the wall: not due yet
            if got and now - last_send < 0.5 * period:
                # Too soon after the last command (the state comes faster than
                # the command rate, or just after an own-clock send): skip it,
                # and let the next deadline count from it.
                anchor, synced = now, True
                continue
            synced = got
            with self._lock:
                out = self._policy_out
                self._state, cmd = modes.on_tick(self.ecfg, self._state, now, out)
                driven = self._state.mode is modes.Mode.POLICY
            if cmd is not None and self._cmd_pub is not None:
                self._cmd_pub.publish(lowlevel.serialize_lowcmd(cmd))
                self.commands_sent += 1
                if got:
                    self._path_s.append(time.monotonic() - taken)
                if driven and out is not None and out is not self._sent_out:
                    self._sent_out = out
                    self._action_age_s.append(now - out.state_stamp)
            last_send = anchor = now
            self._mode_changed()

    def _policy_loop(self):
        """Step the policy every control period while in POLICY."""
        if self._runner is None:
            return
        dt = self._runner.contract.control_dt
        epoch = None
        next_t = self._now()
        while not self._stop.is_set():
            next_t += dt
            now = self._now()
            if next_t - now > dt:
                next_t = now + dt   # the clock went back (a simulator reset)
            if next_t > now:
                # The estimator takes each LowState as it comes, not ten at the step.
                if not self._sleep_until(next_t, self._feed_estimator):
                    continue
            else:
                next_t = now
            # Act on the first LowState of the period rather than on one up to a state
            # period old: its targets then reach the motors one state period after it.
            self._await_state(next_t)
            with self._lock:
                st = self._state
            if st.mode is not modes.Mode.POLICY or st.sample is None:
                continue
            if epoch != st.since:
                self._runner.reset()
                self._velocity_samples.clear()   # its estimator starts from the next one
                epoch = st.since
            try:
                self._feed_estimator()
                now = self._now()
                out = self._runner.step(st.sample, now, self.velocity_command(st.sample, now))
            except Exception as exc:  # noqa: B902 - a failing policy must damp, not crash
                with self._lock:
                    self._state = modes.fault(self._state, f'policy raised: {exc}',
                                              self._now())
                continue
            with self._lock:
                self._policy_out = out

    # --- status ------------------------------------------------------------

    def _mode_changed(self):
        with self._lock:
            mode = self._state.mode
            changed = mode is not self._published_mode
            self._published_mode = mode
        if changed:
            self._mode_pub.publish(String(data=mode.value))
            st = self._state
            self.get_logger().info(
                f'mode {st.previous.value if st.previous else "-"} -> {mode.value}: {st.reason}')
            self._publish_status()

    def _path_percentiles(self) -> dict:
        """
        command_path_ms_p50/_p99 and action_age_ms_p50/_p99 as text ('' before the first).

        command_path: a LowState taken to its LowCmd published (wall clock); action_age:
        the LowState a policy step acted on to the first LowCmd with its targets (node
        clock, simulated on sim time), the latency a policy has to stand.
        """
        out = {}
        for name, seconds in (('command_path', self._path_s),
                              ('action_age', self._action_age_s)):
            ms = np.array(seconds) * 1e3
            out.update({f'{name}_ms_p{q}': f'{np.percentile(ms, q):.3f}' if len(ms) else ''
                        for q in (50, 99)})
        return out

    def _publish_status(self):
        with self._lock:
            st = self._state
        level = DiagnosticStatus.OK
        if st.mode is modes.Mode.DAMPING:
            level = DiagnosticStatus.ERROR
        elif st.fault:
            level = DiagnosticStatus.WARN
        age = '' if st.sample is None else f'{(self._now() - st.sample.stamp) * 1e3:.1f}'
        values = dict(mode=st.mode.value, previous=st.previous.value if st.previous else '',
                      reason=st.reason, fault=st.fault, tick_faults=str(st.tick_faults),
                      lowstate_age_ms=age, commands_sent=str(self.commands_sent),
                      **self._path_percentiles(),
                      policy=getattr(getattr(self, 'cfg', None), 'policy_path', ''))
        status = diagnostics.status(self.get_name(), level, f'{st.mode.value}: {st.reason}',
                                    'g1', values)
        self._status_pub.publish(status)
        self._diagnostics.publish(status)
        self._mode_marker_pub.publish(mode_marker(st.mode, st.reason,
                                                  self.get_clock().now().to_msg()))


def _autostart(node: PolicyNode) -> None:
    if params.read(node, PolicyNodeConfig).autostart:
        node.trigger_configure()
        node.trigger_activate()


def main(args=None) -> int:
    """Run policy_node until shut down; on the way out it sends its last damping command."""
    return spin.run('policy_node', lambda stop: PolicyNode(), (params.ParameterError,), args,
                    start=_autostart, finish=lambda node: node._halt())


if __name__ == '__main__':
    sys.exit(main())
