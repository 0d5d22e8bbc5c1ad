"""End to end: the health alerts fire on the faults a simulated node injects, and stay silent on the
same node without them.

examples/scenarios/health-node.yaml (remapped rows, a pending remap, a remap failure, PCIe replays,
a power brake, a thermal one, XIDs 48 and 63) is played through the exporter's real pipeline
(fake NVML / fake DCGM -> backend -> collectors -> text exposition) every 15 virtual seconds for
its 10 minutes; what it served becomes promtool's input series, exactly as Prometheus would have
stored the scrapes, and promtool evaluates alerts/*.yml on them: at each check time the set of
(alert, GPU) firing must be the scenario's truth. A Prometheus at 30x would squeeze the rules'
5-minute windows into 10 seconds of scrapes; promtool keeps the rules' own time.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from dcgm_helpers import NV_HOSTENGINE, Run, write_scenario
from tests.conftest import REPO, SCENARIOS

STEP = 15  # virtual seconds between polls (a 15 s scrape interval)
DURATION = 600
ALERT_FILES = ("gpushare-recording.yml", "gpushare-health.yml", "gpushare-hardware.yml")
LABELS = {"job": "gpushare", "instance": "node1:18474"}
# Fault keys of health-node's GPUs and its events: removing them leaves a healthy node.
FAULT_KEYS = ("pcie_replays", "remapped_rows_correctable", "remapped_rows_uncorrectable", "row_remap_pending",
              "power_violation_seconds", "thermal_violation_seconds", "row_remap_failure")

# (minute of the check) -> {(alertname, gpu index)} firing then. GPU 0 is the H100 (power brake
# 1m-2m while drawing 574 of 700 W, 120 PCIe replays at 3m, an uncorrectable row remapped at 4m
# and pending from then, XIDs 48 and 63 at 4m, thermal brake 5m-5m30s); GPU 1 the A100 whose
# remapper fails at 6m; the L4 and the T4 have nothing.
TRUTH = {
    "3m": {("GpuPowerBrakeViolation", "0")},
    "6m30s": {("GpuPowerBrakeViolation", "0"), ("GpuThermalViolation", "0"), ("GpuPcieReplayRate", "0"),
              ("GpuUncorrectableRowsRemapped", "0"), ("GpuXidHardwareError", "0"), ("GpuRowRemapFailure", "1")},
    "9m30s": {("GpuThermalViolation", "0"), ("GpuUncorrectableRowsRemapped", "0"), ("GpuRowRemapPending", "0"),
              ("GpuXidHardwareError", "0"), ("GpuRowRemapFailure", "1")},
}


def _alert_names() -> list[str]:
    names = []
    for name in ALERT_FILES:
        for group in yaml.safe_load((REPO / "alerts" / name).read_text())["groups"]:
            names += [rule["alert"] for rule in group["rules"] if "alert" in rule]
    return names


def _series_text(name: str, labels: tuple) -> str:
    parts = [f'{k}="{str(v).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
             for k, v in sorted({**dict(labels), **LABELS}.items())]
    return f"{name}{{{','.join(parts)}}}"


def served_series(scenario: Path, backend: str) -> dict[str, list[str]]:
    """promtool input series (values per STEP) of what the exporter served, gpushare_gpu_* and
    gpushare_exporter_*: '_' before a series exists, 'stale' after it went away."""
    address = NV_HOSTENGINE if backend == "dcgm" else None
    times = range(0, DURATION + 1, STEP)
    out: dict[str, list[str]] = {}
    with Run(scenario, backend, address=address, interval=STEP) as run:
        for i, t in enumerate(times):
            scrape = run.poll(float(t))
            seen = set()
            for (name, labels), value in scrape.items():
                if not name.startswith(("gpushare_gpu_", "gpushare_exporter_")):
                    continue
                key = _series_text(name, labels)
                seen.add(key)
                out.setdefault(key, ["_"] * i).append(repr(float(value)))
            for key, values in out.items():
                if key not in seen and len(values) == i:
                    values.append("stale" if any(v not in ("_", "stale") for v in values) else "_")
    out[_series_text("up", ())] = ["1"] * len(times)
    return out


def promtool_check(tmp_path: Path, series: dict[str, list[str]], expected: dict[str, set]) -> subprocess.CompletedProcess:
    names = "|".join(_alert_names())
    tests = [{
        "interval": f"{STEP}s",
        "input_series": [{"series": key, "values": " ".join(values)} for key, values in sorted(series.items())],
        "promql_expr_test": [
            {"expr": f'count by (alertname, gpu) (ALERTS{{alertstate="firing",alertname=~"{names}"}})',
             "eval_time": at,
             "exp_samples": [{"labels": f'{{alertname="{alert}"' + (f',gpu="{gpu}"' if gpu else "") + "}",
                              "value": count}
                             for (alert, gpu), count in sorted(firing.items())]}
            for at, firing in expected.items()],
    }]
    for name in ALERT_FILES:
        (tmp_path / name).write_text((REPO / "alerts" / name).read_text())
    document = {"rule_files": list(ALERT_FILES), "evaluation_interval": f"{STEP}s",
                "group_eval_order": ["gpushare.recording", "gpushare.health", "gpushare.hardware"], "tests": tests}
    (tmp_path / "e2e.test.yml").write_text(yaml.safe_dump(document, sort_keys=False, width=10_000))
    return subprocess.run(["promtool", "test", "rules", "e2e.test.yml"], cwd=tmp_path, capture_output=True,
                          text=True)


def _counts(truth: set) -> dict:
    """XID alerts fire once per XID code: two on GPU 0 (48 and 63)."""
    return {key: (2 if key == ("GpuXidHardwareError", "0") else 1) for key in truth}


def _healthy_copy(tmp_path):
    """The health node with every injected fault (scenario keys and events) taken out."""
    data = yaml.safe_load((SCENARIOS / "health-node.yaml").read_text())
    for gpu in data["gpus"]:
        for key in FAULT_KEYS:
            gpu.pop(key, None)
    data.pop("events", None)
    return write_scenario(tmp_path, data, "healthy-node.yaml")


@pytest.mark.parametrize("backend", ["nvml", "dcgm"])
def test_each_injected_fault_fires_its_alert(tmp_path, backend, promtool):
    series = served_series(SCENARIOS / "health-node.yaml", backend)
    result = promtool_check(tmp_path, series, {at: _counts(truth) for at, truth in TRUTH.items()})
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("backend", ["nvml", "dcgm"])
def test_the_same_node_without_faults_fires_nothing(tmp_path, backend, promtool):
    healthy = _healthy_copy(tmp_path)
    series = served_series(healthy, backend)
    result = promtool_check(tmp_path, series, {at: {} for at in ("3m", "6m30s", "9m30s", "10m")})
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.e2e
def test_a_real_prometheus_fires_the_instant_alerts_and_nothing_on_the_healthy_node(tmp_path, promtool):
    """The same faults through `exporter serve` and Debian's Prometheus evaluating the shipped rules:
    the alerts without a `for:` (remap failure, uncorrectable rows, hardware XIDs) fire on the
    faulty node's GPUs while the scenario runs at 30x (a poll every 15 virtual seconds, as promtool's
    series above); the healthy copy fires none of these groups' alerts over the same virtual time."""
    import time

    from tests.promstack import Prometheus, start_exporters, stop_all

    healthy = _healthy_copy(tmp_path)
    names = "|".join(_alert_names())
    play = {"speed": 30, "interval": 0.5}
    faulty_exporter, healthy_exporter = start_exporters([(SCENARIOS / "health-node.yaml", play), (healthy, play)])
    try:
        rules = [REPO / "alerts" / name for name in ALERT_FILES]
        with Prometheus({"faulty": [faulty_exporter.target], "healthy": [healthy_exporter.target]},
                        rule_files=rules) as prom:
            want = {("GpuRowRemapFailure", "1"), ("GpuUncorrectableRowsRemapped", "0"), ("GpuXidHardwareError", "0")}
            firing: set = set()
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and not want <= firing:
                firing = {(s["metric"]["alertname"], s["metric"].get("gpu", ""))
                          for s in prom.query(f'ALERTS{{alertstate="firing",job="faulty",alertname=~"{names}"}}')}
                time.sleep(0.2)
            assert want <= firing, firing
            assert len(prom.query('gpushare_gpu_info{job="healthy"}')) == 4  # scraped all along
            quiet = prom.query_range(f'ALERTS{{job="healthy",alertname=~"{names}"}}', time.time() - 80, time.time())
            assert quiet == [], quiet
    finally:
        stop_all([faulty_exporter, healthy_exporter])


@pytest.mark.parametrize("backend", ["nvml", "dcgm"])
def test_a_gpu_that_leaves_the_bus_is_lost_then_vanished(tmp_path, backend, promtool):
    """GPU 1 is hot-removed at 2m: the exporter reads it as lost for three polls, then re-enumerates
    without it, so GpuLost (for 1m) never fires and the GPU is simply gone from the scrape:
    GpuVanished (by UUID) pages 2 minutes later, and keeps paging."""
    data = {"name": "vanish", "duration": "10m", "gpus": [{"model": "H100-80GB"}, {"model": "H100-80GB"}],
            "processes": [{"pid": 1, "cmdline": "python a.py", "gpu": 0, "memory": "1GiB"}],
            "events": [{"at": "2m", "gpu_removed": {"gpu": 1}}]}
    series = served_series(write_scenario(tmp_path, data, "vanish.yaml"), backend)
    result = promtool_check(tmp_path, series, {"1m": {}, "4m": {}, "6m": {("GpuVanished", ""): 1},
                                               "9m": {("GpuVanished", ""): 1}})
    assert result.returncode == 0, result.stdout + result.stderr
