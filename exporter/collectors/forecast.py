"""Forecast series: expected peaks, time-aware peak demand, headroom, ETAs, learned profiles.

Reads the latest :class:`~exporter.foresight.result.ForesightResult`; never touches NVML.
Series that have no meaningful value are absent, never 0: the exhaustion ETA when memory is
not growing, the contention ETA and stagger advice when no contention is predicted.
"""

from __future__ import annotations

from dataclasses import replace

from prometheus_client.metrics_core import Metric

from exporter.collectors.base import Families, Family, Spec, gi_label, gpu_labels
from exporter.collectors.instances import POD, group, known_total, with_mode_labels
from exporter.collectors.process import PROCESS
from exporter.foresight.forecast import BASES
from exporter.foresight.result import DeviceRow
from exporter.foresight.state import Foresight

GPU = ("gpu", "uuid")
MIG = ("gpu", "uuid", "gi", "profile")

EXPECTED_PEAK = Spec(
    "gpushare_process_memory_expected_peak_bytes",
    "gauge",
    "Learned peak memory of the process's workload, at least its current use.",
    PROCESS,
    "bytes",
)
AT_CONTENTION = Spec(
    "gpushare_process_memory_expected_at_contention_bytes",
    "gauge",
    "Memory the process is expected to hold when its device first overflows (only when an overflow is predicted); "
    "basis: what the figure rests on (learned, scaled, declared, trend, current).",
    PROCESS,
    "bytes",
)


def _device_specs(scope: str, labels: tuple[str, ...], where: str) -> dict[str, Spec]:
    """The per-device forecast families for ``scope`` (gpu or mig)."""
    return {
        "demand": Spec(
            f"gpushare_{scope}_memory_peak_demand_bytes", "gauge",
            f"Maximum over future time of the memory expected to be held at once on the {where}.", labels, "bytes"),
        "sum": Spec(
            f"gpushare_{scope}_memory_expected_peak_sum_bytes", "gauge",
            f"Sum of the expected peaks on the {where}, as if all peaked at the same moment.", labels, "bytes"),
        "headroom": Spec(
            f"gpushare_{scope}_memory_headroom_bytes", "gauge",
            f"Usable memory of the {where} minus peak demand; negative means contention is coming.", labels, "bytes"),
        "contention": Spec(
            f"gpushare_{scope}_memory_contention_eta_seconds", "gauge",
            f"Seconds until expected demand first exceeds the {where}'s memory (only when predicted).", labels,
            "seconds"),
        "stagger": Spec(
            f"gpushare_{scope}_memory_stagger_needed_seconds", "gauge",
            f"Spacing between job starts that would avoid the predicted contention on the {where}.", labels, "seconds"),
        "exhaustion": Spec(
            f"gpushare_{scope}_memory_exhaustion_eta_seconds", "gauge",
            f"Seconds until the {where}'s memory is full at the recent linear trend (absent when not growing).",
            labels, "seconds"),
        "confidence": Spec(
            f"gpushare_{scope}_memory_contention_confidence_ratio", "gauge",
            f"How well grounded the predicted contention on the {where} is, 0..1 (only when predicted): growth-weighted "
            "grounding of the processes' bases (learned runs, spread of their peaks) times how far the overflow clears "
            "that spread, the highest since the contention was first predicted, and under 0.8 for a repeat of a cleared "
            "page within 10 min unless its overflow grew; the critical alert tier needs 0.8.", labels, "ratio"),
        "slowdown": Spec(
            f"gpushare_{scope}_forecast_slowdown_ratio", "gauge",
            f"Factor by which learned timelines are stretched on the {where} because runs are late (1 = on time).",
            labels, "ratio"),
    }


GPU_SPECS = _device_specs("gpu", GPU, "GPU")
MIG_SPECS = _device_specs("mig", MIG, "MIG instance")
PROFILE_LABELS = ("workload",)
PROFILE_PEAK = Spec("gpushare_workload_profile_peak_bytes", "gauge", "Learned peak memory of one run.",
                    PROFILE_LABELS, "bytes")
PROFILE_DURATION = Spec("gpushare_workload_profile_duration_seconds", "gauge",
                        "Length of the newest fully observed run.", PROFILE_LABELS, "seconds")
PROFILE_OFFSET = Spec("gpushare_workload_profile_peak_offset_seconds", "gauge",
                      "Age of a run when it first reaches its peak.", PROFILE_LABELS, "seconds")
PROFILE_RUNS = Spec("gpushare_workload_profile_runs", "gauge",
                    "Fully observed runs learned (0: provisional, not used for forecasts).", PROFILE_LABELS)
PROFILES_STORED = Spec("gpushare_workload_profiles", "gauge",
                       "Workload profiles held (the exported gpushare_workload_profile_* series are capped).")
SUSPECTED_OOM = Spec(
    "gpushare_suspected_oom_kills_total", "counter",
    "Processes that vanished while their memory domain or MPS memory limit was nearly full (a heuristic, "
    "docs/foresight.md), by whether the contention warning was up on their device then.",
    ("gpu", "uuid", "predicted"))
WARNINGS = Spec(
    "gpushare_memory_contention_warnings_total", "counter",
    "Contention warnings (predicted headroom below zero for 30 s) that ended, by outcome: oom when a suspected "
    "OOM kill happened on the GPU while it was up or within 60 s after, else none.",
    ("gpu", "uuid", "outcome"))
SLACK = Spec("gpushare_workload_forecast_slack_ratio", "gauge",
             "Share by which the workload's learned curve is forecast lower because its contention warnings kept "
             "ending without an OOM (its observed slack; 0..0.15; only for workloads outcomes changed).",
             PROFILE_LABELS, "ratio")
MARGIN = Spec("gpushare_workload_forecast_margin_ratio", "gauge",
              "Share by which the workload's learned curve is forecast higher because its runs were OOM-killed "
              "unwarned (0..0.15; only for workloads outcomes changed).", PROFILE_LABELS, "ratio")
STORE_OK = Spec("gpushare_exporter_state_store_ok", "gauge",
                "1 while the --state-dir profile store reads and writes fine, 0 when profiles live in memory only.")


class ForecastCollector:
    """prometheus_client collector over a :class:`Foresight`."""

    name = "forecast"

    def __init__(self, foresight: Foresight, process_series: str = POD) -> None:
        self.foresight = foresight
        self.mode = process_series
        self._peak = with_mode_labels(EXPECTED_PEAK, process_series)
        at_contention = with_mode_labels(AT_CONTENTION, process_series)
        self._at_contention = replace(at_contention, labels=at_contention.labels + ("basis",))
        self._kept: dict = {}  # what collect_series made last time, by GPU, device and "profiles" (see there)

    def _process_series(self, index: int, uuid: str, rows: tuple) -> list[tuple]:
        """(spec, label values, value) of one GPU's process rows."""
        series = []
        # The same series as gpushare_process_memory_used_bytes: peaks of a container (or
        # replica slot) add up like its memory does.
        for labels, members in group(rows, gpu_labels(index, uuid), _row_fields, self.mode):
            if len(members) == 1:
                series.append((self._peak, labels, members[0].expected_peak_bytes))
                series.append((self._at_contention, labels + (members[0].basis,), members[0].at_contention_bytes))
                continue
            series.append((self._peak, labels, known_total([r.expected_peak_bytes for r in members])))
            series.append((self._at_contention, labels + (weakest_basis(r.basis for r in members),),
                           known_total([r.at_contention_bytes for r in members])))
        return series

    def section_ok(self) -> bool:
        """False when the last Foresight.observe() failed (the previous forecast is still served)."""
        return self.foresight.healthy

    def collect(self) -> list[Metric]:
        """prometheus_client entry point: families for the latest forecast."""
        return [family.metric() for family in self.collect_series()]

    def collect_series(self) -> list[Family]:
        """The latest forecast's families, lean (what the poller renders)."""
        result = self.foresight.result()
        out = Families()
        by_gpu: dict[tuple[int, str], list] = {}
        for row in result.processes:
            by_gpu.setdefault((row.gpu, row.uuid), []).append(row)
        # A GPU's rows, a device's row and the exported profiles are mostly the very records of the
        # poll before (the forecast is reused between forecasts: exporter.foresight.cadence): their
        # series are kept with the records they came from, and made again unless the records are the
        # same objects (identity, not equality: 0.0 == -0.0, and NaN != NaN).
        made: dict = {}
        kept = self._kept
        for (index, uuid), rows in by_gpu.items():
            key, rows = (index, uuid), tuple(rows)
            held = kept.get(key)
            series = held[1] if held is not None and _same(held[0], rows) else self._process_series(index, uuid, rows)
            made[key] = (rows, series)
            for spec, labels, value in series:
                out.add(spec, labels, value)
        for device in result.devices:
            key = (device.uuid, device.gi)
            held = kept.get(key)
            series = held[1] if held is not None and held[0] is device else _device_series(device)
            made[key] = (device, series)
            for spec, labels, value in series:
                out.add(spec, labels, value)
        held = kept.get("profiles")
        series = held[1] if held is not None and _same(held[0], result.profiles) else _profile_series(result.profiles)
        made["profiles"] = (result.profiles, series)
        for spec, labels, value in series:
            out.add(spec, labels, value)
        self._kept = made
        for index, uuid, hit, missed, oom, none in result.outcomes:
            ids = gpu_labels(index, uuid)
            out.add(SUSPECTED_OOM, ids + ("true",), hit)
            out.add(SUSPECTED_OOM, ids + ("false",), missed)
            out.add(WARNINGS, ids + ("oom",), oom)
            out.add(WARNINGS, ids + ("none",), none)
        for label, slack, margin in result.adjustments:
            out.add(SLACK, (label,), slack)
            out.add(MARGIN, (label,), margin)
        out.add(PROFILES_STORED, (), result.profiles_stored)
        out.add(STORE_OK, (), None if result.store_ok is None else int(result.store_ok))
        return out.series()


def weakest_basis(bases) -> str:
    """The least informed of several members' bases (BASES runs from most to least informed)."""
    return max(bases, key=BASES.index, default="current")


def _row_fields(row):
    return (gi_label(row.gi), str(row.pid), row.process, row.sharing, row.workload, row.namespace, row.pod,
            row.container, row.replica)


def _same(before: tuple, now: tuple) -> bool:
    """True when both hold the same objects in the same order."""
    return len(before) == len(now) and all(a is b for a, b in zip(before, now))


def _device_series(device: DeviceRow) -> list[tuple]:
    """(spec, label values, value) of the forecast series of one GPU or MIG instance."""
    if device.gi is None:
        specs, ids = GPU_SPECS, gpu_labels(device.gpu, device.uuid)
    else:
        specs, ids = MIG_SPECS, gpu_labels(device.gpu, device.uuid) + (gi_label(device.gi), device.profile)
    forecast = device.forecast
    return [
        (specs["demand"], ids, forecast.peak_demand_bytes),
        (specs["sum"], ids, forecast.peak_sum_bytes),
        (specs["headroom"], ids, forecast.headroom_bytes),
        (specs["contention"], ids, forecast.contention_in_seconds),
        (specs["stagger"], ids, forecast.stagger_seconds),
        (specs["exhaustion"], ids, device.exhaustion_eta_seconds),
        (specs["slowdown"], ids, forecast.slowdown),
        (specs["confidence"], ids, device.confidence),
    ]


def _profile_series(profiles) -> list[tuple]:
    """(spec, label values, value) of the exported learned profiles."""
    series = []
    for label, profile in profiles:
        series.append((PROFILE_PEAK, (label,), profile.peak_bytes))
        series.append((PROFILE_DURATION, (label,), profile.duration_seconds))
        series.append((PROFILE_OFFSET, (label,), profile.peak_offset_seconds))
        series.append((PROFILE_RUNS, (label,), profile.runs))
    return series
