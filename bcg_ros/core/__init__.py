"""Pure JAX science: differentiable simulation, contact, BCG, SHAC, ADD. No ROS imports."""
