"""Soak: hours of virtual time through the exporter, reporting RSS and open-file growth.

    python bench/soak_bench.py               # 6 virtual hours, polls every 10 s (2,160 polls), ~1 minute
    python bench/soak_bench.py --hours 48    # a longer soak
    python bench/soak_bench.py --hours 0.2   # smoke (what tests/test_bench_smoke.py runs)

One process runs what `exporter serve` runs: the simulated backend on a manual virtual clock,
the poller (every collector, foresight, the transition log, the HTTP self-metrics), and the
real HTTP server with its connection guard, scraped after every poll by a keep-alive client
and a client that reconnects each time, plus a malformed request and a half-sent one every 10
polls. The scenario churns: a new process on every GPU each minute (each its own pid and
workload), fault windows every 20 minutes (a GPU lost and back, failing calls), an MPS server
restart and a MIG repartition every hour, XIDs.

RSS (VmRSS) and open file descriptors are read every poll; growth is measured from the end of a
warm-up (the first 10 % of polls, when caches fill) to the end. Targets: RSS growth < 5 MiB,
no file-descriptor growth. Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from exporter.backend.sim import SimBackend  # noqa: E402
from exporter.collectors.forecast import ForecastCollector  # noqa: E402
from exporter.collectors.http import HttpCollector  # noqa: E402
from exporter.foresight.state import Foresight  # noqa: E402
from exporter.poller import Poller  # noqa: E402
from exporter.server import start_server  # noqa: E402
from exporter.sim.scenario import load_scenario  # noqa: E402
from exporter.transitions import TransitionLog  # noqa: E402
from exporter.web.guard import HttpLimits, HttpStats  # noqa: E402

RSS_TARGET_MIB = 5.0
LAYOUTS = ([{"profile": "3g.20gb"}, {"profile": "2g.10gb"}, {"profile": "1g.5gb"}],
           [{"profile": "3g.20gb"}, {"profile": "3g.20gb"}])


def churn_scenario(hours: float) -> dict:
    """4 GPUs (plain, MPS, MIG, plain) with process churn and recurring faults for ``hours``."""
    duration = int(hours * 3600)
    gpus = [{"model": "H100-80GB"}, {"model": "H100-80GB", "mps": True, "compute_mode": "exclusive_process"},
            {"model": "A100-40GB", "mig": LAYOUTS[0]}, {"model": "H100-80GB"}]
    processes, events, pid = [], [], 10_000
    for start in range(0, duration - 300, 60):
        hour_offset = start % 3600
        for gpu in (0, 1, 3):
            pid += 1
            processes.append({"pid": pid, "cmdline": f"python job.py --run {pid} --seed {pid}", "gpu": gpu,
                              "start": start, "end": start + 240, "memory": [["+0s", "1GiB"], ["+60s", "6GiB"]]})
        # MIG jobs avoid the last 5 minutes of each hour: the repartition needs the GPU idle.
        if hour_offset < 3300 - 240:
            pid += 1
            processes.append({"pid": pid, "cmdline": f"python mig-job.py --id {pid}", "gpu": 2, "mig": 0,
                              "start": start, "end": start + 240, "memory": "3GiB"})
    for hour in range(int(hours) + 1):
        t0 = hour * 3600
        if t0 + 3300 < duration:
            events.append({"at": t0 + 3300, "mig_reconfigure": {"gpu": 2, "mig": LAYOUTS[(hour + 1) % 2]}})
        if t0 + 1800 < duration:
            events.append({"at": t0 + 1800, "mps_restart": {"gpu": 1}})
        for minute in (5, 25, 45):
            at = t0 + minute * 60
            if at + 300 < duration:
                events.append({"at": at, "fault": {"call": "*", "gpu": 3, "error": "GpuIsLost", "until": at + 120}})
                events.append({"at": at + 60, "fault": {"call": "nvmlDeviceGetPowerUsage", "gpu": 0,
                                                        "error": "Unknown", "until": at + 180}})
                events.append({"at": at + 30, "xid": {"gpu": 0, "code": 31}})
    return {"name": "soak", "duration": duration, "gpus": gpus, "processes": processes, "events": events}


def rss_kib() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class Loop:
    """An asyncio loop in a thread: the HTTP server and its clients live there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


async def _get(host: str, port: int, request: bytes, reader_writer=None) -> tuple[bytes, tuple | None]:
    """One request; keeps the connection when ``reader_writer`` is given (keep-alive)."""
    reader, writer = reader_writer or await asyncio.open_connection(host, port)
    writer.write(request)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    body = await reader.readexactly(length)
    if reader_writer is None:
        writer.close()
        await writer.wait_closed()
        return head + body, None
    return head + body, (reader, writer)


async def _hostile(host: str, port: int) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"NOT HTTP\r\n\r\n")
    await writer.drain()
    await reader.read()
    writer.close()
    _, half = await asyncio.open_connection(host, port)
    half.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished: the read timeout closes it
    await half.drain()
    half.close()


class _CountingHandler(logging.Handler):
    """Counts log lines by level instead of printing them (the soak reports how many there were)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.counts: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.levelname] = self.counts.get(record.levelname, 0) + 1


def run(hours: float, interval: float, scrape_every: int) -> dict:
    counter = _CountingHandler()
    logging.getLogger().addHandler(counter)
    logging.getLogger().setLevel(logging.INFO)
    tmp = Path(tempfile.mkdtemp(prefix="gpushare-soak-"))
    scenario_path = tmp / "soak.yaml"
    scenario_path.write_text(yaml.safe_dump(churn_scenario(hours)))
    virtual = [0.0]
    backend = SimBackend(load_scenario(scenario_path), clock=lambda: virtual[0], gpu_timeout=2.0)
    stats = HttpStats()
    foresight = Foresight(state_dir=tmp / "state")
    poller = Poller(backend, interval, extra_collectors=[ForecastCollector(foresight), HttpCollector(stats)],
                    observers=[TransitionLog().observe, foresight.observe])
    poller.backend.open()
    loop = Loop()
    server = loop.run(start_server(poller, "127.0.0.1", 0, stats=stats,
                                   limits=HttpLimits(read_timeout=1.0, idle_timeout=30.0)))
    host, port = server.url.removeprefix("http://").rstrip("/").split(":")
    port = int(port)
    scrape = b"GET /metrics HTTP/1.1\r\nHost: soak\r\nAccept: application/openmetrics-text\r\nAccept-Encoding: gzip\r\n\r\n"
    polls = int(hours * 3600 / interval)
    warmup = max(1, polls // 10)
    rss, fds = [], []
    keep = loop.run(asyncio.open_connection(host, port))  # a keep-alive scraper, as Prometheus is
    started = time.monotonic()
    try:
        for i in range(polls):
            virtual[0] = (i + 1) * interval
            poller.poll_once()
            if i % scrape_every == 0:
                _, keep = loop.run(_get(host, port, scrape, keep))
                loop.run(_get(host, port, b"GET /api/v1/snapshot HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n"))
            if i % (10 * scrape_every) == 0:
                loop.run(_hostile(host, port))
            rss.append(rss_kib())
            fds.append(open_fds())
    finally:
        elapsed = time.monotonic() - started
        keep[1].close()
        loop.run(server.close())
        loop.stop()
        poller.backend.close()
        foresight.flush()
    base_rss, base_fds = rss[warmup], fds[warmup]
    return {
        "virtual_hours": hours, "polls": polls, "seconds": elapsed,
        "rss_start_mib": rss[0] / 1024, "rss_after_warmup_mib": base_rss / 1024, "rss_end_mib": rss[-1] / 1024,
        "rss_growth_mib": (rss[-1] - base_rss) / 1024, "rss_max_mib": max(rss[warmup:]) / 1024,
        "fds_after_warmup": base_fds, "fds_end": fds[-1], "fds_max": max(fds[warmup:]),
        "fd_growth": fds[-1] - base_fds,
        "rejected": dict(stats.rejected), "responses": dict(stats.responses), "profiles": len(foresight.profiles),
        "log_lines": dict(counter.counts),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=6.0, help="virtual hours to run (default 6)")
    parser.add_argument("--interval", type=float, default=10.0, help="virtual seconds between polls (default 10)")
    parser.add_argument("--scrape-every", type=int, default=1, help="scrape after every N polls (default 1)")
    args = parser.parse_args(argv)
    if not 0 < args.hours <= 1000 or not 0 < args.interval <= 3600 or args.hours * 3600 / args.interval < 20:
        parser.error("need 0 < --hours <= 1000, 0 < --interval <= 3600 and at least 20 polls")
    result = run(args.hours, args.interval, args.scrape_every)
    rss_ok = result["rss_growth_mib"] < RSS_TARGET_MIB
    fds_ok = result["fd_growth"] <= 0 and result["fds_max"] - result["fds_after_warmup"] <= 4
    print(f"== Soak: {result['virtual_hours']:g} virtual hours, {result['polls']} polls, {result['seconds']:.0f} s")
    print(f"RSS MiB: start {result['rss_start_mib']:.1f}, after warm-up {result['rss_after_warmup_mib']:.1f}, "
          f"end {result['rss_end_mib']:.1f}, max {result['rss_max_mib']:.1f}; "
          f"growth {result['rss_growth_mib']:+.2f} (target < {RSS_TARGET_MIB:g}) {'OK' if rss_ok else 'MISSED'}")
    print(f"open fds: after warm-up {result['fds_after_warmup']}, end {result['fds_end']}, max {result['fds_max']}; "
          f"growth {result['fd_growth']:+d} (target: flat) {'OK' if fds_ok else 'MISSED'}")
    print(f"HTTP: responses {sorted(result['responses'].items())}, rejected {sorted(result['rejected'].items())}; "
          f"workload profiles held {result['profiles']}; log lines {sorted(result['log_lines'].items())}")
    return 0 if rss_ok and fds_ok else 1


if __name__ == "__main__":
    sys.exit(main())
