"""Scrape load: C independent scrapers against one URL on 127.0.0.1, latency of each scrape.

Each scraper behaves like a Prometheus server: it asks with Prometheus' own Accept and
Accept-Encoding headers (OpenMetrics preferred, gzip), has at most one scrape in flight,
and scrapes on its own fixed period from a random phase (missed ticks are skipped, not
queued). Latency is from writing the request to having the whole body, on a lean asyncio
HTTP/1.1 client (keep-alive when the server allows it, a new connection otherwise, as
Prometheus does), so the client adds little to what it measures.

A scrape whose body differs from every body seen before is the *first after a poll*: a
scraper polling less often than the exporter (the usual 15 s scrape vs 1 s poll) only ever
makes such scrapes, so their latency is reported apart ("cold").
"""

from __future__ import annotations

import asyncio
import random
import time
import zlib
from dataclasses import dataclass, field
from urllib.parse import urlsplit

# What Prometheus 2.x/3.x sends by default (scrape_protocols: OpenMetrics first, then text 0.0.4).
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0;q=0.5,"
                     "application/openmetrics-text;version=0.0.1;q=0.4,"
                     "text/plain;version=0.0.4;q=0.3,*/*;q=0.1")
TIMEOUT_S = 10.0  # a scrape slower than this counts as failed (Prometheus' default scrape_timeout)


@dataclass
class LoadResult:
    """Latencies (seconds) of one load level."""

    scrapers: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    cold: list[float] = field(default_factory=list)  # first scrape of each new body
    failures: int = 0
    body_bytes: int = 0  # bytes on the wire (after content-encoding) of the last body

    def percentile(self, q: float, values: list[float] | None = None) -> float | None:
        """Nearest-rank percentile (q in 0..100) of ``values`` (default: all latencies)."""
        data = sorted(self.latencies if values is None else values)
        if not data:
            return None
        rank = max(1, min(len(data), -(-q * len(data) // 100)))
        return data[int(rank) - 1]

    @property
    def rate(self) -> float:
        """Scrapes completed per second."""
        return len(self.latencies) / self.seconds if self.seconds else 0.0


class _Connection:
    """One keep-alive HTTP/1.1 connection; reopened whenever the server closes it."""

    def __init__(self, host: str, port: int, path: str):
        self.host, self.port, self.path = host, port, path
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.request = (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: {PROMETHEUS_ACCEPT}\r\n"
                        "Accept-Encoding: gzip\r\nUser-Agent: gpushare-bench\r\n\r\n").encode()

    async def get(self) -> bytes:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(self.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        if "content-length" in headers:
            body = await self.reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = await self._chunked()
        else:
            body = await self.reader.read()  # until the server closes
            headers["connection"] = "close"
        if status[0] != "HTTP/1.1" or headers.get("connection", "").lower() == "close":
            self.close()
        if len(status) < 2 or status[1] != "200":
            raise RuntimeError(f"HTTP {' '.join(status[1:])}")
        return body

    async def _chunked(self) -> bytes:
        parts = []
        while True:
            size = int((await self.reader.readline()).split(b";")[0].strip(), 16)
            if size == 0:
                await self.reader.readline()
                return b"".join(parts)
            parts.append(await self.reader.readexactly(size))
            await self.reader.readexactly(2)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def _scraper(url: str, period: float, stop_at: float, result: LoadResult, seen: set, rng) -> None:
    parts = urlsplit(url)
    conn = _Connection(parts.hostname, parts.port, parts.path or "/metrics")
    loop = asyncio.get_running_loop()
    next_at = loop.time() + rng.uniform(0, period)
    try:
        while True:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            if loop.time() >= stop_at:
                return
            start = time.perf_counter()
            try:
                body = await asyncio.wait_for(conn.get(), TIMEOUT_S)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, RuntimeError, ValueError):
                result.failures += 1
                conn.close()
            else:
                latency = time.perf_counter() - start
                result.latencies.append(latency)
                result.body_bytes = len(body)
                digest = zlib.crc32(body)
                if digest not in seen:
                    seen.add(digest)
                    result.cold.append(latency)
            now = loop.time()
            next_at += period * rng.uniform(0.9, 1.1)
            if next_at < now:  # a slow scrape: skip the ticks it missed
                next_at = now + rng.uniform(0, period)
    finally:
        conn.close()


async def _run(url: str, scrapers: int, seconds: float, period: float, seed: int) -> LoadResult:
    rng = random.Random(seed)
    result = LoadResult(scrapers=scrapers, seconds=seconds)
    seen: set[int] = set()
    stop_at = asyncio.get_running_loop().time() + seconds
    await asyncio.gather(*(_scraper(url, period, stop_at, result, seen, rng) for _ in range(scrapers)))
    return result


def run_load(url: str, scrapers: int, seconds: float, period: float = 0.5, seed: int = 6) -> LoadResult:
    """Run ``scrapers`` scrapers for ``seconds``, each scraping every ``period`` seconds."""
    if not url.startswith("http://127.0.0.1:"):
        raise ValueError(f"load only goes to 127.0.0.1, not {url}")
    return asyncio.run(_run(url, scrapers, seconds, period, seed))


def scrape_once(url: str) -> bytes:
    """One plain-text, uncompressed GET (for reading counters), body returned."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        return response.read()
