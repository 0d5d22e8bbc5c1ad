"""Exporter history for a real Prometheus, made from what the exporter itself serves.

A scenario is played through the whole pipeline (fake libnvidia-ml -> real pynvml -> backend
-> collectors -> /metrics text) at virtual times; each page becomes one scrape, at
``epoch + t``, of a target whose ``instance`` label we choose. The scrapes are written as
OpenMetrics and backfilled with ``promtool tsdb create-blocks-from openmetrics``, so the history
holds exactly the label values the exporter emits (``mig_mode="enabled"``, workload keys, ...).
Backfilled data has no staleness markers: a finished process's series simply stops, as after a
crash of Prometheus; recommend's queries must cope with that too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

from exporter.backend.sim import SimBackend
from exporter.identity import Identifier
from exporter.poller import Poller
from tests.sim_snapshots import shared_file

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "examples" / "scenarios"
# The families `exporter recommend --prometheus` reads.
FAMILIES = (
    "gpushare_gpu_info", "gpushare_mig_info", "gpushare_process_memory_used_bytes",
    "gpushare_process_sm_utilization_ratio", "gpushare_gpu_sm_active_ratio", "gpushare_mig_sm_active_ratio",
    "gpushare_gpu_tensor_active_ratio", "gpushare_mig_tensor_active_ratio", "gpushare_mig_memory_total_bytes",
    "gpushare_simulation_oom_kills_total",
)
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")


def pages(scenario: str | Path, times: list[float]) -> list[tuple[float, str]]:
    """(t, /metrics text) of ``scenario`` at each virtual time (ascending)."""
    backend = SimBackend(str(scenario), identifier=Identifier())
    poller = Poller(backend, interval=1.0)
    backend.open()
    out = []
    try:
        for t in times:
            backend.step_to(t)
            assert poller.poll_once(), poller.stats.last_error
            out.append((t, poller.exposition.body(openmetrics_format=False, gzipped=False).decode()))
    finally:
        backend.close()
    return out


def shared_pages(shared_dir: Path, scenario: Path, times: list[float]) -> list[tuple[float, str]]:
    """``pages(scenario, times)``, played once per test run (conftest's ``run_shared_dir``): the
    Prometheus modules backfill the same scenarios at the same times."""
    path = shared_file(shared_dir, f"{scenario.stem}-pages", scenario.read_bytes() + repr(list(times)).encode(),
                       lambda: json.dumps(pages(scenario, times)))
    return [(t, text) for t, text in json.loads(path.read_text())]


def openmetrics(targets: dict, epoch: float, job: str = "gpushare") -> str:
    """OpenMetrics text of every target's pages, each page scraped at ``epoch + t``. A target is named by
    its ``instance``, or by (cluster, instance) for a fleet of clusters whose series carry the ``cluster``
    label (an external label, as a Thanos Query or Mimir returns it)."""
    series: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for key, scraped in sorted(targets.items()):
        cluster, instance = key if isinstance(key, tuple) else (None, key)
        for t, text in scraped:
            stamp = f"{epoch + t:.3f}"
            for line in text.splitlines():
                m = _SAMPLE.match(line)
                if not m or m.group(1) not in FAMILIES:
                    continue
                name, labels, value = m.groups()
                inner = labels[1:-1] if labels else ""
                target = (f'cluster="{cluster}",' if cluster is not None else "") + \
                    f'instance="{instance}",job="{job}"' + (f",{inner}" if inner else "")
                series[name][target].append(f"{name}{{{target}}} {value} {stamp}")
    lines = []
    for name in sorted(series):
        family = name.removesuffix("_total")
        lines.append(f"# TYPE {family} {'counter' if name.endswith('_total') else 'gauge'}")
        for target in sorted(series[name]):
            lines += series[name][target]
    return "\n".join(lines + ["# EOF"]) + "\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BackfilledPrometheus:
    """A Prometheus on 127.0.0.1 serving only backfilled history (scrapes nothing)."""

    def __init__(self, directory: Path, om_text: str, prometheus: str, promtool: str):
        self.dir = directory
        (directory / "history.om").write_text(om_text)
        subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(directory / "history.om"),
                        str(directory / "data")], check=True, capture_output=True, timeout=300)
        (directory / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [prometheus, f"--config.file={directory / 'prometheus.yml'}", f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=100y"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("backfilled prometheus did not become ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir / "data", ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def binaries() -> tuple[str | None, str | None]:
    return shutil.which("prometheus"), shutil.which("promtool") or os.environ.get("PROMTOOL")
