"""A server behind a web config: TLS, client certificates (right and wrong), basic auth (right and
wrong credentials), headers, rate limit, SAN allow-list, and reloads without a restart.

Certificates come from trustme (tests/webcerts.py); the server is the real aiohttp server on
127.0.0.1 in front of a poller that has polled once.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from exporter.poller import Poller
from exporter.server import start_server
from exporter.web.guard import HttpLimits
from exporter.web.live import LiveWebConfig
from snapshot_samples import rich_snapshot
from webcerts import HASH, PASSWORD, Pki

pytestmark = pytest.mark.asyncio


class Backend:
    name = "nvml"

    def open(self):
        pass

    def poll(self):
        return rich_snapshot()

    def close(self):
        pass


@pytest.fixture
def pki(tmp_path) -> Pki:
    return Pki(tmp_path / "pki")


def web_config(pki: Pki, text: str) -> str:
    path = pki.dir / "web.yml"
    path.write_text(text)
    return str(path)


@pytest_asyncio.fixture
async def serve():
    """serve(config_path) -> a started server on a free port; all closed at the end."""
    servers = []

    async def start(path: str | None, limits: HttpLimits | None = None):
        poller = Poller(Backend(), 5.0)
        poller.poll_once()
        server = await start_server(poller, "127.0.0.1", 0, web_config=LiveWebConfig.from_path(path), limits=limits)
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.close()


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def fetch(url: str, ssl_context=None, auth: str | None = None, path: str = "metrics"):
    connector = aiohttp.TCPConnector(ssl=ssl_context if ssl_context is not None else False, force_close=True)
    headers = {"Authorization": auth} if auth else {}
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(url + path, headers=headers) as response:
            return response.status, response.headers, await response.read()


TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
MTLS = TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"


async def test_tls_serves_https_with_the_configured_certificate(pki, serve):
    """https works for a client trusting the CA; the URL says https."""
    server = await serve(web_config(pki, TLS))
    assert server.url.startswith("https://127.0.0.1:")
    status, _, body = await fetch(server.url, pki.client_context())
    assert status == 200 and b"gpushare_gpu_up" in body


async def test_plain_http_to_a_tls_port_gets_nothing_and_the_server_lives_on(pki, serve):
    """A plain-HTTP client cannot talk to the TLS port; the server keeps serving TLS clients."""
    server = await serve(web_config(pki, TLS))
    plain = server.url.replace("https://", "http://")
    with pytest.raises(aiohttp.ClientError):
        await fetch(plain)
    assert (await fetch(server.url, pki.client_context()))[0] == 200


@pytest.mark.parametrize("client", ["rogue", None])
async def test_mtls_refuses_a_wrong_or_missing_client_certificate(pki, serve, client):
    """RequireAndVerifyClientCert: a certificate from another CA (same names), or none, ends the connection."""
    server = await serve(web_config(pki, MTLS))
    with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
        await fetch(server.url, pki.client_context(client))
    status, _, _ = await fetch(server.url, pki.client_context("client"))
    assert status == 200  # and the right certificate still works afterwards


async def test_mtls_accepts_the_right_client_certificate(pki, serve):
    server = await serve(web_config(pki, MTLS))
    status, _, body = await fetch(server.url, pki.client_context("client"), path="api/v1/snapshot")
    assert status == 200 and body.startswith(b"{")


async def test_verify_if_given_lets_a_certless_client_in_but_not_a_wrong_cert(pki, serve):
    server = await serve(web_config(pki, TLS + "  client_auth_type: VerifyClientCertIfGiven\n"
                                              "  client_ca_file: ca.crt\n"))
    assert (await fetch(server.url, pki.client_context()))[0] == 200
    with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
        await fetch(server.url, pki.client_context("rogue"))


async def test_min_version_refuses_older_clients(pki, serve):
    server = await serve(web_config(pki, TLS + "  min_version: TLS13\n"))
    old = pki.client_context(maximum_version=ssl.TLSVersion.TLSv1_2)
    with pytest.raises((aiohttp.ClientError, ssl.SSLError)):
        await fetch(server.url, old)
    assert (await fetch(server.url, pki.client_context()))[0] == 200


async def test_client_allowed_sans(pki, serve):
    """Only a client certificate carrying an allowed SAN gets an answer other than 403."""
    server = await serve(web_config(pki, MTLS + "  client_allowed_sans: [10.0.0.7]\n"))
    assert (await fetch(server.url, pki.client_context("client")))[0] == 200
    assert (await fetch(server.url, pki.client_context("stranger")))[0] == 403


USERS = f"basic_auth_users:\n  alice: '{HASH}'\n"


@pytest.mark.parametrize("auth", [None, ("alice", "Wr0ng-pa55"), ("mallory", PASSWORD), ("alice", "")])
async def test_wrong_or_missing_credentials_get_401_with_www_authenticate(pki, serve, auth, caplog):
    """No, wrong or unknown credentials: 401 and a Basic challenge, on every path."""
    server = await serve(web_config(pki, TLS + USERS))
    caplog.set_level(logging.DEBUG)
    for path in ("metrics", "health", "api/v1/snapshot", "", "nope"):
        status, headers, body = await fetch(server.url, pki.client_context(),
                                            basic(*auth) if auth else None, path)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
        assert b"gpushare" not in body
    if auth:
        assert auth[1] == "" or auth[1] not in caplog.text  # credentials never logged
    assert "Authorization" not in caplog.text


async def test_right_credentials_get_in_and_are_never_logged(pki, serve, caplog):
    server = await serve(web_config(pki, TLS + USERS))
    caplog.set_level(logging.DEBUG)
    for _ in range(3):  # the first pays for bcrypt, the rest hit the cache
        status, _, body = await fetch(server.url, pki.client_context(), basic("alice", PASSWORD))
        assert status == 200 and b"gpushare_gpu_up" in body
    assert PASSWORD not in caplog.text and HASH not in caplog.text


async def test_configured_headers_on_every_answer(pki, serve):
    server = await serve(web_config(pki, USERS + "http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
                                               "    Strict-Transport-Security: max-age=63072000\n"))
    for auth in (None, basic("alice", PASSWORD)):
        status, headers, _ = await fetch(server.url, auth=auth)
        assert status in (200, 401)
        assert headers["X-Frame-Options"] == "deny" and headers["Strict-Transport-Security"] == "max-age=63072000"


async def test_rate_limit_answers_429(pki, serve):
    server = await serve(web_config(pki, "rate_limit: {interval: 1h, burst: 2}\n"))
    statuses = [(await fetch(server.url))[0] for _ in range(4)]
    assert statuses == [200, 200, 429, 429]


async def test_users_reload_on_sighup_without_restart(pki, serve):
    """A new password works after reload(); the old one stops working."""
    import bcrypt

    path = web_config(pki, USERS)
    server = await serve(path)
    old, new = basic("alice", PASSWORD), basic("alice", "n3w")
    assert (await fetch(server.url, auth=old))[0] == 200
    Path(path).write_text(f"basic_auth_users:\n  alice: '{bcrypt.hashpw(b'n3w', bcrypt.gensalt(4)).decode()}'\n")
    assert await server.reload("test")
    assert (await fetch(server.url, auth=new))[0] == 200
    assert (await fetch(server.url, auth=old))[0] == 401


async def test_certificate_rotation_is_picked_up_from_the_files(pki, serve):
    """Replacing the certificate and key files switches new connections to them (file watch)."""
    path = web_config(pki, TLS)
    server = await serve(path)
    assert (await fetch(server.url, pki.client_context()))[0] == 200
    for suffix in ("crt", "key"):
        Path(pki.path(f"server.{suffix}")).write_bytes(Path(pki.path(f"other-server.{suffix}")).read_bytes())
    for _ in range(50):  # the watcher looks every second
        if server.stats.reload_timestamp and not server.live.changed():
            try:
                if (await fetch(server.url, pki.client_context(ca="other-ca.crt")))[0] == 200:
                    break
            except aiohttp.ClientError:
                pass
        await asyncio.sleep(0.1)
    assert (await fetch(server.url, pki.client_context(ca="other-ca.crt")))[0] == 200
    with pytest.raises(aiohttp.ClientError):
        await fetch(server.url, pki.client_context())  # the old CA no longer matches


async def test_client_ca_rotation_revokes_the_old_ca(pki, serve):
    """A reload that changes client_ca_file refuses certificates of the old CA on new connections."""
    path = web_config(pki, MTLS)
    server = await serve(path)
    assert (await fetch(server.url, pki.client_context("client")))[0] == 200
    Path(path).write_text(MTLS.replace("ca.crt", "other-ca.crt"))
    assert await server.reload("test")
    assert (await fetch(server.url, pki.client_context("rogue")))[0] == 200
    with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
        await fetch(server.url, pki.client_context("client"))


async def test_bad_reload_keeps_the_previous_config(pki, serve, caplog):
    """A broken file is one WARNING; the old config stays in force and the self-metric says so."""
    path = web_config(pki, USERS)
    server = await serve(path)
    Path(path).write_text("basic_auth_users: {alice: notbcrypt}\n")
    caplog.set_level(logging.INFO)
    assert not await server.reload("test")
    assert server.stats.reload_ok is False
    assert (await fetch(server.url, auth=basic("alice", PASSWORD)))[0] == 200
    def reload_lines():
        return [r for r in caplog.records if r.getMessage().startswith("web config reload")]

    assert len(reload_lines()) == 1 and reload_lines()[0].levelno == logging.WARNING
    assert "\n" not in reload_lines()[0].getMessage()
    assert not await server.reload("test again")
    assert len(reload_lines()) == 1  # the same failure is logged once


async def test_switching_tls_off_needs_a_restart(pki, serve):
    path = web_config(pki, TLS)
    server = await serve(path)
    Path(path).write_text(USERS)
    assert not await server.reload("test")
    assert (await fetch(server.url, pki.client_context()))[0] == 200


async def test_stalled_tls_handshake_is_closed_and_failures_are_not_logged_as_errors(pki, serve, caplog):
    """Half a ClientHello is dropped after --web.read-timeout; failed handshakes leave no ERROR or traceback."""
    caplog.set_level(logging.DEBUG, logger="asyncio")
    caplog.set_level(logging.INFO)
    server = await serve(web_config(pki, MTLS), HttpLimits(read_timeout=0.5))
    host, port = server.url.removeprefix("https://").rstrip("/").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # the start of a ClientHello, then nothing
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 5.0) == b""
    writer.close()
    for client in ("rogue", None):
        with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
            await fetch(server.url, pki.client_context(client))
    assert (await fetch(server.url, pki.client_context("client")))[0] == 200
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info and r.levelno > logging.DEBUG]
