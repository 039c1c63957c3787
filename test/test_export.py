"""
ONNX export: onnxruntime parity with the JAX policy, and the contract in the metadata.

Parity: the largest absolute difference between onnxruntime and the jitted JAX
policy on random observations must be under 1e-5 (float32 both); it is stated
in the assertion message.
"""

import jax
import numpy as np
import onnxruntime as ort
import pytest

from bcg_ros import contract as ct
from bcg_ros.core import networks, toy_env
from bcg_ros.train import export

PARITY_TOL = 1e-5


def _random_policy(obs_size, act_size, hidden, seed=0):
    actor = networks.policy_init(jax.random.PRNGKey(seed), obs_size, act_size, hidden, -1.0,
                                 out_scale=1.0)
    # Non-trivial LayerNorm parameters and normaliser statistics, as after training.
    noise_key = jax.random.PRNGKey(seed + 1)
    actor = jax.tree.map(lambda x: x + 0.1 * jax.random.normal(noise_key, x.shape), actor)
    data = 2.0 * jax.random.normal(jax.random.PRNGKey(seed + 2), (500, obs_size)) + 0.5
    norm = networks.normalizer_update(networks.normalizer_init(obs_size), data)
    return actor, norm


@pytest.mark.parametrize('which', ['g1', 'toy'])
def test_onnx_parity_and_metadata(tmp_path, which):
    if which == 'g1':
        contract = ct.imitation_contract('run', 271)
        hidden = (512, 256, 128)
    else:
        contract = toy_env.ToyEnv().contract()
        hidden = (32, 32)
    actor, norm = _random_policy(contract.obs_size, contract.num_joints, hidden)
    path = export.export_policy(tmp_path / 'policy.onnx', actor, norm, contract, 5.0,
                                train_penetration_mm=3.25)
    sess = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    # Observations beyond the normaliser's clip, too, so the Clip node is exercised.
    obs = np.asarray(3.0 * jax.random.normal(jax.random.PRNGKey(9), (256, contract.obs_size)),
                     np.float32)
    got = sess.run(['actions'], {'obs': obs})[0]
    want = np.asarray(jax.jit(networks.policy_mean)(actor, norm, obs, 5.0))
    diff = float(np.max(np.abs(got - want)))
    assert diff < PARITY_TOL, f'onnxruntime vs JAX max abs diff {diff:.2e} >= {PARITY_TOL}'
    meta = dict(sess.get_modelmeta().custom_metadata_map)
    assert ct.Contract.from_metadata(meta) == contract
    assert float(meta[ct.TRAIN_PENETRATION_KEY]) == 3.25
    assert not list(tmp_path.glob('*.tmp')), 'the atomic write left a temporary file'


def test_evaluator_reads_the_exported_contract(tmp_path):
    policy_mod = pytest.importorskip('bcg_ros.runtime.policy')
    contract = ct.imitation_contract('jump', 100)
    actor, norm = _random_policy(contract.obs_size, contract.num_joints, (64, 64))
    path = export.export_policy(tmp_path / 'policy.onnx', actor, norm, contract, 5.0, 2.0)
    pol = policy_mod.load_policy(path)
    assert pol.source == 'metadata'
    assert pol.contract == contract
    assert pol.train_penetration_mm == pytest.approx(2.0)
    obs = np.zeros(contract.obs_size, np.float32)
    np.testing.assert_allclose(pol.act(obs), np.asarray(networks.policy_mean(actor, norm, obs)),
                               atol=PARITY_TOL)


def test_export_refuses_a_contract_of_another_size(tmp_path):
    actor, norm = _random_policy(7, 2, (8,))
    with pytest.raises(ValueError, match='obs_size'):
        export.export_policy(tmp_path / 'p.onnx', actor, norm, toy_env.ToyEnv().contract(), 5.0)
