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


class Spinner:
    """
    Spin an rclpy executor on a background thread until :meth:`stop`.

    ``executor.spin`` on a thread cannot be stopped cleanly: ``Executor.shutdown``
    does not wait for it, and destroying a node while that thread is inside a
    wait races with rclpy's handle locks (a rare deadlock). Here the thread spins
    in short ``spin_once`` periods and :meth:`stop` joins it, so nodes and the
    context are destroyed only after the thread has left the executor.
    """

    def __init__(self, executor, period: float = 0.05):
        import threading

        self.executor = executor
        self.period = period
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._spin, daemon=True,
                                       name='bcg_ros_test_spinner')
        self.thread.start()

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException

        try:
            while not self._stop.is_set() and self.executor.context.ok():
                self.executor.spin_once(timeout_sec=self.period)
        except ExternalShutdownException:
            pass

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread, wait for it, then shut the executor down."""
        self._stop.set()
        self.executor.wake()
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise RuntimeError(f'the executor thread did not stop within {timeout} s')
        self.executor.shutdown(timeout_sec=timeout)
