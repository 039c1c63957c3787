"""
Small ONNX policies and IsaacLab-style deploy files, for tests and benchmarks.

The policies are plain MLPs written with ``onnx.helper`` (Gemm + Elu), so
they need neither a trainer nor a GPU; the deploy file is the format
unitree_rl_lab exports next to its ``policy.onnx``.
"""

import pathlib
from typing import Mapping, Optional, Sequence, Union

import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto
import yaml

from bcg_ros import contract as ct
from bcg_ros.robot import g1

INPUT_NAME = 'obs'
OUTPUT_NAME = 'actions'


def mlp_onnx(obs_size: int, act_size: int, hidden: Sequence[int] = (),
             seed: int = 0, weight_scale: float = 0.0, bias: Union[float, np.ndarray] = 0.0,
             metadata: Optional[Mapping[str, str]] = None) -> onnx.ModelProto:
    """
    Build an MLP ``obs [B, obs_size] -> actions [B, act_size]`` with ELU between layers.

    Weights are N(0, weight_scale^2 / fan_in); the last layer's bias is ``bias``.
    ``weight_scale = 0`` and ``bias = 0`` give the zeros policy (it holds the
    default pose); a large constant ``bias`` gives a policy that drives every
    joint to one side.
    """
    rng = np.random.default_rng(seed)
    sizes = [obs_size, *hidden, act_size]
    nodes, inits = [], []
    x = INPUT_NAME
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = (rng.standard_normal((n_in, n_out)) * weight_scale / np.sqrt(n_in)).astype(np.float32)
        last = i == len(sizes) - 2
        b = (np.broadcast_to(np.asarray(bias, np.float32), (n_out,)) if last
             else np.zeros(n_out, np.float32))
        inits += [numpy_helper.from_array(w, f'w{i}'),
                  numpy_helper.from_array(np.ascontiguousarray(b), f'b{i}')]
        y = OUTPUT_NAME if last else f'h{i}'
        nodes.append(helper.make_node('Gemm', [x, f'w{i}', f'b{i}'], [y if last else f'z{i}']))
        if not last:
            nodes.append(helper.make_node('Elu', [f'z{i}'], [y]))
        x = y
    graph = helper.make_graph(
        nodes, 'policy',
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ['batch', obs_size])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ['batch', act_size])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])
    model.ir_version = 8
    for k, v in (metadata or {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = k, v
    onnx.checker.check_model(model)
    return model


def save_policy(path: Union[str, pathlib.Path], contract: Optional[ct.Contract],
                hidden: Sequence[int] = (), seed: int = 0, weight_scale: float = 0.0,
                bias: Union[float, np.ndarray] = 0.0, obs_size: Optional[int] = None,
                extra_metadata: Optional[Mapping[str, str]] = None) -> pathlib.Path:
    """Write an MLP policy for ``contract`` (its metadata in the file unless contract is None)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = dict(contract.to_metadata()) if contract is not None else {}
    meta.update(extra_metadata or {})
    n_obs = obs_size if obs_size is not None else contract.obs_size
    n_act = contract.num_joints if contract is not None else g1.NUM_JOINTS
    onnx.save(mlp_onnx(n_obs, n_act, hidden, seed, weight_scale, bias, meta), str(path))
    return path


def isaaclab_joint_order() -> tuple:
    """G1 joint names breadth-first through the kinematic tree, as IsaacLab orders them."""
    children = {}
    for b in g1.BODIES:
        children.setdefault(b.parent, []).append(b)
    order, frontier = [], [g1.body(g1.ROOT_BODY)]
    while frontier:
        nxt = []
        for b in frontier:
            for c in children.get(b.name, []):
                order.append(c.joint.name)
                nxt.append(c)
        frontier = nxt
    return tuple(order)


def deploy_yaml(contract: ct.Contract, command_ranges: Optional[Mapping] = None) -> dict:
    """
    Return the unitree_rl_lab deploy.yaml content for a policy with ``contract``.

    As unitree_rl_lab writes it: ``joint_ids_map[i]`` is the motor slot of
    policy joint ``i``; ``stiffness`` and ``damping`` are in motor order;
    ``default_joint_pos``, action scale/offset and observation scales in policy
    order; each observation term has its own ``history_length``.
    """
    ids = [g1.joint_index(n) for n in contract.joint_names]
    kp, kd = np.zeros(g1.NUM_JOINTS), np.zeros(g1.NUM_JOINTS)
    kp[ids], kd[ids] = contract.kp, contract.kd
    obs = {}
    for t in contract.obs_terms:
        scale = (list(t.scale) if not isinstance(t.scale, (int, float))
                 else [float(t.scale)] * t.size)
        clip = None
        if t.clip is not None:
            clip = ([-float(t.clip), float(t.clip)] if isinstance(t.clip, (int, float))
                    else [float(c) for c in t.clip])
        obs[t.name] = {'params': {}, 'clip': clip, 'scale': scale,
                       'history_length': int(t.history)}
    ranges = dict(command_ranges or {'lin_vel_x': [-0.5, 1.0], 'lin_vel_y': [-0.5, 0.5],
                                     'ang_vel_z': [-1.0, 1.0]})
    clip = ([list(b) for b in contract.target_clip] if contract.target_clip is not None
            else None)
    return {
        'joint_ids_map': ids,
        'step_dt': float(contract.control_dt),
        'stiffness': kp.tolist(),
        'damping': kd.tolist(),
        'default_joint_pos': list(contract.default_pose),
        'commands': {'base_velocity': {'ranges': {**ranges, 'heading': None}}},
        'actions': {'JointPositionAction': {
            'clip': clip, 'joint_names': list(contract.joint_names),
            'scale': list(contract.action_scale), 'offset': list(contract.action_offset),
            'joint_ids': None}},
        'observations': obs,
    }


def write_deploy_yaml(path: Union[str, pathlib.Path], contract: ct.Contract,
                      command_ranges: Optional[Mapping] = None) -> pathlib.Path:
    """Write :func:`deploy_yaml` of ``contract`` to ``path``."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(deploy_yaml(contract, command_ranges), sort_keys=False))
    return path


def velocity_contract(joint_names: Sequence[str] = g1.JOINT_NAMES,
                      history: int = 1, action_scale: float = 0.25) -> ct.Contract:
    """Return a velocity-tracking G1 contract in the unitree_rl_lab style, any joint order."""
    idx = [g1.joint_index(n) for n in joint_names]
    nj = len(joint_names)
    pick = (lambda v: tuple(float(v[i]) for i in idx))
    terms = (ct.ObsTerm('base_ang_vel', 3, history, scale=(0.2, 0.2, 0.2)),
             ct.ObsTerm('projected_gravity', 3, history),
             ct.ObsTerm('velocity_commands', 3, history),
             ct.ObsTerm('joint_pos_rel', nj, history),
             ct.ObsTerm('joint_vel_rel', nj, history, scale=0.05),
             ct.ObsTerm('last_action', nj, history))
    default = pick(g1.DEFAULT_POSE)
    return ct.Contract(joint_names=tuple(joint_names), default_pose=default,
                       kp=pick(g1.DEFAULT_KP), kd=pick(g1.DEFAULT_KD),
                       action_scale=(action_scale,) * nj, action_offset=default,
                       action_clip=None, obs_terms=terms, control_dt=g1.CONTROL_DT)


def held_pose_motion(g, seconds: float = 2.0, fps: float = 1.0 / g1.CONTROL_DT,
                     name: str = 'stand', offset=(0.0, 0.0, 0.0)):
    """
    Return a reference motion that holds ``g``'s standing pose, key points from MuJoCo FK.

    ``offset`` shifts the whole motion (root and key points) in the world frame,
    which makes a known tracking error for a robot that stands where it started.
    """
    import mujoco

    from bcg_ros.motion import Motion

    m = g.model
    d = mujoco.MjData(m)
    d.qpos[:] = g.standing_qpos()
    mujoco.mj_kinematics(m, d)
    bodies = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, b) for _, b, _ in g1.KEY_POINTS]
    key = np.stack([d.xpos[b] + d.xmat[b].reshape(3, 3) @ np.asarray(p)
                    for b, (_, _, p) in zip(bodies, g1.KEY_POINTS)])
    n = int(round(seconds * fps)) + 1
    off = np.asarray(offset, float)
    tile = (lambda a: np.repeat(np.asarray(a, float)[None], n, axis=0))
    return Motion(name=name, fps=fps, root_pos=tile(d.qpos[:3] + off), root_quat=tile(d.qpos[3:7]),
                  joint_pos=tile(d.qpos[g.qpos_adr]), joint_vel=np.zeros((n, g1.NUM_JOINTS)),
                  root_lin_vel=np.zeros((n, 3)), root_ang_vel=np.zeros((n, 3)),
                  key_pos=tile(key + off))


def quiet_rollout(**kw):
    """A rollout set-up without randomisation (no joint or velocity noise, friction 1)."""
    from bcg_ros.eval.rollout import RolloutConfig
    return RolloutConfig(**{'joint_noise': 0.0, 'root_vel_noise': 0.0,
                            'friction_range': (1.0, 1.0), **kw})


def zeros_policy(folder: Union[str, pathlib.Path], motion, residual: bool = False):
    """
    A loaded policy that always outputs zeros, on the imitation contract of ``motion``.

    It holds the default pose (or, ``residual``, replays the motion): the
    evaluator's tests and benchmarks judge it against hand-computed figures.
    """
    from bcg_ros.runtime.policy import load_policy

    c = ct.imitation_contract(motion.name, motion.num_frames, residual=residual)
    return load_policy(save_policy(pathlib.Path(folder) / 'policy.onnx', c))
