"""What securing the endpoint costs a scrape: latency of /metrics per web config, against a baseline.

    python bench/security_bench.py            # 2,000 scrapes per configuration, ~30 s
    python bench/security_bench.py --scrapes 200

One process, one poll of the shipped mixed 8-GPU node (600 s in), then sequential keep-alive
scrapes as Prometheus makes them (OpenMetrics, gzip) against:

- baseline: a bare aiohttp app handing out the same pre-encoded bytes (no guard, no checks);
- guarded: the exporter's server without a web config (connection guard, refusal checks);
- basic auth: with basic_auth_users (bcrypt cost 10; after the first scrape a cache hit);
- TLS: tls_server_config, then TLS with client certificates (mTLS) and basic auth.

Figures are median and p99 microseconds per scrape, and the ratio to the baseline's median,
all from the same run. Certificates come from trustme (a test dependency).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import bcrypt
from aiohttp import web

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from exporter.backend.sim import SimBackend  # noqa: E402
from exporter.poller import Poller  # noqa: E402
from exporter.server import start_server  # noqa: E402
from exporter.web.live import LiveWebConfig  # noqa: E402

MIXED_NODE = HERE.parent / "examples" / "scenarios" / "h100-mixed-node.yaml"
HEADERS = {"Accept": "application/openmetrics-text;version=1.0.0", "Accept-Encoding": "gzip"}


async def _baseline(poller) -> tuple[web.AppRunner, str]:
    async def metrics(request):
        exposition = poller.exposition
        return web.Response(body=exposition.body(openmetrics_format=True, gzipped=True),
                            headers={"Content-Type": exposition.content_type(True), "Content-Encoding": "gzip"})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/"


async def _scrapes(url: str, n: int, ssl_context=None, auth: str | None = None) -> list[float]:
    headers = dict(HEADERS, **({"Authorization": auth} if auth else {}))
    connector = aiohttp.TCPConnector(ssl=ssl_context if ssl_context is not None else False, limit=1)
    times = []
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        for i in range(n + 20):
            start = time.perf_counter()
            async with session.get(url + "metrics", headers=headers) as response:
                await response.read()
                assert response.status == 200, response.status
            if i >= 20:  # warm-up: connection, TLS handshake, first bcrypt check
                times.append((time.perf_counter() - start) * 1e6)
    return times


def _pki(directory: Path):
    import trustme

    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "ca.crt"))
    server = ca.issue_cert("127.0.0.1")
    server.cert_chain_pems[0].write_to_path(str(directory / "server.crt"))
    server.private_key_pem.write_to_path(str(directory / "server.key"))
    client = ca.issue_cert("scraper.example")
    client.cert_chain_pems[0].write_to_path(str(directory / "client.crt"))
    client.private_key_pem.write_to_path(str(directory / "client.key"))


async def run(n: int) -> list[tuple[str, list[float]]]:
    tmp = Path(tempfile.mkdtemp(prefix="gpushare-secbench-"))
    _pki(tmp)
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(10)).decode()
    users = f"basic_auth_users: {{prometheus: '{hashed}'}}\n"
    tls = "tls_server_config: {cert_file: server.crt, key_file: server.key}\n"
    mtls = ("tls_server_config: {cert_file: server.crt, key_file: server.key, "
            "client_auth_type: RequireAndVerifyClientCert, client_ca_file: ca.crt}\n")
    auth = "Basic " + base64.b64encode(b"prometheus:s3cret").decode()
    client_tls = ssl.create_default_context(cafile=str(tmp / "ca.crt"))
    client_mtls = ssl.create_default_context(cafile=str(tmp / "ca.crt"))
    client_mtls.load_cert_chain(str(tmp / "client.crt"), str(tmp / "client.key"))

    backend = SimBackend(MIXED_NODE)
    poller = Poller(backend, 10.0)
    backend.open()
    backend.step_to(599.0)
    poller.poll_once()
    backend.step_to(600.0)
    poller.poll_once()
    results = []
    runner, url = await _baseline(poller)
    results.append(("baseline (bare aiohttp)", await _scrapes(url, n)))
    await runner.cleanup()
    for label, config, client, credentials in (
            ("guarded, no web config", None, None, None),
            ("basic auth", users, None, auth),
            ("TLS", tls, client_tls, None),
            ("TLS + client cert + basic auth", mtls + users, client_mtls, auth)):
        path = None
        if config is not None:
            path = tmp / f"{len(results)}.yml"
            path.write_text(config)
        server = await start_server(poller, "127.0.0.1", 0, web_config=LiveWebConfig.from_path(
            str(path) if path else None))
        results.append((label, await _scrapes(server.url, n, client, credentials)))
        await server.close()
    backend.close()
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=2000, help="scrapes per configuration (default 2000)")
    args = parser.parse_args(argv)
    if not 10 <= args.scrapes <= 1_000_000:
        parser.error("--scrapes: from 10 to 1000000")
    results = asyncio.run(run(args.scrapes))
    base = statistics.median(results[0][1])
    print(f"== Scrape latency, {args.scrapes} keep-alive scrapes each (mixed 8-GPU node, OpenMetrics + gzip)")
    print(f"{'configuration':34} {'median us':>10} {'p99 us':>10} {'median / baseline':>18}")
    for label, times in results:
        median = statistics.median(times)
        p99 = sorted(times)[int(len(times) * 0.99) - 1]
        print(f"{label:34} {median:10.0f} {p99:10.0f} {median / base:18.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
