"""Unmodified third-party NVML clients on every shipped scenario: no crash, the scenario's truth.

Each scenario runs once, at its midpoint, in a fresh process (exporter.sim.client) with
tests/clients/all_clients.py driving nvitop's Python API, ``gpustat --json``, pynvml's own
example.py and ``nvitop --once`` through their public entry points. What they read is
compared with the truth of the same scenario at the same instant, taken from a Simulation
built here (the engine's state: which processes are alive after OOM kills, their memory,
the board's catalog values). The recorder's list of symbols the clients asked for but the
simulated driver lacks must hold only symbols newer than the R580 driver simulated.
"""

from __future__ import annotations

import json
import shlex
import os
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.catalog import MIB
from exporter.sim import Simulation
from exporter.sim.nvml_symbols import SINCE
from exporter.sim.scenario import load_scenario

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((REPO / "examples" / "scenarios").glob("*.yaml"))


def midpoint(path: Path) -> float:
    duration = load_scenario(path).duration
    return round((duration or 600.0) / 2)


def truth(path: Path, at: float) -> list[dict]:
    """What the scenario says the host looks like at ``at``, GPU by GPU (NVML order)."""
    sim = Simulation(load_scenario(path), start_at=at)
    try:
        sim.advance_to(at)
        engine, tele = sim.engine, sim.engine.telemetry
        gpus = []
        for i in engine.lifecycle.present_gpus(at):
            model, spec, epoch = engine.models[i], engine.gpus[i], engine.epoch(i, at)
            procs = {p.pid: p for p in engine.alive(at, gpu=i)}
            gpus.append(dict(
                name=model.nvml_name, uuid=spec.uuid, memory_total=model.memory_total_mib * MIB,
                power_mw=round(1000 * tele.power_w(i, at)), limit_mw=round(1000 * model.power_limit_watts),
                temperature=round(tele.temperature_c(i, at)),
                pstate=f"P{0 if tele.busy(i, at) else model.idle_pstate}", nvlinks=model.nvlink_links,
                used=sum(int(p.memory_at(at)) for p in procs.values()),
                mig=None if not epoch.mig_enabled else [
                    (inst.profile.name, inst.gi, inst.profile.memory_mib * MIB)
                    for inst in sorted(epoch.instances, key=lambda x: x.mig_index) if inst.has_ci],
                procs={pid: dict(memory=None if p.memory_na else int(p.memory_at(at)),
                                 argv=shlex.split(p.cmdline), age=at - p.start, gi=p.gi)
                       for pid, p in procs.items()}))
        return gpus
    finally:
        sim.close()


def active_fault(path: Path, at: float, call: str) -> bool:
    sim = Simulation(load_scenario(path))
    try:
        return any(f.active(at) and f.call in (call, "*") for f in sim.engine.faults)
    finally:
        sim.close()


@pytest.fixture(scope="module", params=SCENARIOS, ids=lambda p: p.stem)
def run(request, tmp_path_factory):
    """(scenario path, instant, output directory, recorder) of one harness run."""
    path: Path = request.param
    at = midpoint(path)
    out = tmp_path_factory.mktemp(path.stem)
    record = out / "recorder.json"
    proc = subprocess.run(
        [sys.executable, "-m", "exporter.sim.client", str(path), "--at", str(at), "--record", str(record),
         "--", str(REPO / "tests" / "clients" / "all_clients.py"), str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return path, at, out, json.loads(record.read_text())


def test_no_client_crashed(run):
    """No client raised: nvitop (API and CLI), gpustat and example.py all ran to the end."""
    _, _, out, _ = run
    errors = out / "errors.txt"
    assert not errors.exists(), errors.read_text()[-3000:]
    assert "EXIT" not in (out / "nvitop_once.txt").read_text()


def test_missing_symbols_are_absent_from_the_simulated_driver_too(run):
    """The recorder: every symbol a client looked up and did not get is newer than R580
    (pynvml 13.615 and nvitop probe R595+ APIs first, then fall back)."""
    _, _, _, recorder = run
    assert all(SINCE.get(name, 0) > 580 for name in recorder["missing"]), recorder["missing"]
    assert recorder["invalid"] == {}  # every call the clients made had usable arguments
    assert recorder["calls"]["nvmlDeviceGetBAR1MemoryInfo"] > 0  # what crashed nvitop before


def test_nvitop_api_reads_the_scenario_truth(run):
    """Per GPU: identity, memory, power, limit, temperature, P-state, fan N/A, NVLink, MIG
    layout; per process: GPU memory, owner, command line, running time, GPU instance."""
    path, at, out, _ = run
    seen = json.loads((out / "nvitop_api.json").read_text())
    expected = truth(path, at)
    assert seen["count"] == len(expected) and seen["driver"] == load_scenario(path).driver_version
    power_fault = active_fault(path, at, "nvmlDeviceGetPowerUsage")
    for dev, want in zip(seen["devices"], expected):
        assert (dev["name"], dev["uuid"], dev["memory_total"]) == (want["name"], want["uuid"], want["memory_total"])
        assert dev["power_limit"] == want["limit_mw"] and dev["temperature"] == want["temperature"]
        assert dev["power_usage"] == (None if power_fault else want["power_mw"])
        assert (dev["fan_speed"], dev["performance_state"], dev["persistence_mode"]) == (None, want["pstate"], "Enabled")
        assert dev["nvlink_link_count"] == want["nvlinks"]
        assert dev["memory_used"] == want["used"]
        got = {int(pid): p for pid, p in dev["processes"].items()}
        assert set(got) == set(want["procs"])
        for pid, p in got.items():
            w = want["procs"][pid]
            assert p["gpu_memory"] == w["memory"] and p["username"] == "root"
            assert shlex.split(p["command"]) == w["argv"]
            # The host clock reads real time at --at: the age, plus the seconds the client
            # took to start (never less: a start in the future was the old bug).
            assert w["age"] - 1 <= p["running_time"] <= w["age"] + 30
        if want["mig"] is None:
            assert dev["mig_devices"] == [] and dev["mig_mode"] in ("Disabled", None)
            continue
        assert dev["compute_mode"] == "Default"  # MIG-enabled parent, as real drivers say
        layout = [(m["name"].rsplit(" ", 1)[-1], m["gpu_instance_id"], m["memory_total"]) for m in dev["mig_devices"]]
        assert layout == want["mig"]


def test_gpustat_json_reads_the_scenario_truth(run):
    """gpustat --json: names, memory in MiB, power, temperature, processes with owners."""
    path, at, out, _ = run
    seen = json.loads((out / "gpustat.json").read_text())["gpus"]
    expected = truth(path, at)
    power_fault = active_fault(path, at, "nvmlDeviceGetPowerUsage")
    assert len(seen) == len(expected)
    for gpu, want in zip(seen, expected):
        assert (gpu["name"], gpu["uuid"], gpu["memory.total"]) == (want["name"], want["uuid"], want["memory_total"] // MIB)
        assert gpu["temperature.gpu"] == want["temperature"] and gpu["fan.speed"] is None
        assert gpu["power.draw"] == (None if power_fault else want["power_mw"] // 1000)
        assert gpu["enforced.power.limit"] == want["limit_mw"] // 1000
        procs = {p["pid"]: p for p in gpu["processes"]}
        assert set(procs) == set(want["procs"])
        for pid, p in procs.items():
            w = want["procs"][pid]
            assert p["full_command"] == w["argv"] and p["username"] == "root"
            if w["memory"] is not None:
                assert p["gpu_memory_usage"] == w["memory"] // MIB


def test_example_py_lists_every_gpu(run):
    """pynvml's example.py prints each GPU's product name, brand and virtualization mode."""
    path, at, out, _ = run
    text = (out / "example.txt").read_text()
    expected = truth(path, at)
    assert f"<attached_gpus>{len(expected)}</attached_gpus>" in text
    for want in expected:
        assert f"<product_name>{want['name']}</product_name>" in text and want["uuid"] in text
    assert "<virtualization_mode>None</virtualization_mode>" in text


def test_nvitop_once_shows_every_gpu_and_process(run):
    """nvitop --once: each GPU (name, power cap, fan N/A) and each live pid on screen."""
    path, at, out, _ = run
    screen = (out / "nvitop_once.txt").read_text()
    for want in truth(path, at):
        assert want["name"].removeprefix("NVIDIA ") in screen
        assert f"/ {want['limit_mw'] // 1000}W" in screen
        for pid in want["procs"]:
            assert f" {pid} " in screen
    assert "N/A" in screen


def test_a_shipped_scenario_runs_by_name(tmp_path):
    """`python3 -m exporter.sim.client h200-mig -- script.py`: the name works as for --simulate."""
    script = tmp_path / "count.py"
    script.write_text("import pynvml\npynvml.nvmlInit()\nprint(pynvml.nvmlDeviceGetCount(),"
                      " pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)))\n")
    out = subprocess.run([sys.executable, "-m", "exporter.sim.client", "h200-mig", "--", str(script)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == "1" and "H200" in out.stdout
