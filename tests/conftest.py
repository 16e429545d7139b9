"""Test-suite configuration: hypothesis profiles and the ``gpu`` marker."""
import os

import pytest
from hypothesis import HealthCheck, settings

# CI (CI=true) gets a derandomized profile: the same examples every run, no deadline
# (2 shared cores make timings noisy). Locally hypothesis explores new examples each run.
settings.register_profile("ci", derandomize=True, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def _gpu_available() -> bool:
    try:
        import cupy  # noqa: F401
        return bool(cupy.cuda.is_available())
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (cupy.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
