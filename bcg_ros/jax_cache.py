"""Turn on JAX's persistent compilation cache (G1 compiles take minutes on a CPU)."""

import os
import pathlib


def cache_dir() -> pathlib.Path:
    """Return the cache folder: $BCG_ROS_CACHE/jax, default ~/.cache/bcg_ros/jax."""
    root = os.environ.get('BCG_ROS_CACHE', str(pathlib.Path.home() / '.cache' / 'bcg_ros'))
    return pathlib.Path(root) / 'jax'


def enable_compilation_cache():
    """
    Point JAX at the persistent cache and cache every compile that takes over 1 s.

    Returns the cache folder, or None when ``BCG_ROS_JAX_CACHE=0`` turns the cache
    off (a way out should a cached executable fail to load on some machine).
    """
    import jax

    if os.environ.get('BCG_ROS_JAX_CACHE', '1').strip().lower() in ('0', 'false', 'no', 'off'):
        return None
    path = cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update('jax_compilation_cache_dir', str(path))
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 1.0)
    jax.config.update('jax_persistent_cache_min_entry_size_bytes', -1)
    return path
