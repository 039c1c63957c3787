"""
The G1 imitation env: contract observations, terminations, resets, randomisation.

One small env (2 envs, BCG off, randomisation on) compiled once for the module;
a forward step of the G1 takes minutes to compile on a CPU.
"""

import copy
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bcg_ros import contract as ct
from bcg_ros import rotation
from bcg_ros.core import bcg as bcg_mod
from bcg_ros.core import sim as simulator
from bcg_ros.core.env import check_env, INFO_KEYS
from bcg_ros.core.g1_env import G1Env, G1EnvConfig, ImitationRewardConfig


@pytest.fixture(scope='module')
def env():
    # Residual actions and the dense tracking terms on: a zero action replays the clip.
    # Random starts leave 16 frames, so only a test that moves the frame sees the hold.
    cfg = G1EnvConfig(num_envs=2, motion='run', episode_length=5, hold_end=2,
                      bcg=bcg_mod.BCGConfig(enabled=False), residual=True,
                      imitation=ImitationRewardConfig(pose_weight=1.0, joint_vel_weight=1.0,
                                                      key_weight=1.0, root_weight=1.0,
                                                      root_vel_weight=1.0),
                      privileged_critic=True)
    e = G1Env(cfg)
    e.jit_step = jax.jit(e.step)
    e.jit_reset = jax.jit(e.reset)
    return e


def _np_obs(env, state, i):
    """The policy input of env ``i`` computed by the contract in NumPy."""
    qpos = np.asarray(state.bcg.sim.qpos[i])
    qvel = np.asarray(state.bcg.sim.qvel[i])
    robot = ct.RobotObs(quat=qpos[3:7], gyro=qvel[3:6], joint_pos=qpos[env.qpos_adr],
                        joint_vel=qvel[env.qvel_adr], last_action=np.asarray(
                            state.last_action[i]))
    f = int(state.frame[i])
    m = env.motion
    idx = np.clip(np.arange(f + 1, f + 1 + ct.REF_FUTURE), 0, m.num_frames - 1)
    ref = ct.RefObs(joint_pos=m.joint_pos[idx], root_quat=m.root_quat[idx],
                    root_height=m.root_pos[idx, 2], root_lin_vel=m.root_lin_vel[idx])
    c = env.contract()
    return ct.flatten(ct.init_history(c, ct.observation_frame(c, robot, ref)))


def test_protocol_and_contract(env):
    check_env(env)
    c = env.contract()
    assert env.obs_size == c.obs_size and c.motion_name == 'run'
    assert c.motion_frames == env.motion.num_frames


def test_reset_observation_is_the_contracts(env):
    st = env.jit_reset(jax.random.PRNGKey(0))
    obs = np.asarray(env.observe(st))
    assert obs.shape == (2, env.obs_size)
    for i in range(2):
        np.testing.assert_allclose(obs[i], _np_obs(env, st, i), rtol=1e-4, atol=1e-4)
    dr = st.dr
    lo, hi = env.config.dr.friction_range
    assert np.all((np.asarray(dr.friction) >= lo) & (np.asarray(dr.friction) <= hi))
    assert np.all(np.abs(np.asarray(dr.com_offset)) <= env.config.dr.com_offset)
    # A late episode holds the previous action for the whole control step (latency_max 0).
    assert set(np.unique(np.asarray(dr.latency))) <= {0.0, float(env.sim.config.substeps)}


def test_a_late_action_reaches_the_motors_after_its_latency(env):
    """dr.latency physics steps of a control step hold the previous action, the rest the new."""
    st = env.jit_reset(jax.random.PRNGKey(6))
    substeps = env.sim.config.substeps
    old = jnp.zeros((2, env.action_size))
    new = jnp.full((2, env.action_size), 0.3)
    st = dataclasses.replace(st, last_action=old)

    def joints(action, latency):
        dr = dataclasses.replace(st.dr, latency=jnp.full((2,), float(latency)))
        after, _ = env.jit_step(dataclasses.replace(st, dr=dr), action, jax.random.PRNGKey(7))
        return np.asarray(after.bcg.sim.qpos[:, env.qpos_adr])

    on_time, part, whole = joints(new, 0), joints(new, 2), joints(new, substeps)
    np.testing.assert_allclose(whole, joints(old, 0), atol=1e-6)   # one control step late
    assert np.abs(part - on_time).max() > 1e-3 and np.abs(part - whole).max() > 1e-3
    np.testing.assert_allclose(joints(old, 2), joints(old, 0), atol=1e-6)   # nothing changed
    # latency_max draws a late episode's delay in whole physics steps, 1 to its length.
    late = copy.copy(env)
    late.config = dataclasses.replace(env.config, dr=dataclasses.replace(
        env.config.dr, latency_prob=0.5, latency_max=2.2 * env.sim.config.dt))
    drawn = np.asarray(late._latency(jax.random.PRNGKey(8), 2000))
    assert set(np.unique(drawn)) == {0.0, 1.0, 2.0}
    assert 0.45 < np.mean(drawn > 0) < 0.55


def test_step_truncates_at_the_episode_length_and_resets(env):
    st = env.jit_reset(jax.random.PRNGKey(1))
    a = jnp.zeros((2, env.action_size))
    for i in range(5):
        st, out = env.jit_step(st, a, jax.random.PRNGKey(10 + i))
        assert set(INFO_KEYS) <= set(out.info)
        for x in (out.obs, out.reward, out.info['add_delta'], out.info['e_track']):
            assert np.isfinite(np.asarray(x)).all()
        assert out.info['add_delta'].shape == (2, env.add_size)
        if i < 4:
            assert not np.asarray(out.done).any()
    assert np.all(np.asarray(out.info['truncated']) == 1.0)
    assert np.all(np.asarray(out.info['terminated']) == 0.0)
    assert np.all(np.asarray(st.t) == 0), 'finished episodes restart inside step'
    # The observation returned is the fresh episode's; terminal_obs is the finished one's.
    np.testing.assert_allclose(np.asarray(out.obs), np.asarray(env.observe(st)))
    assert not np.allclose(np.asarray(out.info['terminal_obs']), np.asarray(out.obs))


def test_episode_holds_the_last_frame_then_truncates(env):
    """At the clip's end the reference stays at its last frame for hold_end steps."""
    st = env.jit_reset(jax.random.PRNGKey(4))
    last = env.num_frames - 1
    sim_state = simulator.SimState(jnp.tile(env.ref_qpos[last - 1], (2, 1)),
                                   jnp.tile(env.ref_qvel[last - 1], (2, 1)))
    st = dataclasses.replace(st, frame=jnp.full((2,), last - 1, jnp.int32),
                             bcg=dataclasses.replace(st.bcg, sim=sim_state))
    a = jnp.zeros((2, env.action_size))
    done, truncated = [], []
    for i in range(4):
        st, out = env.jit_step(st, a, jax.random.PRNGKey(20 + i))
        done.append(np.asarray(out.done).tolist())
        truncated.append(np.asarray(out.info['truncated']).tolist())
        if i < 2:
            assert np.asarray(st.frame).tolist() == [last, last]
            assert np.asarray(st.held).tolist() == [i + 1, i + 1]
    # One step to reach the last frame, two held there, the third past the hold ends it.
    assert done == [[0.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]
    assert truncated[2] == [1.0, 1.0], 'the end of a hold is a truncation, not a failure'
    assert np.all(np.asarray(st.held) == 0)


def test_low_root_terminates_only_that_env(env):
    st = env.jit_reset(jax.random.PRNGKey(2))
    qpos = st.bcg.sim.qpos.at[0, 2].add(-0.6)
    sim_state = simulator.SimState(qpos, st.bcg.sim.qvel)
    st = dataclasses.replace(st, bcg=dataclasses.replace(st.bcg, sim=sim_state))
    st2, out = env.jit_step(st, jnp.zeros((2, env.action_size)), jax.random.PRNGKey(3))
    assert np.asarray(out.info['terminated']).tolist() == [1.0, 0.0]
    assert np.asarray(out.done).tolist() == [1.0, 0.0]
    assert np.asarray(st2.t).tolist() == [0, 1]
    assert float(st2.bcg.sim.qpos[0, 2]) > env.config.min_root_height


@pytest.mark.parametrize('bad', [float('nan'), 1e4])
def test_diverged_state_terminates_only_that_env(env, bad):
    st = env.jit_reset(jax.random.PRNGKey(4))
    qvel = st.bcg.sim.qvel.at[1, 7].set(bad)
    sim_state = simulator.SimState(st.bcg.sim.qpos, qvel)
    st = dataclasses.replace(st, bcg=dataclasses.replace(st.bcg, sim=sim_state))
    st2, out = env.jit_step(st, jnp.zeros((2, env.action_size)), jax.random.PRNGKey(5))
    assert np.asarray(out.info['terminated']).tolist() == [0.0, 1.0]
    assert np.asarray(st2.t).tolist() == [1, 0]
    assert bool(jnp.all(jnp.isfinite(st2.bcg.sim.qvel)))
    # The diverged env counts in the metrics at the termination bound, not as garbage.
    m = {k: np.asarray(v) for k, v in out.info['metrics'].items()}
    assert m['diverged_rate'].tolist() == [0.0, 1.0]
    e = np.asarray(out.info['e_track'])
    assert e[1] == pytest.approx(100.0 * env.config.max_track_error)
    assert np.isfinite(e[0]) and e[0] < 100.0 * env.config.max_track_error
    assert m['track_reward'][1] == 0.0 and 0.0 < m['track_reward'][0] <= 1.0
    # Not the diverged state's depth: no penetration counted for it.
    assert float(out.info['penetration_sum_mm'][1]) == 0.0
    assert float(out.info['penetration_count'][1]) == 0.0
    # Nothing of it reaches the critic's targets or the discriminator: all finite, zeroed.
    for name in ('terminal_obs', 'terminal_critic_obs', 'add_delta'):
        x = np.asarray(out.info[name])
        assert np.all(np.isfinite(x)) and np.all(x[1] == 0.0), name
    assert np.all(np.isfinite(np.asarray(out.reward))) and float(out.reward[1]) == 0.0


def test_e_track_is_the_evaluators_all_body_error(env):
    import mujoco

    from bcg_ros import motion as motion_mod
    from bcg_ros.robot import g1
    st = env.jit_reset(jax.random.PRNGKey(6))
    st2, out = env.jit_step(st, 0.3 * jnp.ones((2, env.action_size)), jax.random.PRNGKey(7))
    assert not np.asarray(out.done).any()
    m = env.robot.model
    d = mujoco.MjData(m)
    ref = motion_mod.body_positions(env.motion, env.robot)
    ids = [m.body(n).id for n in g1.TRACK_BODIES]
    for i in range(2):
        d.qpos[:] = np.asarray(st2.bcg.sim.qpos[i])
        mujoco.mj_kinematics(m, d)
        want = 100.0 * motion_mod.tracking_error(d.xpos[ids], ref[int(st2.frame[i])])
        assert float(out.info['e_track'][i]) == pytest.approx(want, abs=0.01)
        assert want > 0.1   # the step moved the robot off the reference


def test_residual_targets_and_dense_terms(env):
    c = env.contract()
    assert c.action_residual
    st = env.jit_reset(jax.random.PRNGKey(8))
    zero = jnp.zeros((2, env.action_size))
    _, out0 = env.jit_step(st, zero, jax.random.PRNGKey(9))
    _, out1 = env.jit_step(st, 2.0 * jnp.ones((2, env.action_size)), jax.random.PRNGKey(9))
    r0, r1 = np.asarray(out0.reward), np.asarray(out1.reward)
    # Five terms of weight 1, started on the reference: a zero residual stays close to it.
    assert np.all(r0 > 3.0) and np.all(r0 <= 5.0 + 1e-6)
    assert np.all(r1 < r0 - 0.5)
    # The targets are the reference's next frame plus scale * action.
    ref = env._ref_obs(st.frame[0])
    np.testing.assert_allclose(c.action_to_targets(np.zeros(29, np.float32), ref=ref),
                               np.asarray(env.motion.joint_pos[int(st.frame[0]) + 1]),
                               atol=1e-6)


def test_privileged_critic_terms(env):
    from bcg_ros.core.g1_env import PRIVILEGED_SIZE
    st = env.jit_reset(jax.random.PRNGKey(10))
    cobs = np.asarray(env.critic_observe(st))
    assert env.critic_obs_size == env.obs_size + PRIVILEGED_SIZE
    assert cobs.shape == (2, env.critic_obs_size)
    np.testing.assert_allclose(cobs[:, :env.obs_size], np.asarray(env.observe(st)), rtol=1e-6)
    priv = cobs[:, env.obs_size:]
    qpos = np.asarray(st.bcg.sim.qpos)
    np.testing.assert_allclose(priv[:, 0], qpos[:, 2], rtol=1e-6)
    np.testing.assert_allclose(priv[:, -1], np.asarray(st.frame) / (env.num_frames - 1),
                               rtol=1e-6)
    # Started on the reference: no position or heading error yet (up to the joint noise).
    assert np.abs(priv[:, 4:8]).max() < 1e-4
    _, out = env.jit_step(st, jnp.zeros((2, env.action_size)), jax.random.PRNGKey(11))
    assert out.info['terminal_critic_obs'].shape == (2, env.critic_obs_size)


def test_on_a_terrain_heights_are_over_the_ground_and_the_clip_is_observed_as_recorded():
    """Built, not stepped: terminations and the critic read the height over the stairs."""
    e = G1Env(G1EnvConfig(num_envs=2, motion='run', bcg=bcg_mod.BCGConfig(enabled=False),
                          sim=simulator.SimConfig(terrain='steps:0.05'),
                          privileged_critic=True))
    flat = e.motion.observed
    assert e.motion.root_pos[-1, 2] > flat.root_pos[-1, 2] + 0.3, 'the targets climb'
    np.testing.assert_allclose(np.asarray(e.ref_root_height), flat.root_pos[:, 2], rtol=1e-6)
    ref = e._ref_obs(jnp.asarray(e.num_frames - 10))
    np.testing.assert_allclose(np.asarray(ref.root_height),
                               flat.root_pos[e.num_frames - 9:e.num_frames - 6, 2], rtol=1e-6)
    qpos = jnp.asarray(np.stack([e.ref_qpos[0], e.ref_qpos[-1]]))
    over = np.asarray(e._root_height(qpos))
    np.testing.assert_allclose(over, [flat.root_pos[0, 2], flat.root_pos[-1, 2]], atol=1e-4)
    assert float(qpos[1, 2]) - over[1] > 0.3


def test_observed_base_velocity_is_the_simulators_with_its_noise():
    # Resets only (no physics step to compile): 64 episodes at random frames of the clip.
    cfg = G1EnvConfig(num_envs=64, motion='run', bcg=bcg_mod.BCGConfig(enabled=False),
                      observe_ref_velocity=True, observe_base_velocity=True,
                      base_velocity_noise=0.2)
    e = G1Env(cfg)
    c = e.contract()
    assert [t.name for t in c.obs_terms[-2:]] == ['ref_root_lin_vel', 'base_lin_vel']
    st = jax.jit(e.reset)(jax.random.PRNGKey(3))
    qpos, qvel = np.asarray(st.bcg.sim.qpos), np.asarray(st.bcg.sim.qvel)
    truth = rotation.quat_rotate_inverse(qpos[:, 3:7], qvel[:, 0:3])
    assert np.abs(truth[:, 0]).max() > 1.0, 'no episode started while running'
    seen = np.asarray(e.observe(st))[:, -3:] / c.obs_terms[-1].scale
    err = seen - truth
    assert 0.15 < err.std() < 0.25 and abs(err.mean()) < 0.06, (err.std(), err.mean())


def test_observed_base_velocity_bias_is_drawn_per_episode_and_held():
    cfg = G1EnvConfig(num_envs=64, motion='run', bcg=bcg_mod.BCGConfig(enabled=False),
                      observe_base_velocity=True, base_velocity_noise=0.0,
                      base_velocity_bias=0.2)
    e = G1Env(cfg)
    st = jax.jit(e.reset)(jax.random.PRNGKey(4))
    qpos, qvel = np.asarray(st.bcg.sim.qpos), np.asarray(st.bcg.sim.qvel)
    truth = rotation.quat_rotate_inverse(qpos[:, 3:7], qvel[:, 0:3])
    err = np.asarray(e.observe(st))[:, -3:] / e.contract().obs_terms[-1].scale - truth
    bias = np.asarray(st.dr.velocity_bias)
    np.testing.assert_allclose(err, bias, atol=1e-5)
    assert 0.15 < bias.std() < 0.25, bias.std()
    # Every later step of the episode sees the same offset: only the white part is drawn.
    for k in range(3):
        np.testing.assert_array_equal(
            np.asarray(e._velocity_noise(jax.random.PRNGKey(k), st.dr, st.frame)), bias)
    off = G1Env(dataclasses.replace(cfg, dr=dataclasses.replace(cfg.dr, enabled=False)))
    assert not np.any(np.asarray(jax.jit(off.reset)(jax.random.PRNGKey(4)).dr.velocity_bias))


def test_recorded_estimator_errors_are_replayed_at_the_episode_frames(tmp_path):
    from bcg_ros import velocity_errors
    from bcg_ros.motion import load_motion
    from bcg_ros.robot import g1
    clip = load_motion('run', control_dt=g1.CONTROL_DT)
    frames = np.arange(clip.num_frames)
    # Run r's error at frame f: (r, f / 1000, -r), so a value names its run and frame.
    errors = np.stack([np.stack([np.full_like(frames, r, dtype=float), frames / 1000.0,
                                 np.full_like(frames, -r, dtype=float)], -1) for r in range(3)])
    path = velocity_errors.save(tmp_path / 'errors.npz', errors, clip.name, clip.fps)
    cfg = G1EnvConfig(num_envs=16, motion='run', bcg=bcg_mod.BCGConfig(enabled=False),
                      observe_base_velocity=True, base_velocity_noise=0.0,
                      base_velocity_errors=str(path))
    e = G1Env(cfg)
    st = jax.jit(e.reset)(jax.random.PRNGKey(5))
    trace, frame = np.asarray(st.dr.velocity_trace), np.asarray(st.frame)
    assert set(trace) <= {0, 1, 2} and len(set(trace)) > 1, trace
    qpos, qvel = np.asarray(st.bcg.sim.qpos), np.asarray(st.bcg.sim.qvel)
    truth = rotation.quat_rotate_inverse(qpos[:, 3:7], qvel[:, 0:3])
    seen = np.asarray(e.observe(st))[:, -3:] / e.contract().obs_terms[-1].scale
    np.testing.assert_allclose(seen - truth, errors[trace, frame], atol=1e-5)
    # Later in the episode: the same run, at the frame the episode has reached.
    later = np.asarray(e._velocity_noise(jax.random.PRNGKey(0), st.dr, st.frame + 7))
    np.testing.assert_allclose(later, errors[trace, frame + 7], atol=1e-6)
    off = G1Env(dataclasses.replace(cfg, dr=dataclasses.replace(cfg.dr, enabled=False)))
    st_off = jax.jit(off.reset)(jax.random.PRNGKey(5))
    assert not np.any(np.asarray(off._velocity_noise(jax.random.PRNGKey(0), st_off.dr,
                                                     st_off.frame)))
    short = velocity_errors.save(tmp_path / 'short.npz', errors[:, :-1], clip.name, clip.fps)
    with pytest.raises(velocity_errors.VelocityErrorsError, match='short.npz.*frames'):
        G1Env(dataclasses.replace(cfg, base_velocity_errors=str(short)))


def test_adaptive_starts_go_where_episodes_fail():
    # Resets and the failure counts only (no physics step to compile).
    cfg = G1EnvConfig(num_envs=256, motion='run', bcg=bcg_mod.BCGConfig(enabled=False),
                      adaptive_start=0.75)
    e = G1Env(cfg)
    n, nb = cfg.num_envs, e.num_bins
    assert nb == -(-(e.num_frames - 1 - cfg.min_remaining) // cfg.adaptive_bin)
    reset = jax.jit(e._fresh)
    empty = jnp.zeros((n, nb))
    # No failure yet: every start is uniform over the clip.
    frames = np.asarray(reset(jax.random.PRNGKey(0), empty).frame)
    assert frames.min() < 30 and frames.max() > e.num_frames - 50
    # Two of 256 envs fall at frame 205 (bin 20): that bin and the four before it gain
    # counts 1, 0.8, .. 0.2 (x 2/256), earlier and later bins none.
    terminated = jnp.zeros(n).at[:2].set(1.0)
    failures = e._count_failures(empty, terminated, jnp.full((n,), 205))
    counts = np.asarray(failures)
    assert np.all(counts == counts[0]), 'every env row holds the shared counts'
    np.testing.assert_allclose(counts[0, 16:21] * n / 2, [0.2, 0.4, 0.6, 0.8, 1.0],
                               rtol=1e-6)
    assert not counts[0, :16].any() and not counts[0, 21:].any()
    # Decay: a step without a failure scales the counts by adaptive_decay.
    np.testing.assert_allclose(e._count_failures(failures, jnp.zeros(n), jnp.zeros(n, int)),
                               cfg.adaptive_decay * counts, rtol=1e-6)
    state = reset(jax.random.PRNGKey(1), failures)
    np.testing.assert_array_equal(state.failures, failures)
    frames = np.asarray(state.frame)
    hard = (frames >= 160) & (frames < 210)
    # 75 % drawn from the failing bins plus the uniform share that lands there.
    expect = 0.75 + 0.25 * 50 / (e.num_frames - 1 - cfg.min_remaining)
    assert abs(hard.mean() - expect) < 0.08, hard.mean()
    # Among the adaptive draws, the bin nearest the fall is drawn most.
    near, far = ((frames >= 200) & (frames < 210)).sum(), ((frames >= 160) & (frames < 170)).sum()
    assert near > 2 * far, (near, far)
    # Off (the default): the counts never change and starts stay uniform.
    off = G1Env(dataclasses.replace(cfg, adaptive_start=0.0))
    assert not np.any(np.asarray(off._count_failures(empty, terminated, jnp.full((n,), 205))))
    frames = np.asarray(jax.jit(off._fresh)(jax.random.PRNGKey(1), failures).frame)
    assert ((frames >= 160) & (frames < 210)).mean() < 0.35
