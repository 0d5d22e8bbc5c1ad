"""Start-up imports only what the command uses (issue 22), checked on module names, not on time.

Each check runs the CLI in a fresh interpreter and reads ``sys.modules`` at its exit (``-X
importtime`` misses modules imported through importlib, as the CLI imports its commands); the
checks name the modules a command must not load: the web server (aiohttp) for anything but serve, the planner's SciPy for
`recommend --help`, the simulator for a snapshot of a running exporter. Timings are in
bench/startup_bench.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

HEAVY = ("aiohttp", "scipy", "numpy", "prometheus_client", "grpc", "sqlite3", "exporter.sim", "exporter.server",
         "exporter.foresight.state", "exporter.poller", "exporter.collectors", "pynvml")


RUN_AND_LIST = """\
import atexit, json, sys
atexit.register(lambda: sys.stderr.write("\\nMODULES " + json.dumps(sorted(sys.modules)) + "\\n"))
from exporter.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def imported(*args: str) -> set[str]:
    """Names of the modules the ``exporter ARGS`` command line has imported when it exits."""
    out = subprocess.run([sys.executable, "-c", RUN_AND_LIST, *args], cwd=REPO, capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    listed = [line for line in out.stderr.splitlines() if line.startswith("MODULES ")]
    assert listed, out.stderr[-2000:]
    names = set(json.loads(listed[-1].split(" ", 1)[1]))
    assert "exporter.cli" in names  # the check sees the modules at all
    return names


def loaded(names: set[str], prefixes=HEAVY) -> list[str]:
    return sorted(n for n in names if any(n == p or n.startswith(p + ".") for p in prefixes))


@pytest.mark.parametrize("args", [("--help",), ("snapshot", "--help"), ("recommend", "--help"), ("profiles", "--help"),
                                  ("serve", "--help")])
def test_help_loads_nothing_heavy(args):
    assert loaded(imported(*args)) == []


def test_recommend_help_loads_no_other_command():
    names = imported("recommend", "--help")
    assert "exporter.recommend.command" in names
    assert loaded(names, ("exporter.commands", "exporter.config", "yaml")) == []


def test_snapshot_of_a_simulated_host_loads_no_web_server():
    names = imported("snapshot", "--simulate", "wan22-h100-mps-solo", "--at", "1")
    assert "exporter.sim" in names and "pynvml" in names  # it did poll the simulated driver
    assert loaded(names, ("aiohttp", "scipy", "exporter.server", "exporter.web", "prometheus_client.openmetrics",
                          "exporter.collectors", "exporter.foresight.state", "grpc")) == []


def test_snapshot_from_loads_no_driver():
    """A bad URL still parses the command and fails before any driver: nothing of the backends loads."""
    names = imported("snapshot", "--from", "http://127.0.0.1:1")
    assert loaded(names, HEAVY + ("exporter.backend", "yaml")) == []
