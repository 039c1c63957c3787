"""
Robot logs with a hidden truth: the "real" G1 that calibration is judged against.

A real robot's logs come from a robot whose physics nobody knows exactly. To
check a calibration, this module makes such logs from a robot whose physics is
known but hidden: g1_sim_node's G1 (:class:`bcg_ros.robot.g1_sim.G1Sim`, run
in-process, no DDS) with physical parameters drawn by a seed
(:func:`bcg_ros.robot.physics.draw`: joint friction, damping and armature,
motor strength, link masses and centres of mass, ground friction and softness,
control latency). Each log is a rosbag2 like the robot's: LowState at 500 Hz
(encoders, IMU, estimated torques, with sensor noise), the LowCmd the robot
was sent, and the pelvis odometry g1_sim_node publishes as ground truth, at
100 Hz (:mod:`bcg_ros.real2sim.logs`). The scenarios (:data:`SCENARIOS`):

- ``stand``: the PD holds the default pose on the floor;
- ``push``: the same, with horizontal forces on the pelvis now and then;
- ``policy``: a shipped policy, run by policy_node's own executor
  (:class:`bcg_ros.PolicyRunner`, its modes and command limits);
- ``drop``: held by the elastic band above the floor, released, landing on
  the PD's default pose;
- ``sweep``: hanging in the elastic band, every joint follows a sine whose
  frequency sweeps up (a chirp), the classic way to excite joint dynamics.

:func:`make_logs` writes one bag per scenario and, apart, the truth:
``hidden/truth.yaml`` (the :class:`~bcg_ros.robot.physics.PhysicsParams`,
loadable by g1_sim_node's ``physics_params`` and ``bcg-eval
--physics-params``) and ``hidden/scenarios.yaml`` (each log's exact initial
state, elastic band and pushes). Calibration never reads ``hidden/``: it sees
what a robot user has, the bags. The bags carry no parameter value.

Time: LowState ``k`` is stamped ``k / 500`` s, the command that answers it
carries the same stamp and acts from the next physics step on (after the
latency), as g1_sim_node applies a command that arrived between two steps.
:func:`replay` runs a log's commands open loop through the same loop
(:func:`simulate`) on a robot of given parameters; with the truth it gives back
the logged states up to the sensor noise, with the nominal model it does not,
and that gap is what calibration closes.
"""

import dataclasses
import functools
import pathlib
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import mujoco
import numpy as np
import yaml

from bcg_ros.real2sim import logs
from bcg_ros.robot import g1, lowlevel, model as model_mod, physics
from bcg_ros.robot.g1_sim import G1Sim, G1SimConfig
from bcg_ros.robot.lowlevel import LowStateSample, MotorCommand
from bcg_ros.robot.sensors import SensorNoise

SCENARIOS = ('stand', 'push', 'policy', 'drop', 'sweep')
"""The logs :func:`make_logs` writes by default, in this order."""
Vec3 = Tuple[float, float, float]


@dataclass(frozen=True)
class Push:
    """A constant horizontal force on the pelvis for a while (a shove)."""

    start: float
    """When it begins [s after the log's start]."""
    duration: float
    """How long it lasts [s]."""
    force: Vec3
    """[N], world frame, at the pelvis's centre of mass."""


@dataclass(frozen=True)
class Scenario:
    """What one log's robot went through apart from its commands: the hidden set-up."""

    name: str
    """The log's name (its bag directory)."""
    kind: str
    """One of :data:`SCENARIOS`."""
    duration: float
    """Seconds logged."""
    qpos: Tuple[float, ...]
    """Initial MuJoCo qpos (pelvis position, quaternion w x y z, joints in model order)."""
    qvel: Tuple[float, ...]
    """Initial qvel."""
    band_height: float = 0.0
    """Pelvis height [m] the elastic band holds; 0: no band."""
    band_until: float = 0.0
    """When the band lets go [s]; past the duration: never."""
    pushes: Tuple[Push, ...] = ()
    policy: str = ''
    """Motion of the shipped policy that drove the robot (kind ``policy``)."""
    noise_seed: int = 0
    """Seed of the sensor noise."""

    def band_on(self, t: float) -> bool:
        """Whether the elastic band holds the pelvis at time ``t``."""
        return self.band_height > 0 and t < self.band_until - 1e-9

    def push_wrench(self, t: float) -> np.ndarray:
        """[6] external wrench on the pelvis at time ``t`` (world frame)."""
        out = np.zeros(6)
        for p in self.pushes:
            if p.start - 1e-9 <= t < p.start + p.duration - 1e-9:
                out[:3] += p.force
        return out

    def to_dict(self) -> Dict:
        """Plain YAML form."""
        d = dataclasses.asdict(self)
        d['qpos'], d['qvel'] = [float(x) for x in self.qpos], [float(x) for x in self.qvel]
        d['pushes'] = [{'start': p.start, 'duration': p.duration,
                        'force': [float(f) for f in p.force]} for p in self.pushes]
        return d

    @classmethod
    def from_dict(cls, data: Dict) -> 'Scenario':
        """Inverse of :meth:`to_dict`."""
        data = dict(data)
        data['qpos'], data['qvel'] = tuple(data['qpos']), tuple(data['qvel'])
        data['pushes'] = tuple(Push(p['start'], p['duration'], tuple(p['force']))
                               for p in data.get('pushes', ()))
        return cls(**data)


@dataclass(frozen=True)
class GeneratorConfig:
    """Which logs to make, how long, on which hidden robot."""

    seed: int = 0
    """Draws the hidden robot (PhysicsRanges) and every log's pushes and noise."""
    duration: float = 10.0
    """Seconds per log (the policy sees its clip's last frame held once the clip ends)."""
    scenarios: Tuple[str, ...] = SCENARIOS
    """Logs to make, each at most once."""
    policy: str = 'jump'
    """Shipped policy of the ``policy`` log (it stays up on the official model)."""
    storage: str = 'mcap'
    """Bag storage: mcap or sqlite3."""
    model_path: str = ''
    """G1 MJCF of the robot; empty: the project's model."""
    ranges: physics.PhysicsRanges = field(default_factory=physics.PhysicsRanges)
    """Where the hidden parameters are drawn from."""
    noise: Optional[SensorNoise] = field(default_factory=SensorNoise)
    """Sensor noise; None: exact sensors."""
    push_force: Tuple[float, float] = (15.0, 35.0)
    """Magnitude range of a push [N], random horizontal direction: what the PD's stance
    takes without a step."""
    push_duration: float = 0.2
    """Length of a push [s]."""
    push_every: float = 3.0
    """About one push per this many seconds (at least one per log)."""
    lift: float = 0.15
    """How far above its standing height the band holds the pelvis in drop and sweep [m]."""
    drop_after: float = 0.2
    """Fraction of the drop log held in the band before the release."""
    sweep_band: Tuple[float, float] = (0.2, 2.0)
    """Start and end frequency [Hz] of the sweep's chirp (exponential)."""
    sweep_amplitude: float = 0.3
    """Largest sweep amplitude [rad], less near a joint limit."""

    def __post_init__(self):
        """Reject what cannot make logs, naming the field."""
        unknown = [s for s in self.scenarios if s not in SCENARIOS]
        if unknown or len(set(self.scenarios)) != len(self.scenarios) or not self.scenarios:
            raise ValueError(f'GeneratorConfig.scenarios: {list(self.scenarios)}; expected '
                             f'distinct names of {SCENARIOS}')
        if not self.duration > 0:
            raise ValueError(f'GeneratorConfig.duration: must be > 0 s, got {self.duration}')
        if self.storage not in logs.STORAGES:
            raise ValueError(f'GeneratorConfig.storage: {self.storage!r} is not one of '
                             f'{logs.STORAGES}')


SIM = G1SimConfig(sim_dt=0.001, state_rate_hz=g1.LOWCMD_RATE_HZ, ground_truth_rate_hz=100.0,
                  real_time_factor=0.0)
"""g1_sim_node's defaults: 1 kHz physics, LowState at 500 Hz, odometry at 100 Hz."""

Controller = Callable[[int, float, LowStateSample], Optional[MotorCommand]]
"""(LowState index, its time [s], the LowState) -> the LowCmd sent in answer (None: none)."""


# --- the loop --------------------------------------------------------------

def _sample(sim: G1Sim, t: float, meas: Sequence[np.ndarray]) -> LowStateSample:
    """The LowState the robot publishes, as policy_node reads it (float32 on the wire)."""
    q, dq, quat, gyro, acc = (np.asarray(a, np.float32).astype(np.float64) for a in meas)
    slots = np.zeros((3, lowlevel.NUM_SLOTS))
    slots[:, :g1.NUM_JOINTS] = q, dq, np.asarray(sim.tau, np.float32)
    return LowStateSample(stamp=t, tick=sim.tick, mode_machine=sim.cfg.mode_machine, mode_pr=0,
                          q=slots[0], dq=slots[1], tau=slots[2], quat=quat, gyro=gyro, acc=acc,
                          remote=bytes(lowlevel.REMOTE_SIZE))


def simulate(sim: G1Sim, scenario: Scenario, controller: Controller) -> logs.RobotLog:
    """
    Run ``scenario`` on ``sim`` with commands from ``controller``; return what was logged.

    g1_sim_node's loop, in-process: the physics steps between LowStates, each
    LowState is measured (with ``sim``'s sensor noise) and answered by a LowCmd,
    serialized and read back as the node reads it, so the robot acts on the
    float32 values the log keeps. The band and pushes follow ``scenario``.
    """
    d, cfg = sim.data, sim.cfg
    sim.reset()
    d.qpos[:], d.qvel[:] = scenario.qpos, scenario.qvel
    mujoco.mj_forward(sim.model, d)
    sim.band_height = scenario.band_height or sim.band_height
    period = 1.0 / cfg.state_rate_hz
    n = int(round(scenario.duration / period))
    odom_every = max(1, int(round(cfg.state_rate_hz / cfg.ground_truth_rate_hz)))
    states: Dict[str, list] = {k: [] for k in ('t', 'tick', 'q', 'dq', 'tau_est', 'quat',
                                               'gyro', 'acc')}
    odom: Dict[str, list] = {k: [] for k in ('t', 'pos', 'quat', 'lin_vel', 'ang_vel')}
    cmds: Dict[str, list] = {k: [] for k in ('t', 'mode', 'q', 'dq', 'kp', 'kd', 'tau')}
    for k in range(n + 1):
        t = k * period
        meas = sim.measurements()
        for name, value in zip(('q', 'dq', 'quat', 'gyro', 'acc'), meas):
            states[name].append(value)
        states['t'].append(t)
        states['tick'].append(sim.tick)
        states['tau_est'].append(sim.tau.copy())
        if k % odom_every == 0:
            for name, value in zip(('pos', 'quat', 'lin_vel', 'ang_vel'), sim.odometry()):
                odom[name].append(value)
            odom['t'].append(t)
        if k == n:
            break
        cmd = controller(k, t, _sample(sim, t, meas))
        if cmd is not None:
            # The robot acts on what the wire carries: float32, as the log keeps it.
            sim.command, _ = lowlevel.read_lowcmd_cdr(lowlevel.serialize_lowcmd(cmd))
            cmds['t'].append(t)
            for name in ('mode', 'q', 'dq', 'kp', 'kd', 'tau'):
                cmds[name].append(getattr(sim.command, name)[:g1.NUM_JOINTS])
        sim.band = scenario.band_on(t)
        sim.push = scenario.push_wrench(t)
        for _ in range(sim.steps_per_state):
            sim.step()
    return _robot_log(states, cmds, odom, cfg.mode_machine)


def _robot_log(states: Dict[str, list], cmds: Dict[str, list], odom: Dict[str, list],
               mode_machine: int) -> logs.RobotLog:
    s = {k: np.asarray(v) for k, v in states.items()}
    n = len(s['t'])
    state = logs.StateLog(t=s['t'], tick=s['tick'].astype(np.int64),
                          mode_pr=np.zeros(n, np.uint8),
                          mode_machine=np.full(n, mode_machine, np.uint8), q=s['q'], dq=s['dq'],
                          tau_est=s['tau_est'], quat=s['quat'], gyro=s['gyro'], acc=s['acc'])
    command = None
    if cmds['t']:
        c = {k: np.asarray(v) for k, v in cmds.items()}
        m = len(c['t'])
        command = logs.CommandLog(t=c['t'], mode_pr=np.zeros(m, np.uint8),
                                  mode_machine=np.full(m, mode_machine, np.uint8),
                                  mode=c['mode'].astype(np.uint8), q=c['q'], dq=c['dq'],
                                  kp=c['kp'], kd=c['kd'], tau=c['tau'],
                                  crc_ok=np.ones(m, bool))
    o = {k: np.asarray(v) for k, v in odom.items()}
    odometry = logs.OdometryLog(t=o['t'], stamp_ns=np.round(o['t'] * 1e9).astype(np.int64),
                                pos=o['pos'], quat=o['quat'], lin_vel=o['lin_vel'],
                                ang_vel=o['ang_vel'])
    return logs.RobotLog(lowstate=state, lowcmd=command, odom=odometry)


# --- the scenarios ---------------------------------------------------------

def _limited(cmd: MotorCommand) -> MotorCommand:
    """``cmd`` through policy_node's last barrier (its command limits)."""
    from bcg_ros.runtime import modes
    cfg = modes.ExecutorConfig()
    return cfg.limits.clip(cmd, cfg.damping_kd)


def _hold(q: np.ndarray) -> MotorCommand:
    return _limited(lowlevel.pd_command(q, np.asarray(g1.DEFAULT_KP), np.asarray(g1.DEFAULT_KD),
                                        g1.MODE_MACHINE_29DOF))


def _hold_default(k: int, t: float, s: LowStateSample) -> MotorCommand:
    """The PD holds the default pose."""
    return _hold(np.asarray(g1.DEFAULT_POSE))


SWEEP_ARMS_OUT = 0.4
"""How much further from the body than the default pose the sweep holds the arms'
shoulder roll [rad]: swept about the default pose, upper arms hit the torso and hands
the thighs in most of the log, as on a robot an experimenter would not let them."""


def sweep_centre() -> np.ndarray:
    """[29] the pose the sweep swings about: the default pose, arms held out."""
    centre = np.asarray(g1.DEFAULT_POSE, float).copy()
    centre[g1.JOINT_NAMES.index('left_shoulder_roll_joint')] += SWEEP_ARMS_OUT
    centre[g1.JOINT_NAMES.index('right_shoulder_roll_joint')] -= SWEEP_ARMS_OUT
    return centre


def sweep_targets(t: float, duration: float, band: Tuple[float, float],
                  amplitude: float) -> np.ndarray:
    """
    [29] joint targets of the sweep at ``t``: :func:`sweep_centre` plus an exponential chirp.

    Joint ``j`` follows ``A_j sin(phi(t) + 2 pi j / 29)``, ``phi`` the phase of a
    frequency going from ``band[0]`` to ``band[1]`` over ``duration``; the
    amplitude ``A_j`` is ``amplitude`` or half the way to the nearer joint limit,
    and fades in over the first half second; the arms move out to the centre over
    that half second too, so the targets do not jump.
    """
    f0, f1 = band
    rate = np.log(f1 / f0) / duration
    phase = 2 * np.pi * f0 * (np.expm1(rate * t) / rate if rate > 0 else t)
    fade = min(1.0, t / 0.5)
    default = np.asarray(g1.DEFAULT_POSE)
    centre = default + fade * (sweep_centre() - default)
    room = np.minimum(centre - np.asarray(g1.JOINT_LOWER), np.asarray(g1.JOINT_UPPER) - centre)
    amp = np.minimum(amplitude, 0.5 * room) * fade
    offsets = 2 * np.pi * np.arange(g1.NUM_JOINTS) / g1.NUM_JOINTS
    return centre + amp * np.sin(phase + offsets)


def _sweep(k: int, t: float, s: LowStateSample, duration: float, band: Tuple[float, float],
           amplitude: float) -> MotorCommand:
    """The PD follows :func:`sweep_targets`."""
    return _hold(sweep_targets(t, duration, band, amplitude))


def _policy_controller(motion: str) -> Tuple[Controller, object]:
    """policy_node's executor in POLICY mode on a shipped policy: (controller, its clip)."""
    from bcg_ros import policies
    from bcg_ros.runtime import modes
    from bcg_ros.runtime.runner import PolicyRunner
    runner = PolicyRunner(str(policies.path(motion)))
    cfg = modes.ExecutorConfig()
    every = int(round(runner.contract.control_dt * g1.LOWCMD_RATE_HZ))
    state = {'exec': modes.ExecState(), 'out': None}

    def controller(k: int, t: float, s: LowStateSample) -> Optional[MotorCommand]:
        st, _ = modes.on_lowstate(cfg, state['exec'], s)
        runner.observe_state(s)   # every LowState, as policy_node feeds its estimator
        if k == 0:
            # The operator has stood the robot up and pressed start.
            st = modes.enter(st, modes.Mode.POLICY, 'log generator', t)
        if k % every == 0:
            state['out'] = runner.step(s, t)
        st, cmd = modes.on_tick(cfg, st, t, state['out'])
        state['exec'] = st
        return cmd

    return controller, runner.motion


def make_scenario(kind: str, cfg: GeneratorConfig, robot: model_mod.G1Model,
                  rng: np.random.Generator, name: str = '') -> Tuple[Scenario, Controller]:
    """The set-up of one log of ``kind`` and the controller that sends its commands."""
    qpos, qvel = robot.standing_qpos(), np.zeros(robot.model.nv)
    extra: Dict = {}
    controller = _hold_default
    duration = cfg.duration
    if kind == 'push':
        count = max(1, int(round(duration / cfg.push_every)))
        pushes = []
        for i in range(count):
            # Spread over the log, each with its own size and direction.
            start = round((i + rng.uniform(0.3, 0.7)) * duration / count, 3)
            size, angle = rng.uniform(*cfg.push_force), rng.uniform(0, 2 * np.pi)
            force = (round(size * np.cos(angle), 3), round(size * np.sin(angle), 3), 0.0)
            pushes.append(Push(start, cfg.push_duration, force))
        extra['pushes'] = tuple(pushes)
    elif kind in ('drop', 'sweep'):
        qpos[2] += cfg.lift
        extra['band_height'] = float(qpos[2])
        extra['band_until'] = (round(cfg.drop_after * duration, 3) if kind == 'drop'
                               else duration + 1.0)
        if kind == 'sweep':
            controller = functools.partial(_sweep, duration=duration, band=cfg.sweep_band,
                                           amplitude=cfg.sweep_amplitude)
    elif kind == 'policy':
        from bcg_ros.eval.rollout import start_state
        controller, motion = _policy_controller(cfg.policy)
        qpos, qvel = start_state(robot, motion)
        extra['policy'] = cfg.policy
    elif kind != 'stand':
        raise ValueError(f'scenario {kind!r}: known {SCENARIOS}')
    scenario = Scenario(name=name or kind, kind=kind, duration=duration,
                        qpos=tuple(float(x) for x in qpos), qvel=tuple(float(x) for x in qvel),
                        noise_seed=int(rng.integers(2**31)), **extra)
    return scenario, controller


def sim_config(noise: Optional[SensorNoise], seed: int = 0) -> G1SimConfig:
    """g1_sim_node's configuration with this sensor noise (None: exact sensors)."""
    if noise is None:
        return dataclasses.replace(SIM, seed=seed)
    return dataclasses.replace(SIM, seed=seed, joint_pos_noise=noise.joint_pos,
                               joint_vel_noise=noise.joint_vel, gyro_noise=noise.gyro,
                               acc_noise=noise.acc)


# --- logs in, truth apart ---------------------------------------------------

HIDDEN = 'hidden'
"""Folder of the truth, beside the logs; calibration never reads it."""
TRUTH_HEADER = ('The hidden physical parameters of the robot that made the logs beside this\n'
                'folder (bcg_ros.robot.physics.PhysicsParams). Calibration never reads it:\n'
                'it is the answer its estimates are checked against.')


@dataclass(frozen=True)
class Made:
    """What :func:`make_logs` wrote."""

    logs: Tuple[pathlib.Path, ...]
    """One bag directory per scenario."""
    truth: pathlib.Path
    """hidden/truth.yaml: the physical parameters."""
    scenarios: pathlib.Path
    """hidden/scenarios.yaml: each log's initial state, band and pushes."""
    params: physics.PhysicsParams


def make_logs(out: pathlib.Path, cfg: GeneratorConfig = GeneratorConfig(),
              on_log: Optional[Callable[[str, logs.RobotLog], None]] = None) -> Made:
    """
    Draw a hidden robot by ``cfg.seed``, log each scenario on it, write the bags and the truth.

    ``out/<scenario>/`` is a rosbag2 per scenario, ``out/hidden/`` the truth
    (:data:`HIDDEN`). ``out`` must not hold logs already. ``on_log`` is told
    each log as it is made.
    """
    out = pathlib.Path(out)
    taken = [s for s in cfg.scenarios + (HIDDEN,) if (out / s).exists()]
    if taken:
        raise FileExistsError(f'{out}: {", ".join(taken)} exist already; give a new folder')
    params = physics.draw(cfg.seed, cfg.ranges)
    robot = physics.perturb(model_mod.load(cfg.model_path or None, whole_body=True), params,
                            f'seed {cfg.seed}')
    rng = np.random.default_rng([cfg.seed, 1])   # apart from the parameters' stream
    scenarios, paths = [], []
    for kind in cfg.scenarios:
        scenario, controller = make_scenario(kind, cfg, robot, rng)
        sim = G1Sim(sim_config(cfg.noise, scenario.noise_seed), robot)
        log = simulate(sim, scenario, controller)
        paths.append(logs.write_log(log, out / scenario.name, cfg.storage))
        scenarios.append(scenario)
        if on_log is not None:
            on_log(scenario.name, log)
    truth = physics.save(params, out / HIDDEN / 'truth.yaml', TRUTH_HEADER)
    scen = out / HIDDEN / 'scenarios.yaml'
    scen.write_text('# What each log\'s robot went through apart from its commands: the exact\n'
                    '# initial state, the elastic band, the pushes (never read by calibration).\n'
                    + physics.dump_yaml({'seed': cfg.seed, 'model': cfg.model_path,
                                         'scenarios': [s.to_dict() for s in scenarios]}))
    return Made(tuple(paths), truth, scen, params)


def load_scenarios(path: pathlib.Path) -> List[Scenario]:
    """The scenarios of a hidden/scenarios.yaml."""
    data = yaml.safe_load(pathlib.Path(path).read_text())
    return [Scenario.from_dict(s) for s in data['scenarios']]


def replay(log: logs.RobotLog, params: physics.PhysicsParams, scenario: Scenario,
           model_path: str = '') -> logs.RobotLog:
    """
    The states a robot of ``params`` goes through under ``log``'s commands, open loop.

    From ``scenario``'s initial state, with its band and pushes, exact sensors:
    each LowState is answered by the latest logged command stamped at or
    before it.
    """
    robot = model_mod.load(model_path or None, whole_body=True)
    if not params.is_nominal:
        robot = physics.perturb(robot, params)
    sim = G1Sim(sim_config(None), robot)
    c = log.lowcmd

    def slots(row: np.ndarray, dtype=np.float64) -> np.ndarray:
        out = np.zeros(lowlevel.NUM_SLOTS, dtype)
        out[:g1.NUM_JOINTS] = row
        return out

    def logged(k: int, t: float, s: LowStateSample) -> Optional[MotorCommand]:
        i = int(np.searchsorted(c.t, t + 1e-9, side='right')) - 1
        if i < 0:
            return None
        return MotorCommand(mode_pr=int(c.mode_pr[i]), mode_machine=int(c.mode_machine[i]),
                            mode=slots(c.mode[i], np.uint8), q=slots(c.q[i]),
                            dq=slots(c.dq[i]), tau=slots(c.tau[i]), kp=slots(c.kp[i]),
                            kd=slots(c.kd[i]))

    return simulate(sim, scenario, logged)
