"""The fault storm the reliability suite (test_reliability.py) and the soak bench run.

A storm is a scenario built from *fault kinds*. Each :class:`FaultKind` adds its GPUs' events
(and processes) to the scenario and says what a scrape must show while and after it happens;
the suite checks every kind it was given against what 50 clients scraped meanwhile. A new kind
(say a new fault of the simulator's fault model, docs/scenarios.md) is one more entry in KINDS:
its events and its check, nothing else changes.

GPU 0 is never faulted: it is the "healthy GPU" whose series must stay fresh throughout.
Times are virtual seconds of the scenario.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

DURATION = 480.0


@dataclass
class Sample:
    """What one monitoring scrape showed."""

    sim_time: float
    wall_age: float  # seconds between the scrape and the exporter's last successful poll
    health: int
    up: dict[str, float] = field(default_factory=dict)  # gpu -> gpushare_gpu_up
    errors: dict[str, float] = field(default_factory=dict)  # error class -> total of poll_errors_total
    mig_profiles: dict[str, list[str]] = field(default_factory=dict)  # gpu -> profiles of gpushare_mig_info
    mps_pids: dict[str, set[str]] = field(default_factory=dict)  # gpu -> pids of gpushare_mps_server_info
    rejected: dict[str, float] = field(default_factory=dict)


_SAMPLE = re.compile(r'^(\w+)(?:\{([^}]*)\})? (\S+)$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_sample(text: str, health: int, now: float) -> Sample:
    """Sample from a Prometheus text exposition."""
    sample = Sample(0.0, 0.0, health)
    last_poll = None
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, labels, value = match.group(1), dict(_LABEL.findall(match.group(2) or "")), float(match.group(3))
        if name == "gpushare_simulation_time_seconds":
            sample.sim_time = value
        elif name == "gpushare_exporter_last_poll_timestamp_seconds":
            last_poll = value
        elif name == "gpushare_gpu_up":
            sample.up[labels["gpu"]] = value
        elif name == "gpushare_exporter_poll_errors_total":
            sample.errors[labels["error"]] = sample.errors.get(labels["error"], 0.0) + value
        elif name == "gpushare_mig_info":
            sample.mig_profiles.setdefault(labels["gpu"], []).append(labels["profile"])
        elif name == "gpushare_mps_server_info":
            sample.mps_pids.setdefault(labels["gpu"], set()).add(labels["pid"])
        elif name == "gpushare_exporter_http_rejected_total":
            sample.rejected[labels["reason"]] = value
    sample.wall_age = now - last_poll if last_poll is not None else float("inf")
    return sample


def between(samples: list[Sample], start: float, end: float) -> list[Sample]:
    return [s for s in samples if start <= s.sim_time <= end]


@dataclass
class FaultKind:
    """One kind of fault: its scenario pieces and its check over the monitoring samples."""

    name: str
    gpus: list[dict]  # GPUs it adds, in order (their indices are assigned by the storm)
    events: Callable[[int], list[dict]]  # first GPU index -> events
    processes: Callable[[int], list[dict]]
    check: Callable[[list[Sample], int], None]  # (samples, first GPU index) -> AssertionError when wrong


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _lost_and_recovered() -> FaultKind:
    def check(samples, gpu):
        g = str(gpu)
        _require(any(s.up.get(g) == 0 for s in between(samples, 90, 170)), f"GPU {g} never shown down while lost")
        _require(all(s.up.get(g) == 1 for s in between(samples, 230, DURATION)), f"GPU {g} did not recover")
        _require(samples[-1].errors.get("GpuIsLost", 0) > 0, "GpuIsLost not counted in poll_errors_total")

    return FaultKind("gpu lost, then back", [{"model": "H100-80GB"}],
                     lambda g: [{"at": 80, "fault": {"call": "*", "gpu": g, "error": "GpuIsLost", "until": 180}}],
                     lambda g: [{"pid": 2000 + g, "cmdline": "python serve.py --model a", "gpu": g,
                                 "memory": "20GiB"}], check)


def _hang() -> FaultKind:
    def check(samples, gpu):
        g = str(gpu)
        _require(any(s.up.get(g) == 0 for s in between(samples, 110, 190)), f"hung GPU {g} never shown down")
        _require(all(s.up.get(g) == 1 for s in between(samples, 260, DURATION)), f"GPU {g} did not recover")

    return FaultKind("every call of one GPU hangs past --gpu-timeout", [{"model": "H100-80GB"}],
                     lambda g: [{"at": 100, "fault": {"call": "*", "gpu": g, "error": "Timeout", "delay": "1500ms",
                                                      "until": 180}}],
                     lambda g: [{"pid": 2100 + g, "cmdline": "python train.py", "gpu": g, "memory": "30GiB"}], check)


def _flaky_calls() -> FaultKind:
    # Windows in which several calls of one GPU fail, overlapping, so a growing share of calls
    # fails and recovers (random failures on a share of calls: _random_call_errors).
    calls = ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature", "nvmlDeviceGetClockInfo",
             "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetUtilizationRates")

    def check(samples, gpu):
        _require(samples[-1].errors.get("Unknown", 0) > 0, "Unknown errors not counted")
        _require(all(s.up.get(str(gpu)) == 1 for s in samples), f"flaky GPU {gpu} reported down")

    return FaultKind("calls failing in windows (Unknown)", [{"model": "H100-80GB"}],
                     lambda g: [{"at": 40 + 30 * i, "fault": {"call": c, "gpu": g, "error": "Unknown",
                                                              "until": 140 + 30 * i}} for i, c in enumerate(calls)],
                     lambda g: [{"pid": 2200 + g, "cmdline": "python infer.py", "gpu": g, "memory": "10GiB"}], check)


def _mig_reconfigure() -> FaultKind:
    def check(samples, gpu):
        g = str(gpu)
        before = {tuple(sorted(s.mig_profiles.get(g, []))) for s in between(samples, 10, 280)}
        after = {tuple(sorted(s.mig_profiles.get(g, []))) for s in between(samples, 330, DURATION)}
        _require(before == {("1g.5gb", "2g.10gb", "3g.20gb")}, f"layout before: {before}")
        _require(after == {("3g.20gb", "3g.20gb")}, f"layout after: {after}")

    return FaultKind("MIG reconfigured under load", [{"model": "A100-40GB", "mig": [
        {"profile": "3g.20gb"}, {"profile": "2g.10gb"}, {"profile": "1g.5gb"}]}],
        lambda g: [{"at": 300, "mig_reconfigure": {"gpu": g, "mig": [{"profile": "3g.20gb"}, {"profile": "3g.20gb"}]}},
                   {"at": 200, "xid": {"gpu": g, "code": 48, "mig": 0}}],
        lambda g: [{"pid": 2300 + g, "cmdline": "python a.py", "gpu": g, "mig": 0, "end": 290, "memory": "8GiB"},
                   {"pid": 2310 + g, "cmdline": "python b.py", "gpu": g, "mig": 1, "end": 290, "memory": "4GiB"},
                   {"pid": 2320 + g, "cmdline": "python c.py", "gpu": g, "mig": 1, "start": 320, "memory": "9GiB"}],
        check)


def _mps_restart_and_vanishing_processes() -> FaultKind:
    def check(samples, gpu):
        g = str(gpu)
        before = set().union(*(s.mps_pids.get(g, set()) for s in between(samples, 10, 230)))
        after = set().union(*(s.mps_pids.get(g, set()) for s in between(samples, 260, DURATION)))
        _require(before and after and before.isdisjoint(after), f"MPS server pids {before} -> {after}")
        _require(all(s.up.get(g) == 1 for s in samples), f"GPU {g} reported down")

    return FaultKind("MPS server restart; processes gone between list and query",
                     [{"model": "H100-80GB", "mps": True, "compute_mode": "exclusive_process"}],
                     lambda g: [{"at": 240, "mps_restart": {"gpu": g}},
                                {"at": 350, "fault": {"call": "nvmlSystemGetProcessName", "gpu": g,
                                                      "error": "NotFound", "until": 400}}],
                     lambda g: [{"pid": 2400 + g, "cmdline": "python mps-client.py", "gpu": g, "memory": "6GiB",
                                 "end": 235},
                                {"pid": 2410 + g, "cmdline": "python mps-client.py", "gpu": g, "start": 260,
                                 "memory": "6GiB"}], check)


def _random_call_errors() -> FaultKind:
    # 20 % of every call on one GPU fails with Unknown (seeded, so every run fails alike).
    def check(samples, gpu):
        g = str(gpu)
        _require(samples[-1].errors.get("Unknown", 0) > 0, "random Unknown errors not counted")
        _require(any(s.up.get(g) == 1 for s in between(samples, 60, 180)), f"GPU {g} never read while flaky")
        _require(all(s.up.get(g) == 1 for s in between(samples, 260, DURATION)), f"GPU {g} did not recover")

    return FaultKind("random call errors (20%)", [{"model": "H100-80GB"}],
                     lambda g: [{"at": 50, "fault": {"call": "*", "gpu": g, "error": "Unknown", "probability": 0.2,
                                                     "until": 200}}],
                     lambda g: [{"pid": 2500 + g, "cmdline": "python flaky.py", "gpu": g, "memory": "10GiB"}], check)


def _lost_then_reset() -> FaultKind:
    def check(samples, gpu):
        g = str(gpu)
        _require(any(s.up.get(g) == 0 for s in between(samples, 130, 200)), f"GPU {g} never shown down while lost")
        _require(all(s.up.get(g) == 1 for s in between(samples, 280, DURATION)), f"GPU {g} not back after its reset")

    return FaultKind("GPU lost (XID 79), recovered by a reset", [{"model": "H100-80GB"}],
                     lambda g: [{"at": 120, "xid": {"gpu": g, "code": 79}}, {"at": 120, "gpu_lost": {"gpu": g}},
                                {"at": 210, "gpu_reset": {"gpu": g}}],
                     lambda g: [{"pid": 2600 + g, "cmdline": "python lost.py", "gpu": g, "memory": "16GiB"},
                                {"pid": 2610 + g, "cmdline": "python after.py", "gpu": g, "start": 240,
                                 "memory": "8GiB"}], check)


def _mps_server_death() -> FaultKind:
    def check(samples, gpu):
        g = str(gpu)
        before = set().union(*(s.mps_pids.get(g, set()) for s in between(samples, 10, 140)))
        dead = [s for s in between(samples, 170, 290) if s.mps_pids.get(g)]
        after = set().union(*(s.mps_pids.get(g, set()) for s in between(samples, 340, DURATION)))
        _require(bool(before), f"GPU {g}: no MPS server before its death")
        _require(not dead, f"GPU {g}: a dead MPS server still exported ({dead and dead[0].mps_pids[g]})")
        _require(after and before.isdisjoint(after), f"GPU {g}: MPS server pids {before} -> {after} after the restart")
        _require(all(s.up.get(g) == 1 for s in samples), f"GPU {g} reported down")

    return FaultKind("MPS server death, restarted later", [{"model": "H100-80GB", "mps": True,
                                                            "compute_mode": "exclusive_process"}],
                     lambda g: [{"at": 150, "mps_server_death": {"gpu": g}}, {"at": 300, "mps_restart": {"gpu": g}}],
                     lambda g: [{"pid": 2700 + g, "cmdline": "python mps-a.py", "gpu": g, "memory": "6GiB"},
                                {"pid": 2710 + g, "cmdline": "python mps-b.py", "gpu": g, "start": 320,
                                 "memory": "6GiB"}], check)


def _failed_repartition() -> FaultKind:
    def check(samples, gpu):
        g = str(gpu)
        before = {tuple(sorted(s.mig_profiles.get(g, []))) for s in between(samples, 10, 230)}
        after = {tuple(sorted(s.mig_profiles.get(g, []))) for s in between(samples, 290, DURATION)}
        _require(before == {("4g.20gb", "3g.20gb")} or before == {("3g.20gb", "4g.20gb")}, f"layout before: {before}")
        _require(after == {("3g.20gb",)}, f"half-done repartition: exported {after}, created only one 3g.20gb")
        _require(all(s.up.get(g) == 1 for s in samples), f"GPU {g} reported down")

    return FaultKind("MIG repartition failing halfway", [{"model": "A100-40GB", "mig": [
        {"profile": "4g.20gb"}, {"profile": "3g.20gb"}]}],
        lambda g: [{"at": 260, "mig_reconfigure": {"gpu": g, "fails_after": 1,
                                                   "mig": [{"profile": "3g.20gb"}, {"profile": "3g.20gb"}]}}],
        lambda g: [{"pid": 2800 + g, "cmdline": "python old.py", "gpu": g, "mig": 0, "end": 250, "memory": "8GiB"}],
        check)


KINDS: list[Callable[[], FaultKind]] = [_lost_and_recovered, _hang, _flaky_calls, _mig_reconfigure,
                                        _mps_restart_and_vanishing_processes, _random_call_errors,
                                        _lost_then_reset, _mps_server_death, _failed_repartition]


def storm(kinds: list[FaultKind]) -> tuple[dict, list[int]]:
    """The scenario: GPU 0 healthy, then each kind's GPUs, events and processes."""
    gpus = [{"model": "H100-80GB"}]
    processes = [{"pid": 1000, "cmdline": "python healthy.py", "gpu": 0, "memory": "12GiB"}]
    events: list[dict] = []
    firsts = []
    for kind in kinds:
        first = len(gpus)
        firsts.append(first)
        gpus.extend(kind.gpus)
        events.extend(kind.events(first))
        processes.extend(kind.processes(first))
    return {"name": "storm", "duration": DURATION, "gpus": gpus, "processes": processes, "events": events}, firsts
