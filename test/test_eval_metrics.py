"""Sim2sim metrics against hand-computed cases (pure arrays, no simulation)."""

import numpy as np
import pytest

from bcg_ros.eval import metrics


def test_fall_index_first_row_below_threshold():
    # Root height falls linearly 0.8 -> 0.0 over 1 s at 50 Hz: h(t) = 0.8 - 0.8 t.
    # h < 0.3 once t > 0.625 s; rows are at t = 0, 0.02, ..., so the first is t = 0.64 s.
    t = np.arange(51) * 0.02
    h = 0.8 - 0.8 * t
    i = metrics.fall_index(h)
    assert t[i] == pytest.approx(0.64)
    assert metrics.fall_index(np.full(10, 0.75)) == -1


def test_penetration_and_delta_d():
    # Depths 1, 2, 3 mm -> mean 2 mm; the trainer measured 5 mm -> delta-d = 5 - 2 = 3 mm.
    d = metrics.mean_penetration_mm(np.array([0.001, 0.002, 0.003]))
    assert d == pytest.approx(2.0)
    assert metrics.delta_d_mm(5.0, d) == pytest.approx(3.0)
    assert metrics.delta_d_mm(None, d) is None
    assert metrics.mean_penetration_mm(np.zeros(0)) == 0.0


def test_training_and_mujoco_average_penetration_the_same_way():
    import jax.numpy as jnp

    from bcg_ros.core import contact
    # [steps, envs, spheres]: most sphere-steps do not penetrate, and one env-step has none.
    rng = np.random.default_rng(0)
    depth = rng.uniform(-0.02, 0.004, (20, 4, 8)).astype(np.float32)
    depth[3, 1] = -0.01
    total, count = contact.penetration_totals(jnp.asarray(depth))
    train = float(contact.mean_penetration(total, count))
    assert train == pytest.approx(metrics.mean_penetration_mm(depth[depth > 0]), rel=1e-5)
    # Averaging per env-step with zeros for steps without contact would read lower.
    per_step = np.asarray(total) / np.maximum(np.asarray(count), 1)
    assert per_step.mean() < train
    assert np.isnan(float(contact.mean_penetration(total * 0, count * 0)))


def test_e_track_known_offset():
    # Every key point off by (3, 4, 0) cm -> 5 cm each, at every step.
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(20, 5, 3))
    sim = ref + np.array([0.03, 0.04, 0.0])
    assert metrics.e_track_cm(sim, ref) == pytest.approx(5.0)
    # Half the key points exact, half 10 cm off: mean 5 cm (per-point mean, not RMS).
    sim2 = ref.copy()
    sim2[:, :2] += np.array([0.0, 0.0, 0.1])
    sim2[:, 2] += np.array([0.0, 0.0, 0.05])
    # Per step: (10 + 10 + 5 + 0 + 0) / 5 = 5 cm.
    assert metrics.e_track_cm(sim2, ref) == pytest.approx(5.0)


def test_anchor_error_ignores_a_rigid_shift_and_a_yaw():
    rng = np.random.default_rng(1)
    t = 7
    ref_root = rng.normal(size=(t, 3))
    ref_quat = np.tile([1.0, 0.0, 0.0, 0.0], (t, 1))
    ref_key = ref_root[:, None, :] + rng.normal(size=(t, 5, 3))
    # The robot is the reference turned 90 degrees about z and moved 1 m: globally far off,
    # relative to its own root exact.
    yaw = np.array([np.cos(np.pi / 4), 0.0, 0.0, np.sin(np.pi / 4)])
    rot = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    sim_root = ref_root + np.array([1.0, 0.0, 0.0])
    sim_key = sim_root[:, None, :] + (ref_key - ref_root[:, None, :]) @ rot.T
    sim_quat = np.tile(yaw, (t, 1))
    assert metrics.anchor_error_cm(sim_key, sim_root, sim_quat,
                                   ref_key, ref_root, ref_quat) == pytest.approx(0.0, abs=1e-9)
    assert metrics.e_track_cm(sim_key, ref_key) > 50.0


def test_joint_error():
    # |0.1| over half the entries, 0 elsewhere -> 0.05 rad.
    ref = np.zeros((4, 29))
    sim = ref.copy()
    sim[:2] = 0.1
    assert metrics.joint_error_rad(sim, ref) == pytest.approx(0.05)


def test_velocity_error_in_base_frame():
    # Robot yawed 90 degrees moving +y in the world at 0.5 m/s is moving +x in its own frame.
    t = 5
    quat = np.tile([np.cos(np.pi / 4), 0.0, 0.0, np.sin(np.pi / 4)], (t, 1))
    v_world = np.tile([0.0, 0.5, 0.0], (t, 1))
    w_body = np.tile([0.0, 0.0, 0.2], (t, 1))
    ach = metrics.base_velocity(quat, v_world, w_body)
    np.testing.assert_allclose(ach, np.tile([0.5, 0.0, 0.2], (t, 1)), atol=1e-12)
    # Commanded (0.8, 0.4, 0.0): error (0.3, 0.4) -> 0.5 m/s; yaw rate error 0.2 rad/s.
    e = metrics.velocity_errors(np.tile([0.8, 0.4, 0.0], (t, 1)), ach)
    assert e['lin_vel_error'] == pytest.approx(0.5)
    assert e['ang_vel_error'] == pytest.approx(0.2)


def test_summarize_counts_falls_and_means():
    runs = [{'fell': True, 'fall_time': 1.0, 'penetration_mm': 1.0, 'e_track_cm': 10.0},
            {'fell': False, 'fall_time': None, 'penetration_mm': 3.0, 'e_track_cm': 20.0}]
    s = metrics.summarize(runs, train_penetration_mm=4.0)
    assert s['falls'] == 1 and s['runs'] == 2
    assert s['penetration_mm'] == pytest.approx(2.0)
    assert s['e_track_cm'] == pytest.approx(15.0)
    assert s['delta_d_mm'] == pytest.approx(2.0)


def test_a_fall_is_low_over_the_ground_not_below_zero():
    from types import SimpleNamespace

    # A pelvis that sinks to 0.5 m over stairs 0.45 m high has fallen; on the floor it
    # would be standing low.
    t = np.arange(11) * 0.02
    z = np.linspace(1.2, 0.5, 11)
    run = SimpleNamespace(root_pos=np.stack([t, 0 * t, z], -1), time=t, diverged=False,
                          seed=0, penetration=np.zeros(0), friction_scale=1.0, pushes=0)
    on_floor = metrics.run_metrics(run)
    on_stairs = metrics.run_metrics(run, ground_height=np.full(11, 0.45))
    assert not on_floor['fell'] and on_floor['min_root_height'] == pytest.approx(0.5)
    assert on_stairs['fell'] and on_stairs['min_root_height'] == pytest.approx(0.05)
    assert on_stairs['fall_time'] == pytest.approx(t[np.flatnonzero(z - 0.45 < 0.3)[0]])
