"""Shared pytest options and fixtures."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "examples" / "scenarios"
GOLDEN = Path(__file__).resolve().parent / "golden"


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/* from the current code instead of comparing (review the diff!)",
    )


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path to promtool: skipped on a developer machine without it, a failure under CI."""
    return require_binary("promtool")


def require_binary(name: str) -> str:
    """Path of a Debian-packaged tool the tests drive for real (promtool, prometheus, alertmanager)."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} not installed (apt-get install prometheus prometheus-alertmanager)"
        if os.environ.get("CI"):
            pytest.fail(message + "; .ci/run should have installed it")
        pytest.skip(message)
    return path


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``--dist loadgroup``, pyproject.toml): the tests of a module that share a
    module-scoped fixture (a Prometheus, an exporter, a long simulation) run on one worker, so the
    fixture starts once, not once per worker."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None or item.get_closest_marker("xdist_group") is not None:
            continue
        if any(defs and defs[-1].scope in ("module", "class", "package") for defs in info.name2fixturedefs.values()):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
