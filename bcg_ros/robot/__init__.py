"""The Unitree G1: its description, its wire protocol."""
