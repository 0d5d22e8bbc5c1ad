"""Honest logs and health: transitions logged once, /health steady while a GPU hangs, unknown is absent.

- Over the fault demo every change is one line (a GPU down and back, XIDs, MPS restarts, the MIG
  reconfiguration) and a lost GPU is not reported again on each later poll.
- With the default interval (1 s) and GPU timeout (2 s), a GPU whose every call hangs never turns
  /health to 503, and /health stays 200 (saying so) when every GPU is lost.
- A GPU that is up but whose memory cannot be read has no forecast series, not zeros.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml

from exporter.backend.nvml import NvmlUnavailable
from exporter.backend.sim import SimBackend
from exporter.collectors.forecast import ForecastCollector
from exporter.foresight.state import Foresight
from exporter.poller import Poller
from exporter.sim.scenario import parse_scenario
from exporter.transitions import TransitionLog

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(REPO, "examples", "scenarios", "faults-demo.yaml")


def demo_without_hangs():
    """The fault demo minus its real-time hang (virtual stepping would wait it out for real)."""
    with open(DEMO) as handle:
        doc = yaml.safe_load(handle)
    doc["events"] = [e for e in doc["events"] if "delay" not in e.get("fault", {})]
    return parse_scenario(doc, "faults-demo")


def transition_lines(caplog) -> list[str]:
    return [f"{r.levelname} {r.getMessage()}" for r in caplog.records if r.name == "exporter.transitions"]


def test_each_change_of_the_fault_demo_is_logged_once(caplog):
    caplog.set_level(logging.INFO)
    backend = SimBackend(demo_without_hangs(), gpu_timeout=5.0)
    backend.open()
    log = TransitionLog()
    try:
        for t in range(0, 601, 2):  # 300 polls; GPU 0 is lost for the last 100
            backend.step_to(t)
            try:
                snapshot = backend.poll()
            except NvmlUnavailable:  # 2m30s-2m40s every call fails, nvmlInit of a re-enumeration too:
                continue  # the poll fails as a whole (the poller keeps the last good one)
            log.observe(snapshot)
    finally:
        backend.close()
    lines = transition_lines(caplog)

    def count(*words):
        return sum(1 for line in lines if all(w in line for w in words))

    assert count("WARNING", "GPU 0", "is down: GpuIsLost") == 1
    assert count("WARNING", "GPU 0", "is down: Unknown") == 1 and count("WARNING", "GPU 1", "is down: Unknown") == 1
    assert count("INFO", "GPU 0", "is back up after 10s down") == 1
    assert count("INFO", "GPU 1", "is back up") == 1
    assert count("WARNING", "GPU 0", "XID 31") == 1 and count("WARNING", "GPU 1", "XID 43") == 1
    assert count("WARNING", "GPU 0", "MPS server restarted") == 1
    assert count("WARNING", "GPU 1", "MPS server restarted") == 1
    assert count("INFO", "GPU 1", "MIG layout changed: 3g.20gb@0 2g.10gb@4 1g.5gb@6 -> 3g.20gb@0 3g.20gb@4") == 1
    assert len(lines) == 11, lines  # nothing else: no per-poll repetition
    per_poll = [r for r in caplog.records if r.levelno >= logging.INFO and "reported down" in r.getMessage()]
    assert per_poll == []


def test_an_unreadable_gpu_exports_no_forecast_zeros():
    """Memory info and the process list failing on an up GPU: no peak-demand or peak-sum series."""
    doc = {"name": "unreadable", "gpus": [{"model": "H100-80GB"}, {"model": "H100-80GB"}],
           "processes": [{"pid": 10, "cmdline": "python a.py", "gpu": 0, "memory": "4GiB"},
                         {"pid": 11, "cmdline": "python b.py", "gpu": 1, "memory": "4GiB"}],
           "events": [{"at": 0, "fault": {"call": call, "gpu": 0, "error": "Unknown"}}
                      for call in ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2",
                                   "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v3",
                                   "nvmlDeviceGetComputeRunningProcesses_v2")]}
    backend = SimBackend(parse_scenario(doc, "unreadable"), gpu_timeout=5.0)
    foresight = Foresight()
    poller = Poller(backend, 1.0, extra_collectors=[ForecastCollector(foresight)], observers=[foresight.observe])
    backend.open()
    try:
        for t in (10, 11, 12):
            backend.step_to(t)
            poller.poll_once()
        registry = poller._registry  # noqa: SLF001 - read the rendered families
        assert registry.get_sample_value("gpushare_gpu_up", {"gpu": "0", "uuid": poller._snapshot.gpus[0].uuid}) == 1
        for family in ("gpushare_gpu_memory_peak_demand_bytes", "gpushare_gpu_memory_expected_peak_sum_bytes",
                       "gpushare_gpu_memory_headroom_bytes"):
            gpus = {s.labels["gpu"] for m in registry.collect() if m.name == family for s in m.samples}
            assert gpus == {"1"}, family  # GPU 1 is read fine; GPU 0's demand is unknown, so absent
    finally:
        backend.close()


def _serve(scenario_path, *extra):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "serve", "--simulate", str(scenario_path),
                             "--listen", f"127.0.0.1:{port}", *extra], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": REPO, "PYTHONUNBUFFERED": "1"})
    return proc, f"http://127.0.0.1:{port}"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _health(base: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(base + "/health", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def _stop(proc) -> str:
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=20)
    return stderr


def test_health_never_flaps_while_one_gpu_hangs_with_default_settings(tmp_path):
    """Defaults (interval 1 s, GPU timeout 2 s); every call on GPU 1 hangs 3 s: /health stays 200."""
    doc = {"name": "hang", "gpus": [{"model": "H100-80GB"}, {"model": "H100-80GB"}],
           "events": [{"at": 0, "fault": {"call": "*", "gpu": 1, "error": "Timeout", "delay": "3s"}}]}
    path = tmp_path / "hang.yaml"
    path.write_text(yaml.safe_dump(doc))
    proc, base = _serve(path)
    try:
        deadline = time.monotonic() + 20
        while _health(base)[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        answers = []
        end = time.monotonic() + 8.0  # several hang cycles
        while time.monotonic() < end:
            answers.append(_health(base))
            time.sleep(0.05)
        assert {status for status, _ in answers} == {200}, [a for a in answers if a[0] != 200][:3]
        assert any("GPU 1: timeout" in reason for _, reason in answers)
    finally:
        stderr = _stop(proc)
    assert stderr.count("is down: timeout") == 1, stderr  # one line, not one per poll


def test_health_stays_up_and_says_so_when_every_gpu_is_lost(tmp_path):
    doc = {"name": "lost", "gpus": [{"model": "H100-80GB"}, {"model": "A100-40GB"}],
           "events": [{"at": "2s", "gpu_lost": {"gpu": 0}}, {"at": "2s", "gpu_lost": {"gpu": 1}}]}
    path = tmp_path / "lost.yaml"
    path.write_text(yaml.safe_dump(doc))
    proc, base = _serve(path, "--interval", "0.2")
    try:
        deadline = time.monotonic() + 20
        status, reason = _health(base)
        while "every GPU is down" not in reason and time.monotonic() < deadline:
            time.sleep(0.2)
            status, reason = _health(base)
        assert status == 200 and "every GPU is down (GPU 0: GpuIsLost, GPU 1: GpuIsLost)" in reason
    finally:
        stderr = _stop(proc)
    assert stderr.count("is down: GpuIsLost") == 2 and "reported down" not in stderr


@pytest.mark.parametrize("interval, gpu_timeout", [(1.0, 2.0), (0.5, 5.0), (10.0, 1.0)])
def test_health_limit_covers_a_poll_that_waits_out_the_gpu_timeout(interval, gpu_timeout):
    """The limit serve uses is above the longest gap between good polls with one hung GPU:
    a wait of up to one interval plus a poll of gpu_timeout plus the other GPUs' reads."""
    from exporter.commands.serve import make_poller

    poller = make_poller(SimBackend(demo_without_hangs()), interval, Foresight(), gpu_timeout=gpu_timeout)
    worst_gap = interval + gpu_timeout + 0.5  # 0.5 s for the healthy GPUs' reads, generous
    assert poller.stale_after > worst_gap


def test_mps_client_count_is_absent_when_the_client_list_failed():
    """A failed MPS client list this poll: no gpushare_mps_clients (not 0), the servers still shown."""
    import dataclasses

    from exporter.collectors.mps import MpsCollector
    from snapshot_samples import rich_snapshot

    good = rich_snapshot()
    failed = dataclasses.replace(good, section_ok={**good.section_ok, "mps": False})

    def names(snapshot):
        return {m.name for m in MpsCollector(lambda: snapshot).collect()}

    assert "gpushare_mps_clients" in names(good)
    assert "gpushare_mps_clients" not in names(failed) and "gpushare_mps_server" in names(failed)
