"""Measure one exporter running as its own process: CPU per poll, % of a core, RSS, scrape latency.

Sequence: start the launcher, let it poll ``warmup`` seconds, measure CPU over an idle
window (no scrapes but the two that read the poll counter), read RSS ("after warm-up"),
then run the scrape load levels, then read the peak RSS (VmHWM).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from perf import children
from perf.load import LoadResult, run_load

POLL_COUNTERS = {
    "gpushare": r'gpushare_exporter_polls_total\{result="ok"\}',
    "nvitop": r"bench_polls_total",  # added by launch_nvitop.py
}


@dataclass
class Timing:
    """How long each phase lasts (seconds)."""

    warmup: float
    idle: float
    load: float
    levels: tuple[int, ...] = (1, 10, 50)
    period: float = 0.5  # seconds between two scrapes of one scraper


@dataclass
class ProcessRun:
    """Figures of one exporter process on one scenario."""

    exporter: str
    scenario: str
    polls: float = 0.0
    idle_seconds: float = 0.0
    cpu_seconds: float = 0.0
    rss_kib: int = 0
    hwm_kib: int = 0
    loads: dict[int, LoadResult] = field(default_factory=dict)
    skipped: str | None = None

    @property
    def cpu_per_poll(self) -> float | None:
        return self.cpu_seconds / self.polls if self.polls else None

    @property
    def core_percent(self) -> float | None:
        return 100.0 * self.cpu_seconds / self.idle_seconds if self.idle_seconds else None


def measure(exporter: str, scenario: Path, label: str, start_at: float, timing: Timing,
            logdir: Path, interval: float = 1.0, prototype: str = "") -> ProcessRun:
    """Run ``exporter`` ("gpushare" | "nvitop") on ``scenario`` and measure it.

    ``prototype``: proposed fixes patched into gpushare (the run is named "gpushare+<names>").
    """
    run = ProcessRun(exporter + (f"+{prototype}" if prototype else ""), label)
    extra = ("--prototype", prototype) if prototype else ()
    try:
        child = children.start(exporter, scenario, start_at, interval, logdir, extra)
    except children.Skip as exc:
        run.skipped = str(exc)
        return run
    try:
        time.sleep(timing.warmup)
        pattern = POLL_COUNTERS[exporter]
        polls0, cpu0, t0 = child.counter(pattern), child.cpu(), time.monotonic()
        time.sleep(timing.idle)
        polls1, cpu1, t1 = child.counter(pattern), child.cpu(), time.monotonic()
        run.polls, run.cpu_seconds, run.idle_seconds = polls1 - polls0, cpu1 - cpu0, t1 - t0
        run.rss_kib = child.memory()["VmRSS"]
        for level in timing.levels:
            run.loads[level] = run_load(child.url, level, timing.load, timing.period)
        run.hwm_kib = child.memory()["VmHWM"]
    finally:
        child.stop()
    return run
