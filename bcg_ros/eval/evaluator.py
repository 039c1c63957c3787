"""
One evaluation: load the policy, the model and the motion, run, score.

``bcg-eval`` and the evaluator node both call :func:`evaluate` with an
:class:`EvalConfig`; they differ only in where the config comes from.
"""

import dataclasses
import pathlib
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from bcg_ros import contract as ct
from bcg_ros import motion as motion_mod
from bcg_ros.eval import metrics, render
from bcg_ros.eval.render import Media, RenderConfig
from bcg_ros.eval.rollout import Baseline, num_steps, Run, run_all, RolloutConfig, StepView
from bcg_ros.motion import Motion
from bcg_ros.robot import model as g1_model, physics
from bcg_ros.runtime.policy import load_policy, Policy


@dataclass(frozen=True)
class EvalConfig:
    """What to evaluate and how."""

    policy: str = ''
    """Path of the policy's ONNX file."""
    deploy_yaml: str = ''
    """IsaacLab/unitree_rl_lab deploy.yaml; empty: the ONNX metadata, or one found beside it."""
    model: str = ''
    """G1 MJCF to simulate; empty: the project's model."""
    physics_params: str = ''
    """How the simulated robot differs from the model file (bcg_ros.robot.physics): a YAML
    file of PhysicsParams (a calibration's result, a log generator's hidden truth) or seed:N;
    empty: the file's robot. MuJoCo only: the training simulator keeps its own."""
    motion: str = ''
    """Reference motion: a built-in name or a file path (load_motion); empty: none, or the
    one the policy's contract names when the policy observes a reference motion."""
    motion_joint_order: str = ''
    """Column order of a motion file without joint names ('isaaclab' or 'motor', as
    BeyondMimic npz files need); empty: the file must name its joints."""
    command: Tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Velocity command (vx, vy, wz) for velocity policies."""
    runs: int = 5
    """Rollouts, each with its own seed."""
    threads: int = 1
    """onnxruntime threads."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Per-run setup: duration, noise, friction, pushes, fall height, seed."""
    sims: Tuple[str, ...] = ('mujoco',)
    """Simulators to judge in: 'mujoco' (always) and 'jax', the training simulator over the
    whole clip from frame 0 without randomisation, scored by the same metrics (needs a
    motion; the first use in a process compiles the G1 step, minutes on a CPU)."""
    baselines: Tuple[str, ...] = Baseline.NAMES
    """Open-loop baselines run on the same model, seeds and gains when there is a motion:
    'stand' (the PD holds the default pose), 'replay' (the reference joints fed to the PD)."""
    render: RenderConfig = field(default_factory=RenderConfig)
    """Pictures of the policy's MuJoCo runs: a filmstrip PNG each, a video on request."""
    terrain: str = ''
    """Ground to judge on (:func:`bcg_ros.core.terrain.from_spec`: flat, slope:DEG,
    steps:HEIGHT, rough:AMPLITUDE, a terrain .npz); empty: the one the policy was trained
    on (its training configuration), else flat. The reference motion follows it."""

    def __post_init__(self):
        """Reject what cannot run, naming the field."""
        if self.runs < 1:
            raise ValueError(f'EvalConfig.runs must be >= 1, got {self.runs}')
        if len(self.command) != 3:
            raise ValueError(f'EvalConfig.command must be (vx, vy, wz), got {self.command}')
        for sim in self.sims:
            if sim not in ('mujoco', 'jax'):
                raise ValueError(f"EvalConfig.sims: unknown {sim!r} (known: 'mujoco', 'jax')")
        for b in self.baselines:
            if b not in Baseline.NAMES:
                raise ValueError(f'EvalConfig.baselines: unknown {b!r} (known: {Baseline.NAMES})')


@dataclass(frozen=True)
class Evaluation:
    """An evaluation's inputs, raw runs and metrics."""

    config: EvalConfig
    policy: Policy
    model_path: str
    motion: Optional[Motion]
    runs: List[Run]
    per_run: List[Dict]
    summary: Dict
    baselines: Dict[str, Dict] = field(default_factory=dict)
    """Per baseline name: its summary, on the same model and seeds."""
    added_floor: bool = False
    """The model file had no ground plane; the evaluator added one."""
    jax: Optional[Dict] = None
    """The training simulator's judgement (EvalConfig.sims has 'jax'): 'summary', 'runs'
    (per-run metrics) and 'contact_k'."""
    media: Optional[Media] = None
    """Filmstrips and videos of the policy's MuJoCo runs (EvalConfig.render), not yet saved."""
    terrain: str = 'flat'
    """The ground the runs stood on (both simulators)."""

    def to_dict(self) -> Dict:
        """Return the JSON form: config, provenance, per-run and summary metrics."""
        cfg = dataclasses.asdict(self.config)
        return {'policy': str(self.policy.path), 'contract_source': self.policy.source,
                'model': self.model_path, 'physics_params': self.config.physics_params,
                'motion': self.motion.name if self.motion is not None else None,
                'command': list(self.config.command) if self.motion is None else None,
                'control_dt': self.policy.contract.control_dt,
                'sim_dt': self.runs[0].sim_dt if self.runs else None,
                'added_floor': self.added_floor, 'terrain': self.terrain,
                'config': cfg, 'summary': self.summary,
                'baselines': self.baselines, 'jax': self.jax, 'runs': self.per_run,
                'media': self.media.to_dict() if self.media is not None else None}


def resolve_motion(spec: Union[str, Motion, None], control_dt: float,
                   joint_order: str = '') -> Optional[Motion]:
    """Return a Motion at the control rate from a Motion, a name/path (load_motion), or None."""
    if spec is None or isinstance(spec, Motion):
        return None if spec is None else motion_mod.resample(spec, 1.0 / control_dt)
    if not spec:
        return None
    return motion_mod.load_motion(spec, control_dt, joint_order=joint_order or None)


def training_terrain(policy: Policy) -> str:
    """The terrain a policy was trained on (its training configuration); 'flat' if unknown."""
    import json

    try:
        cfg = json.loads((policy.metadata or {}).get(ct.TRAIN_CONFIG_KEY, '{}'))
        return str(cfg.get('g1', {}).get('sim', {}).get('terrain', 'flat') or 'flat')
    except (ValueError, AttributeError):
        return 'flat'


TILE_MARGIN = 1.5
"""How far [m] past the robot's planned path the MuJoCo ground is tiled."""


def mujoco_ground(terrain, spec: str, motion: Optional[Motion], reach: float):
    """
    The MuJoCo ground of runs on ``terrain`` (a heightfield, named ``spec``).

    Its heightfield is drawn; collisions go through tiles
    (:func:`bcg_ros.core.terrain.mujoco_tiles`) over the clip's root path, or ``reach``
    metres around the start without a clip, and ``TILE_MARGIN`` around that.
    """
    from bcg_ros.core import terrain as terrain_mod

    xy = motion.root_pos[:, :2] if motion is not None else np.zeros((1, 2))
    lo, hi = xy.min(0) - TILE_MARGIN - reach, xy.max(0) + TILE_MARGIN + reach
    region = ((lo[0], hi[0]), (lo[1], hi[1]))
    return dataclasses.replace(terrain_mod.mujoco_hfield(terrain, spec),
                               tiles=terrain_mod.mujoco_tiles(terrain, region))


def evaluate(config: EvalConfig, motion: Union[str, Motion, None] = None,
             policy: Optional[Policy] = None, g: Optional[g1_model.G1Model] = None,
             on_step: Optional[Callable[[StepView], None]] = None,
             progress: bool = False) -> Evaluation:
    """Run ``config`` (a Motion object, a loaded policy or model may be passed in)."""
    policy = policy or load_policy(config.policy, config.deploy_yaml or None, config.threads)
    terrain = config.terrain or training_terrain(policy)
    ground = None
    if terrain != 'flat':
        from bcg_ros.core import terrain as terrain_mod
        ground = terrain_mod.from_spec(terrain)
    spec = motion if motion is not None else config.motion
    if not spec and motion is None and policy.contract.uses_reference:
        spec = policy.contract.motion_name or None   # what it was trained on
    mot = resolve_motion(spec, policy.contract.control_dt, config.motion_joint_order)
    if mot is not None and ground is not None:
        mot = terrain_mod.lift_motion(mot, ground)
    if g is None:
        reach = float(np.linalg.norm(config.command[:2])) * (
            config.rollout.duration or config.rollout.velocity_duration)
        g = g1_model.load(config.model or None, whole_body=True,
                          ground=None if ground is None else mujoco_ground(
                              ground, terrain, mot, reach))
    if config.physics_params:
        g = physics.perturb(g, physics.resolve(config.physics_params), config.physics_params)
    if mot is None and policy.contract.uses_reference:
        raise ct.ContractError(f'{policy.path}: the policy observes a reference motion; '
                               'give one (EvalConfig.motion / --motion)')
    dt = policy.contract.control_dt
    rec = (render.Recorder(g, mot, num_steps(dt, config.rollout, mot), dt, config.rollout.seed,
                           config.render) if config.render.enabled else None)
    try:
        runs = run_all(policy, g, config.runs, config.rollout, mot, config.command,
                       render.chain(rec, on_step), progress)
        media = rec.finish() if rec is not None else None
    finally:
        if rec is not None:
            rec.close()
    velocity = policy.is_velocity_policy and mot is None
    ref_body = motion_mod.body_positions(mot, g) if mot is not None else None

    def score(rs: List[Run]) -> List[Dict]:
        return [metrics.run_metrics(r, mot, config.rollout.fall_height, velocity,
                                    ref_body=ref_body, ground_height=None if ground is None
                                    else terrain_mod.heights_at(ground, r.root_pos[:, :2])[0])
                for r in rs]

    per_run = score(runs)
    summary = metrics.summarize(per_run, policy.train_penetration_mm)
    baselines = {}
    if mot is not None:
        for name in config.baselines:
            b_runs = run_all(Baseline.of(policy, name), g, config.runs, config.rollout, mot)
            b_sum = metrics.summarize(score(b_runs))
            b_sum.pop('train_penetration_mm', None)
            b_sum.pop('delta_d_mm', None)
            baselines[name] = b_sum
    jax_result = None
    if 'jax' in config.sims and mot is not None:
        from bcg_ros.eval import jax_rollout
        j_runs = jax_rollout.run_all(policy, mot, 1, config.rollout, terrain=terrain)
        j_per = score(j_runs)
        j_sum = metrics.summarize(j_per, policy.train_penetration_mm)
        j_sum.pop('delta_d_mm', None)
        jax_result = {'summary': j_sum, 'runs': j_per,
                      'contact_k': jax_rollout.contact_k(policy)}
    if velocity and policy.command_ranges:
        summary['command_in_training_range'] = all(
            lo - 1e-9 <= v <= hi + 1e-9 for v, (lo, hi) in
            zip(config.command, (policy.command_ranges.get(k, (-np.inf, np.inf))
                                 for k in ('lin_vel_x', 'lin_vel_y', 'ang_vel_z'))))
    return Evaluation(config, policy, str(g.path), mot, runs, per_run, summary, baselines,
                      g.added_floor, jax_result, media, terrain)


def model_label(path: Union[str, pathlib.Path]) -> str:
    """Short name of a model file for tables."""
    p = pathlib.Path(path)
    return 'project' if p == g1_model.DEFAULT_MJCF else p.name
