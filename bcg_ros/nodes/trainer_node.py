"""
trainer_node: the training loop of ``bcg-train`` as a ROS 2 node.

Parameters (config/trainer_node.yaml) are the fields of
:class:`TrainerNodeConfig` plus ``overrides``, a list of
``section.field=value`` strings applied as ``bcg-train --set`` applies them
(on top of ``preset`` and ``config_file``). A bad value fails at startup with
the field's name.

Training runs in its own thread, never on the executor, so the services
answer while an iteration computes. Each iteration publishes on ``~/progress``
a ``diagnostic_msgs/DiagnosticArray`` with one status named
``bcg_ros/trainer``: level OK (WARN when the iteration's gradient was not
finite), message ``iteration i/n``, and key-values ``phase`` (``training``),
``iteration``, ``iterations``, ``samples``, ``wall_s``, ``reward``,
``e_track`` [cm], ``bundle_rate``, ``fall_rate`` and the learner's other
metrics. Before the first iteration one status with ``phase`` ``compiling``
says that XLA compiles the training step (minutes for the G1 on a CPU the
first time; the persistent cache makes later starts quick).

Services (std_srvs/Trigger): ``~/save_checkpoint`` (writes checkpoint.npz
now; message: its path), ``~/export_policy`` (writes policy.onnx now;
message: its path), ``~/stop`` (ends training after the current iteration,
saves a checkpoint). Ctrl-C also saves a checkpoint. Starting the node again
on the same ``output_dir`` continues the run.

Every export (``~/export_policy``, and the one at the end when ``finish``) is
announced on ``~/exported`` (std_msgs/String, latched): the ONNX file's path.
evaluator_node with ``policy_topic`` set to it evaluates each one
(train.launch.py).
"""

import sys
import threading
from dataclasses import dataclass
from typing import Any, Dict

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.executors import MultiThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String
from std_srvs.srv import Trigger

from bcg_ros import train
from bcg_ros.nodes import diagnostics, params, spin


@dataclass(frozen=True)
class TrainerNodeConfig:
    """What the node trains and where it writes."""

    preset: str = 'cpu'
    """bcg-train preset: cpu, paper or toy (the test env); empty: the defaults in code."""
    config_file: str = ''
    """YAML file of config sections (as bcg-train --config); empty: none."""
    output_dir: str = 'runs/train'
    """Output folder; a checkpoint there is resumed."""
    resume: bool = True
    """Continue from output_dir's checkpoint when there is one."""
    finish: bool = True
    """After the last iteration: export policy.onnx, write summary.json, evaluate."""
    exit_when_done: bool = True
    """Shut the node down once training has finished (else keep serving ~/export_policy)."""


class TrainerNode(Node):
    """Runs a :class:`bcg_ros.train.Trainer` in a thread; publishes and serves."""

    def __init__(self):
        """Read parameters into configs, create the interfaces, start the training thread."""
        super().__init__('trainer_node')
        params.declare(self, TrainerNodeConfig)
        self.declare_parameter('overrides', Parameter.Type.STRING_ARRAY, ParameterDescriptor(
            description='section.field=value overrides, as bcg-train --set'))
        self.config = params.read(self, TrainerNodeConfig)
        overrides = self.get_parameter('overrides').value or []
        try:
            self.train_config = train.make_config(self.config.preset or None,
                                                  self.config.config_file or None,
                                                  train.parse_set(overrides))
        except train.ConfigError as exc:
            raise params.ParameterError(f'trainer_node: {exc}') from exc
        self.trainer = None
        self.error = None
        self.stop_requested = threading.Event()
        self.done = threading.Event()
        self.pub = self.create_publisher(DiagnosticArray, '~/progress', 10)
        self.diagnostics = diagnostics.Publisher(self)
        self.exported_pub = self.create_publisher(String, '~/exported', QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self.create_service(Trigger, '~/save_checkpoint', self._on_save)
        self.create_service(Trigger, '~/export_policy', self._on_export)
        self.create_service(Trigger, '~/stop', self._on_stop)
        self.thread = threading.Thread(target=self._train, name='bcg_ros_training', daemon=True)
        self.thread.start()

    def _train(self):
        """Build the trainer, compile its step, train, finish; runs in the training thread."""
        try:
            from bcg_ros.jax_cache import cpu_cores, enable_compilation_cache
            enable_compilation_cache(host_devices=cpu_cores())
            cfg = self.train_config
            cfg = train.apply_overrides(cfg, {'run.progress_bar': False})
            self.trainer = train.Trainer(cfg, self.config.output_dir, self.config.resume,
                                         log=self.get_logger().info)
            self.get_logger().info(f'training {cfg.run.algo} on {cfg.run.env} from iteration '
                                   f'{self.trainer.iteration} to {cfg.run.iterations}')
            if self.trainer.iteration < cfg.run.iterations and not self.stop_requested.is_set():
                self._publish_status(DiagnosticStatus.OK, 'compiling the training step',
                                     {'phase': 'compiling',
                                      'iteration': self.trainer.iteration})
                self.trainer.compile()
            finished = self.trainer.run(self.stop_requested.is_set, self._publish)
            if finished and self.config.finish:
                summary = self.trainer.finish()
                self.get_logger().info(f'finished: {summary.get("policy", "no export")}')
                if summary.get('policy'):
                    self._announce(summary['policy'])
            else:
                self.get_logger().info(f'stopped at iteration {self.trainer.iteration}; '
                                       'checkpoint saved')
        except Exception as exc:  # reported on the log and to the services, not lost
            self.error = exc
            self.get_logger().error(f'training failed: {type(exc).__name__}: {exc}')
        finally:
            self.done.set()

    def _publish(self, m: Dict[str, float]) -> None:
        """Publish one iteration's metrics as a DiagnosticArray."""
        level = DiagnosticStatus.OK if m.get('grad_finite', 1.0) > 0 else DiagnosticStatus.WARN
        total = self.train_config.run.iterations
        self._publish_status(level, f'iteration {int(m["iteration"])}/{total}',
                             {'phase': 'training', **m})

    def _publish_status(self, level: bytes, message: str, values: Dict[str, Any]) -> None:
        """Publish the ``bcg_ros/trainer`` status with ``iterations`` and ``values``."""
        msg = DiagnosticArray()
        msg.header.stamp = self.get_clock().now().to_msg()
        st = DiagnosticStatus()
        st.name = 'bcg_ros/trainer'
        st.hardware_id = self.config.output_dir
        st.level = level
        st.message = message
        values = {'iterations': self.train_config.run.iterations, **values}
        st.values = [KeyValue(key=k, value=f'{v:.6g}' if isinstance(v, float) else str(v))
                     for k, v in values.items()]
        msg.status = [st]
        self.pub.publish(msg)
        self.diagnostics.publish(st)

    def _not_ready(self, response):
        """Fill ``response`` when there is no trainer to act on; return whether so."""
        if self.trainer is None:
            response.success = False
            response.message = (f'training failed: {self.error}' if self.error
                                else 'trainer still starting (compiling)')
            return True
        return False

    def _on_save(self, request, response):
        """Write a checkpoint now."""
        if not self._not_ready(response):
            response.success = True
            response.message = str(self.trainer.save_checkpoint())
        return response

    def _on_export(self, request, response):
        """Write policy.onnx from the current actor now."""
        if not self._not_ready(response):
            response.success = True
            response.message = str(self.trainer.export())
            self._announce(response.message)
        return response

    def _announce(self, policy):
        """Publish an exported policy's path on ~/exported."""
        self.exported_pub.publish(String(data=str(policy)))

    def _on_stop(self, request, response):
        """End training after the current iteration (a checkpoint is saved)."""
        self.stop_requested.set()
        response.success = True
        it = self.trainer.iteration if self.trainer is not None else 0
        response.message = f'stopping after iteration {it}'
        return response

    def shutdown_training(self, timeout: float = 600.0):
        """Stop the training thread and wait for its checkpoint."""
        self.stop_requested.set()
        self.thread.join(timeout)


def _finish(node: TrainerNode) -> int:
    """Stop training (a checkpoint when it had not ended) and give the exit code."""
    if not node.done.is_set():
        node.get_logger().info('interrupted: stopping training and saving a checkpoint')
    node.shutdown_training()
    return 1 if node.error is not None else 0


def _ended(node: TrainerNode) -> bool:
    """Training is over and the node should exit (exit_when_done, or ~/stop was called)."""
    return node.done.is_set() and (node.config.exit_when_done or node.stop_requested.is_set())


def main(args=None) -> int:
    """Run trainer_node until training ends, ~/stop, or Ctrl-C (which saves a checkpoint)."""
    return spin.run('trainer_node', lambda stop: TrainerNode(), (params.ParameterError,), args,
                    executor=lambda: MultiThreadedExecutor(num_threads=2), done=_ended,
                    finish=_finish)


if __name__ == '__main__':
    sys.exit(main())
