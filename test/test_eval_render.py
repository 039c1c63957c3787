"""Filmstrips and videos of evaluation runs, drawn offscreen (skipped without an OpenGL)."""

import json

import numpy as np
import pytest

from bcg_ros import motion as motion_mod
from bcg_ros.eval import cli, render, report, synthetic
from bcg_ros.eval.evaluator import EvalConfig, evaluate
from bcg_ros.eval.rollout import run_once

QUIET = synthetic.quiet_rollout()
SMALL = render.RenderConfig(width=160, height=120, tiles=3)


@pytest.fixture(scope='module')
def gl(g):
    """Skip when no offscreen OpenGL backend works here."""
    try:
        render.Painter(g.model, SMALL).close()
    except render.RenderUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope='module')
def held(g):
    return synthetic.held_pose_motion(g, seconds=0.3)


@pytest.fixture(scope='module')
def zeros(tmp_path_factory, held):
    return synthetic.zeros_policy(tmp_path_factory.mktemp('zeros'), held)


def _png(path) -> np.ndarray:
    from PIL import Image
    return np.asarray(Image.open(path).convert('RGB'))


def test_tile_steps_are_even_and_span_the_run():
    assert render.tile_steps(15, 3) == [0, 7, 14]
    assert render.tile_steps(2, 8) == [0, 1]
    assert render.tile_steps(0, 8) == []


def test_ghost_and_contact_forces_are_drawn(g, gl, zeros, held):
    seen = {}

    def at_last_step(view):
        if view.step != held.num_frames - 2:
            return
        assert view.foot_contacts.any(), 'the feet should touch the floor'
        with render.Painter(view.model, SMALL, motion_mod.reference_state(held, g)[0]) as p:
            seen['all'] = p.draw(view.data, view.frame).astype(int)
            seen['no_ghost'] = p.draw(view.data, view.frame, ghost=False).astype(int)
            seen['no_contacts'] = p.draw(view.data, view.frame, contacts=False).astype(int)
            seen['no_frame'] = p.draw(view.data, -1).astype(int)

    run_once(zeros, g, 0, QUIET, held, on_step=at_last_step)
    assert seen['all'].shape == (SMALL.height, SMALL.width, 3)

    def changed(a, b):
        return np.any(np.abs(seen[a] - seen[b]) > 8, axis=-1)

    ghost = changed('all', 'no_ghost')
    assert ghost.sum() > 100
    # The ghost is blue: where it shows, blue rises over red.
    d = seen['all'] - seen['no_ghost']
    assert (d[ghost, 2] - d[ghost, 0]).mean() > 0
    assert np.array_equal(seen['no_ghost'], seen['no_frame'])
    assert changed('all', 'no_contacts').sum() > 20


def test_filmstrip_tiles_and_an_end_tile(g, gl, zeros, held, tmp_path):
    steps = held.num_frames - 1
    rec = render.Recorder(g, held, steps, zeros.contract.control_dt, seed=7, config=SMALL)
    try:
        run_once(zeros, g, 7, QUIET, held, on_step=rec)
        # Planned three times as long: the run "ends early", its last step becomes a tile.
        longer = render.Recorder(g, held, 3 * steps, zeros.contract.control_dt, seed=8,
                                 config=SMALL)
        run_once(zeros, g, 8, QUIET, held, on_step=longer)
        early = longer.finish()
        longer.close()
        media = rec.finish()
    finally:
        rec.close()
    assert media.files == ['filmstrip_seed7.png'] and not media.note
    assert media.frames == 3 and media.draw_seconds > 0
    img = _png(media.folder / 'filmstrip_seed7.png')
    assert img.shape == (SMALL.height + render.LABEL_HEIGHT, 3 * SMALL.width, 3)
    # The label strip under the tiles is white with dark text.
    strip = img[SMALL.height:]
    assert strip.max() == 255 and strip.min() < 100
    assert early.frames == 2   # the tile at step 0 of 0..44, then the last step (14)
    assert _png(early.folder / 'filmstrip_seed8.png').shape[1] == 2 * SMALL.width


def test_evaluate_writes_filmstrips_and_a_video_into_the_report(g, gl, zeros, held, tmp_path):
    cfg = EvalConfig(runs=2, rollout=QUIET, baselines=(),
                     render=render.RenderConfig(width=160, height=120, tiles=2, video=True,
                                                runs=1))
    ev = evaluate(cfg, motion=held, policy=zeros, g=g)
    result = report.write(ev, tmp_path, plots=False)
    video = result['media']['videos']
    assert result['media']['filmstrips'] == ['filmstrip_seed0.png']   # runs=1: the first
    assert (tmp_path / 'filmstrip_seed0.png').is_file()
    assert not (tmp_path / 'filmstrip_seed1.png').exists()
    md = (tmp_path / 'report.md').read_text()
    assert '![filmstrip_seed0.png](filmstrip_seed0.png)' in md
    assert json.loads((tmp_path / 'result.json').read_text())['media']['frames'] > 0
    steps = held.num_frames - 1
    every = round(1.0 / (cfg.render.fps * zeros.contract.control_dt))
    want = len(range(0, steps, every))
    try:
        import imageio_ffmpeg
    except ImportError:
        assert video == ['run_seed0.gif']
        from PIL import Image
        assert Image.open(tmp_path / 'run_seed0.gif').n_frames == want
        return
    assert video == ['run_seed0.mp4']
    frames, _ = imageio_ffmpeg.count_frames_and_secs(str(tmp_path / 'run_seed0.mp4'))
    assert frames == want


def test_cli_flags(g, gl, zeros, held, tmp_path):
    clip = motion_mod.save_motion(held, tmp_path / 'held.npz')
    base = [str(zeros.path), '--motion', str(clip), '--runs', '1', '--baselines', '--quiet',
            '--no-plots']
    assert cli.main(base + ['--out', str(tmp_path / 'on')]) == 0
    assert (tmp_path / 'on' / 'filmstrip_seed0.png').is_file()
    assert not list((tmp_path / 'on').glob('run_seed*'))
    assert cli.main(base + ['--no-filmstrip', '--out', str(tmp_path / 'off')]) == 0
    assert not list((tmp_path / 'off').glob('filmstrip_*'))
    assert 'media' in json.loads((tmp_path / 'off' / 'result.json').read_text())


def test_without_opengl_the_report_says_why(g, zeros, held, tmp_path, monkeypatch):
    monkeypatch.setenv('MUJOCO_GL', 'none-here')
    ev = evaluate(EvalConfig(runs=1, rollout=QUIET, baselines=()), motion=held, policy=zeros,
                  g=g)
    assert ev.media.files == [] and 'none-here' in ev.media.note
    report.write(ev, tmp_path, plots=False)
    md = (tmp_path / 'report.md').read_text()
    assert 'Not drawn: ' in md and '\n' not in ev.media.note
    assert not list(tmp_path.glob('filmstrip_*'))
