"""
Pictures of the runs: a filmstrip PNG per run and, on request, a video.

A :class:`Recorder` is a rollout step watcher (``run_once(..., on_step=...)``):
it draws the live MuJoCo state of chosen steps with a camera that follows the
pelvis, MuJoCo's contact points and contact forces (arrows), and the reference
pose of the step's frame as a translucent blue ghost, so a fall, a foot that
skates or sinks, or a pose that drifts off the reference shows at a glance.

Drawing is offscreen OpenGL through MuJoCo's own contexts: ``MUJOCO_GL``
picks the backend (``osmesa``: software, Debian package libosmesa6; ``egl``:
a GPU's or Mesa's EGL; ``glfw``: a display). When it is unset this module
sets it, to osmesa if libOSMesa is installed, else to egl if libEGL is.
MuJoCo reads the variable when ``mujoco`` is first imported, usually long
before this module, so the context is made here from the backend's class
rather than through ``mujoco.Renderer``. Without a working backend nothing
is drawn and :class:`Media` carries a one-line note saying why.
"""

import copy
import ctypes.util
import os
import pathlib
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

if not os.environ.get('MUJOCO_GL'):
    for _backend, _library in (('osmesa', 'OSMesa'), ('egl', 'EGL')):
        if ctypes.util.find_library(_library):
            os.environ['MUJOCO_GL'] = _backend
            break

import mujoco  # noqa: E402  (after MUJOCO_GL, for a first import here)
import numpy as np  # noqa: E402

from bcg_ros.eval.rollout import StepView  # noqa: E402
from bcg_ros.motion import Motion, reference_state  # noqa: E402
from bcg_ros.robot import g1  # noqa: E402
from bcg_ros.robot.model import G1Model  # noqa: E402

GHOST_RGBA = (0.3, 0.6, 1.0, 0.3)
"""Colour of the reference pose drawn over the robot."""
FORCE_RGBA = (0.95, 0.15, 0.1, 1.0)
"""Colour of the contact force arrows."""
POINT_RGBA = (1.0, 0.85, 0.1, 1.0)
"""Colour of the contact point discs."""
LABEL_HEIGHT = 20
"""Pixels of the time label strip under each filmstrip tile."""
SHADOW_SIZE = 1024
"""Shadow map size [px]: MuJoCo's default 4096 costs most of a software frame."""
MAX_GEOM = 2000
"""Geoms a scene holds: robot, floor, ghost, a point and an arrow per contact."""
INSTALL_HINT = 'on Debian: apt-get install libosmesa6 (MUJOCO_GL=osmesa), or set MUJOCO_GL=egl'


class RenderUnavailable(RuntimeError):
    """No offscreen OpenGL context could be made."""


@dataclass(frozen=True)
class RenderConfig:
    """What the evaluator draws of each run."""

    filmstrip: bool = True
    """A PNG per run: ``tiles`` evenly spaced moments side by side, the time under each."""
    video: bool = False
    """A video per run (MP4 with imageio-ffmpeg, else GIF), about ``fps`` frames a second."""
    runs: int = 0
    """Film the first this many runs; 0: all."""
    tiles: int = 8
    """Filmstrip tiles per run (one more when the run ends before its planned length)."""
    width: int = 320
    """Frame width [px] (even, for the video codec)."""
    height: int = 240
    """Frame height [px] (even)."""
    fps: float = 25.0
    """Video frame rate wanted; frames are every k-th control step, so playback is real time."""
    ghost: bool = True
    """Draw the reference pose of each step's frame as a translucent robot."""
    contacts: bool = True
    """Draw MuJoCo's contact points and contact force arrows."""
    antialias: bool = False
    """Multisample the image (MuJoCo's vis.quality.offsamples): smoother edges, slower."""
    force_scale: float = 1.0
    """Arrow length [m] of a contact force equal to the robot's weight."""
    distance: float = 3.0
    """Camera distance from the pelvis [m]."""
    azimuth: float = 135.0
    """Camera azimuth [deg], MuJoCo's convention (90: looking along +y)."""
    elevation: float = -15.0
    """Camera elevation [deg] (negative: from above)."""

    def __post_init__(self):
        """Reject what cannot be drawn, naming the field."""
        for name in ('width', 'height'):
            v = getattr(self, name)
            if v < 16 or v % 2:
                raise ValueError(f'RenderConfig.{name} must be even and >= 16, got {v}')
        if self.runs < 0 or self.tiles < 1:
            raise ValueError(f'RenderConfig: runs >= 0 and tiles >= 1, got {self.runs}, '
                             f'{self.tiles}')
        if self.fps <= 0 or self.force_scale <= 0 or self.distance <= 0:
            raise ValueError('RenderConfig: fps, force_scale and distance must be > 0')

    @property
    def enabled(self) -> bool:
        """Whether anything is drawn."""
        return self.filmstrip or self.video


def _gl_context(width: int, height: int):
    """An offscreen OpenGL context of the ``MUJOCO_GL`` backend, made current."""
    backend = os.environ.get('MUJOCO_GL', '').lower()
    try:
        if backend == 'osmesa':
            from mujoco.osmesa import GLContext
        elif backend == 'egl':
            from mujoco.egl import GLContext
        elif backend in ('glfw', 'glx'):
            from mujoco.glfw import GLContext
        elif not backend:
            raise RenderUnavailable('no offscreen OpenGL (neither libOSMesa nor libEGL found); '
                                    f'{INSTALL_HINT}')
        else:
            raise RenderUnavailable(f'MUJOCO_GL={backend!r} is not an offscreen backend '
                                    '(osmesa, egl, glfw)')
        ctx = GLContext(width, height)
        ctx.make_current()
        return ctx
    except RenderUnavailable:
        raise
    except Exception as exc:   # a missing library, display or driver: many error types
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RenderUnavailable(f'no offscreen OpenGL (MUJOCO_GL={backend}: {msg}); '
                                f'{INSTALL_HINT}') from exc


class Painter:
    """
    Draws MuJoCo states of one model into RGB images.

    The model is copied once and its visual settings changed on the copy: the
    offscreen buffer fits the frame, the shadow map is smaller, multisampling is
    off unless ``config.antialias``, and a contact
    force as large as the robot's weight draws as an arrow ``force_scale``
    metres long (MuJoCo draws ``|f| * vis.map.force / stat.meanmass``).
    ``reference_qpos`` [T, nq] holds the ghost's pose per reference frame.
    """

    def __init__(self, model: mujoco.MjModel, config: RenderConfig = RenderConfig(),
                 reference_qpos: Optional[np.ndarray] = None):
        """Make the OpenGL context (RenderUnavailable when none works) and the scene."""
        self.config = config
        m = self.model = copy.deepcopy(model)
        w, h = config.width, config.height
        m.vis.global_.offwidth = max(m.vis.global_.offwidth, w)
        m.vis.global_.offheight = max(m.vis.global_.offheight, h)
        m.vis.quality.shadowsize = min(m.vis.quality.shadowsize, SHADOW_SIZE)
        if not config.antialias:
            m.vis.quality.offsamples = 0
        weight = float(m.body_subtreemass[0]) * (float(np.linalg.norm(m.opt.gravity)) or 9.81)
        m.vis.map.force = config.force_scale * m.stat.meanmass / weight
        m.vis.rgba.contactforce = FORCE_RGBA
        m.vis.rgba.contactpoint = POINT_RGBA
        self._gl = _gl_context(w, h)
        try:
            self._con = mujoco.MjrContext(m, mujoco.mjtFontScale.mjFONTSCALE_100)
            mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._con)
        except Exception as exc:
            self._gl.free()
            self._gl = None
            raise RenderUnavailable(f'MuJoCo could not render offscreen: {exc}') from exc
        self._rect = mujoco.MjrRect(0, 0, w, h)
        self._rgb = np.empty((h, w, 3), np.uint8)
        self._scene = mujoco.MjvScene(m, maxgeom=MAX_GEOM)
        self._bare = mujoco.MjvOption()
        self._opt = mujoco.MjvOption()
        self._opt.flags[mujoco.mjtVisFlag.mjVIS_CONTACTPOINT] = True
        self._opt.flags[mujoco.mjtVisFlag.mjVIS_CONTACTFORCE] = True
        self._perturb = mujoco.MjvPerturb()
        self._ref = None if reference_qpos is None else np.asarray(reference_qpos, float)
        self._ghost = mujoco.MjData(m) if self._ref is not None else None
        cam = self._cam = mujoco.MjvCamera()
        cam.type = mujoco.mjtCamera.mjCAMERA_FREE
        cam.distance, cam.azimuth, cam.elevation = (config.distance, config.azimuth,
                                                    config.elevation)
        pelvis = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, g1.ROOT_BODY)
        self._pelvis = pelvis if pelvis >= 0 else 1

    def draw(self, data: mujoco.MjData, frame: int = -1, label: str = '',
             ghost: Optional[bool] = None, contacts: Optional[bool] = None) -> np.ndarray:
        """
        Return the [H, W, 3] uint8 image of ``data`` (kinematics and contacts current).

        ``frame`` picks the ghost's reference pose (-1: none); ``label`` is
        written at the top left; ``ghost`` and ``contacts`` override the config.
        """
        if self._gl is None:
            raise RenderUnavailable('Painter is closed')
        ghost = self.config.ghost if ghost is None else ghost
        contacts = self.config.contacts if contacts is None else contacts
        m, scn = self.model, self._scene
        self._cam.lookat[:] = data.xpos[self._pelvis]
        mujoco.mjv_updateScene(m, data, self._opt if contacts else self._bare, None, self._cam,
                               mujoco.mjtCatBit.mjCAT_ALL, scn)
        if ghost and self._ghost is not None and frame >= 0:
            gd = self._ghost
            gd.qpos[:] = self._ref[min(frame, len(self._ref) - 1)]
            mujoco.mj_kinematics(m, gd)
            first = scn.ngeom
            mujoco.mjv_addGeoms(m, gd, self._bare, self._perturb, mujoco.mjtCatBit.mjCAT_DYNAMIC,
                                scn)
            for i in range(first, scn.ngeom):
                geom = scn.geoms[i]
                geom.rgba[:] = GHOST_RGBA
                geom.transparent = 1
                geom.castshadow = 0
        self._gl.make_current()
        mujoco.mjr_render(self._rect, scn, self._con)
        if label:
            mujoco.mjr_overlay(mujoco.mjtFont.mjFONT_NORMAL, mujoco.mjtGridPos.mjGRID_TOPLEFT,
                               self._rect, label, '', self._con)
        mujoco.mjr_readPixels(self._rgb, None, self._rect, self._con)
        return np.flipud(self._rgb).copy()   # OpenGL rows start at the bottom

    def close(self) -> None:
        """Free the OpenGL context (drawing again raises)."""
        if self._gl is not None:
            with self._gl.as_current():
                self._con.free()
            self._gl.free()
            self._gl = None

    def __enter__(self) -> 'Painter':
        """Use as a context manager."""
        return self

    def __exit__(self, *exc) -> None:
        """Close."""
        self.close()


def tile_steps(steps: int, tiles: int) -> List[int]:
    """Control steps of ``tiles`` evenly spaced filmstrip tiles over a run of ``steps``."""
    if steps < 1:
        return []
    return sorted({int(s) for s in np.round(np.linspace(0, steps - 1, min(tiles, steps)))})


def filmstrip(tiles: Sequence[Tuple[np.ndarray, str]]) -> np.ndarray:
    """Images side by side, each with its label centred on a strip below: [H + 20, n W, 3]."""
    from PIL import Image, ImageDraw, ImageFont

    h, w = tiles[0][0].shape[:2]
    strip = Image.new('RGB', (w * len(tiles), h + LABEL_HEIGHT), 'white')
    pen = ImageDraw.Draw(strip)
    try:
        font = ImageFont.load_default(size=13)
    except TypeError:   # Pillow < 10.1: one bitmap size
        font = ImageFont.load_default()
    for i, (img, label) in enumerate(tiles):
        strip.paste(Image.fromarray(img), (i * w, 0))
        if i:
            pen.line([(i * w, 0), (i * w, h - 1)], fill=(255, 255, 255), width=1)
        pen.text((i * w + w // 2, h + LABEL_HEIGHT // 2), label, fill='black', font=font,
                 anchor='mm')
    return np.asarray(strip)


class _Video:
    """A video file written frame by frame: MP4 through imageio-ffmpeg, else a GIF (Pillow)."""

    def __init__(self, stem: pathlib.Path, fps: float):
        self.fps, self.frames = fps, 0
        try:
            import imageio.v2 as imageio
            import imageio_ffmpeg  # noqa: F401  (the MP4 writer needs it)
        except ImportError:
            self.path, self._writer, self._gif = stem.with_suffix('.gif'), None, []
            return
        self.path, self._gif = stem.with_suffix('.mp4'), None
        self._writer = imageio.get_writer(str(self.path), fps=fps, codec='libx264',
                                          quality=7, macro_block_size=2,
                                          ffmpeg_log_level='error')

    def add(self, rgb: np.ndarray) -> None:
        self.frames += 1
        if self._writer is not None:
            self._writer.append_data(rgb)
        else:
            self._gif.append(rgb)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        elif self._gif:
            from PIL import Image
            imgs = [Image.fromarray(f) for f in self._gif]
            imgs[0].save(self.path, save_all=True, append_images=imgs[1:], loop=0,
                         duration=int(round(1000.0 / self.fps)))
            self._gif = []


@dataclass
class Media:
    """
    The files a :class:`Recorder` wrote, in a temporary folder until a report saves them.

    The folder lasts as long as this object (or :meth:`cleanup`).
    """

    folder: pathlib.Path
    files: List[str] = field(default_factory=list)
    """Names in ``folder``, in run order: ``filmstrip_seed<N>.png``, ``run_seed<N>.mp4``."""
    note: str = ''
    """Why runs were not drawn (no OpenGL, ...); empty when all wanted were."""
    frames: int = 0
    """Images drawn."""
    draw_seconds: float = 0.0
    """Wall time spent drawing them."""
    _tmp: Optional[tempfile.TemporaryDirectory] = field(default=None, repr=False, compare=False)

    @property
    def filmstrips(self) -> List[str]:
        """Names of the filmstrip images."""
        return [f for f in self.files if f.startswith('filmstrip_')]

    @property
    def videos(self) -> List[str]:
        """Names of the videos."""
        return [f for f in self.files if f.startswith('run_')]

    def save(self, out_dir: pathlib.Path) -> List[pathlib.Path]:
        """Copy the files into ``out_dir``; return their new paths."""
        out_dir = pathlib.Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        return [pathlib.Path(shutil.copyfile(self.folder / f, out_dir / f)) for f in self.files]

    def to_dict(self) -> Dict:
        """Return the JSON form: file names, the note, the drawing time per image."""
        return {'filmstrips': self.filmstrips, 'videos': self.videos, 'note': self.note,
                'backend': os.environ.get('MUJOCO_GL', ''), 'frames': self.frames,
                'seconds_per_frame': self.draw_seconds / self.frames if self.frames else None}

    def cleanup(self) -> None:
        """Delete the temporary folder."""
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


class Recorder:
    """
    A step watcher that films runs: pass it as ``on_step`` to run_once / run_all.

    Run ``r`` (``StepView.run``) is named by its seed, ``seed + r``. Filmstrip
    tiles are at :func:`tile_steps` of the planned ``steps`` per run; a run
    that ends before (a fall with stop_on_fall, a divergence) gets its last
    step as a final tile, so the end shows. Video frames are every
    ``round(1 / (fps * control_dt))``-th step. ``motion`` (at the control rate,
    what StepView.frame indexes) gives the ghost. :meth:`finish` ends the last
    run and returns the :class:`Media`; :meth:`close` frees OpenGL.
    """

    def __init__(self, g: G1Model, motion: Optional[Motion], steps: int, control_dt: float,
                 seed: int = 0, config: RenderConfig = RenderConfig()):
        """Plan the tiles and the video rate; OpenGL starts at the first step seen."""
        self.config, self.seed = config, seed
        self._ref = (reference_state(motion, g)[0]
                     if motion is not None and config.ghost else None)
        self._tiles_at = set(tile_steps(steps, config.tiles)) if config.filmstrip else set()
        self._every = max(1, int(round(1.0 / (config.fps * control_dt))))
        self._fps = 1.0 / (self._every * control_dt)
        tmp = tempfile.TemporaryDirectory(prefix='bcg_render_')
        self.media = Media(pathlib.Path(tmp.name), _tmp=tmp)
        self._painter: Optional[Painter] = None
        self._run: Optional[int] = None
        self._tiles: List[Tuple[np.ndarray, str]] = []
        self._video: Optional[_Video] = None
        self._last: Optional[mujoco.MjData] = None
        self._last_step = self._last_frame = -1
        self._last_time = 0.0

    def _draw(self, data: mujoco.MjData, frame: int, label: str = '') -> np.ndarray:
        t0 = time.perf_counter()
        img = self._painter.draw(data, frame, label)
        self.media.draw_seconds += time.perf_counter() - t0
        self.media.frames += 1
        return img

    def __call__(self, view: StepView) -> None:
        """Draw what ``view`` (a rollout StepView) asks of this run and step."""
        if self.media.note and self._painter is None:
            return   # no OpenGL: said once
        if view.run != self._run:
            self._end_run()
            if self.config.runs and view.run >= self.config.runs:
                return
            if self._painter is None:
                try:
                    self._painter = Painter(view.model, self.config, self._ref)
                except RenderUnavailable as exc:
                    self.media.note = str(exc)
                    return
                self._last = mujoco.MjData(self._painter.model)
            self._run = view.run
            if self.config.video:
                self._video = _Video(self.media.folder / f'run_seed{self.seed + view.run}',
                                     self._fps)
        if view.step in self._tiles_at:
            self._tiles.append((self._draw(view.data, view.frame), f't = {view.time:.2f} s'))
        if self._video is not None and view.step % self._every == 0:
            self._video.add(self._draw(view.data, view.frame, f't = {view.time:.2f} s'))
        mujoco.mj_copyData(self._last, view.model, view.data)
        self._last_step, self._last_frame, self._last_time = view.step, view.frame, view.time

    def _end_run(self) -> None:
        if self._run is None:
            return
        seed = self.seed + self._run
        if self.config.filmstrip:
            if self._last_step not in self._tiles_at:
                self._tiles.append((self._draw(self._last, self._last_frame),
                                    f't = {self._last_time:.2f} s (end)'))
            name = f'filmstrip_seed{seed}.png'
            from PIL import Image
            Image.fromarray(filmstrip(self._tiles)).save(self.media.folder / name)
            self.media.files.append(name)
        if self._video is not None:
            self._video.close()
            if self._video.frames:
                self.media.files.append(self._video.path.name)
            self._video = None
        self._run, self._tiles, self._last_step = None, [], -1

    def finish(self) -> Media:
        """End the run being filmed and return what was written."""
        self._end_run()
        return self.media

    def close(self) -> None:
        """Free OpenGL (the media stay)."""
        if self._video is not None:
            self._video.close()
            self._video = None
        if self._painter is not None:
            self._painter.close()
            self._painter = None


def chain(*watchers: Optional[Callable[[StepView], None]]
          ) -> Optional[Callable[[StepView], None]]:
    """One step watcher calling each given one in turn (None when none is given)."""
    live = [w for w in watchers if w is not None]
    if not live:
        return None
    if len(live) == 1:
        return live[0]

    def watch(view: StepView) -> None:
        for w in live:
            w(view)
    return watch
