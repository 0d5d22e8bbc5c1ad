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


# What a simulated NVML host without pods does not use: the DCGM backend and the simulated DCGM (a scenario
# without a dcgm section, --backend auto picks NVML), the HTTPS client (only --from fetches), http.server (only
# the tests' fake API server serves) and the Kubernetes sources (no pods).
NOT_FOR_SIMULATED_NVML = ("exporter.backend.dcgm", "exporter.backend.dcgm_session", "exporter.backend.dcgm_values",
                          "exporter.backend.dcgm_source", "exporter.backend.dcgm_caller", "exporter.backend.dcgm_status",
                          "exporter.sim.fakedcgm.hostengine", "exporter.sim.fakedcgm.spec", "exporter.http_client",
                          "ssl", "urllib.request", "http.server", "http.client", "exporter.k8s")


@pytest.mark.parametrize("args", [("snapshot", "--simulate", "h100-mixed-node", "--at", "60"),
                                  ("snapshot", "--simulate", "wan22-h100-mps-solo", "--backend", "nvml")])
def test_simulated_nvml_snapshot_loads_no_dcgm_and_no_http_client(args):
    names = imported(*args)
    assert "exporter.backend.nvml" in names and "exporter.sim.engine" in names  # it did poll the simulated driver
    assert loaded(names, NOT_FOR_SIMULATED_NVML) == []


def test_simulated_dcgm_snapshot_still_loads_dcgm():
    """The other side of the check above: where the scenario has DCGM, the lazily imported modules do load."""
    names = imported("snapshot", "--simulate", "a30-mig-dcgm", "--at", "30")
    assert loaded(names, ("exporter.backend.dcgm", "exporter.sim.fakedcgm.hostengine")) == [
        "exporter.backend.dcgm", "exporter.sim.fakedcgm.hostengine"]


def test_flags_of_secured_endpoints_load_no_network_module():
    """`recommend --help` and `snapshot --help` define the --from-* flags (exporter.client_flags) without ssl."""
    for args in (("recommend", "--help"), ("snapshot", "--help")):
        names = imported(*args)
        assert "exporter.client_flags" in names
        assert loaded(names, ("exporter.http_client", "ssl", "urllib.request")) == []
