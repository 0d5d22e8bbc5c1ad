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
