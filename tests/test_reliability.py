"""Reliability: the real exporter through a fault storm while 50 clients scrape it 10,000 times.

The storm (tests/reliability.py) loses a GPU and brings it back, hangs another past
--gpu-timeout, fails calls in windows, reconfigures MIG under load, restarts an MPS server and
makes processes vanish between list and query. Meanwhile 50 clients scrape /metrics (as
Prometheus does: OpenMetrics, gzip, keep-alive), a monitor records what the exporter shows, and
a hostile client sends malformed requests. Afterwards:

- 0 failed scrapes, /health 200 throughout;
- the healthy GPU fresh throughout (up, and the last poll never more than a few intervals old);
- every fault visible in the self-metrics, and every faulted GPU recovered without a restart;
- one process from start to end, which exits 0 on SIGTERM with no traceback in its log and
  one log line per transition.

Bounded: 10,000 scrapes over a 480-virtual-second scenario played at 16x (30 s).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time

import aiohttp
import pytest
import yaml

import reliability

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRAPES = 10_000
CLIENTS = 50
SPEED = 16.0
# Two polls a second: the storm node's poll (health reads included) and 50 scrapers share a 2-core CI
# machine with a second test worker; /health's staleness bound scales with it.
INTERVAL = 0.5
# Below the injected hang (1500 ms, tests/reliability.py) so the hung GPU is shown down, and with room
# for a healthy GPU's poll on a 2-core CI machine whose other core runs another test worker.
GPU_TIMEOUT = 1.0
PROMETHEUS_HEADERS = {"Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
                      "Accept-Encoding": "gzip"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _wait_healthy(base: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()
            try:
                async with session.get(base + "/health") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("exporter never became healthy")


async def _storm(base: str) -> dict:
    results = {"ok": 0, "failed": [], "samples": [], "malformed": 0}
    remaining = [SCRAPES]
    run_until = time.monotonic() + reliability.DURATION / SPEED + 3.0  # the whole scenario, and then some
    pace = (reliability.DURATION / SPEED) / (SCRAPES / CLIENTS)  # spread the scrapes over the scenario

    async def scraper() -> None:
        async with aiohttp.ClientSession() as session:
            while remaining[0] > 0:
                remaining[0] -= 1
                try:
                    async with session.get(base + "/metrics", headers=PROMETHEUS_HEADERS,
                                           timeout=aiohttp.ClientTimeout(total=10)) as response:
                        body = await response.read()
                        if response.status == 200 and body.startswith(b"# HELP") and body.endswith(b"# EOF\n"):
                            results["ok"] += 1
                        else:
                            results["failed"].append((response.status, body[:100]))
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    results["failed"].append(repr(exc))
                await asyncio.sleep(pace)

    async def monitor() -> None:
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < run_until or remaining[0] > 0:
                async with session.get(base + "/health") as response:
                    health = response.status
                async with session.get(base + "/metrics") as response:
                    text = await response.text()
                results["samples"].append(reliability.parse_sample(text, health, time.time()))
                await asyncio.sleep(0.2)

    async def hostile() -> None:
        host, port = base.removeprefix("http://").split(":")
        while time.monotonic() < run_until:
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"GARBAGE / HTTP/1.1\r\n" + b"X" * 9000 + b"\r\n\r\n")
            await writer.drain()
            answer = await reader.read()
            writer.close()
            assert answer == b"" or answer[:10] in (b"HTTP/1.1 4", b"HTTP/1.0 4"), answer[:100]
            results["malformed"] += 1
            await asyncio.sleep(0.3)

    await asyncio.gather(monitor(), hostile(), *(scraper() for _ in range(CLIENTS)))
    return results


@pytest.mark.e2e
def test_fault_storm_under_10000_scrapes(tmp_path):
    kinds = [make() for make in reliability.KINDS]
    doc, firsts = reliability.storm(kinds)
    scenario = tmp_path / "storm.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "serve", "--simulate", str(scenario), "--speed", str(SPEED),
         "--interval", str(INTERVAL), "--gpu-timeout", str(GPU_TIMEOUT), "--listen", f"127.0.0.1:{port}"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": REPO, "PYTHONUNBUFFERED": "1"})
    try:
        asyncio.run(_wait_healthy(base, proc))
        results = asyncio.run(asyncio.wait_for(_storm(base), timeout=240))
        assert proc.poll() is None, "the exporter died during the storm"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate()
    samples = results["samples"]
    print(f"\nreliability: {results['ok']} scrapes ok, {len(results['failed'])} failed, {len(samples)} monitor "
          f"samples, {results['malformed']} malformed requests, scenario reached {samples[-1].sim_time:g}s")
    assert results["failed"] == [] and results["ok"] == SCRAPES
    assert proc.returncode == 0 and "Traceback" not in stderr, stderr[-2000:]
    assert samples[-1].sim_time == reliability.DURATION, "the scenario did not play to its end during the load"
    flaps = [(s.sim_time, round(s.wall_age, 2)) for s in samples if s.health != 200]
    assert flaps == [], f"/health left 200 at (simulated time, poll age): {flaps[:10]}"
    assert all(s.up.get("0") == 1 for s in samples), "the healthy GPU was reported down"
    stale = [round(s.wall_age, 2) for s in samples if s.wall_age > 3 * INTERVAL + GPU_TIMEOUT + 1.0]
    assert stale == [], f"polls went stale while clients scraped: {stale[:10]}"
    assert samples[-1].rejected.get("malformed", 0) > 0
    for kind, first in zip(kinds, firsts):
        kind.check(samples, first)
    # Each GPU going down is one line, however many polls it stays down.
    for first in firsts[:2]:
        assert stderr.count(f"GPU {first} (") >= 1
        down_lines = [line for line in stderr.splitlines() if f"GPU {first} (" in line and " is down" in line]
        assert len(down_lines) == 1, down_lines
