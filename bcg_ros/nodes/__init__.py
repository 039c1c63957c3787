"""Thin rclpy nodes over the pure components."""
