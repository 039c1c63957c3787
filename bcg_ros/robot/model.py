"""
Load a G1 MuJoCo model: the project's by default, or any G1 MJCF a user gives.

The loader checks that the model is a 29-DoF G1 (the joints of
:mod:`bcg_ros.robot.g1`, by name) and maps them to ids once, outside any jit.
"""

import pathlib
from dataclasses import dataclass
from typing import Optional, Tuple, Union

import mujoco
import numpy as np

from bcg_ros.robot import g1

DEFAULT_MJCF = pathlib.Path(__file__).resolve().parents[1] / 'models' / 'g1_29dof.xml'


class ModelError(ValueError):
    """A model file that is missing, unreadable or not a 29-DoF G1."""


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


def load(path: Optional[Union[str, pathlib.Path]] = None) -> G1Model:
    """Compile a G1 MJCF (the project's when ``path`` is None) and index its joints."""
    path = pathlib.Path(path) if path is not None else DEFAULT_MJCF
    if not path.is_file():
        raise ModelError(f'{path}: no such model file')
    try:
        model = mujoco.MjModel.from_xml_path(str(path))
    except ValueError as exc:
        raise ModelError(f'{path}: MuJoCo could not load it: {exc}') from exc
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
                   root, feet)
