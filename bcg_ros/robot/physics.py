"""
Physical parameters of one G1 beyond its model file: what a real robot does differently.

A model file describes a nominal G1; every robot deviates from it. A
:class:`PhysicsParams` says how, relative to the file, so that it applies to
any G1 MJCF (the project's or the official one):

- per joint: dry friction (``frictionloss``), viscous damping and armature
  (reflected rotor inertia) as factors on the file's values, and motor strength,
  the torque a motor delivers per newton metre its driver commands;
- per body: a mass factor (the inertia scales with it, the shape is kept) and a
  centre-of-mass offset in the body frame;
- the ground: the sliding friction and the contact softness (MuJoCo's
  ``solref`` time constant and damping ratio, ``solimp`` impedance) of every
  contact with it, as absolute values;
- the control latency: how long after a LowCmd arrives the motors act on it.

:func:`apply` writes the parameters into an ``MjModel``; :func:`perturb`
returns a perturbed copy of a :class:`~bcg_ros.robot.model.G1Model` that
carries the parameters along. The model holds all of them but the latency:
motor strength is the gain of each joint's motor (``actuator_gainprm[:, 0]``,
1 in a plain ``<motor>``), which :func:`bcg_ros.robot.pd.use_pd_actuators`
keeps and :func:`~bcg_ros.robot.pd.set_pd` multiplies into the whole PD law;
the latency is a :class:`~bcg_ros.robot.pd.CommandDelay` of the PD loop that
g1_sim_node and the evaluator run (:attr:`G1Model.physics`). So g1_sim_node
(parameter ``physics_params``) and ``bcg-eval --physics-params`` simulate the
same robot from the same file.

The ground's parameters act through geom priority: the ground geoms get a
priority above every robot geom, so MuJoCo takes friction, ``solref`` and
``solimp`` of each ground contact from the ground alone instead of mixing
them with the foot's. The evaluator's per-run friction randomisation
(``RolloutConfig.friction_range``) scales every geom's friction, so it
varies around the perturbed ground.

:func:`draw` draws a robot from :class:`PhysicsRanges` by a seed; the ranges
and why they are that wide are the docstrings of its fields. A file is YAML
(:func:`save`, :func:`load`); :func:`resolve` takes a file or ``seed:N``.
"""

import copy
import dataclasses
import pathlib
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Sequence, Tuple, Union

import mujoco
import numpy as np
import yaml

from bcg_ros.robot import g1
from bcg_ros.robot.model import G1Model

Vec3 = Tuple[float, float, float]
JOINT_FIELDS = ('joint_frictionloss', 'joint_damping', 'joint_armature', 'motor_strength')
"""Per-joint factors, keyed by joint name."""
SOLIMP_SIZE = 5


class PhysicsError(ValueError):
    """Physical parameters that do not fit a model, or a file that holds none: says which."""


@dataclass(frozen=True)
class PhysicsParams:
    """How one G1 deviates from its model file; the defaults change nothing."""

    joint_frictionloss: Mapping[str, float] = field(default_factory=dict)
    """Joint name -> factor on the file's dry friction torque (``frictionloss``)."""
    joint_damping: Mapping[str, float] = field(default_factory=dict)
    """Joint name -> factor on the file's viscous damping."""
    joint_armature: Mapping[str, float] = field(default_factory=dict)
    """Joint name -> factor on the file's armature (reflected rotor inertia)."""
    motor_strength: Mapping[str, float] = field(default_factory=dict)
    """Joint name -> torque delivered per torque commanded (the torque limit scales too);
    LowState's tau_est stays the commanded torque, as the driver estimates it."""
    body_mass: Mapping[str, float] = field(default_factory=dict)
    """Body name -> factor on its mass and inertia."""
    body_com: Mapping[str, Vec3] = field(default_factory=dict)
    """Body name -> offset of its centre of mass [m], body frame."""
    latency: float = 0.0
    """Time [s] from a LowCmd's arrival to the motors acting on it (whole physics steps)."""
    ground_friction: Optional[float] = None
    """Sliding friction coefficient of every ground contact; None: the file's."""
    ground_solref: Optional[Tuple[float, float]] = None
    """(time constant [s], damping ratio) of every ground contact; None: the file's."""
    ground_solimp: Optional[Tuple[float, ...]] = None
    """(dmin, dmax, width [m], midpoint, power) of every ground contact; None: the file's."""

    def __post_init__(self):
        """Reject values no robot has, naming the field."""
        for name in JOINT_FIELDS + ('body_mass',):
            for key, value in getattr(self, name).items():
                if not (np.isfinite(value) and value > 0):
                    raise PhysicsError(f'PhysicsParams.{name}[{key}]: must be a finite '
                                       f'factor > 0, got {value!r}')
        for key, value in self.body_com.items():
            if np.shape(value) != (3,) or not np.all(np.isfinite(value)):
                raise PhysicsError(f'PhysicsParams.body_com[{key}]: expected 3 finite '
                                   f'numbers [m], got {value!r}')
        if not (np.isfinite(self.latency) and self.latency >= 0):
            raise PhysicsError(f'PhysicsParams.latency: must be >= 0 s, got {self.latency!r}')
        if self.ground_friction is not None and not self.ground_friction > 0:
            raise PhysicsError('PhysicsParams.ground_friction: must be > 0, got '
                               f'{self.ground_friction!r}')
        if self.ground_solref is not None and (
                len(self.ground_solref) != 2 or not min(self.ground_solref) > 0):
            raise PhysicsError('PhysicsParams.ground_solref: expected (time constant > 0, '
                               f'damping ratio > 0), got {self.ground_solref!r}')
        if self.ground_solimp is not None and (
                len(self.ground_solimp) != SOLIMP_SIZE
                or not 0 < self.ground_solimp[0] <= self.ground_solimp[1] < 1):
            raise PhysicsError('PhysicsParams.ground_solimp: expected (dmin, dmax, width, '
                               'midpoint, power) with 0 < dmin <= dmax < 1, got '
                               f'{self.ground_solimp!r}')

    @property
    def is_nominal(self) -> bool:
        """Whether these parameters leave a model as its file describes it."""
        return self == PhysicsParams()

    def to_dict(self) -> Dict:
        """Plain YAML/JSON form (joints in motor order, bodies in the G1's order)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Mapping):
                value = {k: [float(x) for x in v] if f.name == 'body_com' else float(v)
                         for k, v in _ordered(value)}
            elif isinstance(value, tuple):
                value = [float(x) for x in value]
            elif value is not None:
                value = float(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping, source: str = 'physics parameters') -> 'PhysicsParams':
        """Inverse of :meth:`to_dict`; unknown keys raise naming ``source``."""
        if not isinstance(data, Mapping):
            raise PhysicsError(f'{source}: expected a mapping of PhysicsParams fields, got '
                               f'{type(data).__name__}')
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise PhysicsError(f'{source}: unknown fields {unknown}; known: {sorted(names)}')
        kw = {}
        try:
            for name, value in data.items():
                if value is None:
                    continue
                if name == 'body_com':
                    kw[name] = {str(k): tuple(float(x) for x in v) for k, v in value.items()}
                elif name in JOINT_FIELDS + ('body_mass',):
                    kw[name] = {str(k): float(v) for k, v in value.items()}
                elif name in ('ground_solref', 'ground_solimp'):
                    kw[name] = tuple(float(x) for x in value)
                else:
                    kw[name] = float(value)
            return cls(**kw)
        except PhysicsError as exc:
            raise PhysicsError(f'{source}: {exc}') from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise PhysicsError(f'{source}: field {name}: {exc}') from None


def _ordered(mapping: Mapping) -> list:
    """Items in the G1's joint, then body order; unknown names last, sorted."""
    order = {n: i for i, n in enumerate(g1.JOINT_NAMES + g1.TRACK_BODIES)}
    return sorted(mapping.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))


@dataclass(frozen=True)
class PhysicsRanges:
    """
    Where :func:`draw` draws each parameter from (uniform, independently per joint or body).

    The widths are what the G1's description leaves unknown: datasheet values
    (rotor inertia, torque constant) are tight; what depends on wear, grease,
    temperature and the floor (friction, damping, contact) is loose.
    """

    frictionloss: Tuple[float, float] = (0.5, 2.0)
    """Factor on dry joint friction: gearbox friction changes with wear, grease and
    temperature, and the file's value is a single guess for all joints."""
    damping: Tuple[float, float] = (0.5, 2.0)
    """Factor on viscous joint damping, as uncertain as the friction."""
    armature: Tuple[float, float] = (0.8, 1.2)
    """Factor on armature: rotor inertia times gear ratio squared, from the motor datasheet."""
    strength: Tuple[float, float] = (0.9, 1.1)
    """Torque delivered per torque commanded: the torque constant drifts with magnet
    temperature and from motor to motor."""
    mass: Tuple[float, float] = (0.8, 1.2)
    """Factor on each link's mass and inertia: CAD masses miss cables, grease and
    fasteners, and the torso carries a battery and computers."""
    com: float = 0.01
    """Offset of each link's centre of mass [m], uniform in +- this per axis."""
    latency: Tuple[float, float] = (0.002, 0.010)
    """Control latency [s], rounded to whole milliseconds: DDS transport and the motor
    drivers' own cycle."""
    ground_friction: Tuple[float, float] = (0.6, 1.2)
    """Sliding friction of rubber soles on lab floors, from dusty tiles to mats."""
    ground_timeconst: Tuple[float, float] = (0.01, 0.04)
    """Contact time constant [s] (solref): stiff floors with hard soles to soft mats."""
    ground_dampratio: Tuple[float, float] = (0.7, 1.3)
    """Contact damping ratio (solref): bouncier to more dead than critical."""
    ground_dmin: Tuple[float, float] = (0.8, 0.9)
    """Impedance at zero penetration (solimp dmin)."""
    ground_dmax: Tuple[float, float] = (0.92, 0.99)
    """Impedance at full penetration (solimp dmax)."""
    ground_width: Tuple[float, float] = (0.0005, 0.005)
    """Penetration [m] over which the impedance goes from dmin to dmax (solimp width)."""


def draw(seed: int, ranges: PhysicsRanges = PhysicsRanges(),
         joints: Sequence[str] = g1.JOINT_NAMES,
         bodies: Sequence[str] = g1.TRACK_BODIES) -> PhysicsParams:
    """
    A robot drawn from ``ranges`` by ``seed`` (the same seed, the same robot).

    Factors are rounded to 1e-4, offsets to 0.01 mm and the latency to 1 ms, so
    a file shows the values that were simulated.
    """
    rng = np.random.default_rng(seed)

    def factors(lo_hi, names):
        return {n: round(float(v), 4) for n, v in zip(names, rng.uniform(*lo_hi, len(names)))}

    r = ranges
    joint = {name: factors(lo_hi, joints) for name, lo_hi in zip(
        JOINT_FIELDS, (r.frictionloss, r.damping, r.armature, r.strength))}
    mass = factors(r.mass, bodies)
    com = {n: tuple(round(float(x), 5) for x in rng.uniform(-r.com, r.com, 3)) for n in bodies}
    latency = round(float(rng.uniform(*r.latency)), 3)
    friction = round(float(rng.uniform(*r.ground_friction)), 4)
    solref = (round(float(rng.uniform(*r.ground_timeconst)), 4),
              round(float(rng.uniform(*r.ground_dampratio)), 4))
    solimp = (round(float(rng.uniform(*r.ground_dmin)), 4),
              round(float(rng.uniform(*r.ground_dmax)), 4),
              round(float(rng.uniform(*r.ground_width)), 5), 0.5, 2.0)
    return PhysicsParams(body_mass=mass, body_com=com, latency=latency,
                         ground_friction=friction, ground_solref=solref, ground_solimp=solimp,
                         **joint)


# --- the model -------------------------------------------------------------

def ground_geoms(model: mujoco.MjModel) -> np.ndarray:
    """Geoms of the world body that collide: the floor, a terrain heightfield."""
    world = model.geom_bodyid == 0
    collides = (model.geom_contype != 0) | (model.geom_conaffinity != 0)
    return np.flatnonzero(world & collides)


def _id(model: mujoco.MjModel, kind: mujoco.mjtObj, name: str, what: str, where: str) -> int:
    i = mujoco.mj_name2id(model, kind, name)
    if i < 0:
        raise PhysicsError(f'{where}: {what} {name!r} is not in the model')
    return i


def apply(model: mujoco.MjModel, params: PhysicsParams, where: str = 'PhysicsParams') -> None:
    """
    Write ``params`` into ``model`` in place (all but the latency, which the PD loop runs).

    Factors multiply the model's values and offsets add to them, so parameters
    apply once, to a model as loaded. Nominal parameters leave every array
    bit for bit as it was. ``where`` names the parameters in errors (a file).
    """
    if params.is_nominal:
        return
    JOINT, BODY = mujoco.mjtObj.mjOBJ_JOINT, mujoco.mjtObj.mjOBJ_BODY
    for name, column in (('joint_frictionloss', model.dof_frictionloss),
                         ('joint_damping', model.dof_damping),
                         ('joint_armature', model.dof_armature)):
        for joint, factor in getattr(params, name).items():
            column[model.jnt_dofadr[_id(model, JOINT, joint, 'joint', where)]] *= factor
    for joint, factor in params.motor_strength.items():
        jid = _id(model, JOINT, joint, 'joint', where)
        acts = np.flatnonzero((model.actuator_trnid[:, 0] == jid)
                              & (model.actuator_trntype == mujoco.mjtTrn.mjTRN_JOINT))
        if acts.size != 1 or model.actuator_gaintype[acts[0]] != mujoco.mjtGain.mjGAIN_FIXED \
                or model.actuator_biastype[acts[0]] != mujoco.mjtBias.mjBIAS_NONE:
            raise PhysicsError(f'{where}: motor_strength[{joint}]: the joint needs one plain '
                               '<motor> (fixed gain, no bias) to carry a strength')
        model.actuator_gainprm[acts[0], 0] *= factor
    for body, factor in params.body_mass.items():
        b = _id(model, BODY, body, 'body', where)
        model.body_mass[b] *= factor
        model.body_inertia[b] *= factor
    for body, offset in params.body_com.items():
        b = _id(model, BODY, body, 'body', where)
        if any(offset):
            model.body_ipos[b] += np.asarray(offset, float)
    ground = ground_geoms(model)
    if ground.size and (params.ground_friction is not None or params.ground_solref is not None
                        or params.ground_solimp is not None):
        robot = model.geom_bodyid != 0
        model.geom_priority[ground] = int(model.geom_priority[robot].max(initial=0)) + 1
        if params.ground_friction is not None:
            model.geom_friction[ground, 0] = params.ground_friction
        if params.ground_solref is not None:
            model.geom_solref[ground] = params.ground_solref
        if params.ground_solimp is not None:
            model.geom_solimp[ground] = params.ground_solimp
    elif params.ground_friction is not None or params.ground_solref is not None \
            or params.ground_solimp is not None:
        raise PhysicsError(f'{where}: ground parameters given, but the model has no ground')
    if params.body_mass or params.body_com or params.joint_armature:
        # Masses, inertias and armature enter constants MuJoCo computes at compile time
        # (subtree masses, the inverse weights that scale constraint softness).
        mujoco.mj_setConst(model, mujoco.MjData(model))


def perturb(g: G1Model, params: PhysicsParams, where: str = 'PhysicsParams') -> G1Model:
    """A copy of ``g`` with ``params`` applied (:func:`apply`) and carried as ``g.physics``."""
    if g.physics is not None and not g.physics.is_nominal:
        raise PhysicsError(f'{where}: {g.path} is perturbed already; parameters apply to a '
                           'model as loaded')
    model = copy.deepcopy(g.model)
    apply(model, params, where)
    return dataclasses.replace(g, model=model, physics=params)


def latency_steps(latency: float, dt: float) -> int:
    """Whole physics steps of ``dt`` [s] nearest to ``latency`` [s]."""
    return int(round(latency / dt))


# --- files -----------------------------------------------------------------

def save(params: PhysicsParams, path: Union[str, pathlib.Path], header: str = '') -> pathlib.Path:
    """Write ``params`` as YAML (``header``: comment lines on top); return the path."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = ''.join(f'# {line}\n' for line in header.splitlines())
    path.write_text(text + dump_yaml(params.to_dict()))
    return path


class _Dumper(yaml.SafeDumper):
    """Mappings in blocks, one key a line; lists (vectors) inline."""


_Dumper.add_representer(list, lambda d, v: d.represent_sequence(
    'tag:yaml.org,2002:seq', v, flow_style=True))


def dump_yaml(data) -> str:
    """``data`` as YAML that reads well: a key a line, vectors on one line, order kept."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=99)


def load(path: Union[str, pathlib.Path]) -> PhysicsParams:
    """Read a file :func:`save` wrote; errors name the file and the field."""
    path = pathlib.Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise PhysicsError(f'{path}: cannot read physics parameters ({exc})') from None
    except yaml.YAMLError as exc:
        raise PhysicsError(f'{path}: not YAML ({exc})') from None
    return PhysicsParams.from_dict(data if data is not None else {}, str(path))


def resolve(spec: str) -> PhysicsParams:
    """``seed:N`` draws a robot (:func:`draw`), anything else is a file; '' is nominal."""
    if not spec:
        return PhysicsParams()
    if spec.startswith('seed:'):
        try:
            return draw(int(spec[len('seed:'):]))
        except ValueError:
            raise PhysicsError(f'physics parameters {spec!r}: expected seed:<integer> or a '
                               'YAML file') from None
    return load(spec)
