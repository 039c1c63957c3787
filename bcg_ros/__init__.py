"""bcg_ros: Bundled Contact Gradients for the Unitree G1, as a ROS 2 stack."""
