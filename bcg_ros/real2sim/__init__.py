"""
Real-to-sim: what the G1 recorded, brought into the project's simulators.

:mod:`bcg_ros.real2sim.logs` reads and writes the robot's logs (rosbag2 files of
LowState, LowCmd and odometry) as numpy arrays. :mod:`bcg_ros.real2sim.groundtruth`
makes such logs from a G1 whose physical parameters are hidden
(``bcg-real2sim make-logs``, :mod:`bcg_ros.real2sim.cli`), the truth a calibration is
checked against. :mod:`bcg_ros.real2sim.calibrate` fits the differentiable
simulator's physical parameters to such logs (``bcg-calibrate``), into a file that
g1_sim_node, the MuJoCo evaluator and training (``g1.physics_params``) all read.
"""
