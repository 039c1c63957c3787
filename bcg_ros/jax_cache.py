"""JAX's compile settings: the persistent compilation cache and XLA's CPU flags."""

import os
import pathlib
from importlib import metadata

XLA_CPU_FLAGS = ('--xla_cpu_use_fusion_emitters=false',)
"""XLA flags the project compiles with: XLA's older CPU fusion emitters, with which the
G1 training step compiles faster and runs as fast (figures in bcg_ros/core/README.md)."""
XLA_FLAGS_JAXLIB = '0.9.'
"""The jaxlib versions these flags are known to: an XLA that does not know a flag in
``$XLA_FLAGS`` aborts the process, so other versions get none."""


def cache_dir() -> pathlib.Path:
    """Return the cache folder: $BCG_ROS_CACHE/jax, default ~/.cache/bcg_ros/jax."""
    root = os.environ.get('BCG_ROS_CACHE', str(pathlib.Path.home() / '.cache' / 'bcg_ros'))
    return pathlib.Path(root) / 'jax'


HOST_DEVICES_FLAG = '--xla_force_host_platform_device_count'
"""XLA's flag that splits the CPU into that many JAX devices."""


def cpu_cores() -> int:
    """
    The CPU cores this process may run on, or ``$BCG_ROS_HOST_DEVICES`` where set.

    XLA's CPU client runs one computation on one core at a time (small kernels, one after
    the other); as that many devices, with the envs sharded over them, it runs one shard
    per core. ``BCG_ROS_HOST_DEVICES=1`` keeps one device.
    """
    forced = os.environ.get('BCG_ROS_HOST_DEVICES', '').strip()
    if forced:
        try:
            n = int(forced)
        except ValueError:
            raise ValueError(f'BCG_ROS_HOST_DEVICES: expected a whole number, got {forced!r}')
        if n < 1:
            raise ValueError(f'BCG_ROS_HOST_DEVICES: expected at least 1, got {n}')
        return n
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def set_xla_flags(host_devices: int = 1) -> str:
    """
    Add :data:`XLA_CPU_FLAGS` to ``$XLA_FLAGS`` and return it; a flag already set there stays.

    ``host_devices`` > 1 also splits the CPU into that many JAX devices
    (:data:`HOST_DEVICES_FLAG`), unless ``$XLA_FLAGS`` already says how many.
    XLA reads the variable once, when JAX first computes, so this acts only before that;
    ``XLA_FLAGS=--xla_cpu_use_fusion_emitters=true`` keeps XLA's default.
    """
    current = os.environ.get('XLA_FLAGS', '')
    try:
        known = metadata.version('jaxlib').startswith(XLA_FLAGS_JAXLIB)
    except metadata.PackageNotFoundError:
        known = False
    names = {flag.split('=')[0] for flag in current.split()}
    extra = [flag for flag in XLA_CPU_FLAGS if flag.split('=')[0] not in names] if known else []
    if host_devices > 1 and HOST_DEVICES_FLAG not in names:
        extra.append(f'{HOST_DEVICES_FLAG}={int(host_devices)}')
    if extra:
        current = ' '.join([current] + extra).strip()
        os.environ['XLA_FLAGS'] = current
    return current


def enable_compilation_cache(host_devices: int = 1):
    """
    Set XLA's flags and point JAX at the persistent cache, for every compile over 1 s.

    The flags are :func:`set_xla_flags`'s (``host_devices`` CPU devices: the training
    commands pass :func:`cpu_cores`). Returns the cache folder, or None when
    ``BCG_ROS_JAX_CACHE=0`` turns the cache off (a way out should a cached executable
    fail to load on some machine).
    """
    set_xla_flags(host_devices)
    import jax

    if os.environ.get('BCG_ROS_JAX_CACHE', '1').strip().lower() in ('0', 'false', 'no', 'off'):
        return None
    path = cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update('jax_compilation_cache_dir', str(path))
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 1.0)
    jax.config.update('jax_persistent_cache_min_entry_size_bytes', -1)
    return path
