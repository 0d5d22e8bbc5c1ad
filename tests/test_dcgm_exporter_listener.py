"""The --compat-listen listener (exporter.compat.listener): the dcgm-exporter text on /metrics in the
text format whatever the scraper asks, 503 before the first poll, and the main listener's web config
(TLS, basic auth) in front of it: a second port is no way around the credentials."""

from __future__ import annotations

import gzip

import pytest
import pytest_asyncio

from exporter.compat.dcgm_exporter import DcgmExporterOutput
from exporter.compat.listener import start_compat_server
from exporter.poller import Poller
from exporter.server import start_server
from exporter.web.live import LiveWebConfig
from test_web_security import TLS, USERS, Backend, basic, fetch, pki, web_config  # noqa: F401 - pki is a fixture
from webcerts import PASSWORD

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def listeners():
    """listeners(config_path, poll=True) -> (main server, compat server, output); closed at the end."""
    servers = []

    async def start(path: str | None, poll: bool = True):
        output = DcgmExporterOutput("node-a")
        poller = Poller(Backend(), 5.0, observers=[output.observe])
        if poll:
            poller.poll_once()
        live = LiveWebConfig.from_path(path)
        main = await start_server(poller, "127.0.0.1", 0, web_config=live)
        compat = await start_compat_server(poller, output, "127.0.0.1:0", live)
        servers.extend([main, compat])
        return main, compat, output

    yield start
    for server in servers:
        await server.close()


async def test_metrics_are_the_dcgm_exporter_text_in_format_0_0_4(listeners):
    _, compat, output = await listeners(None)
    status, headers, body = await fetch(compat.url)
    assert status == 200 and body == output.body and body.startswith(b"# HELP DCGM_FI_")
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"


async def test_openmetrics_accept_still_gets_text_and_gzip_when_asked(listeners):
    import aiohttp

    _, compat, output = await listeners(None)
    headers = {"Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
               "Accept-Encoding": "gzip"}
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        async with session.get(compat.url + "metrics", headers=headers) as response:
            raw = await response.read()
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert response.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(raw) == output.body


async def test_503_before_the_first_poll(listeners):
    _, compat, _ = await listeners(None, poll=False)
    status, headers, _ = await fetch(compat.url)
    assert status == 503 and "Retry-After" in headers


async def test_the_compat_port_needs_the_same_credentials_over_the_same_tls(pki, listeners):
    path = web_config(pki, TLS + USERS)
    main, compat, output = await listeners(path)
    assert compat.url.startswith("https://")
    for server in (main, compat):
        assert (await fetch(server.url, pki.client_context()))[0] == 401
        assert (await fetch(server.url, pki.client_context(), basic("alice", "wrong")))[0] == 401
    status, _, body = await fetch(compat.url, pki.client_context(), basic("alice", PASSWORD))
    assert status == 200 and body == output.body
