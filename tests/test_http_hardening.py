"""The HTTP server against hostile clients: malformed requests, half-sent and idle connections,
too many connections, request bodies, and arbitrary bytes (hypothesis).

Every malformed request gets a 4xx and at most one WARNING line per client per window, never
a traceback; connections that send nothing or half a request are closed; the server keeps
answering scrapes throughout.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.poller import Poller
from exporter.server import start_server
from exporter.web.guard import ConnectionGuard, HttpLimits, WarnLimiter
from snapshot_samples import rich_snapshot

FAST = HttpLimits(max_connections=8, read_timeout=0.5, idle_timeout=1.0, write_timeout=5.0)


class Backend:
    name = "nvml"

    def open(self):
        pass

    def poll(self):
        return rich_snapshot()

    def close(self):
        pass


@pytest_asyncio.fixture
async def server():
    poller = Poller(Backend(), 5.0)
    poller.poll_once()
    server = await start_server(poller, "127.0.0.1", 0, limits=FAST)
    yield server
    await server.close()


def address(server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    return host, int(port)


async def exchange(server, data: bytes, timeout: float = 5.0) -> bytes:
    """Send ``data``, then read until the server closes the connection (or ``timeout``)."""
    reader, writer = await asyncio.open_connection(*address(server))
    try:
        writer.write(data)
        await writer.drain()
        chunks = []
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), timeout)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            if b"\r\n\r\n" in b"".join(chunks) and b"Connection: close" not in b"".join(chunks):
                head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
                length = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")]
                if length and len(body) >= length[0]:
                    return b"".join(chunks)
    finally:
        writer.close()


async def status_of(server, data: bytes) -> int:
    answer = await exchange(server, data)
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


async def scrape_ok(server) -> bool:
    return await status_of(server, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") == 200


MALFORMED = [
    b"GARBAGE\r\n\r\n",
    b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(200)) + b"\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n",
    b"GET / HTTP/9.9\r\n\r\n",
    b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
    b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\0" * 40,  # a TLS ClientHello to the plain port
    b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
]


@pytest.mark.asyncio
async def test_malformed_requests_get_4xx_one_warning_and_no_traceback(server, caplog):
    """Each malformed request is a 4xx (or a closed connection); one WARNING for the client; no traceback."""
    caplog.set_level(logging.DEBUG, logger="exporter")
    caplog.set_level(logging.INFO)
    for data in MALFORMED * 3:
        status = await status_of(server, data)
        assert status == 0 or 400 <= status < 500, data[:40]
    assert await scrape_ok(server)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) <= 1, [r.getMessage() for r in warnings]
    assert "Traceback" not in caplog.text and not any(r.exc_info for r in caplog.records if r.levelno > logging.DEBUG)
    assert server.stats.rejected["malformed"] >= len(MALFORMED)


@pytest.mark.asyncio
async def test_half_sent_request_is_closed_after_the_read_timeout(server):
    """Headers that never end: the connection is closed about read_timeout after the first byte."""
    reader, writer = await asyncio.open_connection(*address(server))
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # no blank line
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 5.0) == b""  # closed by the server
    writer.close()
    assert server.stats.rejected["read_timeout"] == 1


@pytest.mark.asyncio
async def test_slow_drip_request_is_closed_too(server):
    """A client sending one byte every 0.2 s cannot keep a connection beyond the read timeout."""
    reader, writer = await asyncio.open_connection(*address(server))
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        for byte in b"GET /metrics HTTP/1.1\r\nHost: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n":
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.2)
    except ConnectionError:  # the server closed it while we were still dripping
        pass
    else:
        assert await asyncio.wait_for(reader.read(), 5.0) == b""
    assert loop.time() - started < 4.0
    assert server.stats.rejected["read_timeout"] == 1
    writer.close()


@pytest.mark.asyncio
async def test_idle_connection_is_closed_after_the_idle_timeout(server):
    """A connection that sends nothing is closed after idle_timeout; a keep-alive one too."""
    reader, writer = await asyncio.open_connection(*address(server))
    assert await asyncio.wait_for(reader.read(), 5.0) == b""
    writer.close()
    reader, writer = await asyncio.open_connection(*address(server))
    writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), 5.0)  # the answer, then the close
    assert answer.startswith(b"HTTP/1.1 200")
    writer.close()


@pytest.mark.asyncio
async def test_request_body_is_refused_before_it_is_read(server):
    """A request announcing a 1 GB body is answered 413 at once and the connection closed."""
    answer = await exchange(server, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\nabc")
    assert answer.startswith(b"HTTP/1.1 413")
    answer = await exchange(server, b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n")
    assert answer.startswith(b"HTTP/1.1 413")
    answer = await exchange(server, b"PUT /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n"
                                    b"Expect: 100-continue\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 417") and b"100 Continue" not in answer
    assert await scrape_ok(server)


@pytest.mark.asyncio
async def test_connection_cap_makes_room_by_closing_idle_connections(server):
    """At the cap a new connection closes the longest-idle one; scrapes keep working."""
    idle = [await asyncio.open_connection(*address(server)) for _ in range(FAST.max_connections)]
    await asyncio.sleep(0.05)
    assert await scrape_ok(server)
    closed = 0
    for reader, writer in idle:
        try:
            if await asyncio.wait_for(reader.read(), 0.2) == b"":
                closed += 1
        except asyncio.TimeoutError:
            pass
        writer.close()
    assert closed >= 1
    assert server.stats.open_connections <= FAST.max_connections


def test_cap_refuses_when_every_connection_is_busy():
    """With every connection in the middle of a request, a newcomer is refused (503 and close)."""

    class Conn:
        def __init__(self, busy):
            self.busy_since, self.partial_since, self.last_done, self.client = busy, None, 0.0, "10.0.0.1"

        def force_close(self):
            self.closed = True

    guard = ConnectionGuard(HttpLimits(max_connections=2), clock=lambda: 10.0)
    busy = [Conn(1.0), Conn(2.0)]
    assert all(guard.admit(c) for c in busy)
    assert not guard.admit(Conn(None))
    assert guard.stats.rejected["too_many_connections"] == 1


def test_warn_limiter_one_line_per_client_per_window(caplog):
    now = [0.0]
    limiter = WarnLimiter(window=60.0, clock=lambda: now[0])
    caplog.set_level(logging.WARNING)
    for _ in range(100):
        limiter.warn("10.0.0.1", "bad request from %s", "10.0.0.1")
    limiter.warn("10.0.0.2", "bad request from %s", "10.0.0.2")
    assert len(caplog.records) == 2
    now[0] = 61.0
    limiter.warn("10.0.0.1", "bad request from %s", "10.0.0.1")
    assert len(caplog.records) == 3 and "99 more" in caplog.records[-1].getMessage()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(
    st.binary(max_size=300),
    st.builds(lambda m, p, v, h: b"%s %s %s\r\n%s\r\n" % (m, p, v, h),
              st.sampled_from([b"GET", b"HEAD", b"POST", b"DELETE", b"OPTIONS", b"G\x00T", b""]),
              st.sampled_from([b"/", b"/metrics", b"/health", b"/api/v1/snapshot", b"/%00", b"*", b"/../../etc",
                               b"http://x/metrics", b"/metrics?x=" + b"y" * 100]),
              st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1x", b""]),
              st.lists(st.sampled_from([b"Host: x", b"Accept: */*", b"Accept-Encoding: gzip;q=bad",
                                        b"Content-Length: 5", b"Transfer-Encoding: chunked", b"Connection: close",
                                        b"Expect: 100-continue", b"Authorization: Basic !!!", b"Upgrade: websocket",
                                        b"Connection: Upgrade", b"X: \xff\xfe"]),
                       max_size=5).map(lambda hs: b"".join(h + b"\r\n" for h in hs))),
))
def test_any_bytes_get_a_4xx_or_an_answer_never_a_500(data):
    """Arbitrary request bytes: an HTTP answer below 500 or a closed connection; then a scrape works."""

    async def run():
        poller = Poller(Backend(), 5.0)
        poller.poll_once()
        server = await start_server(poller, "127.0.0.1", 0, limits=FAST)
        try:
            answer = await exchange(server, data + b"\r\n", timeout=3.0)
            if answer.startswith(b"HTTP/1.1 "):
                assert int(answer.split(b" ", 2)[1]) < 500, answer[:200]
            assert await scrape_ok(server)
        finally:
            await server.close()

    asyncio.run(run())


@pytest.mark.asyncio
async def test_warnings_never_quote_the_clients_bytes(server, caplog):
    """A malformed header line holding a credential is answered 400; the warning does not repeat it."""
    caplog.set_level(logging.DEBUG)
    for data in (b"GET / HTTP/1.1\r\nAuthorization Basic czNjcjN0\r\n\r\n", b"czNjcjN0 / HTTP/1.1\r\n\r\n",
                 b"GET /" + b"czNjcjN0" * 2000 + b" HTTP/1.1\r\n\r\n"):
        status = await status_of(server, data)
        assert status == 0 or 400 <= status < 500
    assert "czNjcjN0" not in "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.INFO)
