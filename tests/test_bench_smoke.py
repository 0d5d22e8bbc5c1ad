"""Smoke tests of the exporter bench harness (bench/exporter_bench.py) and the real-GPU check.

They check that the harness runs end to end and reports; they never assert on speed (the
figures themselves are the bench's output, not test material).
"""

from __future__ import annotations

import ctypes.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench" / "exporter_bench.py"
REAL_GPU = REPO / "bench" / "real_gpu_smoke.py"


def _bench(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), "--smoke", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=240, env=env)


def test_smoke_run_prints_every_table():
    """A --smoke run on the 1-GPU scenario exits 0 and prints targets, scaling and NVML call tables."""
    out = _bench()
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    for title in ("== Targets: gpushare on 1gpu-10proc", "== Scaling: gpushare per poll",
                  "== NVML calls per poll on 1gpu-10proc", "== C symbols called per poll on 1gpu-10proc"):
        assert title in text
    # The peer is either measured side by side or skipped with its one line, never silently absent.
    assert "== Side by side on 1gpu-10proc" in text or "nvitop-exporter: skipped:" in text
    calls = re.search(r"NVML calls per poll / minimum\s+(\d+) / (\d+)", text)
    assert calls is not None
    # The minimum leaves out cached identity the exporter also skips, so it can never exceed the calls made.
    assert 0 < int(calls.group(2)) <= int(calls.group(1))


def test_missing_peer_is_skipped_with_one_line(tmp_path):
    """When nvitop-exporter cannot be imported the bench says so in one line and still finishes."""
    stub = tmp_path / "nvitop_exporter"
    stub.mkdir()
    (stub / "__init__.py").write_text('raise ImportError("hidden by the bench smoke test")\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    out = _bench("--peers", "nvitop", env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    skipped = [line for line in out.stdout.splitlines() if "nvitop-exporter: skipped:" in line]
    assert len(skipped) == 1
    assert "not installed" in skipped[0]
    assert "== Side by side" not in out.stdout


def test_unknown_peer_is_a_usage_error():
    """Naming a peer the bench does not know is refused before anything runs."""
    out = _bench("--peers", "no-such-exporter")
    assert out.returncode == 2
    assert "unknown peer" in out.stderr


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this host has an NVIDIA driver")
def test_real_gpu_check_refuses_without_a_driver():
    """Without an NVIDIA driver the real-GPU check prints one error line and exits 2."""
    out = subprocess.run([sys.executable, str(REAL_GPU)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("real_gpu_smoke: error:")
    assert "driver" in lines[0]


def test_dcgm_bench_smoke_reports_both_backends():
    """bench/dcgm_bench.py --smoke prints the DCGM backend's poll cost next to NVML's on the A100 MIG scenario."""
    out = subprocess.run([sys.executable, str(REPO / "bench" / "dcgm_bench.py"), "--smoke"], cwd=REPO,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {line.split()[1]: line.split() for line in out.stdout.splitlines()
            if line.startswith("a100-40gb-two-3g@300s")}
    assert set(rows) == {"nvml", "dcgm"}
    # Through DCGM the exporter makes DCGM calls and fewer NVML calls, and exports the activity NVML cannot.
    assert int(rows["dcgm"][5]) < int(rows["nvml"][5]) and float(rows["dcgm"][6]) > 0 == float(rows["nvml"][6])
    assert int(rows["dcgm"][4]) > int(rows["nvml"][4])


REAL_DCGM = REPO / "bench" / "real_dcgm_smoke.py"


def test_real_dcgm_check_refuses_cleanly_without_dcgm(tmp_path):
    """Where DCGM's bindings are not, the real-DCGM check says so in one line and exits 2 (no traceback)."""
    out = subprocess.run([sys.executable, str(REAL_DCGM), "--dcgm-bindings", str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("real_dcgm_smoke: error: --backend dcgm: DCGM Python bindings not found")
    assert "Traceback" not in out.stderr


def test_real_dcgm_check_dry_run_on_the_simulator():
    """The same script against the simulated DCGM: entity mapping, activity per GPU instance, both polls timed."""
    out = subprocess.run([sys.executable, str(REAL_DCGM), "--simulate", "examples/scenarios/a30-mig-dcgm.yaml",
                          "--interval", "30", "--polls", "2"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "DCGM 4.6.0 through the embedded host engine" in text and "-> NVML GPU 0" in text
    assert re.search(r"GI 2 2g\.12gb\s+dcgm: sm=0\.95 ", text)  # the compute-bound training instance
    assert "source dcgm_profiling: available" in text
    assert re.search(r"poll dcgm: .* NVML calls / [1-9]\d* DCGM calls", text)
def test_soak_bench_smoke_reports_rss_and_fds():
    """A short soak (12 virtual minutes) runs the whole serve stack and reports RSS and fd growth."""
    out = subprocess.run([sys.executable, str(REPO / "bench" / "soak_bench.py"), "--hours", "0.2"], cwd=REPO,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode in (0, 1), out.stderr[-2000:]  # 1 = a target missed: a bench result, not a crash
    assert re.search(r"RSS MiB: start [\d.]+, after warm-up [\d.]+, end [\d.]+, max [\d.]+; growth [+-][\d.]+",
                     out.stdout), out.stdout
    assert re.search(r"open fds: after warm-up \d+, end \d+, max \d+; growth [+-]\d+", out.stdout), out.stdout


def test_security_bench_smoke_prints_every_configuration():
    out = subprocess.run([sys.executable, str(REPO / "bench" / "security_bench.py"), "--scrapes", "20"], cwd=REPO,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    for label in ("baseline (bare aiohttp)", "guarded, no web config", "basic auth", "TLS ",
                  "TLS + client cert + basic auth"):
        assert label in out.stdout


def test_k8s_bench_churn_node_is_a_valid_pod_scenario():
    """The churning node of bench/k8s_bench.py: every process runs in a pod (a field-order slip once
    put the pods in another field and the bench measured 0 series)."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import k8s_bench
    finally:
        sys.path.remove(str(REPO / "bench"))
    scenario = k8s_bench.churn_node(0.1)
    assert scenario.processes and all(p.pod is not None and p.env["HOSTNAME"] == p.pod.name
                                      for p in scenario.processes)
    assert not any(p.memory_na for p in scenario.processes)
