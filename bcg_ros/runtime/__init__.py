"""
What runs on the robot's computer: policy loading today; no JAX, no MuJoCo.

Modules here import only numpy, pyyaml and onnxruntime (and rclpy in the nodes), so
they install on the G1's Python without the training stack.
"""
