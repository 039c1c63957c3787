"""
Load a G1 MuJoCo model: the project's by default, or any G1 MJCF a user gives.

The loader checks that the model is a 29-DoF G1 (the joints of
:mod:`bcg_ros.robot.g1`, by name) and maps them to ids once, outside any jit.

A model without a ground plane (a robot-only file such as the official
``g1_29dof.xml``) gets one, so the robot always has a floor to stand on. The
project's MJCF collides only through the eight foot spheres, as training does;
``whole_body=True`` also switches on its link collision shapes (geoms named
``*_collision`` in group 3) against the floor and against each other, which the
MuJoCo judge uses so that a fallen robot lies on the floor instead of sinking
through it. A model whose meshes already collide is left as it is.

Given a :class:`Ground` (a heightfield, :func:`bcg_ros.core.terrain.mujoco_hfield`),
the robot stands on it instead: the model's planes stop colliding and are hidden.
A ground with ``tiles`` (:func:`bcg_ros.core.terrain.mujoco_tiles`) collides through
those boxes and shows the heightfield only as a picture.
"""

import copy
import pathlib
from dataclasses import dataclass
from typing import List, Optional, Tuple, TYPE_CHECKING, Union

import mujoco
import numpy as np

from bcg_ros.robot import g1

if TYPE_CHECKING:
    from bcg_ros.robot.physics import PhysicsParams

DEFAULT_MJCF = pathlib.Path(__file__).resolve().parents[1] / 'models' / 'g1_29dof.xml'

FLOOR_FRICTION = (1.0, 0.005, 0.0001)
"""Sliding, torsional and rolling friction of an added floor, as the project's floor has."""
HIDDEN_GROUP = 5
"""Geom group of a floor a :class:`Ground` replaces (not drawn, not collided, not ray-cast
by callers that pass a group mask without it)."""
STAND_CLEARANCE = 0.005
"""Body pairs closer than this [m] in the standing pose never collide with each other."""


class ModelError(ValueError):
    """A model file that is missing, unreadable or not a 29-DoF G1."""


@dataclass(frozen=True)
class Ground:
    """A heightfield for MuJoCo: ``z0 + size[2] * data`` over a grid centred at ``center``."""

    name: str
    """What it is (a terrain spec), for reports."""
    data: np.ndarray
    """[nrow, ncol] heights in [0, 1]; row r at y = cy - ry + 2 ry r / (nrow - 1), columns in x."""
    center: Tuple[float, float]
    """x, y of the grid's centre [m]."""
    size: Tuple[float, float, float, float]
    """MuJoCo's hfield size: half extents rx, ry [m], elevation range [m], base depth [m]."""
    z0: float
    """Height of data 0 [m]."""
    tiles: Optional[np.ndarray] = None
    """[N, 10] boxes that collide in the heightfield's place (centre 3, quaternion 4, half
    sizes 3), each top face tangent to the surface; None: the heightfield collides."""


@dataclass(frozen=True)
class G1Model:
    """A compiled G1 model with the index maps every consumer needs."""

    path: pathlib.Path
    model: mujoco.MjModel
    qpos_adr: np.ndarray
    """qpos address of each joint, motor order."""
    qvel_adr: np.ndarray
    """qvel address of each joint, motor order."""
    actuator_ids: np.ndarray
    """Actuator driving each joint, motor order (-1 where the model has none)."""
    root_body: int
    foot_bodies: Tuple[int, int]
    added_floor: bool = False
    """The file had no ground plane and the loader added one (geom 'floor' at z = 0)."""
    ground: str = 'flat'
    """What the robot stands on: 'flat', or the :class:`Ground`'s name."""
    physics: Optional['PhysicsParams'] = None
    """Physical parameters applied to the file's model (:func:`bcg_ros.robot.physics.perturb`),
    the control latency among them, which the PD loop runs; None: the file's robot."""

    def standing_qpos(self) -> np.ndarray:
        """Return the default pose with the feet on the ground (the 'stand' key if any)."""
        key = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_KEY, 'stand')
        if key >= 0:
            return self.model.key_qpos[key].copy()
        qpos = self.model.qpos0.copy()
        qpos[self.qpos_adr] = g1.DEFAULT_POSE
        data = mujoco.MjData(self.model)
        data.qpos[:] = qpos
        mujoco.mj_kinematics(self.model, data)
        lowest = min(
            (data.xpos[b] + data.xmat[b].reshape(3, 3) @ np.asarray(p))[2]
            for b_name, p in g1.FOOT_SPHERES
            for b in [mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, b_name)])
        qpos[2] += g1.FOOT_SPHERE_RADIUS - lowest
        return qpos


def load(path: Optional[Union[str, pathlib.Path]] = None,
         whole_body: bool = False, ground: Optional[Ground] = None) -> G1Model:
    """
    Compile a G1 MJCF (the project's when ``path`` is None) and index its joints.

    A floor is added when the file has no plane. With ``whole_body`` the link
    collision shapes are switched on; body pairs that touch in the standing pose
    (a hip housing inside the pelvis, the waist inside the torso) are excluded
    from colliding, and MuJoCo already skips parent-child pairs. With ``ground``
    the robot stands on that heightfield instead of the floor.
    """
    path = pathlib.Path(path) if path is not None else DEFAULT_MJCF
    if not path.is_file():
        raise ModelError(f'{path}: no such model file')
    try:
        spec = mujoco.MjSpec.from_file(str(path))
    except ValueError as exc:
        raise ModelError(f'{path}: MuJoCo could not load it: {exc}') from exc
    added_floor = not any(g.type == mujoco.mjtGeom.mjGEOM_PLANE for g in spec.geoms)
    if added_floor:
        spec.worldbody.add_geom(name='floor', type=mujoco.mjtGeom.mjGEOM_PLANE,
                                size=[0.0, 0.0, 0.05], friction=list(FLOOR_FRICTION),
                                contype=1, conaffinity=1)
    if ground is not None:
        add_ground(spec, ground)
    switched = [g for g in spec.geoms if g.group == 3 and g.name.endswith('_collision')
                and g.contype == 0 and g.conaffinity == 0] if whole_body else []
    for g in switched:
        g.contype, g.conaffinity = 1, 1
    name = ground.name if ground is not None else 'flat'
    loaded = _index(path, _compile(spec, path), added_floor, name)
    if not switched:
        return loaded
    for b1, b2 in _standing_contacts(loaded):
        spec.add_exclude(bodyname1=b1, bodyname2=b2)
    return _index(path, _compile(spec, path), added_floor, name)


def add_ground(spec: mujoco.MjSpec, ground: Ground) -> None:
    """Put ``ground`` in the world (an hfield geom, or its tiles); planes stop colliding."""
    for g in spec.geoms:
        if g.type == mujoco.mjtGeom.mjGEOM_PLANE:
            g.contype, g.conaffinity, g.group = 0, 0, HIDDEN_GROUP
            g.rgba = [0.0, 0.0, 0.0, 0.0]
    nrow, ncol = ground.data.shape
    spec.add_hfield(name='terrain', size=list(ground.size), nrow=nrow, ncol=ncol,
                    userdata=np.asarray(ground.data, np.float32).ravel().tolist())
    hfield = spec.worldbody.add_geom(name='terrain', type=mujoco.mjtGeom.mjGEOM_HFIELD,
                                     hfieldname='terrain', pos=[*ground.center, ground.z0],
                                     friction=list(FLOOR_FRICTION), contype=1, conaffinity=1,
                                     rgba=[0.55, 0.6, 0.65, 1.0])
    if ground.tiles is None:
        return
    hfield.contype, hfield.conaffinity = 0, 0
    for i, (pos, quat, half) in enumerate(zip(ground.tiles[:, 0:3], ground.tiles[:, 3:7],
                                              ground.tiles[:, 7:10])):
        spec.worldbody.add_geom(name=f'terrain_tile{i}', type=mujoco.mjtGeom.mjGEOM_BOX,
                                size=half.tolist(), pos=pos.tolist(), quat=quat.tolist(),
                                friction=list(FLOOR_FRICTION), contype=1, conaffinity=1,
                                group=HIDDEN_GROUP, rgba=[0.0, 0.0, 0.0, 0.0])


def _compile(spec: mujoco.MjSpec, path: pathlib.Path) -> mujoco.MjModel:
    try:
        return spec.compile()
    except ValueError as exc:
        raise ModelError(f'{path}: MuJoCo could not load it: {exc}') from exc


def _standing_contacts(g: G1Model) -> List[Tuple[str, str]]:
    """Robot body pairs in contact, or within STAND_CLEARANCE, in the standing pose."""
    m = copy.deepcopy(g.model)
    robot = m.geom_bodyid != 0
    m.geom_margin[robot] = STAND_CLEARANCE
    d = mujoco.MjData(m)
    d.qpos[:] = g.standing_qpos()
    mujoco.mj_fwdPosition(m, d)
    pairs = set()
    for c in d.contact[:d.ncon]:
        b1, b2 = sorted((int(m.geom_bodyid[c.geom[0]]), int(m.geom_bodyid[c.geom[1]])))
        if b1 != 0:
            pairs.add((b1, b2))
    return [(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b1),
             mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b2)) for b1, b2 in sorted(pairs)]


def _index(path: pathlib.Path, model: mujoco.MjModel, added_floor: bool,
           ground: str = 'flat') -> G1Model:
    """Check that ``model`` is a 29-DoF G1 and map its joints, motor order."""
    qpos_adr, qvel_adr, act_ids = [], [], []
    for name in g1.JOINT_NAMES:
        jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        if jid < 0:
            raise ModelError(f'{path}: joint {name!r} of the G1 29-DoF is missing')
        if model.jnt_type[jid] != mujoco.mjtJoint.mjJNT_HINGE:
            raise ModelError(f'{path}: joint {name!r} is not a hinge')
        qpos_adr.append(model.jnt_qposadr[jid])
        qvel_adr.append(model.jnt_dofadr[jid])
        acts = np.flatnonzero((model.actuator_trnid[:, 0] == jid)
                              & (model.actuator_trntype == mujoco.mjtTrn.mjTRN_JOINT))
        act_ids.append(int(acts[0]) if acts.size else -1)
    root = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, g1.ROOT_BODY)
    if root < 0 or model.body_jntnum[root] < 1 or \
            model.jnt_type[model.body_jntadr[root]] != mujoco.mjtJoint.mjJNT_FREE:
        raise ModelError(f'{path}: body {g1.ROOT_BODY!r} with a free joint is missing')
    feet = tuple(mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, f) for f in g1.FOOT_BODIES)
    if min(feet) < 0:
        raise ModelError(f'{path}: foot bodies {g1.FOOT_BODIES} are missing')
    return G1Model(path, model, np.array(qpos_adr), np.array(qvel_adr), np.array(act_ids),
                   root, feet, added_floor, ground)
