"""Shared test setup: JAX cache, a private ROS domain, the reference folder."""

import os
import pathlib
import random

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_REFERENCE = REPO.parent / 'shared' / 'reference'

# A private DDS domain per test session, so parallel runs on one machine do not
# hear each other's /lowcmd.
os.environ.setdefault('ROS_DOMAIN_ID', str(random.randint(100, 200)))
os.environ.setdefault('RMW_IMPLEMENTATION', 'rmw_fastrtps_cpp')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')


def pytest_configure(config):
    """Turn on the persistent JAX compilation cache before any test compiles."""
    try:
        from bcg_ros.jax_cache import enable_compilation_cache
    except ImportError:
        return
    enable_compilation_cache()


def pytest_collection_modifyitems(config, items):
    """Skip GPU-marked tests when JAX has no GPU."""
    if not any(item.get_closest_marker('gpu') for item in items):
        return
    import jax
    if any(d.platform == 'gpu' for d in jax.devices()):
        return
    skip = pytest.mark.skip(reason='needs a GPU; JAX sees only ' + str(jax.devices()))
    for item in items:
        if item.get_closest_marker('gpu'):
            item.add_marker(skip)


@pytest.fixture(scope='session')
def reference_dir():
    """../shared/reference, or skip: it is not part of a user's clone."""
    if not SHARED_REFERENCE.is_dir():
        pytest.skip(f'{SHARED_REFERENCE} is absent (reference material is not part of the '
                    'repository); the project-only tests cover the same path')
    return SHARED_REFERENCE


@pytest.fixture(scope='session')
def g():
    """The project's G1 model, as training loads it (read-only: copy before changing it)."""
    from bcg_ros.robot import model as g1_model
    return g1_model.load()
