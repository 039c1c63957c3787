"""Benchmarks: scripts that print figures, each ending in a ``name: value`` line."""
