"""Start an exporter launcher as a child process, read its CPU and memory from /proc, stop it.

CPU is utime + stime of /proc/<pid>/stat (every thread of the process, clock ticks);
memory is VmRSS (now) and VmHWM (peak) of /proc/<pid>/status.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from perf.load import scrape_once

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TICK = os.sysconf("SC_CLK_TCK")
START_TIMEOUT_S = 60.0


class Skip(Exception):
    """The peer cannot run here (not installed); the message is the one line to print."""


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14 and 15)


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid`` in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Child:
    """A running launcher: ``url`` of its /metrics, ``pid``, the log file of its stderr."""

    name: str
    proc: subprocess.Popen
    url: str
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def memory(self) -> dict[str, int]:
        return memory_kib(self.pid)

    def counter(self, pattern: str) -> float:
        """Value of the first exposition line matching regex ``pattern`` (e.g. a poll counter)."""
        text = scrape_once(self.url).decode()
        match = re.search(r"^" + pattern + r"\s+(\S+)$", text, re.M)
        if match is None:
            raise RuntimeError(f"{self.name}: no line matching {pattern!r} in {self.url}")
        return float(match.group(1))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _wait_ready(child: Child) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        code = child.proc.poll()
        if code is not None:
            tail = child.log.read_text(errors="replace").strip().splitlines()[-3:]
            if code == 3:
                raise Skip(" ".join(tail) or f"{child.name} is not installed")
            raise RuntimeError(f"{child.name} exited with status {code}: {' | '.join(tail)}")
        try:
            scrape_once(child.url)
            return
        except OSError:
            time.sleep(0.1)
    child.stop()
    raise RuntimeError(f"{child.name} did not serve {child.url} within {START_TIMEOUT_S:g}s")


def start(name: str, scenario: Path, start_at: float, interval: float, logdir: Path, extra=()) -> Child:
    """Launch exporter ``name`` ("gpushare" or "nvitop") on ``scenario`` and wait until it serves."""
    port = free_port()
    launcher = HERE / f"launch_{name}.py"
    log = logdir / f"{name}-{scenario.stem}-{port}.log"
    cmd = [sys.executable, str(launcher), str(scenario), "--port", str(port),
           "--interval", str(interval), "--start-at", str(start_at), *extra]
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
    child = Child(name, proc, f"http://127.0.0.1:{port}/metrics", log)
    try:
        _wait_ready(child)
    except BaseException:
        child.stop()
        raise
    return child


# Modules `exporter serve` imports on a real host (no simulator).
REAL_IMPORTS = ("exporter.cli", "exporter.commands.serve", "exporter.backend.nvml", "exporter.poller", "exporter.server")


def import_rss_kib(modules=("pynvml",)) -> int:
    """RSS (KiB) of a fresh Python that imported ``modules`` and nothing else."""
    code = (f"import {', '.join(modules)}, re; "
            "print(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read()).group(1))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    return int(out.stdout.strip())


def sim_only_rss_kib(scenario: Path, start_at: float, logdir: Path) -> int:
    """RSS (KiB) of a Python process that only loads and installs the simulation of ``scenario``."""
    log = logdir / f"sim-only-{scenario.stem}.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, str(HERE / "launch_gpushare.py"), str(scenario), "--sim-only",
                                 "--start-at", str(start_at)], cwd=REPO, stdout=subprocess.PIPE, stderr=err)
    try:
        line = proc.stdout.readline()
        if not line.startswith(b"ready"):
            raise RuntimeError(f"sim-only launcher failed: {log.read_text(errors='replace')[-300:]}")
        return memory_kib(proc.pid)["VmRSS"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
