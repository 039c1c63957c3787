"""
``bcg-bench estimator``: the base state estimator against MuJoCo ground truth.

The G1 runs in MuJoCo in-process at the LowState rate (500 Hz): it first stands
under PD and is pushed, then steps forward. Stepping is held up by a harness
(an external force and torque on the pelvis, ``xfrc_applied``, that carries a
fixed share of the weight and steers the pelvis along its path) while the legs
follow inverse-kinematics targets under the default PD gains: so the feet make
and break contact, carry weight and the pelvis travels, without a trained
policy. The estimator sees only LowState-like inputs built from the MuJoCo
sensors (imu_quat, imu_gyro, imu_acc), the joints and the actuator forces, with
Gaussian sensor noise; it never sees the harness.

Figures: base velocity RMSE (3-D), position drift per metre travelled,
contact detection F1 per foot against MuJoCo's contact normal forces above a
threshold, and the time of one estimator step. Last line
``estimator_velocity_rmse_mps: X`` (goal X <= 0.1).
"""

import time
from dataclasses import dataclass, replace
from typing import Dict, List, Tuple

import mujoco
import numpy as np

from bcg_ros.runtime import estimator as est
from bcg_ros.robot import g1, legs
from bcg_ros.robot import model as g1_model


@dataclass(frozen=True)
class ScenarioConfig:
    """The simulated run the estimator is measured on."""

    dt: float = 0.002
    """Physics and LowState period [s] (500 Hz)."""
    stand_s: float = 2.0
    """Standing under PD alone (with pushes) before stepping [s]."""
    push_force: float = 60.0
    """Peak horizontal push on the pelvis while standing [N]."""
    walk_s: float = 20.0
    """Stepping time [s]."""
    speed: float = 0.3
    """Forward pelvis speed while stepping [m/s]."""
    cycle_s: float = 1.0
    """Gait cycle [s]: each foot swings once, 40 % of it."""
    step_height: float = 0.05
    """Swing foot clearance [m]."""
    sway: float = 0.02
    """Lateral pelvis sway towards the stance foot [m]."""
    support: float = 0.5
    """Share of the weight the harness carries while stepping."""
    ik_period: float = 0.01
    """Period of the leg IK targets [s]."""
    noise_quat: float = 0.002
    """Orientation noise [rad] (small rotation about a random axis)."""
    noise_gyro: float = 0.01
    """Gyro noise [rad/s]."""
    noise_acc: float = 0.1
    """Accelerometer noise [m/s^2]."""
    noise_q: float = 0.0005
    """Joint position noise [rad]."""
    noise_dq: float = 0.02
    """Joint velocity noise [rad/s]."""
    noise_tau: float = 0.5
    """Joint torque noise [N m]."""
    truth_force: float = 30.0
    """A foot is in contact in the ground truth when its normal force exceeds this [N]."""
    seed: int = 0
    """Noise seed."""


@dataclass
class Trace:
    """Estimates and ground truth per LowState sample."""

    t: np.ndarray
    v_true: np.ndarray
    v_est: np.ndarray
    p_true: np.ndarray
    p_est: np.ndarray
    contact_true: np.ndarray
    contact_est: np.ndarray
    force_true: np.ndarray
    """[n, 2] vertical ground force per foot [N]."""
    force_est: np.ndarray
    step_s: np.ndarray
    """Wall time of each estimator step [s]."""


class _Leg:
    """Damped-Newton IK of both ankles to world poses, pelvis level, on the leg chains."""

    def __init__(self, chains):
        self.chains = chains

    def solve(self, q: np.ndarray, pelvis: np.ndarray, feet: np.ndarray,
              iterations: int = 4) -> np.ndarray:
        """Joint targets (motor order) from ``q`` that put both feet at ``feet``, flat."""
        q = q.copy()
        for _ in range(iterations):
            for k, chain in enumerate(self.chains):
                pose = legs.place(chain, np.eye(3), q[chain.slots])
                jac = pose.jacobian()
                rot = pose.foot_rot
                # Orientation error of a flat foot (identity) from the current one.
                rot_err = 0.5 * np.array([rot[2, 1] - rot[1, 2], rot[0, 2] - rot[2, 0],
                                          rot[1, 0] - rot[0, 1]])
                err = np.concatenate([feet[k] - pelvis - pose.foot_pos, -rot_err])
                q[chain.slots] += np.linalg.solve(jac.T @ jac + 1e-6 * np.eye(6), jac.T @ err)
        return q


def _gait(cfg: ScenarioConfig, t: float, x0: np.ndarray, feet0: np.ndarray):
    """Pelvis position and both feet's positions at stepping time t (from stepping start)."""
    ramp = min(t / cfg.cycle_s, 1.0)
    # Distance travelled with a one-cycle speed ramp: integral of speed * ramp.
    if t < cfg.cycle_s:
        dist = 0.5 * cfg.speed * t * t / cfg.cycle_s
    else:
        dist = cfg.speed * (t - 0.5 * cfg.cycle_s)
    cycle = t / cfg.cycle_s
    phase = cycle % 1.0
    n = int(cycle)
    # Left swings in [0, 0.4), right in [0.5, 0.9) of each cycle.
    sway_y = cfg.sway * ramp * np.sin(2 * np.pi * phase)   # towards the right foot first
    pelvis = x0 + np.array([dist, -sway_y, 0.0])
    feet = feet0.copy()
    step = cfg.speed * cfg.cycle_s

    def landed_x(k, cycles_done):
        # After its j-th swing a foot rests a quarter cycle of travel ahead of where
        # the pelvis is at that landing.
        if cycles_done <= 0:
            return 0.0
        t_land = (cycles_done - 1 + (0.4 if k == 0 else 0.9)) * cfg.cycle_s
        d_land = (0.5 * cfg.speed * t_land ** 2 / cfg.cycle_s if t_land < cfg.cycle_s
                  else cfg.speed * (t_land - 0.5 * cfg.cycle_s))
        return d_land + 0.25 * step * min(t_land / cfg.cycle_s, 1.0)

    for k, (start, end) in enumerate(((0.0, 0.4), (0.5, 0.9))):
        done = n + (1 if phase >= end else 0)
        x_rest = landed_x(k, done)
        feet[k, 0] = feet0[k, 0] + x_rest
        if start <= phase < end:
            s = (phase - start) / (end - start)
            x_from, x_to = landed_x(k, n), landed_x(k, n + 1)
            blend = 3 * s * s - 2 * s ** 3
            feet[k, 0] = feet0[k, 0] + x_from + (x_to - x_from) * blend
            feet[k, 2] = feet0[k, 2] + cfg.step_height * ramp * np.sin(np.pi * s)
    return pelvis, feet


def _contact_forces(robot: g1_model.G1Model, d: mujoco.MjData) -> np.ndarray:
    """Sum the normal ground force on each foot [N] over MuJoCo's contacts."""
    m = robot.model
    out = np.zeros(est.NUM_FEET)
    f6 = np.zeros(6)
    for i in range(d.ncon):
        c = d.contact[i]
        for k, foot in enumerate(robot.foot_bodies):
            if foot in (m.geom_bodyid[c.geom1], m.geom_bodyid[c.geom2]):
                mujoco.mj_contactForce(m, d, i, f6)
                out[k] += f6[0]
    return out


def _noisy(rng, x, sigma):
    return x + sigma * rng.standard_normal(np.shape(x)) if sigma > 0 else x


def _sample(robot, d, cfg: ScenarioConfig, rng) -> est.Sample:
    m = robot.model
    quat = d.sensor('imu_quat').data.copy()
    if cfg.noise_quat > 0:
        dq = np.empty(4)
        mujoco.mju_axisAngle2Quat(dq, rng.standard_normal(3), cfg.noise_quat
                                  * abs(rng.standard_normal()))
        mujoco.mju_mulQuat(quat, quat.copy(), dq)
    del m
    return est.Sample(
        quat=quat,
        gyro=_noisy(rng, d.sensor('imu_gyro').data.copy(), cfg.noise_gyro),
        acc=_noisy(rng, d.sensor('imu_acc').data.copy(), cfg.noise_acc),
        q=_noisy(rng, d.qpos[robot.qpos_adr].copy(), cfg.noise_q),
        dq=_noisy(rng, d.qvel[robot.qvel_adr].copy(), cfg.noise_dq),
        tau=_noisy(rng, d.actuator_force[robot.actuator_ids].copy(), cfg.noise_tau))


def simulate(cfg: ScenarioConfig = ScenarioConfig(),
             ecfg: est.EstimatorConfig = est.EstimatorConfig(),
             robot: g1_model.G1Model = None) -> Trace:
    """Run the scenario with the estimator in the loop; return the per-sample trace."""
    robot = robot if robot is not None else g1_model.load()
    m = robot.model
    m.opt.timestep = cfg.dt
    d = mujoco.MjData(m)
    d.qpos[:] = robot.standing_qpos()
    rng = np.random.default_rng(cfg.seed)
    estimator = est.StateEstimator(ecfg)
    ik = _Leg(estimator.chains)
    kp, kd = np.array(g1.DEFAULT_KP), np.array(g1.DEFAULT_KD)
    q_target = np.array(g1.DEFAULT_POSE)
    mass = float(m.body_subtreemass[robot.root_body])
    root = robot.root_body

    # Settle under PD before the estimator starts, as a robot does before its bridge runs.
    for _ in range(int(0.5 / cfg.dt)):
        d.ctrl[robot.actuator_ids] = (kp * (q_target - d.qpos[robot.qpos_adr])
                                      - kd * d.qvel[robot.qvel_adr])
        mujoco.mj_step(m, d)
    mujoco.mj_forward(m, d)
    x0 = d.qpos[0:3].copy()
    feet0 = d.xpos[list(robot.foot_bodies)].copy()
    state = estimator.initial_state(_sample(robot, d, cfg, rng), position_xy=x0[:2])

    n_stand, n_walk = int(cfg.stand_s / cfg.dt), int(cfg.walk_s / cfg.dt)
    ik_every = max(1, int(round(cfg.ik_period / cfg.dt)))
    rows: Dict[str, List] = {k: [] for k in Trace.__dataclass_fields__}
    for i in range(n_stand + n_walk):
        t = i * cfg.dt
        mujoco.mj_step1(m, d)
        d.xfrc_applied[root] = 0.0
        if i < n_stand:
            # Two pushes, forward then sideways, each a half-sine of 0.3 s.
            for t0, axis in ((0.3 * cfg.stand_s, 0), (0.65 * cfg.stand_s, 1)):
                if t0 <= t < t0 + 0.3:
                    d.xfrc_applied[root, axis] = cfg.push_force * np.sin(np.pi * (t - t0) / 0.3)
        else:
            tw = t - cfg.stand_s
            if (i - n_stand) % ik_every == 0:
                pelvis_ref, feet_ref = _gait(cfg, tw, x0, feet0)
                q_target = ik.solve(q_target, pelvis_ref, feet_ref)
                ramp = min(tw / cfg.cycle_s, 1.0)
            # Harness: share of the weight, PD on the pelvis pose (stiff on the path).
            err = pelvis_ref - d.qpos[0:3]
            d.xfrc_applied[root, 0:3] = (cfg.support * ramp * mass * 9.81 * np.array([0, 0, 1.0])
                                         + 3000.0 * err - 300.0 * d.qvel[0:3])
            rot = d.xmat[root].reshape(3, 3)
            rot_err = 0.5 * np.array([rot[2, 1] - rot[1, 2], rot[0, 2] - rot[2, 0],
                                      rot[1, 0] - rot[0, 1]])
            d.xfrc_applied[root, 3:6] = -400.0 * rot_err - 40.0 * (rot @ d.qvel[3:6])
        d.ctrl[robot.actuator_ids] = (kp * (q_target - d.qpos[robot.qpos_adr])
                                      - kd * d.qvel[robot.qvel_adr])
        qpos, qvel = d.qpos.copy(), d.qvel.copy()
        mujoco.mj_step2(m, d)
        # Sensors and forces now describe the state (qpos, qvel) the step started from.
        sample = _sample(robot, d, cfg, rng)
        tic = time.perf_counter()
        state, e = estimator.step(state, sample, cfg.dt if i else 0.0)
        rows['step_s'].append(time.perf_counter() - tic)
        force = _contact_forces(robot, d)
        rows['t'].append(t)
        rows['v_true'].append(qvel[0:3])
        rows['p_true'].append(qpos[0:3])
        rows['v_est'].append(e.velocity)
        rows['p_est'].append(e.position)
        rows['force_true'].append(force)
        rows['contact_true'].append(force > cfg.truth_force)
        rows['force_est'].append(e.foot_wrench[:, 2])
        rows['contact_est'].append(e.foot_contact)
    return Trace(**{k: np.asarray(v) for k, v in rows.items()})


def f1_score(truth: np.ndarray, pred: np.ndarray) -> float:
    """F1 of boolean predictions against boolean truth (1.0 when both are all False)."""
    tp = np.sum(truth & pred)
    fp = np.sum(~truth & pred)
    fn = np.sum(truth & ~pred)
    return 1.0 if tp + fp + fn == 0 else float(2 * tp / (2 * tp + fp + fn))


def metrics(trace: Trace) -> Dict[str, float]:
    """Velocity RMSE, drift per metre, contact F1 and step time of a trace."""
    err = trace.v_est - trace.v_true
    travelled = float(np.sum(np.linalg.norm(np.diff(trace.p_true[:, :2], axis=0), axis=1)))
    drift = trace.p_est[-1] - trace.p_true[-1] - (trace.p_est[0] - trace.p_true[0])
    return {
        'velocity_rmse_mps': float(np.sqrt(np.mean(np.sum(err ** 2, axis=1)))),
        'velocity_rmse_x': float(np.sqrt(np.mean(err[:, 0] ** 2))),
        'velocity_rmse_y': float(np.sqrt(np.mean(err[:, 1] ** 2))),
        'velocity_rmse_z': float(np.sqrt(np.mean(err[:, 2] ** 2))),
        'travelled_m': travelled,
        'drift_m': float(np.linalg.norm(drift)),
        'drift_per_m': float(np.linalg.norm(drift) / max(travelled, 1e-9)),
        'contact_f1': f1_score(trace.contact_true.ravel(), trace.contact_est.ravel()),
        'force_rmse_n': float(np.sqrt(np.mean((trace.force_est - trace.force_true) ** 2))),
        'step_ms_mean': float(1e3 * np.mean(trace.step_s)),
        'step_ms_p99': float(1e3 * np.percentile(trace.step_s, 99)),
    }


def add_arguments(parser):
    """Options of ``bcg-bench estimator``."""
    parser.add_argument('--walk-s', type=float, default=None,
                        help='stepping time [s] (default 20, 5 with --quick)')
    parser.add_argument('--speed', type=float, default=ScenarioConfig.speed,
                        help='forward speed while stepping [m/s]')
    parser.add_argument('--noise-scale', type=float, default=1.0,
                        help='multiply every sensor noise by this (0: noiseless)')
    parser.add_argument('--seed', type=int, default=0)


def _scenario(args) -> ScenarioConfig:
    walk = args.walk_s if args.walk_s is not None else (5.0 if args.quick else 20.0)
    cfg = ScenarioConfig(walk_s=walk, speed=args.speed, seed=args.seed,
                         stand_s=1.5 if args.quick else 2.0)
    s = args.noise_scale
    return replace(cfg, noise_quat=cfg.noise_quat * s, noise_gyro=cfg.noise_gyro * s,
                   noise_acc=cfg.noise_acc * s, noise_q=cfg.noise_q * s,
                   noise_dq=cfg.noise_dq * s, noise_tau=cfg.noise_tau * s)


def run(args) -> int:
    """Simulate, print the figures; the last line is the velocity RMSE."""
    cfg = _scenario(args)
    tic = time.perf_counter()
    trace = simulate(cfg)
    wall = time.perf_counter() - tic
    res = metrics(trace)
    print(f'scenario: stand {cfg.stand_s} s with pushes of {cfg.push_force} N, step '
          f'{cfg.walk_s} s at {cfg.speed} m/s (harness carries {cfg.support:.0%} of the '
          f'weight), {1 / cfg.dt:.0f} Hz, sensor noise x{args.noise_scale}; wall {wall:.1f} s')
    for name, value in res.items():
        print(f'{name}: {value:.4f}')
    print(f'estimator_velocity_rmse_mps: {res["velocity_rmse_mps"]:.4f}')
    return 0


def per_phase(trace: Trace, stand_s: float) -> Tuple[float, float]:
    """Velocity RMSE while standing and while stepping."""
    err = np.sum((trace.v_est - trace.v_true) ** 2, axis=1)
    stand = trace.t < stand_s
    return float(np.sqrt(err[stand].mean())), float(np.sqrt(err[~stand].mean()))
