"""The test tables of tests/conftest.py name tests that exist: a renamed test would silently leave
the inner loop's e2e list, the timed-processes worker or the slowest-first order."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import E2E_TESTS, SLOWEST_FIRST, TIMED_PROCESSES

TESTS = Path(__file__).resolve().parent


def _functions(module: str) -> set[str]:
    path = TESTS / f"{module}.py"
    assert path.is_file(), f"tests/{module}.py does not exist"
    return set(re.findall(r"^(?:async )?def (test_\w+)\(", path.read_text(), re.MULTILINE))


@pytest.mark.parametrize("table", ["E2E_TESTS", "TIMED_PROCESSES"])
def test_every_listed_test_exists(table):
    listed = {"E2E_TESTS": E2E_TESTS, "TIMED_PROCESSES": TIMED_PROCESSES}[table]
    missing = [f"{module}::{name}" for module, names in sorted(listed.items())
               for name in sorted(names - {"*"} - _functions(module))]
    assert missing == []


def test_every_slowest_first_test_exists_once():
    assert len(set(SLOWEST_FIRST)) == len(SLOWEST_FIRST)
    missing = [f"{module}::{name}" for module, name in SLOWEST_FIRST if name not in _functions(module)]
    assert missing == []
