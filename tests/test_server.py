"""HTTP server: routes, content negotiation, gzip, 503 before the first poll, /health, errors."""

from __future__ import annotations

import dataclasses
import gzip
import re

import aiohttp
import pytest
import pytest_asyncio

from exporter.poller import Poller
from exporter.server import start_server, wants_gzip, wants_openmetrics
from snapshot_samples import mps_gpu, rich_snapshot

pytestmark = pytest.mark.asyncio


class Clock:
    def __init__(self, t: float = 50.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Backend:
    name = "nvml"

    def __init__(self, snapshot=None) -> None:
        self.snapshot = snapshot or rich_snapshot()

    def open(self):
        pass

    def poll(self):
        return self.snapshot

    def close(self):
        pass


@pytest_asyncio.fixture
async def served():
    """A server on a free port in front of a poller that has not polled yet."""
    clock = Clock()
    poller = Poller(Backend(), 5.0, monotonic=clock, version="1.2.3")
    server = await start_server(poller, "127.0.0.1", 0)
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        yield poller, server, session, clock
    await server.close()


async def get(session, url, method="GET", **headers):
    headers.setdefault("Accept-Encoding", "identity")  # aiohttp's client asks for gzip unless told otherwise
    async with session.request(method, url, headers=headers) as response:
        return response.status, response.headers, await response.read()


async def test_metrics_503_with_one_line_reason_before_first_poll(served):
    """Before the first poll /metrics is 503 with a single line saying why."""
    poller, server, session, _ = served
    status, headers, body = await get(session, server.url + "metrics")
    assert status == 503
    assert body.count(b"\n") == 1 and b"first poll" in body
    assert headers["Retry-After"] == "5"


async def test_metrics_serves_cached_text_by_default(served):
    """After a poll /metrics returns the exposition's text bytes as text 0.0.4."""
    poller, server, session, _ = served
    poller.poll_once()
    status, headers, body = await get(session, server.url + "metrics")
    assert status == 200
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert body == poller.exposition.text


async def test_openmetrics_when_asked(served):
    """An Accept header naming application/openmetrics-text (as Prometheus sends) gets OpenMetrics."""
    poller, server, session, _ = served
    poller.poll_once()
    accept = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
    status, headers, body = await get(session, server.url + "metrics", Accept=accept)
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert body.rstrip().endswith(b"# EOF")


async def test_openmetrics_with_q_zero_is_refused(served):
    """q=0 means 'not acceptable', so the text format is served."""
    poller, server, session, _ = served
    poller.poll_once()
    _, headers, _ = await get(session, server.url + "metrics", Accept="application/openmetrics-text;q=0")
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")


async def test_gzip_when_accepted(served):
    """Accept-Encoding: gzip yields a gzip body that decompresses to the cached text."""
    poller, server, session, _ = served
    poller.poll_once()
    status, headers, body = await get(session, server.url + "metrics", **{"Accept-Encoding": "gzip, deflate"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(body) == poller.exposition.text
    _, plain_headers, plain = await get(session, server.url + "metrics", **{"Accept-Encoding": "identity"})
    assert "Content-Encoding" not in plain_headers and plain == poller.exposition.text


async def test_head_has_headers_but_no_body(served):
    """HEAD /metrics answers like GET without a body."""
    poller, server, session, _ = served
    poller.poll_once()
    status, headers, body = await get(session, server.url + "metrics", method="HEAD")
    assert status == 200 and body == b""
    assert headers["Content-Type"].startswith("text/plain")
    status, _, body = await get(session, server.url + "health", method="HEAD")
    assert status == 200 and body == b""


async def test_snapshot_json_endpoint(served):
    """/api/v1/snapshot is 503 before a poll, then the poll's snapshot as JSON, rendered once."""
    import json

    poller, server, session, _ = served
    status, _, body = await get(session, server.url + "api/v1/snapshot")
    assert status == 503 and b"no snapshot" in body
    poller.poll_once()
    status, headers, body = await get(session, server.url + "api/v1/snapshot")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    data = json.loads(body)
    expected = poller.exposition.snapshot
    assert [g["uuid"] for g in data["gpus"]] == [g.uuid for g in expected.gpus]
    assert set(data["call_errors"]) == {f"{c}/{e}" for c, e in expected.call_errors}
    assert poller.exposition.snapshot_json() is poller.exposition.snapshot_json()


async def test_unknown_path_404(served):
    """Unknown paths are 404 with a message naming the path and every route that exists."""
    _, server, session, _ = served
    status, _, body = await get(session, server.url + "metricz")
    assert status == 404 and b"/metricz" in body
    for route in (b"/metrics", b"/health", b"/api/v1/snapshot"):
        assert route in body


async def test_other_methods_405_with_allow(served):
    """POST/PUT/DELETE on a known path are 405 and say which methods are allowed."""
    _, server, session, _ = served
    for method in ("POST", "PUT", "DELETE"):
        status, headers, _ = await get(session, server.url + "metrics", method=method)
        assert status == 405 and headers["Allow"] == "GET, HEAD"


async def test_health_transitions(served):
    """/health: 503 before any poll, 200 after one, 503 again once 3 intervals pass without one."""
    poller, server, session, clock = served
    status, _, body = await get(session, server.url + "health")
    assert status == 503 and b"no successful poll yet" in body
    poller.poll_once()
    status, _, body = await get(session, server.url + "health")
    assert status == 200 and body.startswith(b"ok")
    clock.t += 15.0
    status, _, body = await get(session, server.url + "health")
    assert status == 503 and b"15.0s ago" in body


async def test_landing_page_lists_gpus_and_links(served):
    """The landing page shows version, backend, each GPU's name and sharing mode, and the links."""
    poller, server, session, _ = served
    weird = dataclasses.replace(mps_gpu(), name="<script>x</script>")
    poller.backend.snapshot = dataclasses.replace(rich_snapshot(), gpus=(weird,) + rich_snapshot().gpus[1:])
    poller.poll_once()
    status, headers, body = await get(session, server.url)
    page = body.decode()
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "1.2.3" in page and "nvml" in page
    assert "mig+mps" in page and "time_slicing" in page and "GpuIsLost" in page
    assert 'href="/metrics"' in page and 'href="/health"' in page and "docs/metrics.md" in page
    assert "<script>" not in page and "&lt;script&gt;" in page


async def test_landing_page_says_which_backend_why_and_which_source_is_down(served):
    """The backend's reason, and each data source that does not deliver with its reason, escaped."""
    poller, server, session, _ = served
    poller.backend.reason = "--backend auto: DCGM bindings in /opt/dcgm and nv-hostengine at tcp://h:5555 answered"
    poller.poll_once()  # rich_snapshot: dcgm_profiling unavailable, "profiling module busy (-37)"
    _, _, body = await get(session, server.url)
    page = body.decode()
    assert "<p>Backend nvml: --backend auto: DCGM bindings in /opt/dcgm and nv-hostengine at tcp://h:5555 answered.</p>" in page
    assert "<p>Source dcgm_profiling unavailable: profiling module busy (-37).</p>" in page
    assert "Source nvml" not in page and "Source dcgm " not in page  # available ones are not listed


async def test_internal_error_is_one_line_500_without_traceback(served, monkeypatch):
    """An exception inside a handler becomes a one-line 500, never a traceback."""
    poller, server, session, _ = served

    def broken():
        raise RuntimeError("secret internals")

    monkeypatch.setattr(poller, "health", broken)
    status, _, body = await get(session, server.url + "health")
    assert status == 500
    assert body.count(b"\n") == 1 and b"Traceback" not in body and b"secret" not in body


async def test_close_stops_listening():
    """After close() the port no longer accepts connections."""
    poller = Poller(Backend(), 5.0)
    server = await start_server(poller, "127.0.0.1", 0)
    assert server.url.startswith("http://127.0.0.1:") and not server.url.endswith(":0/")
    await server.close()
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            await get(session, server.url + "health")


async def test_negotiation_helpers():
    """Header parsing: q values, case, and '*' not treated as gzip consent."""
    assert wants_openmetrics("Application/OpenMetrics-Text; version=1.0.0")
    assert not wants_openmetrics("text/plain;version=0.0.4")
    assert not wants_openmetrics("application/openmetrics-text;q=bogus")
    assert wants_gzip("br;q=1.0, gzip;q=0.8")
    assert not wants_gzip("gzip;q=0")
    assert not wants_gzip("*")


async def test_landing_page_says_it_simulates_and_links_the_docs_it_serves(served):
    """A simulated exporter says so on its landing page; each doc reference is a link that answers."""
    poller, server, session, _ = served
    poller.backend.snapshot = rich_snapshot()  # has a simulation section
    poller.poll_once()
    _, _, body = await get(session, server.url)
    page = body.decode()
    assert "Simulated GPUs" in page and "no real GPU is read" in page
    links = re.findall(r'href="(/docs/[^"]+)"', page)
    assert "/docs/metrics.md" in links and "/docs/kubernetes.md" in links
    for link in links:
        status, headers, doc = await get(session, server.url + link.lstrip("/"))
        assert status == 200 and headers["Content-Type"].startswith("text/markdown") and doc.startswith(b"# ")
    poller.backend.snapshot = rich_snapshot(simulated=False)
    poller.poll_once()
    _, _, body = await get(session, server.url)
    assert "Simulated" not in body.decode()
