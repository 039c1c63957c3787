"""
Base state estimation for the G1 from LowState: IMU + leg kinematics + contact.

Pure NumPy, no ROS and no MuJoCo (the legs' kinematics and dynamics are
:mod:`bcg_ros.robot.legs`): ``state_bridge_node`` on the robot's computer and
the ``estimator`` benchmark call it the same way.

The filter is the one legged robots commonly use (Bloesch et al., RSS 2012,
"State Estimation for Legged Robots"; the MIT Cheetah's linear KF). State, all
in the odom (world) frame::

    x = [p (3), v (3), c_1 .. c_8 (3 each)]

``p``, ``v``: pelvis (IMU) position and linear velocity; ``c_i``: the eight
foot contact spheres of :data:`bcg_ros.robot.g1.FOOT_SPHERES`. Orientation
comes from the IMU and is not estimated. Process: the IMU specific force
rotated to the world, plus gravity, integrates ``p`` and ``v``; a sphere in
stance is held fixed (small process noise), a sphere in swing may move freely
(large process noise). Measurements: the leg kinematics give each sphere
relative to the pelvis, ``R fk_i(q) = c_i - p``; each foot in stance gives the
pelvis velocity from its spheres' zero velocity; optionally, stance spheres
lie on flat ground. All of them are linear in ``x`` once ``R`` is known, so
the "extended" part is only that ``R`` and the contact set change per step.

Contact force per foot comes from the motor torques: the six leg joints see
``tau_bias - tau_passive - tau_motor = J^T W`` (``J``: the foot body's 6x6
Jacobian over its leg's joints, ``W``: the ground's wrench on the foot at the
foot body's origin, world axes), solved by damped least squares. The wrench is
then shared among the foot's four spheres (minimum-norm normal forces that
reproduce its vertical force and tipping moments); a foot is in contact by
hysteresis on its vertical force, a sphere by hysteresis on its share. Force
alone is not enough: a swing leg's torques can read as a ground force, and a
heel lifts while the foot rolls onto its toes. So a stance sphere must also
stand still: its velocity innovation against the predicted pelvis velocity
passes a chi-square test, or it leaves contact (Mahalanobis gating).

Kinematics place each leg with the pelvis at the origin and the IMU's
orientation, so their world-frame results are the pelvis-relative,
world-aligned vectors the filter needs.
"""

from dataclasses import dataclass, field, fields
from typing import Optional, Tuple

import numpy as np

from bcg_ros.robot import g1, legs
from bcg_ros.rotation import quat_to_matrix

NUM_FEET = len(g1.FOOT_BODIES)
NUM_SPHERES = len(g1.FOOT_SPHERES)
SPHERES_PER_FOOT = NUM_SPHERES // NUM_FEET
STATE_SIZE = 6 + 3 * NUM_SPHERES
SPHERE_FOOT = np.array([g1.FOOT_BODIES.index(b) for b, _ in g1.FOOT_SPHERES])
"""Foot index (0 left, 1 right) of each sphere."""


class EstimatorConfigError(ValueError):
    """An estimator setting that is out of range."""


@dataclass(frozen=True)
class EstimatorConfig:
    """
    Noise levels, contact thresholds and options of :class:`StateEstimator`.

    Process noises are white-noise densities (variance per second); measurement
    noises are standard deviations per sample.
    """

    gravity: float = 9.81
    """Gravity [m/s^2], along -z of the odom frame."""
    accel_noise: float = 0.1
    """Accelerometer noise density on the velocity [m/s^2 / sqrt(Hz)]."""
    position_noise: float = 0.001
    """Process noise density on the pelvis position [m / sqrt(s)]."""
    stance_foot_noise: float = 0.002
    """Process noise density of a stance sphere [m / sqrt(s)]: small, it does not slip."""
    swing_foot_noise: float = 2.0
    """Process noise density of a swing sphere [m / sqrt(s)]: large, it moves freely."""
    kinematics_noise: float = 0.003
    """Std of a sphere position from leg kinematics [m] (encoders, link lengths)."""
    swing_kinematics_noise: float = 0.05
    """Std of a swing sphere's kinematic measurement [m]; larger, so it cannot pull the base."""
    foot_velocity_noise: float = 0.05
    """Std of the pelvis velocity from one stance foot's kinematics [m/s], horizontal."""
    foot_vertical_velocity_noise: float = 0.15
    """Its std along the vertical [m/s]: a compliant contact lets a loaded foot sink at
    touch-down and rise again as the load leaves it."""
    ground_height_noise: float = 0.01
    """Std of 'a stance sphere lies on flat ground at ground_height' [m]; 0 turns it off."""
    ground_height: float = g1.FOOT_SPHERE_RADIUS
    """Height of a sphere centre resting on the ground [m] in the odom frame."""
    initial_velocity_std: float = 0.1
    """Std of the initial pelvis velocity [m/s]."""
    contact_on_force: float = 60.0
    """A foot enters contact when its estimated vertical force exceeds this [N]."""
    contact_off_force: float = 30.0
    """A foot in contact leaves it when its vertical force falls below this [N]."""
    stance_gate: float = 16.27
    """Chi-square bound (3 dof, 99.9 %) on a stance sphere's velocity innovation: a
    sphere that moves against the predicted pelvis velocity by more than this (in
    sigmas squared) is not standing, whatever its force share says (0: no gate)."""
    sphere_on_force: float = 12.0
    """A sphere of a foot in contact enters contact above this share of the force [N]."""
    sphere_off_force: float = 4.0
    """A sphere in contact leaves it below this share [N] (or when its foot leaves)."""
    force_damping: float = 1e-5
    """Damping lambda [m^2] of the wrench solve (J J^T + lambda I)^-1 J b; the smallest
    eigenvalue of J J^T is about 7e-3 m^2 when standing, so 1e-5 biases forces by ~0.1 %."""
    compensate_bias: bool = True
    """Subtract the legs' gravity, Coriolis and passive torques (Newton-Euler) from tau."""
    compensate_inertia: bool = True
    """Also subtract M qacc (armature included), with qacc from differentiated joint speeds
    and gyro and the IMU."""
    acceleration_filter_hz: float = 25.0
    """Cut-off of the low-pass on the differentiated joint speeds and gyro [Hz]."""
    max_dt: float = 0.05
    """Longest step [s] integrated at once; longer gaps (lost messages) are clipped."""

    def __post_init__(self):
        """Reject settings the filter cannot run with, naming the field."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and f.name != 'ground_height' and not value >= 0.0:
                raise EstimatorConfigError(f'EstimatorConfig.{f.name} must be >= 0, got {value}')
        positive = ('accel_noise', 'position_noise', 'stance_foot_noise', 'swing_foot_noise',
                    'kinematics_noise', 'swing_kinematics_noise', 'foot_velocity_noise',
                    'foot_vertical_velocity_noise',
                    'initial_velocity_std', 'max_dt')
        for name in positive:
            if getattr(self, name) <= 0.0:
                raise EstimatorConfigError(f'EstimatorConfig.{name} must be > 0')
        if self.contact_off_force > self.contact_on_force:
            raise EstimatorConfigError(
                'EstimatorConfig.contact_off_force must not exceed contact_on_force '
                f'({self.contact_off_force} > {self.contact_on_force})')
        if self.sphere_off_force > self.sphere_on_force:
            raise EstimatorConfigError(
                'EstimatorConfig.sphere_off_force must not exceed sphere_on_force '
                f'({self.sphere_off_force} > {self.sphere_on_force})')


@dataclass(frozen=True)
class Sample:
    """One LowState's worth of inputs, in motor order."""

    quat: np.ndarray
    """[4] pelvis orientation (w, x, y, z), body to odom."""
    gyro: np.ndarray
    """[3] pelvis angular velocity, body frame [rad/s]."""
    acc: np.ndarray
    """[3] specific force (acceleration minus gravity), body frame [m/s^2]."""
    q: np.ndarray
    """[29] joint positions [rad]."""
    dq: np.ndarray
    """[29] joint velocities [rad/s]."""
    tau: np.ndarray
    """[29] motor torques (LowState tau_est) [N m]."""


@dataclass(frozen=True)
class EstimatorState:
    """The filter's belief, passed explicitly from one step to the next."""

    x: np.ndarray
    """[30] p, v, then the eight spheres' positions, odom frame."""
    cov: np.ndarray
    """[30, 30] covariance of x."""
    foot_contact: np.ndarray
    """[2] bool, left and right foot in contact."""
    sphere_contact: np.ndarray
    """[8] bool, each sphere in contact."""
    acc_world: np.ndarray
    """[3] last sample's acceleration in the odom frame, integrated over the next step."""
    speeds: np.ndarray
    """[32] last sample's gyro (3) and joint speeds (29), to differentiate."""
    accelerations: np.ndarray
    """[32] low-passed angular (body frame) and joint accelerations."""


@dataclass(frozen=True)
class Estimate:
    """What one step publishes."""

    position: np.ndarray
    """[3] pelvis position, odom frame [m]."""
    velocity: np.ndarray
    """[3] pelvis linear velocity, odom frame [m/s]."""
    quat: np.ndarray
    """[4] pelvis orientation (w, x, y, z), from the IMU."""
    angular_velocity: np.ndarray
    """[3] pelvis angular velocity, body frame [rad/s], from the IMU."""
    position_cov: np.ndarray
    """[3, 3]."""
    velocity_cov: np.ndarray
    """[3, 3]."""
    foot_contact: np.ndarray
    """[2] bool."""
    sphere_contact: np.ndarray
    """[8] bool."""
    foot_wrench: np.ndarray
    """[2, 6] ground wrench on each foot (force, torque) at the foot body origin, odom axes."""
    sphere_force: np.ndarray
    """[8] each sphere's share of its foot's vertical force [N]."""
    sphere_position: np.ndarray
    """[8, 3] sphere centres from the pelvis estimate and the kinematics, odom frame [m]."""
    foot_position: np.ndarray
    """[2, 3] foot body origins, odom frame [m]."""
    foot_rotation: np.ndarray
    """[2, 3, 3] foot body orientations, odom frame."""


# --- small pure terms ------------------------------------------------------

def hysteresis(previous: np.ndarray, value: np.ndarray, on: float, off: float) -> np.ndarray:
    """Contact flags: on above ``on``, off below ``off``, unchanged in between."""
    value = np.asarray(value)
    return np.where(previous, value >= off, value > on)


def damped_wrench(jac: np.ndarray, generalized: np.ndarray, damping: float) -> np.ndarray:
    """Solve ``jac^T W = generalized`` for W in the damped least-squares sense."""
    jjt = jac @ jac.T
    return np.linalg.solve(jjt + damping * np.eye(jjt.shape[0]), jac @ generalized)


def share_vertical_force(offsets: np.ndarray, wrench: np.ndarray) -> np.ndarray:
    """
    Share a wrench's f_z, m_x and m_y among spheres as minimum-norm normal forces.

    ``offsets``: [n, 3] sphere centres relative to the wrench's reference point.
    A vertical force f at offset r gives moment (r_y f, -r_x f); negative shares
    (a sphere that would have to pull) are clipped to zero.
    """
    a = np.stack([np.ones(len(offsets)), offsets[:, 1], -offsets[:, 0]])
    b = np.array([wrench[2], wrench[3], wrench[4]])
    share = a.T @ np.linalg.solve(a @ a.T + 1e-9 * np.eye(3), b)
    return np.maximum(share, 0.0)


def predict(state: EstimatorState, acc_world: np.ndarray, dt: float,
            cfg: EstimatorConfig) -> Tuple[np.ndarray, np.ndarray]:
    """Propagate x and its covariance over dt with the previous step's acceleration."""
    x = state.x.copy()
    a = state.acc_world
    x[0:3] += x[3:6] * dt + 0.5 * a * dt * dt
    x[3:6] += a * dt
    # F = I with dp/dv = dt; apply it to the covariance blockwise (cheaper than 30x30 products).
    cov = state.cov.copy()
    cov[0:3, :] += dt * cov[3:6, :]
    cov[:, 0:3] += dt * cov[:, 3:6]
    q_diag = np.empty(STATE_SIZE)
    q_diag[0:3] = cfg.position_noise ** 2 * dt
    q_diag[3:6] = cfg.accel_noise ** 2 * dt
    sphere_q = np.where(state.sphere_contact, cfg.stance_foot_noise ** 2,
                        cfg.swing_foot_noise ** 2) * dt
    q_diag[6:] = np.repeat(sphere_q, 3)
    cov[np.diag_indices(STATE_SIZE)] += q_diag
    return x, cov


def correct(x: np.ndarray, cov: np.ndarray, h: np.ndarray, z: np.ndarray,
            r_diag: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Kalman update for a linear measurement z = h x + noise, Joseph form."""
    ph = cov @ h.T
    s = h @ ph
    s[np.diag_indices(len(z))] += r_diag
    gain = np.linalg.solve(s, ph.T).T
    x = x + gain @ (z - h @ x)
    ikh = np.eye(len(x)) - gain @ h
    cov = ikh @ cov @ ikh.T + (gain * r_diag) @ gain.T
    return x, 0.5 * (cov + cov.T)


# --- the estimator ---------------------------------------------------------

@dataclass
class _Kinematics:
    """Per-step kinematic quantities, pelvis-relative and in odom axes."""

    offsets: np.ndarray
    """[8, 3] sphere centres minus pelvis."""
    rel_velocity: np.ndarray
    """[8, 3] sphere velocities if the pelvis did not translate."""
    foot_offsets: np.ndarray
    """[2, 3] foot body origins minus pelvis."""
    foot_rotation: np.ndarray
    """[2, 3, 3]."""
    wrench: np.ndarray
    """[2, 6] ground wrench on each foot."""
    rotation: np.ndarray = field(default_factory=lambda: np.eye(3))
    """[3, 3] pelvis to odom."""


class StateEstimator:
    """
    Leg-kinematics + IMU Kalman filter for the G1; see the module docstring.

    The object holds only the two leg chains; the belief is an
    :class:`EstimatorState` that :meth:`initial_state` makes and :meth:`step`
    maps to the next one.
    """

    def __init__(self, config: EstimatorConfig = EstimatorConfig(),
                 chains: Optional[Tuple[legs.LegChain, ...]] = None):
        """Use ``chains`` for the legs (the G1's, :func:`legs.leg_chains`, when None)."""
        self.config = config
        self.chains = chains if chains is not None else legs.leg_chains()
        if len(self.chains) != NUM_FEET:
            raise ValueError(f'StateEstimator needs {NUM_FEET} leg chains, got {len(self.chains)}')
        self._sphere_local = np.array([p for _, p in g1.FOOT_SPHERES], dtype=np.float64)
        # Variance of the pelvis velocity one stance foot measures, odom axes.
        self._foot_velocity_var = np.array([config.foot_velocity_noise,
                                            config.foot_velocity_noise,
                                            config.foot_vertical_velocity_noise]) ** 2
        self._foot_spheres = [np.flatnonzero(SPHERE_FOOT == k) for k in range(NUM_FEET)]
        # Kinematic measurement rows, c_i - p, fixed.
        self._h_kin = np.zeros((3 * NUM_SPHERES, STATE_SIZE))
        for i in range(NUM_SPHERES):
            self._h_kin[3 * i:3 * i + 3, 0:3] = -np.eye(3)
            self._h_kin[3 * i:3 * i + 3, 6 + 3 * i:9 + 3 * i] = np.eye(3)

    # -- kinematics ----------------------------------------------------------

    def kinematics(self, sample: Sample, acc_world: Optional[np.ndarray] = None,
                   accelerations: Optional[np.ndarray] = None) -> _Kinematics:
        """
        Compute sphere offsets, velocities and foot wrenches for one sample.

        ``acc_world`` [3] and ``accelerations`` [32] (angular, body frame, then
        joints) enter the inverse dynamics when ``compensate_inertia`` is set.
        """
        cfg = self.config
        rotation = quat_to_matrix(sample.quat)
        q = np.asarray(sample.q, dtype=np.float64)
        dq = np.asarray(sample.dq, dtype=np.float64)
        tau = np.asarray(sample.tau, dtype=np.float64)
        w0 = rotation @ np.asarray(sample.gyro, dtype=np.float64)
        inertia = cfg.compensate_inertia and accelerations is not None
        zero = np.zeros(3)
        foot_pos = np.empty((NUM_FEET, 3))
        foot_rot = np.empty((NUM_FEET, 3, 3))
        wrench = np.empty((NUM_FEET, 6))
        rel_vel = np.empty((NUM_SPHERES, 3))
        offsets = np.empty((NUM_SPHERES, 3))
        for k, chain in enumerate(self.chains):
            slots = chain.slots
            pose = legs.place(chain, rotation, q[slots])
            foot_pos[k], foot_rot[k] = pose.foot_pos, pose.foot_rot
            idx = self._foot_spheres[k]
            offsets[idx] = pose.foot_pos + self._sphere_local[idx] @ pose.foot_rot.T
            jac = pose.jacobian()
            # Sphere velocities as if the pelvis did not translate: v_foot + w x r.
            twist = jac @ dq[slots]
            v_foot = legs.cross(w0, pose.foot_pos) + twist[:3]
            w_foot = w0 + twist[3:]
            rel_vel[idx] = v_foot + legs.cross(w_foot, offsets[idx] - pose.foot_pos)
            # Leg rows of M qacc + bias = tau + passive + J^T W.
            generalized = -tau[slots]
            if cfg.compensate_bias or inertia:
                if inertia:
                    bias = legs.inverse_dynamics(
                        chain, pose, w0, rotation @ accelerations[0:3], acc_world,
                        dq[slots], accelerations[3:][slots], cfg.gravity)
                else:
                    bias = legs.inverse_dynamics(chain, pose, w0, zero, zero, dq[slots],
                                                 np.zeros(len(slots)), cfg.gravity)
                generalized = generalized + bias + chain.damping * dq[slots]
            wrench[k] = damped_wrench(jac, generalized, cfg.force_damping)
        return _Kinematics(offsets, rel_vel, foot_pos, foot_rot, wrench, rotation)

    # -- filter --------------------------------------------------------------

    def initial_state(self, sample: Sample, position_xy=(0.0, 0.0)) -> EstimatorState:
        """Belief at start: at rest, the lowest sphere on the ground, at ``position_xy``."""
        cfg = self.config
        kin = self.kinematics(sample)
        p = np.array([position_xy[0], position_xy[1],
                      cfg.ground_height - kin.offsets[:, 2].min()])
        x = np.concatenate([p, np.zeros(3), (p + kin.offsets).ravel()])
        var = np.full(STATE_SIZE, cfg.kinematics_noise ** 2)
        var[0:3] = 1e-6
        var[3:6] = cfg.initial_velocity_std ** 2
        feet, spheres, _ = self._contacts(np.zeros(NUM_FEET, bool), np.zeros(NUM_SPHERES, bool),
                                          kin)
        acc = kin.rotation @ np.asarray(sample.acc, dtype=np.float64)
        acc[2] -= cfg.gravity
        return EstimatorState(x, np.diag(var), feet, spheres, acc, _speeds(sample),
                              np.zeros(3 + g1.NUM_JOINTS))

    def _contacts(self, foot_prev, sphere_prev, kin: _Kinematics):
        cfg = self.config
        feet = hysteresis(foot_prev, kin.wrench[:, 2], cfg.contact_on_force,
                          cfg.contact_off_force)
        share = np.empty(NUM_SPHERES)
        for k in range(NUM_FEET):
            idx = np.flatnonzero(SPHERE_FOOT == k)
            share[idx] = share_vertical_force(kin.offsets[idx] - kin.foot_offsets[k],
                                              kin.wrench[k])
        spheres = hysteresis(sphere_prev, share, cfg.sphere_on_force, cfg.sphere_off_force)
        spheres &= feet[SPHERE_FOOT]
        # A foot in contact rests on at least one sphere: the one bearing the most.
        for k in np.flatnonzero(feet):
            idx = np.flatnonzero(SPHERE_FOOT == k)
            if not spheres[idx].any():
                spheres[idx[np.argmax(share[idx])]] = True
        return feet, spheres, share

    def _gate(self, x: np.ndarray, cov: np.ndarray, kin: _Kinematics, feet: np.ndarray,
              stance: np.ndarray, spheres: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """
        Drop the stance spheres whose motion contradicts the predicted pelvis velocity.

        A sphere resting on the ground does not move, so ``-rel_velocity`` measures
        the pelvis velocity; a sphere that moves (a swing leg whose torques read as a
        ground force, a heel lifting as the foot rolls onto its toes, a foot slipping
        at touch-down) would drag the estimate with it. Each innovation is judged
        against the predicted velocity covariance plus the measurement noise; a
        sphere that fails leaves contact, and a foot left with none leaves it too.
        """
        s_inv = np.linalg.inv(cov[3:6, 3:6] + np.diag(self._foot_velocity_var))
        y = -kin.rel_velocity - x[3:6]
        moving = stance & (np.einsum('ni,ij,nj->n', y, s_inv, y) > self.config.stance_gate)
        spheres = spheres & ~moving
        feet = feet.copy()
        for k in range(NUM_FEET):
            own = SPHERE_FOOT == k
            if moving[own].any() and not spheres[own].any():
                feet[k] = False
        return feet, spheres

    def step(self, state: EstimatorState, sample: Sample,
             dt: float) -> Tuple[EstimatorState, Estimate]:
        """Advance the belief by dt [s] to this sample and fuse its measurements."""
        cfg = self.config
        dt = float(min(max(dt, 0.0), cfg.max_dt))
        speeds = _speeds(sample)
        accelerations = state.accelerations
        if dt > 0.0:
            alpha = 1.0 - np.exp(-2.0 * np.pi * cfg.acceleration_filter_hz * dt)
            accelerations = accelerations + alpha * ((speeds - state.speeds) / dt
                                                     - accelerations)
        acc = _world_acceleration(sample, cfg.gravity)
        kin = self.kinematics(sample, acc, accelerations)
        feet, spheres, share = self._contacts(state.foot_contact, state.sphere_contact, kin)
        # Predict with the contact set the spheres had over the step just ended, and a
        # touching-down sphere as swing: its position is what the kinematics say now.
        x, cov = predict(state, state.acc_world, dt, cfg)
        if cfg.stance_gate > 0.0:
            feet, spheres = self._gate(x, cov, kin, feet, spheres & state.sphere_contact,
                                       spheres)

        rows_h, rows_z, rows_r = [], [], []
        # Sphere positions relative to the pelvis: c_i - p = R fk_i(q).
        rows_h.append(self._h_kin)
        rows_z.append(kin.offsets.ravel())
        sigma = np.where(spheres & state.sphere_contact, cfg.kinematics_noise,
                         cfg.swing_kinematics_noise)
        rows_r.append(np.repeat(sigma ** 2, 3))
        # Pelvis velocity from each foot in stance: its stance spheres do not move.
        for k in range(NUM_FEET):
            stance = np.flatnonzero((SPHERE_FOOT == k) & spheres & state.sphere_contact)
            if stance.size == 0:
                continue
            hv = np.zeros((3, STATE_SIZE))
            hv[:, 3:6] = np.eye(3)
            rows_h.append(hv)
            rows_z.append(-kin.rel_velocity[stance].mean(axis=0))
            rows_r.append(self._foot_velocity_var)
        # Flat ground: a stance sphere's centre is at ground height.
        if cfg.ground_height_noise > 0.0:
            for i in np.flatnonzero(spheres & state.sphere_contact):
                hg = np.zeros((1, STATE_SIZE))
                hg[0, 8 + 3 * i] = 1.0
                rows_h.append(hg)
                rows_z.append(np.array([cfg.ground_height]))
                rows_r.append(np.array([cfg.ground_height_noise ** 2]))
        x, cov = correct(x, cov, np.vstack(rows_h), np.concatenate(rows_z),
                         np.concatenate(rows_r))

        new_state = EstimatorState(x, cov, feet, spheres, acc, speeds, accelerations)
        p = x[0:3]
        estimate = Estimate(
            position=p.copy(), velocity=x[3:6].copy(),
            quat=np.asarray(sample.quat, dtype=np.float64) / np.linalg.norm(sample.quat),
            angular_velocity=np.asarray(sample.gyro, dtype=np.float64).copy(),
            position_cov=cov[0:3, 0:3].copy(), velocity_cov=cov[3:6, 3:6].copy(),
            foot_contact=feet, sphere_contact=spheres, foot_wrench=kin.wrench,
            sphere_force=share, sphere_position=p + kin.offsets,
            foot_position=p + kin.foot_offsets, foot_rotation=kin.foot_rotation)
        return new_state, estimate


def _speeds(sample: Sample) -> np.ndarray:
    return np.concatenate([np.asarray(sample.gyro, dtype=np.float64),
                           np.asarray(sample.dq, dtype=np.float64)])


def _world_acceleration(sample: Sample, gravity: float) -> np.ndarray:
    """Pelvis acceleration in the odom frame: the specific force rotated, plus gravity."""
    acc = quat_to_matrix(sample.quat) @ np.asarray(sample.acc, dtype=np.float64)
    acc[2] -= gravity
    return acc


class BaseVelocity:
    """
    The estimator as a policy's velocity sensor: what ``base_lin_vel`` observes.

    Feed it every state sample (LowState on the robot, each physics step in
    MuJoCo); it steps the filter when at least ``period`` has passed since its
    last step, so the robot's 500 Hz stream and a 200 Hz simulation give the
    filter about the same rate. :meth:`body_velocity` is the latest estimate in
    the pelvis frame, the frame the policy observes it in.
    """

    def __init__(self, config: EstimatorConfig = EstimatorConfig(), period: float = 0.005,
                 estimator: Optional[StateEstimator] = None):
        """Use ``estimator`` (a new one with ``config`` when None)."""
        self.estimator = estimator if estimator is not None else StateEstimator(config)
        self.period = period
        self.reset()

    def reset(self) -> None:
        """Forget the belief: the next sample starts the filter at rest."""
        self.state: Optional[EstimatorState] = None
        self.last_time = 0.0
        self._velocity = np.zeros(3)

    def update(self, sample: Sample, time: float) -> None:
        """Take one sample measured at ``time`` [s]; step the filter when one is due."""
        if self.state is None:
            self.state = self.estimator.initial_state(sample)
            self.last_time = time
            self._velocity = np.zeros(3)
            return
        dt = time - self.last_time
        if dt < self.period - 1e-9 and dt >= 0.0:
            return
        self.state, e = self.estimator.step(self.state, sample, dt)
        self.last_time = time
        self._velocity = quat_to_matrix(e.quat).T @ e.velocity

    def body_velocity(self) -> np.ndarray:
        """Return the estimated pelvis velocity in the pelvis frame [m/s] (zeros at first)."""
        return self._velocity.copy()
