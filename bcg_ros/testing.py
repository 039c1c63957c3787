"""
Small ONNX policies with a real contract, for tests, benchmarks and dry runs of the executor.

A constant policy ignores its observation (its weights are zero) and outputs
one fixed action: zeros hold the contract's action offset (the default pose),
NaN exercises the executor's output checks.
"""

import dataclasses
import pathlib
from typing import Union

import numpy as np

from bcg_ros import contract as contract_mod


def state_contract() -> contract_mod.Contract:
    """The imitation contract without its reference terms: a policy of robot state only."""
    c = contract_mod.imitation_contract()
    terms = tuple(t for t in c.obs_terms if t.name not in contract_mod.REFERENCE_TERMS)
    return dataclasses.replace(c, obs_terms=terms)


def constant_policy(path: Union[str, pathlib.Path], value: float = 0.0,
                    contract: contract_mod.Contract = None) -> pathlib.Path:
    """Write an ONNX policy that always outputs ``value`` and carries ``contract``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    c = contract if contract is not None else state_contract()
    n_obs, n_act = c.obs_size, c.num_joints
    weight = numpy_helper.from_array(np.zeros((n_obs, n_act), np.float32), 'weight')
    bias = numpy_helper.from_array(np.full((n_act,), value, np.float32), 'bias')
    graph = helper.make_graph(
        [helper.make_node('MatMul', ['obs', 'weight'], ['mm']),
         helper.make_node('Add', ['mm', 'bias'], ['action'])],
        'constant_policy',
        [helper.make_tensor_value_info('obs', TensorProto.FLOAT, [1, n_obs])],
        [helper.make_tensor_value_info('action', TensorProto.FLOAT, [1, n_act])],
        initializer=[weight, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])
    model.ir_version = 9
    helper.set_model_props(model, c.to_metadata())
    onnx.checker.check_model(model)
    path = pathlib.Path(path)
    onnx.save(model, str(path))
    return path


def stop_process(proc, timeout: float = 5.0) -> str:
    """
    Stop a node started as a subprocess and return everything it printed.

    SIGINT first, as Ctrl-C would (a policy_node sends its last damping command on
    the way out); SIGKILL after ``timeout`` seconds. ``proc`` with stdout=PIPE, text
    returns what it printed; with no pipe, ''.
    """
    import signal
    import subprocess

    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.stdout.read() if proc.stdout is not None else ''
