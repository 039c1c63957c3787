"""
The box scene, its calibration and the learned simulator on top.

MuJoCo steps the scene in C (milliseconds per second of it); one small learned
simulator, trained for a few hundred iterations on a few runs, is shared by the module
(its compiles take about a minute on a CPU).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bcg_ros import rotation
from bcg_ros.real2sim import boxes, gnn

CFG = gnn.GNNConfig(latent=32, hidden=32, steps=2, batch=64, iterations=500,
                    learning_rate=3e-3, noise_pos=0.0, noise_vel=0.003, noise_angvel=0.02)


def _apart() -> np.ndarray:
    """Boxes in a row on the floor 0.6 m apart, the pusher 0.3 m behind box 0."""
    s = np.zeros((boxes.NUM_BODIES, 13))
    for i in range(boxes.NUM_BODIES - 1):
        s[i, :3] = (0.6 * i, 0.0, boxes.HALF_SIZES[i, 2])
        s[i, 3] = 1.0
    s[-1, :3] = (-0.3, 0.0, boxes.PUSHER_Z)
    s[-1, 3] = 1.0
    return s


@pytest.fixture(scope='module')
def data():
    return boxes.generate(boxes.BoxParams(), 12, 100, seed=0, drop_fraction=0.0)


@pytest.fixture(scope='module')
def trained(data):
    return gnn.train(data, CFG)


def test_pusher_pushes_a_box_and_a_heavier_box_on_rougher_floor_moves_less():
    actions = np.tile([0.4, 0.0], (75, 1))
    light = boxes.simulate(boxes.model(), _apart(), actions)
    assert light[-1, 0, 0] > 0.2                      # pushed on
    assert abs(light[-1, 0, 2] - boxes.HALF_SIZES[0, 2]) < 2e-3   # still on the floor
    heavy = boxes.model(boxes.BoxParams(floor_friction=1.0, mass_scale=(2.0, 1.0, 1.0)))
    stuck = boxes.simulate(heavy, _apart(), actions)
    assert stuck[-1, 0, 0] < light[-1, 0, 0] - 0.1     # 60 N cannot slide 39 N ... 4 kg at mu 1
    # Nothing else moved; the state round-trips through MuJoCo unchanged at rest.
    np.testing.assert_allclose(light[-1, 1:3, :3], light[0, 1:3, :3], atol=1e-3)


def test_logs_round_trip_and_a_bad_file_names_itself(tmp_path):
    logs = boxes.make_logs(boxes.draw(1), count=2, seconds=0.4, seed=3)
    boxes.save(logs, tmp_path / 'logs.npz')
    back = boxes.load(tmp_path / 'logs.npz')
    np.testing.assert_array_equal(back[1].states(), logs[1].states())
    np.testing.assert_array_equal(back[0].action, logs[0].action)
    np.savez(tmp_path / 'bad.npz', states=np.zeros((2, 5, 3, 13)), actions=np.zeros((2, 4, 2)))
    with pytest.raises(ValueError, match='bad.npz.*states'):
        boxes.load(tmp_path / 'bad.npz')


def test_calibration_moves_the_floor_friction_toward_the_hidden_one():
    hidden = boxes.BoxParams(floor_friction=0.3, mass_scale=(1.5, 1.0, 1.0))
    logs = boxes.make_logs(hidden, count=2, seconds=3.0, seed=5)
    fit = boxes.calibrate(logs, boxes.CalibrationConfig(max_evaluations=80))
    assert fit.error_after < 0.7 * fit.error_before
    assert abs(np.log(fit.params.floor_friction / 0.3)) < abs(np.log(0.6 / 0.3))


def _yawed(state: np.ndarray, yaw: float, shift) -> np.ndarray:
    """The whole scene turned by ``yaw`` about z and moved by ``shift`` in x, y."""
    q = rotation.rpy_to_quat(np.array([0.0, 0.0, yaw]))
    out = state.copy()
    out[:, :3] = rotation.quat_rotate(q[None], state[:, :3]) + np.array([*shift, 0.0])
    out[:, 3:7] = rotation.quat_mul(q[None], state[:, 3:7])
    out[:, 7:10] = rotation.quat_rotate(q[None], state[:, 7:10])
    out[:, 10:13] = rotation.quat_rotate(q[None], state[:, 10:13])
    return out


def test_step_is_the_same_wherever_the_scene_is_and_whichever_way_it_faces(trained, data):
    state = data[0].states()[40].copy()
    state[1, 10:13] = (0.5, -0.3, 1.0)          # tumbling, and moving
    state[1, 7:10] = (0.2, 0.1, -0.3)
    state[-1, 3:7] = (1.0, 0.0, 0.0, 0.0)
    action = np.array([0.3, -0.2])
    yaw, shift = 0.7, (1.5, -2.0)
    moved = _yawed(state, yaw, shift)
    q = rotation.rpy_to_quat(np.array([0.0, 0.0, yaw]))
    a2 = rotation.quat_rotate(q, np.array([*action, 0.0]))[:2]
    step = jax.jit(gnn.step, static_argnums=(2,))
    out = np.asarray(step(trained.params, trained.stats, CFG, jnp.asarray(state, jnp.float32),
                          jnp.asarray(action, jnp.float32)), np.float64)
    out2 = np.asarray(step(trained.params, trained.stats, CFG, jnp.asarray(moved, jnp.float32),
                           jnp.asarray(a2, jnp.float32)), np.float64)
    expect = _yawed(out, yaw, shift)
    np.testing.assert_allclose(out2[:-1, 7:13], expect[:-1, 7:13], atol=2e-4)
    np.testing.assert_allclose(out2[:-1, :3], expect[:-1, :3], atol=2e-4)


def test_far_bodies_do_not_interact_and_near_ones_do(trained):
    far = _apart()
    far[1, 0] = far[2, 0] = 5.0
    far[2, 1] = 3.0
    far[-1, :2] = (-2.0, 2.0)
    _, _, gate, _ = gnn.features(jnp.asarray(far, jnp.float32), jnp.zeros(2), CFG)
    assert float(gate.max()) < 1e-6

    def box0_velocity(pusher_x):
        s = jnp.asarray(far, jnp.float32).at[-1, :2].set(jnp.stack([pusher_x, 0.0]))
        return gnn.step(trained.params, trained.stats, CFG, s, jnp.array([0.4, 0.0]))[0, 7]
    # The surrogate's gradient reaches across a gap (no contact switch), and vanishes far.
    near = float(jax.grad(box0_velocity)(-0.13))
    away = float(jax.grad(box0_velocity)(-1.5))
    assert np.isfinite(near) and abs(near) > 1e-6
    assert abs(away) < 1e-3 * abs(near)


def test_training_lowers_the_loss_and_rollouts_track_and_differentiate(trained, data, tmp_path):
    assert trained.losses[-1] < 0.6 * trained.losses[0]
    log = data[1]
    pred = trained.simulate(log.states()[0], log.action[:25])
    assert pred.shape == (26, boxes.NUM_BODIES, 13)
    # A box at rest stays near where it is; no state blows up.
    assert np.all(np.isfinite(pred))
    assert np.abs(pred[:, :3, 2] - log.states()[:26, :3, 2]).max() < 0.1

    def final_x(u):
        return gnn.rollout(trained.params, trained.stats, CFG,
                           jnp.asarray(_apart(), jnp.float32), u)[-1, 0, 0]
    g = jax.grad(final_x)(jnp.tile(jnp.array([0.4, 0.0]), (20, 1)))
    assert bool(jnp.all(jnp.isfinite(g))) and float(jnp.abs(g).sum()) > 0

    path = gnn.save(trained, tmp_path / 'sim.npz')
    back = gnn.load(path)
    assert back.cfg == CFG
    np.testing.assert_array_equal(back.simulate(log.states()[0], log.action[:5]),
                                  trained.simulate(log.states()[0], log.action[:5]))
    np.savez(tmp_path / 'not.npz', x=np.zeros(3))
    with pytest.raises(ValueError, match='not.npz'):
        gnn.load(tmp_path / 'not.npz')


def test_gnn_bench_prints_recovery_errors_control_and_the_ratio(tmp_path, capsys):
    from bcg_ros.bench import cli as bench
    assert bench.main(['gnn', '--quick', '--seed', '2', '--iterations', '20', '--synthetic', '4',
                       '--out', str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for line in ('| floor_friction |', '| MuJoCo, nominal |', '| learned simulator (GNN) |',
                 '| learned simulator | '):
        assert line in out
    ratio = float(out.strip().splitlines()[-1].split('learned_sim_error_ratio: ')[1])
    assert np.isfinite(ratio) and ratio > 0
    assert (tmp_path / 'learned_sim.npz').is_file() and (tmp_path / 'held_out.npz').is_file()


def test_pushforward_windows_stay_in_their_run_and_training_learns_and_goes_on(data):
    starts = gnn.window_starts(data[:3], 4)
    lengths = [len(t.action) for t in data[:3]]
    assert len(starts) == sum(n - 4 for n in lengths)
    ends = np.cumsum(lengths)
    for i in starts:
        run = np.searchsorted(ends, i, side='right')
        assert i + 4 < ends[run], 'a window reaches into the next run'
    cfg = dataclasses.replace(CFG, iterations=200, pushforward=3)
    tr = gnn.train(data, cfg)
    assert np.all(np.isfinite(tr.losses)) and tr.losses[-1] < 0.8 * tr.losses[0]
    # Going on from it keeps its normalisation and starts where it left off.
    more = gnn.train(data, dataclasses.replace(cfg, iterations=100), start=tr)
    assert more.stats is tr.stats
    assert more.losses[0] < 0.8 * tr.losses[0]
    with pytest.raises(ValueError, match='latent'):
        gnn.train(data, dataclasses.replace(cfg, latent=16), start=tr)
