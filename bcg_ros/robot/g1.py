"""
Unitree G1 29-DoF: the one source of truth for the robot.

Everything that knows about the G1 (the MJCF the trainer and the evaluator
load, the URDF robot_state_publisher and rviz show, the executor's joint
order and safety limits) reads it from here.

Kinematics and inertias are those of Unitree's own G1 29-DoF MuJoCo model.
Joint order is the motor order of LowCmd/LowState slots 0..28.
Velocity limits are the rated speeds of the G1's motor types (7520-14:
32 rad/s, 7520-22: 20 rad/s, 5020: 37 rad/s, 4010: 22 rad/s).
"""

from dataclasses import dataclass
from typing import Optional, Tuple

Vec3 = Tuple[float, float, float]
Quat = Tuple[float, float, float, float]


@dataclass(frozen=True)
class Joint:
    """A hinge joint and the motor that drives it."""

    name: str
    axis: Vec3
    range: Tuple[float, float]
    """Position limits [rad]."""
    effort: float
    """Torque limit [N m], symmetric."""
    velocity: float
    """Rated speed [rad/s]."""
    kp: float
    """Default PD stiffness [N m / rad]."""
    kd: float
    """Default PD damping [N m s / rad]."""
    default: float
    """Standing pose [rad]."""
    frictionloss: float
    """Dry friction [N m] as the official model has it."""


@dataclass(frozen=True)
class Body:
    """A rigid link: placement in its parent frame, inertia, and its joint."""

    name: str
    parent: Optional[str]
    pos: Vec3
    quat: Quat
    """Orientation in the parent frame (w, x, y, z)."""
    ipos: Vec3
    """Centre of mass in the body frame."""
    iquat: Quat
    """Principal axes of inertia in the body frame (w, x, y, z)."""
    mass: float
    inertia: Vec3
    """Principal moments [kg m^2]."""
    joint: Optional[Joint]


ARMATURE = 0.01
"""Reflected rotor inertia [kg m^2] of every joint, as the official model has it."""
JOINT_DAMPING = 0.05
"""Passive joint damping [N m s / rad]."""

_I = (1.0, 0.0, 0.0, 0.0)


def _j(name, axis, lo, hi, effort, velocity, kp, kd, default=0.0, friction=0.2):
    return Joint(name, axis, (lo, hi), effort, velocity, kp, kd, default, friction)


_X, _Y, _Z = (1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)

# Standing pose: knees slightly bent, arms relaxed beside the body. The default
# gains are stiff enough that this pose stands under PD alone (no policy) in
# MuJoCo, which the stand mode of the executor and the simulator checks rely on.
_HIP_PITCH, _KNEE, _ANKLE_PITCH = -0.312, 0.669, -0.363

BODIES: Tuple[Body, ...] = (
    Body('pelvis', None, (0.0, 0.0, 0.793), _I, (0.0, 0.0, -0.07605),
         (1.0, 0.0, -0.000399148, 0.0), 3.813, (0.010549, 0.0093089, 0.0079184), None),
    # Left leg.
    Body('left_hip_pitch_link', 'pelvis', (0.0, 0.064452, -0.1027), _I,
         (0.002741, 0.047791, -0.02606), (0.954862, 0.293964, 0.0302556, 0.030122), 1.35,
         (0.00181517, 0.00153422, 0.00116212),
         _j('left_hip_pitch_joint', _Y, -2.5307, 2.8798, 88.0, 32.0, 200.0, 4.0, _HIP_PITCH)),
    Body('left_hip_roll_link', 'left_hip_pitch_link', (0.0, 0.052, -0.030465),
         (0.996179, 0.0, -0.0873386, 0.0), (0.029812, -0.001045, -0.087934),
         (0.977808, -1.97119e-05, 0.205576, -0.0403793), 1.52,
         (0.00254986, 0.00241169, 0.00148755),
         _j('left_hip_roll_joint', _X, -0.5236, 2.9671, 88.0, 32.0, 200.0, 4.0)),
    Body('left_hip_yaw_link', 'left_hip_roll_link', (0.025001, 0.0, -0.12412), _I,
         (-0.057709, -0.010981, -0.15078), (0.600598, 0.15832, 0.223482, 0.751181), 1.702,
         (0.00776166, 0.00717575, 0.00160139),
         _j('left_hip_yaw_joint', _Z, -2.7576, 2.7576, 88.0, 32.0, 200.0, 4.0)),
    Body('left_knee_link', 'left_hip_yaw_link', (-0.078273, 0.0021489, -0.17734),
         (0.996179, 0.0, 0.0873386, 0.0), (0.005457, 0.003964, -0.12074),
         (0.923418, -0.0327699, 0.0158246, 0.382067), 1.932,
         (0.0113804, 0.0112778, 0.00146458),
         _j('left_knee_joint', _Y, -0.087267, 2.8798, 139.0, 20.0, 300.0, 6.0, _KNEE)),
    Body('left_ankle_pitch_link', 'left_knee_link', (0.0, -9.4445e-05, -0.30001), _I,
         (-0.007269, 0.0, 0.011137), (0.603053, 0.369225, 0.369225, 0.603053), 0.074,
         (1.89e-05, 1.40805e-05, 6.9195e-06),
         _j('left_ankle_pitch_joint', _Y, -0.87267, 0.5236, 50.0, 37.0, 200.0, 4.0,
            _ANKLE_PITCH)),
    Body('left_ankle_roll_link', 'left_ankle_pitch_link', (0.0, 0.0, -0.017558), _I,
         (0.026505, 0.0, -0.016425), (-0.000481092, 0.728482, -0.000618967, 0.685065), 0.608,
         (0.00167218, 0.0016161, 0.000217621),
         _j('left_ankle_roll_joint', _X, -0.2618, 0.2618, 50.0, 37.0, 200.0, 4.0)),
    # Right leg.
    Body('right_hip_pitch_link', 'pelvis', (0.0, -0.064452, -0.1027), _I,
         (0.002741, -0.047791, -0.02606), (0.954862, -0.293964, 0.0302556, -0.030122), 1.35,
         (0.00181517, 0.00153422, 0.00116212),
         _j('right_hip_pitch_joint', _Y, -2.5307, 2.8798, 88.0, 32.0, 200.0, 4.0, _HIP_PITCH)),
    Body('right_hip_roll_link', 'right_hip_pitch_link', (0.0, -0.052, -0.030465),
         (0.996179, 0.0, -0.0873386, 0.0), (0.029812, 0.001045, -0.087934),
         (0.977808, 1.97119e-05, 0.205576, 0.0403793), 1.52,
         (0.00254986, 0.00241169, 0.00148755),
         _j('right_hip_roll_joint', _X, -2.9671, 0.5236, 88.0, 32.0, 200.0, 4.0)),
    Body('right_hip_yaw_link', 'right_hip_roll_link', (0.025001, 0.0, -0.12412), _I,
         (-0.057709, 0.010981, -0.15078), (0.751181, 0.223482, 0.15832, 0.600598), 1.702,
         (0.00776166, 0.00717575, 0.00160139),
         _j('right_hip_yaw_joint', _Z, -2.7576, 2.7576, 88.0, 32.0, 200.0, 4.0)),
    Body('right_knee_link', 'right_hip_yaw_link', (-0.078273, -0.0021489, -0.17734),
         (0.996179, 0.0, 0.0873386, 0.0), (0.005457, -0.003964, -0.12074),
         (0.923439, 0.0345276, 0.0116333, -0.382012), 1.932,
         (0.011374, 0.0112843, 0.00146452),
         _j('right_knee_joint', _Y, -0.087267, 2.8798, 139.0, 20.0, 300.0, 6.0, _KNEE)),
    Body('right_ankle_pitch_link', 'right_knee_link', (0.0, 9.4445e-05, -0.30001), _I,
         (-0.007269, 0.0, 0.011137), (0.603053, 0.369225, 0.369225, 0.603053), 0.074,
         (1.89e-05, 1.40805e-05, 6.9195e-06),
         _j('right_ankle_pitch_joint', _Y, -0.87267, 0.5236, 50.0, 37.0, 200.0, 4.0,
            _ANKLE_PITCH)),
    Body('right_ankle_roll_link', 'right_ankle_pitch_link', (0.0, 0.0, -0.017558), _I,
         (0.026505, 0.0, -0.016425), (0.000481092, 0.728482, 0.000618967, 0.685065), 0.608,
         (0.00167218, 0.0016161, 0.000217621),
         _j('right_ankle_roll_joint', _X, -0.2618, 0.2618, 50.0, 37.0, 200.0, 4.0)),
    # Waist and torso.
    Body('waist_yaw_link', 'pelvis', (0.0, 0.0, 0.0), _I, (0.003964, 0.0, 0.018769),
         (-0.0178291, 0.628464, 0.0282471, 0.777121), 0.244,
         (0.000158561, 0.000124229, 9.67669e-05),
         _j('waist_yaw_joint', _Z, -2.618, 2.618, 88.0, 32.0, 300.0, 6.0)),
    Body('waist_roll_link', 'waist_yaw_link', (-0.0039635, 0.0, 0.035), _I,
         (0.0, -0.000236, 0.010111), (0.99979, 0.020492, 0.0, 0.0), 0.047,
         (7.515e-06, 6.40206e-06, 3.98394e-06),
         _j('waist_roll_joint', _X, -0.52, 0.52, 50.0, 37.0, 300.0, 6.0)),
    Body('torso_link', 'waist_roll_link', (0.0, 0.0, 0.019), _I,
         (0.00331658, 0.000261533, 0.179856), (0.999831, 0.000376204, 0.0179895, -0.00377704),
         9.598, (0.12407, 0.111951, 0.0325382),
         _j('waist_pitch_joint', _Y, -0.52, 0.52, 50.0, 37.0, 300.0, 6.0)),
    # Left arm.
    Body('left_shoulder_pitch_link', 'torso_link', (0.0039563, 0.10022, 0.23778),
         (0.990264, 0.139201, 1.38722e-05, -9.86868e-05), (0.0, 0.035892, -0.011628),
         (0.654152, 0.0130458, -0.326267, 0.68225), 0.718,
         (0.000465864, 0.000432842, 0.000406394),
         _j('left_shoulder_pitch_joint', _Y, -3.0892, 2.6704, 25.0, 37.0, 40.0, 1.0, 0.2)),
    Body('left_shoulder_roll_link', 'left_shoulder_pitch_link', (0.0, 0.038, -0.013831),
         (0.990268, -0.139172, 0.0, 0.0), (-0.000227, 0.00727, -0.063243),
         (0.701256, -0.0196223, -0.00710317, 0.712604), 0.643,
         (0.000691311, 0.000618011, 0.000388977),
         _j('left_shoulder_roll_joint', _X, -1.5882, 2.2515, 25.0, 37.0, 40.0, 1.0, 0.2)),
    Body('left_shoulder_yaw_link', 'left_shoulder_roll_link', (0.0, 0.00624, -0.1032), _I,
         (0.010773, -0.002949, -0.072009), (0.716879, -0.0964829, -0.0679942, 0.687134), 0.734,
         (0.00106187, 0.00103217, 0.000400661),
         _j('left_shoulder_yaw_joint', _Z, -2.618, 2.618, 25.0, 37.0, 40.0, 1.0)),
    Body('left_elbow_link', 'left_shoulder_yaw_link', (0.015783, 0.0, -0.080518), _I,
         (0.064956, 0.004454, -0.010062), (0.541765, 0.636132, 0.388821, 0.388129), 0.6,
         (0.000443035, 0.000421612, 0.000259353),
         _j('left_elbow_joint', _Y, -1.0472, 2.0944, 25.0, 37.0, 40.0, 1.0, 0.6)),
    Body('left_wrist_roll_link', 'left_elbow_link', (0.1, 0.00188791, -0.01), _I,
         (0.0171394, 0.000537591, 4.8864e-07), (0.575338, 0.411667, -0.574906, 0.411094),
         0.085445, (5.48211e-05, 4.96646e-05, 3.57798e-05),
         _j('left_wrist_roll_joint', _X, -1.97222, 1.97222, 25.0, 37.0, 40.0, 1.0)),
    Body('left_wrist_pitch_link', 'left_wrist_roll_link', (0.038, 0.0, 0.0), _I,
         (0.0229999, -0.00111685, -0.00111658), (0.249998, 0.661363, 0.293036, 0.643608),
         0.48405, (0.000430353, 0.000429873, 0.000164648),
         _j('left_wrist_pitch_joint', _Y, -1.61443, 1.61443, 5.0, 22.0, 20.0, 1.0,
            friction=0.1)),
    Body('left_wrist_yaw_link', 'left_wrist_pitch_link', (0.046, 0.0, 0.0), _I,
         (0.0708244, 0.000191745, 0.00161742), (0.510571, 0.526295, 0.468078, 0.493188),
         0.254576, (0.000646113, 0.000559993, 0.000147566),
         _j('left_wrist_yaw_joint', _Z, -1.61443, 1.61443, 5.0, 22.0, 20.0, 1.0,
            friction=0.1)),
    # Right arm.
    Body('right_shoulder_pitch_link', 'torso_link', (0.0039563, -0.10021, 0.23778),
         (0.990264, -0.139201, 1.38722e-05, 9.86868e-05), (0.0, -0.035892, -0.011628),
         (0.68225, -0.326267, 0.0130458, 0.654152), 0.718,
         (0.000465864, 0.000432842, 0.000406394),
         _j('right_shoulder_pitch_joint', _Y, -3.0892, 2.6704, 25.0, 37.0, 40.0, 1.0, 0.2)),
    Body('right_shoulder_roll_link', 'right_shoulder_pitch_link', (0.0, -0.038, -0.013831),
         (0.990268, 0.139172, 0.0, 0.0), (-0.000227, -0.00727, -0.063243),
         (0.712604, -0.00710317, -0.0196223, 0.701256), 0.643,
         (0.000691311, 0.000618011, 0.000388977),
         _j('right_shoulder_roll_joint', _X, -2.2515, 1.5882, 25.0, 37.0, 40.0, 1.0, -0.2)),
    Body('right_shoulder_yaw_link', 'right_shoulder_roll_link', (0.0, -0.00624, -0.1032), _I,
         (0.010773, 0.002949, -0.072009), (0.687134, -0.0679942, -0.0964829, 0.716879), 0.734,
         (0.00106187, 0.00103217, 0.000400661),
         _j('right_shoulder_yaw_joint', _Z, -2.618, 2.618, 25.0, 37.0, 40.0, 1.0)),
    Body('right_elbow_link', 'right_shoulder_yaw_link', (0.015783, 0.0, -0.080518), _I,
         (0.064956, -0.004454, -0.010062), (0.388129, 0.388821, 0.636132, 0.541765), 0.6,
         (0.000443035, 0.000421612, 0.000259353),
         _j('right_elbow_joint', _Y, -1.0472, 2.0944, 25.0, 37.0, 40.0, 1.0, 0.6)),
    Body('right_wrist_roll_link', 'right_elbow_link', (0.1, -0.00188791, -0.01), _I,
         (0.0171394, -0.000537591, 4.8864e-07), (0.411667, 0.575338, -0.411094, 0.574906),
         0.085445, (5.48211e-05, 4.96646e-05, 3.57798e-05),
         _j('right_wrist_roll_joint', _X, -1.97222, 1.97222, 25.0, 37.0, 40.0, 1.0)),
    Body('right_wrist_pitch_link', 'right_wrist_roll_link', (0.038, 0.0, 0.0), _I,
         (0.0229999, 0.00111685, -0.00111658), (0.643608, 0.293036, 0.661363, 0.249998),
         0.48405, (0.000430353, 0.000429873, 0.000164648),
         _j('right_wrist_pitch_joint', _Y, -1.61443, 1.61443, 5.0, 22.0, 20.0, 1.0,
            friction=0.1)),
    Body('right_wrist_yaw_link', 'right_wrist_pitch_link', (0.046, 0.0, 0.0), _I,
         (0.0708244, -0.000191745, 0.00161742), (0.493188, 0.468078, 0.526295, 0.510571),
         0.254576, (0.000646113, 0.000559993, 0.000147566),
         _j('right_wrist_yaw_joint', _Z, -1.61443, 1.61443, 5.0, 22.0, 20.0, 1.0,
            friction=0.1)),
)

JOINTS: Tuple[Joint, ...] = tuple(b.joint for b in BODIES if b.joint is not None)
"""The 29 joints in motor order (LowCmd/LowState slots 0..28)."""
JOINT_NAMES: Tuple[str, ...] = tuple(j.name for j in JOINTS)
NUM_JOINTS = len(JOINTS)
NUM_MOTOR_SLOTS = 35
"""LowCmd/LowState carry 35 motor slots; the 29-DoF G1 uses 0..28."""
ISAACLAB_MOTOR_SLOTS: Tuple[int, ...] = (0, 6, 12, 1, 7, 13, 2, 8, 14, 3, 9, 15, 22, 4, 10, 16,
                                         23, 5, 11, 17, 24, 18, 25, 19, 26, 20, 27, 21, 28)
"""Motor slot of each joint in IsaacLab's order (its breadth-first walk of the G1's tree:
both legs and the waist level by level, then the arms), the ``joint_ids_map`` of
unitree_rl_lab's G1 exports and the column order of BeyondMimic motion files."""
ISAACLAB_JOINT_NAMES: Tuple[str, ...] = tuple(JOINT_NAMES[i] for i in ISAACLAB_MOTOR_SLOTS)

JOINT_LOWER = tuple(j.range[0] for j in JOINTS)
JOINT_UPPER = tuple(j.range[1] for j in JOINTS)
TORQUE_LIMIT = tuple(j.effort for j in JOINTS)
VELOCITY_LIMIT = tuple(j.velocity for j in JOINTS)
DEFAULT_POSE = tuple(j.default for j in JOINTS)
DEFAULT_KP = tuple(j.kp for j in JOINTS)
DEFAULT_KD = tuple(j.kd for j in JOINTS)

ROOT_BODY = 'pelvis'
IMU_SITE = 'imu'
"""The pelvis IMU that LowState.imu_state reports; at the pelvis origin."""
IMU_POS: Vec3 = (0.0, 0.0, 0.0)

KEY_POINTS: Tuple[Tuple[str, str, Vec3], ...] = (
    ('left_ankle', 'left_ankle_roll_link', (0.0, 0.0, 0.0)),
    ('right_ankle', 'right_ankle_roll_link', (0.0, 0.0, 0.0)),
    ('head', 'torso_link', (0.0083, 0.0, 0.3651)),
    ('left_wrist', 'left_wrist_yaw_link', (0.0, 0.0, 0.0)),
    ('right_wrist', 'right_wrist_yaw_link', (0.0, 0.0, 0.0)),
)
"""Points the imitation reward and E_track use: (site name, body, position in it).

Both ankles, the head and both wrists. The official model has no head body: the
head point is the centre of the head shell, rigid on torso_link.
"""
KEY_SITES: Tuple[str, ...] = tuple(k[0] for k in KEY_POINTS)

TRACK_BODIES: Tuple[str, ...] = tuple(b.name for b in BODIES)
"""Bodies whose origins E_track averages over: all of the G1's, in BODIES order."""

FOOT_BODIES: Tuple[str, str] = ('left_ankle_roll_link', 'right_ankle_roll_link')
FOOT_SPHERE_RADIUS = 0.005
FOOT_SPHERES: Tuple[Tuple[str, Vec3], ...] = tuple(
    (foot, pos) for foot in FOOT_BODIES
    for pos in ((-0.05, 0.025, -0.03), (-0.05, -0.025, -0.03),
                (0.12, 0.03, -0.03), (0.12, -0.03, -0.03)))
"""Eight foot contact spheres, four per foot: (ankle-roll link, centre in its frame)."""


@dataclass(frozen=True)
class CollisionShape:
    """
    A primitive that stands in for a link's meshes when the whole body collides.

    ``size`` follows MuJoCo: a capsule is (radius, half-length) along its local
    z axis, a box its three half-extents, a sphere (radius,).
    """

    body: str
    kind: str
    """'capsule', 'box' or 'sphere'."""
    pos: Vec3
    """Centre in the body frame."""
    quat: Quat
    """Orientation in the body frame (w, x, y, z)."""
    size: Tuple[float, ...]
    part: str = ''
    """Tells apart several shapes on one body (the torso's halves and its head)."""

    @property
    def name(self) -> str:
        """Geom name in the MJCF: ``<body>_collision`` or ``<body>_<part>_collision``."""
        return f'{self.body}_{self.part}_collision' if self.part else f'{self.body}_collision'


COLLISION: Tuple[CollisionShape, ...] = (
    CollisionShape('pelvis', 'box', (0.0017, 0.0, -0.0748),
                   (1.0, 0.0, 0.0, 0.0), (0.0598, 0.0678, 0.0773)),
    CollisionShape('left_hip_pitch_link', 'capsule', (0.0015, 0.049, -0.0113),
                   (1.0, 0.0, 0.0, 0.0), (0.058, 0.0215)),
    CollisionShape('left_hip_roll_link', 'capsule', (0.028, -0.0001, -0.0667),
                   (1.0, 0.0, 0.0, 0.0), (0.0578, 0.0567)),
    CollisionShape('left_hip_yaw_link', 'capsule', (-0.0374, -0.0003, -0.0989),
                   (0.156897, 0.725727, -0.646332, -0.17595), (0.061, 0.0835)),
    CollisionShape('left_knee_link', 'capsule', (0.0091, 0.0006, -0.1298),
                   (1.0, 0.0, 0.0, 0.0), (0.0565, 0.134)),
    CollisionShape('left_ankle_pitch_link', 'box', (-0.0065, 0.0001, -0.0058),
                   (1.0, 0.0, 0.0, 0.0), (0.018, 0.0065, 0.0187)),
    CollisionShape('left_ankle_roll_link', 'box', (0.035, 0.0, -0.0032),
                   (1.0, 0.0, 0.0, 0.0), (0.085, 0.03, 0.0268)),
    CollisionShape('right_hip_pitch_link', 'capsule', (0.0015, -0.049, -0.0113),
                   (1.0, 0.0, 0.0, 0.0), (0.058, 0.0215)),
    CollisionShape('right_hip_roll_link', 'capsule', (0.028, 0.0001, -0.0667),
                   (1.0, 0.0, 0.0, 0.0), (0.0578, 0.0567)),
    CollisionShape('right_hip_yaw_link', 'capsule', (-0.0374, 0.0003, -0.0989),
                   (0.156897, -0.725727, -0.646332, 0.17595), (0.061, 0.0835)),
    CollisionShape('right_knee_link', 'capsule', (0.0091, -0.0006, -0.1298),
                   (1.0, 0.0, 0.0, 0.0), (0.0565, 0.134)),
    CollisionShape('right_ankle_pitch_link', 'box', (-0.0065, -0.0001, -0.0058),
                   (1.0, 0.0, 0.0, 0.0), (0.018, 0.0065, 0.0187)),
    CollisionShape('right_ankle_roll_link', 'box', (0.035, 0.0, -0.0032),
                   (1.0, 0.0, 0.0, 0.0), (0.085, 0.03, 0.0268)),
    CollisionShape('waist_yaw_link', 'box', (-0.0001, 0.0, 0.0234),
                   (1.0, 0.0, 0.0, 0.0), (0.0424, 0.0425, 0.023)),
    CollisionShape('waist_roll_link', 'box', (0.0, 0.0, 0.0095),
                   (1.0, 0.0, 0.0, 0.0), (0.01, 0.011, 0.0195)),
    CollisionShape('torso_link', 'capsule', (0.0045, 0.0305, 0.1245),
                   (1.0, 0.0, 0.0, 0.0), (0.0858, 0.102), part='left'),
    CollisionShape('torso_link', 'capsule', (0.0045, -0.0305, 0.1245),
                   (1.0, 0.0, 0.0, 0.0), (0.0858, 0.102), part='right'),
    CollisionShape('torso_link', 'capsule', (0.0035, 0.0003, 0.3462),
                   (0.06879, 0.719682, -0.68753, -0.068027), (0.0811, 0.0633), part='head'),
    CollisionShape('left_shoulder_pitch_link', 'capsule', (0.0004, 0.0334, -0.0037),
                   (0.136751, -0.663664, 0.714601, 0.173763), (0.0456, 0.0128)),
    CollisionShape('left_shoulder_roll_link', 'capsule', (0.0, 0.0019, -0.0321),
                   (1.0, 0.0, 0.0, 0.0), (0.0487, 0.0314)),
    CollisionShape('left_shoulder_yaw_link', 'capsule', (0.0095, 0.0018, -0.0287),
                   (0.408721, 0.008123, -0.110169, -0.905949), (0.0456, 0.0529)),
    CollisionShape('left_elbow_link', 'capsule', (0.0464, 0.0091, -0.008),
                   (0.456317, -0.357424, 0.659792, -0.478224), (0.0377, 0.0415)),
    CollisionShape('left_wrist_roll_link', 'capsule', (0.0197, -0.0003, 0.0),
                   (0.5, 0.5, 0.5, 0.5), (0.0303, 0.0183)),
    CollisionShape('left_wrist_pitch_link', 'capsule', (0.0227, 0.0, -0.0001),
                   (0.5, 0.5, 0.5, 0.5), (0.0341, 0.0234)),
    CollisionShape('left_wrist_yaw_link', 'box', (0.0802, -0.0082, 0.0107),
                   (0.447892, -0.42984, 0.566108, -0.542358), (0.0298, 0.0533, 0.098)),
    CollisionShape('right_shoulder_pitch_link', 'capsule', (0.0004, -0.0334, -0.0037),
                   (0.136751, 0.663664, 0.714601, -0.173763), (0.0456, 0.0128)),
    CollisionShape('right_shoulder_roll_link', 'capsule', (0.0, -0.0019, -0.0321),
                   (1.0, 0.0, 0.0, 0.0), (0.0487, 0.0314)),
    CollisionShape('right_shoulder_yaw_link', 'capsule', (0.0095, -0.0018, -0.0287),
                   (0.408721, -0.008123, -0.110169, 0.905949), (0.0456, 0.0529)),
    CollisionShape('right_elbow_link', 'capsule', (0.0464, -0.0091, -0.008),
                   (0.456317, 0.357424, 0.659792, 0.478224), (0.0377, 0.0415)),
    CollisionShape('right_wrist_roll_link', 'capsule', (0.0197, 0.0003, 0.0),
                   (0.5, -0.5, 0.5, -0.5), (0.0303, 0.0183)),
    CollisionShape('right_wrist_pitch_link', 'capsule', (0.0227, 0.0, -0.0001),
                   (0.5, -0.5, 0.5, -0.5), (0.0341, 0.0234)),
    CollisionShape('right_wrist_yaw_link', 'box', (0.0802, 0.0082, 0.0107),
                   (0.447892, 0.42984, 0.566108, 0.542358), (0.0298, 0.0533, 0.098)),
)
"""Whole-body collision shapes, fitted to the official meshes by scripts/fit_collision.py.

Each one holds every vertex of its link's meshes, except the feet: a foot is a box
of the mesh's height whose sole is the rectangle through its sphere centres, so
on flat ground the feet touch only through the eight spheres at any tilt. The
torso is two upright capsules (its left and right halves) and the head a third
shape on torso_link. The right side is the mirror image of the left. Training
never collides these: the MJCF disables them, and
:func:`bcg_ros.robot.model.load` switches them on for ``whole_body=True``.
"""

CONTROL_DT = 0.02
"""Policy period [s] (50 Hz)."""
SIM_DT = 0.005
"""Physics step [s]; four per control step."""
LOWCMD_RATE_HZ = 500.0
MODE_MACHINE_29DOF = 5
"""LowState.mode_machine the 29-DoF G1 reports."""


def body(name: str) -> Body:
    """Return the body called ``name``; raise KeyError naming the known bodies otherwise."""
    for b in BODIES:
        if b.name == name:
            return b
    raise KeyError(f'G1 has no body {name!r}; bodies: {[b.name for b in BODIES]}')


def joint_index(name: str) -> int:
    """Return the motor slot of the joint called ``name``."""
    try:
        return JOINT_NAMES.index(name)
    except ValueError:
        raise KeyError(f'G1 has no joint {name!r}; joints: {list(JOINT_NAMES)}') from None
