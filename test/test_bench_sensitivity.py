"""bcg-bench sensitivity: the state offsets' gradient, and the event labels and tail table."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bcg_ros.bench import sensitivity as sens_mod
from bcg_ros.core import add, shac, toy_env

SMALL = shac.SHACConfig(horizon=6, actor_hidden=(16,), critic_hidden=(16,))
NO_ADD = add.ADDConfig(enabled=False, hidden=(8,), batch_size=16, buffer_size=64)


def _shift(s, x):
    return s.__class__(s.pos + x, s.vel, s.t, s.phase, s.mass, s.last_action)


def test_zero_state_offsets_leave_the_rollout_and_give_each_envs_sensitivity():
    env = toy_env.ToyEnv(toy_env.ToyEnvConfig(num_envs=3, episode_length=100))
    st = shac.init(SMALL, NO_ADD, env, jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(1)
    zeros = jnp.zeros((SMALL.horizon, 3, 2))

    def loss(off):
        return shac._rollout(st.actor, st, key, SMALL, NO_ADD, env, shift=_shift,
                             offsets=off)[0]

    plain = shac._rollout(st.actor, st, key, SMALL, NO_ADD, env)[0]
    assert float(loss(zeros)) == float(plain)
    g = np.asarray(jax.grad(loss)(zeros))
    assert np.all(np.isfinite(g)) and np.abs(g).max() > 0
    # The gradient is the loss's sensitivity to env 1's position at step 2: a central
    # difference of the same offset agrees.
    eps = 1e-3
    bump = zeros.at[2, 1, 0].set(eps)
    fd = (float(loss(bump)) - float(loss(-bump))) / (2 * eps)
    assert g[2, 1, 0] == pytest.approx(fd, rel=2e-2, abs=1e-6)


def test_probe_keeps_the_named_step_info_per_step():
    env = toy_env.ToyEnv(toy_env.ToyEnvConfig(num_envs=2))
    st = shac.init(SMALL, NO_ADD, env, jax.random.PRNGKey(0))
    _, (_, data) = shac._rollout(st.actor, st, jax.random.PRNGKey(1), SMALL, NO_ADD, env,
                                 probe=('e_track',))
    assert data['probe']['e_track'].shape == (SMALL.horizon, 2)
    np.testing.assert_array_equal(data['probe']['e_track'], data['e_track'])


def _probe(h=4, b=2, s=2):
    depth = -np.ones((h, b, s))
    point = np.zeros((h, b, s, 3))
    return {'probe': {'contact_force': np.zeros((h, b, s)), 'contact_depth': depth,
                      'contact_point': point, 'qpos': np.zeros((h, b, 3))},
            'bundle': np.zeros((h, b)), 'done': np.zeros((h, b))}


def test_events_are_labelled_where_they_happen():
    d = _probe()
    p = d['probe']
    p['contact_force'][1, 0, 1] = 500.0              # env 0, step 1: above tau
    p['contact_depth'][2:, 1, 0] = 0.002             # env 1 touches down at step 2
    p['contact_point'][3, 1, 0, 0] = 0.01            # ... and slides 1 cm in step 3
    p['qpos'][0, 0, 2] = 0.99                        # env 0 at its upper limit at step 0
    d['bundle'][1, 0] = 1.0
    ev = sens_mod.label_events(d, tau=400.0, dt=0.02, sphere_foot=[0, 1], limit_qpos=[2],
                               lower=np.array([-1.0]), upper=np.array([1.0]), slip=0.1,
                               margin=0.02)
    assert np.argwhere(ev['stiff contact (trigger)']).tolist() == [[1, 0]]
    assert np.argwhere(ev['touch-down']).tolist() == [[2, 1]]
    assert np.argwhere(ev['slip']).tolist() == [[3, 1]]           # 0.5 m/s
    assert np.argwhere(ev['joint at limit']).tolist() == [[0, 0]]
    assert np.argwhere(ev['bundle']).tolist() == [[1, 0]]
    assert not ev['episode end'].any()
    # Steps t and t - 1 both see an event of step t.
    assert np.argwhere(sens_mod.windowed(ev['touch-down'])).tolist() == [[1, 1], [2, 1]]


def test_tail_table_attributes_the_largest_sensitivities():
    sens = np.ones((10, 10))
    sens[5, 3] = 1e4                                  # one env-step dominates
    stiff = np.zeros((10, 10), bool)
    stiff[6, 3] = True                                # the step after it is stiff
    other = np.zeros((10, 10), bool)
    other[0, 0] = True
    rows, threshold = sens_mod.tail_table(sens, {'stiff': stiff, 'other': other}, top=0.01)
    by = {r[0]: r for r in rows}
    assert threshold == 1e4
    assert by['stiff'][5] == 1.0 and by['other'][5] == 0.0      # the top is caught
    assert by['stiff'][4] > 0.99 and by['other'][4] < 1e-6      # and holds the sum
    assert by['stiff'][1] == pytest.approx(0.02)                # 2 env-steps in its window
