"""
The one policy loader: an ONNX file and the contract it was trained under.

Every consumer (policy_node's runner, bcg-eval, evaluator_node, the trainer's export
check) loads through :func:`load_policy`. Where the contract comes from, tried in
this order, each source under its own name:

1. an IsaacLab/unitree_rl_lab ``deploy.yaml``, given explicitly;
2. the project's own ONNX metadata (:data:`bcg_ros.contract.METADATA_KEY`);
3. the project's contract file beside the ONNX (``contract.yaml``: the metadata's
   JSON, or the same as YAML);
4. a ``deploy.yaml`` beside the ONNX (``deploy.yaml`` in its folder, or
   ``../params/deploy.yaml`` as unitree_rl_lab lays out ``exported/policy.onnx``).

Either way the result is a :class:`bcg_ros.contract.Contract`: the observation
is built by the same contract module the trainer uses, never a second copy.
YAML is read by :func:`read_yaml`, which understands the Python tags IsaacLab's
exporter writes (slices, tuples) and constructs nothing else.
"""

import pathlib
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Tuple, Union

import numpy as np
import yaml

from bcg_ros import contract as ct
from bcg_ros.robot import g1

CONTRACT_FILE = 'contract.yaml'
"""The project's contract file, looked for beside the ONNX."""

BEYONDMIMIC_KEYS = ('anchor_body_name', 'observation_names', 'joint_names')
"""Metadata keys by which a BeyondMimic-style ONNX export is recognised."""

_COMMAND_KEYS = ('lin_vel_x', 'lin_vel_y', 'ang_vel_z')


@dataclass(frozen=True)
class Policy:
    """An ONNX policy ready to run: its session, contract and joint map."""

    path: pathlib.Path
    contract: ct.Contract
    motor_ids: np.ndarray
    """Motor slot (index into :data:`bcg_ros.robot.g1.JOINT_NAMES`) of each contract joint."""
    source: str
    """Where the contract came from: 'metadata' or the deploy.yaml path."""
    metadata: Mapping[str, str]
    session: object = field(repr=False)
    input_name: str = 'obs'
    output_name: str = 'actions'
    command_ranges: Optional[Dict[str, Tuple[float, float]]] = None
    """Velocity command ranges the policy was trained on (vx, vy, wz), if known."""

    @property
    def train_penetration_mm(self) -> Optional[float]:
        """Mean foot penetration [mm] in the training simulator, if the trainer recorded it."""
        v = self.metadata.get(ct.TRAIN_PENETRATION_KEY)
        return float(v) if v not in (None, '') else None

    @property
    def is_velocity_policy(self) -> bool:
        """Whether the observation has a velocity command term."""
        return any(t.name == 'velocity_commands' for t in self.contract.obs_terms)

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Raw action [n_joints] (contract order) for one observation vector."""
        x = np.asarray(obs, np.float32).reshape(1, -1)
        return self.session.run([self.output_name], {self.input_name: x})[0][0]


class _ExportLoader(yaml.SafeLoader):
    """Safe YAML plus the Python tags policy exporters write (slices, tuples)."""


def _slice(loader: yaml.SafeLoader, node: yaml.Node) -> slice:
    return slice(*loader.construct_sequence(node))


def _tuple(loader: yaml.SafeLoader, node: yaml.Node) -> tuple:
    return tuple(loader.construct_sequence(node))


def _refuse(loader: yaml.SafeLoader, suffix: str, node: yaml.Node):
    mark = node.start_mark
    raise ct.ContractError(f'{mark.name}: line {mark.line + 1}: tag {node.tag!r} is not '
                           'read (only slices and tuples are; it could run code)')


_ExportLoader.add_constructor('tag:yaml.org,2002:python/object/apply:builtins.slice', _slice)
_ExportLoader.add_constructor('tag:yaml.org,2002:python/tuple', _tuple)
_ExportLoader.add_multi_constructor('tag:yaml.org,2002:python/', _refuse)
_ExportLoader.add_multi_constructor('!', _refuse)


def read_yaml(path: Union[str, pathlib.Path]) -> Mapping:
    """
    A YAML mapping from ``path``; errors (ContractError) name the file and the line.

    Python tags other than slices and tuples are refused, never constructed.
    """
    path = pathlib.Path(path)
    try:
        with open(path) as f:
            loader = _ExportLoader(f)
            loader.name = str(path)
            try:
                d = loader.get_single_data()
            finally:
                loader.dispose()
    except OSError as exc:
        raise ct.ContractError(f'{path}: cannot read it: {exc}') from exc
    except yaml.YAMLError as exc:
        raise ct.ContractError(f'{path}: not valid YAML: {exc}') from exc
    if d is None:
        return {}
    if not isinstance(d, Mapping):
        raise ct.ContractError(f'{path}: expected a mapping at the top, got {type(d).__name__}')
    return d


def _list(d: Mapping, key: str, n: Optional[int], source: str, default=None):
    """``d[key]`` as a float array of length ``n`` (a scalar broadcasts); errors name the field."""
    v = d.get(key, default)
    if v is None:
        raise ct.ContractError(f'{source}: field {key!r} missing')
    a = np.asarray(v, dtype=float)
    if a.ndim == 0 and n is not None:
        a = np.full(n, float(a))
    if n is not None and a.shape[0] != n:
        raise ct.ContractError(f'{source}: field {key!r} has {a.shape[0]} values, '
                               f'expected {n}')
    bad = np.flatnonzero(~np.isfinite(a))
    if bad.size:
        raise ct.ContractError(f'{source}: field {key!r}[{bad[0]}] is {a[bad[0]]}, '
                               'not a finite number')
    return a


def contract_from_deploy(d: Mapping, source: str = 'deploy.yaml'
                         ) -> Tuple[ct.Contract, Optional[Dict[str, Tuple[float, float]]]]:
    """
    Translate an IsaacLab/unitree_rl_lab deploy.yaml into a contract and command ranges.

    The format: ``joint_ids_map[i]`` is the motor slot of policy joint ``i``
    (names are accepted too); ``stiffness`` and ``damping`` are in motor
    order; ``default_joint_pos``, the JointPositionAction's ``scale`` and
    ``offset`` (raw action times scale plus offset, then ``clip`` as per-joint
    (low, high) target bounds) and the observation scales are in policy order.
    Each observation term carries its own ``scale``, ``clip`` (applied before
    the scale, as IsaacLab does) and ``history_length`` (frames of that term,
    oldest first; 0 means none kept, i.e. one frame).
    """
    if 'joint_ids_map' not in d:
        raise ct.ContractError(f'{source}: field joint_ids_map missing')
    ids = []
    for i, j in enumerate(d['joint_ids_map']):
        if isinstance(j, str):
            ids.append(g1.joint_index(j))
        elif not 0 <= int(j) < g1.NUM_JOINTS:
            raise ct.ContractError(f'{source}: field joint_ids_map[{i}] = {j} is not a G1 '
                                   f'motor slot (0..{g1.NUM_JOINTS - 1})')
        else:
            ids.append(int(j))
    n = len(ids)
    names = tuple(g1.JOINT_NAMES[i] for i in ids)
    n_motor = max(len(np.atleast_1d(d.get('stiffness', []))), max(ids) + 1)
    kp = _list(d, 'stiffness', n_motor, source)[ids]
    kd = _list(d, 'damping', n_motor, source)[ids]
    default = _list(d, 'default_joint_pos', n, source)
    if 'step_dt' in d:
        control_dt = float(d['step_dt'])
    elif 'sim_dt' in d and 'decimation' in d:
        control_dt = float(d['sim_dt']) * int(d['decimation'])
    else:
        raise ct.ContractError(f'{source}: field step_dt missing')
    act = (d.get('actions') or {}).get('JointPositionAction')
    if act is None:
        raise ct.ContractError(f'{source}: field actions.JointPositionAction missing '
                               f'(actions: {sorted(d.get("actions") or {})})')
    scale = _list(act, 'scale', n, f'{source}: actions.JointPositionAction', 1.0)
    offset = _list(act, 'offset', n, f'{source}: actions.JointPositionAction', default)
    target_clip = None
    if act.get('clip') is not None:
        c = np.asarray(act['clip'], dtype=float)
        if c.shape != (n, 2):
            raise ct.ContractError(f'{source}: field actions.JointPositionAction.clip has '
                                   f'shape {c.shape}, expected ({n}, 2)')
        target_clip = tuple((float(lo), float(hi)) for lo, hi in c)
    terms = []
    for name, spec in (d.get('observations') or {}).items():
        if name not in ct.TERMS:
            raise ct.ContractError(f'{source}: field observations.{name}: unknown term '
                                   f'(known: {sorted(ct.TERMS)})')
        spec = spec or {}
        size = ct.TERMS[name][1](n)
        s = spec.get('scale')
        s = 1.0 if s is None else s
        s = float(s) if np.ndim(s) == 0 else tuple(float(x) for x in s)
        c = spec.get('clip')
        if c is not None:
            c = float(c) if np.ndim(c) == 0 else tuple(float(x) for x in c)
        terms.append(ct.ObsTerm(name, size, history=max(1, int(spec.get('history_length') or 0)),
                                scale=s, clip=c, clip_first=True))
    if not terms:
        raise ct.ContractError(f'{source}: field observations is empty')
    try:
        contract = ct.Contract(joint_names=names, default_pose=tuple(default.tolist()),
                               kp=tuple(kp.tolist()), kd=tuple(kd.tolist()),
                               action_scale=tuple(scale.tolist()),
                               action_offset=tuple(offset.tolist()), action_clip=None,
                               obs_terms=tuple(terms), control_dt=control_dt,
                               target_clip=target_clip)
    except ct.ContractError as exc:
        raise ct.ContractError(f'{source}: {exc} (stiffness / damping / default_joint_pos '
                               'of deploy.yaml)') from exc
    ranges = ((d.get('commands') or {}).get('base_velocity') or {}).get('ranges')
    command_ranges = None
    if ranges:
        command_ranges = {k: tuple(float(x) for x in ranges[k])
                          for k in _COMMAND_KEYS if ranges.get(k) is not None}
    return contract, command_ranges


def find_deploy_yaml(onnx_path: pathlib.Path) -> Optional[pathlib.Path]:
    """Find a deploy.yaml beside the policy, where unitree_rl_lab or a user would put it."""
    for p in (onnx_path.parent / 'deploy.yaml',
              onnx_path.parent.parent / 'params' / 'deploy.yaml'):
        if p.is_file():
            return p
    return None


def _session(path: pathlib.Path, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = threads
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    try:
        return ort.InferenceSession(str(path), sess_options=opts,
                                    providers=['CPUExecutionProvider'])
    except Exception as exc:  # onnxruntime raises its own exception types
        raise ct.ContractError(f'{path}: onnxruntime could not load it: {exc}') from exc


def _width(shape) -> Optional[int]:
    last = shape[-1] if shape else None
    return last if isinstance(last, int) else None


def _cross_check(path: pathlib.Path, meta: Mapping[str, str], contract: ct.Contract,
                 source: str):
    """Check joint names and period the ONNX metadata also states against the deploy file."""
    if meta.get('joint_names'):
        names = tuple(n.strip() for n in meta['joint_names'].split(','))
        if names != contract.joint_names:
            raise ct.ContractError(f'{path}: field joint_names: ONNX metadata {list(names)}, '
                                   f'{source} {list(contract.joint_names)}')
    if meta.get('control_dt'):
        dt = float(meta['control_dt'])
        if abs(dt - contract.control_dt) > 1e-9:
            raise ct.ContractError(f'{path}: field control_dt: ONNX metadata {dt} s, '
                                   f'{source} {contract.control_dt} s')


BEYONDMIMIC_TERMS = {'base_ang_vel': 'base_ang_vel', 'base_lin_vel': 'base_lin_vel',
                     'joint_pos': 'joint_pos_rel',
                     'joint_vel': 'joint_vel_rel', 'actions': 'last_action',
                     'projected_gravity': 'projected_gravity'}
"""BeyondMimic observation names and the contract terms that build the same values."""

_BEYONDMIMIC_MISSING = {
    'command': "the reference joint positions and velocities at the ONNX's time_step "
               '(its own joint_pos/joint_vel outputs, fed back)',
    'motion_anchor_pos_b': "the reference anchor body's position in the robot's anchor frame "
                           '(needs the robot\'s world position: an estimator in the loop)',
    'motion_anchor_ori_b': "the reference anchor body's orientation in the robot's anchor frame "
                           "(the ONNX's body_quat_w output against the robot's anchor body)",
}


def beyondmimic_gap(path: pathlib.Path, meta: Mapping[str, str], inputs) -> str:
    """
    Say exactly what a BeyondMimic ONNX export needs that bcg_ros does not build.

    Such an export carries its reference motion inside the graph: a second input
    (``time_step``) indexes it, and outputs beside ``actions`` give the reference
    the observation is built from.
    """
    names = [n.strip() for n in meta.get('observation_names', '').split(',') if n.strip()]
    built = [n for n in names if n in BEYONDMIMIC_TERMS]
    missing = [n for n in names if n not in BEYONDMIMIC_TERMS]
    extra = [i for i in inputs if i != 'obs']
    lines = [f'{path}: a BeyondMimic export (metadata observation_names, anchor_body_name '
             f'{meta.get("anchor_body_name", "?")!r}; ONNX inputs {list(inputs)}) is not run by '
             'bcg_ros.']
    if extra:
        lines.append(f'  input(s) {extra}: bcg_ros feeds one observation input only')
    if built:
        lines.append('  observation terms bcg_ros builds: ' + ', '.join(
            f'{n} (as {BEYONDMIMIC_TERMS[n]})' for n in built))
    for n in missing:
        lines.append(f'  observation term {n!r}: not built; it is '
                     f'{_BEYONDMIMIC_MISSING.get(n, "a term bcg_ros does not know")}')
    lines.append('  a deploy.yaml cannot describe these terms; export the policy with '
                 "bcg_ros's contract instead (bcg-train), or run it with its own deploy code")
    return '\n'.join(lines)


def load_policy(path: Union[str, pathlib.Path],
                deploy_yaml: Optional[Union[str, pathlib.Path]] = None,
                threads: int = 1) -> Policy:
    """
    Load an ONNX policy and its contract, and check them against the G1 and each other.

    Raises :class:`bcg_ros.contract.ContractError` naming the file, the field
    and both values when the input size, the action size, the joint names or
    the control period do not fit.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise ct.ContractError(f'{path}: no such policy file')
    sess = _session(path, threads)
    meta = dict(sess.get_modelmeta().custom_metadata_map)
    ranges = None
    beside = path.parent / CONTRACT_FILE
    if deploy_yaml is None and ct.METADATA_KEY not in meta and not beside.is_file():
        deploy_yaml = find_deploy_yaml(path)
    if deploy_yaml is not None:
        deploy_yaml = pathlib.Path(deploy_yaml)
        if not deploy_yaml.is_file():
            raise ct.ContractError(f'{deploy_yaml}: no such deploy file')
        contract, ranges = contract_from_deploy(read_yaml(deploy_yaml), str(deploy_yaml))
        source = str(deploy_yaml)
    elif ct.METADATA_KEY in meta:
        contract = ct.Contract.from_metadata(meta, str(path))
        source = 'metadata'
    elif beside.is_file():
        contract = ct.Contract.from_dict(read_yaml(beside), str(beside))
        source = str(beside)
    elif all(k in meta for k in BEYONDMIMIC_KEYS):
        raise ct.ContractError(beyondmimic_gap(path, meta, [i.name for i in sess.get_inputs()]))
    else:
        raise ct.ContractError(f'{path}: no {ct.METADATA_KEY!r} metadata, no {CONTRACT_FILE} '
                               f'and no deploy.yaml beside it; pass one (metadata keys: '
                               f'{sorted(meta)})')
    contract.check_robot(g1.JOINT_NAMES, contract.control_dt, source=f'{path} ({source})')
    if source != 'metadata':
        _cross_check(path, meta, contract, source)
    inp, out = sess.get_inputs()[0], sess.get_outputs()[0]
    n_in, n_out = _width(inp.shape), _width(out.shape)
    if n_in is not None and n_in != contract.obs_size:
        raise ct.ContractError(f'{path}: field obs_size: the ONNX input {inp.name!r} has '
                               f'{n_in} values, the contract ({source}) builds '
                               f'{contract.obs_size}')
    if n_out is not None and n_out != contract.num_joints:
        raise ct.ContractError(f'{path}: field joint_names: the ONNX output {out.name!r} has '
                               f'{n_out} values, the contract ({source}) has '
                               f'{contract.num_joints} joints')
    ids = np.array([g1.joint_index(n) for n in contract.joint_names])
    return Policy(path, contract, ids, source, meta, sess, inp.name, out.name, ranges)
