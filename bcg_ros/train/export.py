"""
ONNX export of a trained actor, with its deployment contract in the metadata.

The graph is built node by node from the actor's parameters (no tracing), so
it is exactly the network :func:`bcg_ros.core.networks.policy_mean` computes:
observation normalisation and clipping, then per hidden layer MatMul, Add,
LayerNormalization and Elu, then the linear output layer. Input ``obs``
``[batch, obs_size]`` float32, output ``actions`` ``[batch, action_size]``,
the deterministic (mean) action in the contract's joint order.

Metadata: :meth:`bcg_ros.contract.Contract.to_metadata` (the contract as
JSON under ``bcg_ros.contract``), ``bcg_ros.train_penetration_mm`` (mean foot
penetration of the training simulator, which the evaluator subtracts its own
from for delta-d), and what produced the file.
"""

import pathlib
from typing import Dict, Mapping, Optional

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bcg_ros import contract as ct
from bcg_ros.core import networks
from bcg_ros.train.checkpoint import atomic_write

OPSET = 17
"""LayerNormalization is an ONNX operator from opset 17."""


def build_model(actor, obs_norm: networks.Normalizer, obs_clip: float,
                metadata: Mapping[str, str]) -> onnx.ModelProto:
    """Return the ONNX model of the deterministic actor."""
    f32 = np.float32
    mean = np.asarray(obs_norm.mean, f32)
    std = np.sqrt(np.asarray(obs_norm.var, f32) + f32(1e-8))
    layers = actor['mlp']
    obs_size = layers[0]['w'].shape[0]
    act_size = layers[-1]['w'].shape[1]
    inits = [numpy_helper.from_array(mean, 'obs_mean'), numpy_helper.from_array(std, 'obs_std'),
             numpy_helper.from_array(np.asarray(-obs_clip, f32), 'obs_lo'),
             numpy_helper.from_array(np.asarray(obs_clip, f32), 'obs_hi')]
    nodes = [helper.make_node('Sub', ['obs', 'obs_mean'], ['obs_c']),
             helper.make_node('Div', ['obs_c', 'obs_std'], ['obs_n']),
             helper.make_node('Clip', ['obs_n', 'obs_lo', 'obs_hi'], ['h0'])]
    x = 'h0'
    for i, layer in enumerate(layers):
        w, b = f'w{i}', f'b{i}'
        inits += [numpy_helper.from_array(np.asarray(layer['w'], f32), w),
                  numpy_helper.from_array(np.asarray(layer['b'], f32), b)]
        nodes += [helper.make_node('MatMul', [x, w], [f'mm{i}']),
                  helper.make_node('Add', [f'mm{i}', b], [f'lin{i}'])]
        x = f'lin{i}'
        if i == len(layers) - 1:
            break
        if 'ln_scale' in layer:
            inits += [numpy_helper.from_array(np.asarray(layer['ln_scale'], f32), f'g{i}'),
                      numpy_helper.from_array(np.asarray(layer['ln_bias'], f32), f'beta{i}')]
            nodes.append(helper.make_node('LayerNormalization', [x, f'g{i}', f'beta{i}'],
                                          [f'ln{i}'], axis=-1, epsilon=networks.LN_EPS))
            x = f'ln{i}'
        nodes.append(helper.make_node('Elu', [x], [f'h{i + 1}'], alpha=1.0))
        x = f'h{i + 1}'
    nodes.append(helper.make_node('Identity', [x], ['actions']))
    graph = helper.make_graph(
        nodes, 'bcg_ros_policy',
        [helper.make_tensor_value_info('obs', TensorProto.FLOAT, ['batch', obs_size])],
        [helper.make_tensor_value_info('actions', TensorProto.FLOAT, ['batch', act_size])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', OPSET)],
                              producer_name='bcg_ros')
    model.ir_version = 8
    helper.set_model_props(model, dict(metadata))
    onnx.checker.check_model(model)
    return model


def export_policy(path, actor, obs_norm: networks.Normalizer, contract, obs_clip: float,
                  train_penetration_mm: float = 0.0,
                  extra: Optional[Dict[str, str]] = None) -> pathlib.Path:
    """Write the actor as ONNX to ``path`` atomically, the contract in its metadata."""
    if contract.obs_size != actor['mlp'][0]['w'].shape[0]:
        raise ValueError(f'{path}: contract obs_size {contract.obs_size} != actor input '
                         f'{actor["mlp"][0]["w"].shape[0]}')
    meta = dict(contract.to_metadata())
    meta[ct.TRAIN_PENETRATION_KEY] = repr(float(train_penetration_mm))
    meta.update(extra or {})
    model = build_model(actor, obs_norm, obs_clip, meta)
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, lambda f: f.write(model.SerializeToString()))


def read_metadata(path) -> Dict[str, str]:
    """Return the metadata_props of an ONNX file as a dict."""
    model = onnx.load(str(path), load_external_data=False)
    return {p.key: p.value for p in model.metadata_props}
