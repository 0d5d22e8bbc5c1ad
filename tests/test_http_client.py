"""exporter.http_client against our own secured server: CA file, mTLS, basic auth from a password
file, bearer token file; each failure one line naming the flag, never a secret."""

from __future__ import annotations

import argparse
import asyncio
import json
import threading

import pytest
from aiohttp import web

from exporter.errors import UserError
from exporter.http_client import ClientOptions, add_client_flags, client_options, fetch
from exporter.poller import Poller
from exporter.server import start_server
from exporter.web.live import LiveWebConfig
from snapshot_samples import rich_snapshot
from webcerts import HASH, PASSWORD, Pki


class Backend:
    name = "nvml"

    def open(self):
        pass

    def poll(self):
        return rich_snapshot()

    def close(self):
        pass


class Background:
    """An asyncio loop in a thread running servers, so blocking urllib calls can reach them."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.closers = []

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def exporter(self, web_config: str | None) -> str:
        async def start():
            poller = Poller(Backend(), 5.0)
            poller.poll_once()
            server = await start_server(poller, "127.0.0.1", 0, web_config=LiveWebConfig.from_path(web_config))
            self.closers.append(server.close)
            return server.url

        return self.run(start())

    def bearer_app(self, token: str) -> str:
        async def start():
            async def handler(request):
                if request.headers.get("Authorization") != f"Bearer {token}":
                    return web.Response(status=401, text="no")
                if "query" in request.query:
                    return web.json_response({"status": "error", "error": "parse error at char 3"}, status=400)
                return web.json_response({"status": "success"})

            app = web.Application()
            app.router.add_get("/api/v1/query", handler)
            async def elsewhere(request):
                raise web.HTTPFound("http://example.invalid/x")

            app.router.add_get("/elsewhere", elsewhere)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.closers.append(runner.cleanup)
            return f"http://127.0.0.1:{runner.addresses[0][1]}"

        return self.run(start())

    def close(self):
        for closer in self.closers:
            self.run(closer())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def servers(pki):
    background = Background()
    (pki.dir / "mtls.yml").write_text(f"tls_server_config: {{cert_file: server.crt, key_file: server.key, "
                                      f"client_auth_type: RequireAndVerifyClientCert, client_ca_file: ca.crt}}\n"
                                      f"basic_auth_users: {{alice: '{HASH}'}}\n")
    (pki.dir / "password").write_text(PASSWORD + "\n")
    (pki.dir / "wrong-password").write_text("nope\n")
    (pki.dir / "token").write_text("t0ken-value\n")
    urls = {"mtls": background.exporter(str(pki.dir / "mtls.yml")), "bearer": background.bearer_app("t0ken-value")}
    yield urls
    background.close()


def options(pki, **kw) -> ClientOptions:
    paths = {k: pki.path(v) if k.endswith("_file") and v else v for k, v in kw.items()}
    return ClientOptions(flag="--from", **paths)


def test_mtls_and_basic_auth_from_files(pki, servers):
    body = fetch(servers["mtls"] + "api/v1/snapshot", options(
        pki, ca_file="ca.crt", cert_file="client.crt", key_file="client.key", username="alice",
        password_file="password"))
    assert json.loads(body)["gpus"]


@pytest.mark.parametrize("kw, expected", [
    ({}, "the server's TLS certificate is not trusted"),
    ({"ca_file": "other-ca.crt"}, "not trusted"),
    ({"ca_file": "ca.crt"}, "--from-cert-file"),
    ({"ca_file": "ca.crt", "cert_file": "rogue.crt", "key_file": "rogue.key"}, "--from-cert-file"),
    ({"ca_file": "ca.crt", "cert_file": "client.crt", "key_file": "client.key"}, "answered HTTP 401"),
    ({"ca_file": "ca.crt", "cert_file": "client.crt", "key_file": "client.key", "username": "alice",
      "password_file": "wrong-password"}, "answered HTTP 401"),
    ({"ca_file": "garbage.pem"}, "--from-ca-file"),
    ({"ca_file": "ca.crt", "cert_file": "client.crt", "key_file": "mismatch.key"}, "--from-cert-file"),
    ({"ca_file": "ca.crt", "cert_file": "client.crt", "key_file": "client.key", "username": "alice",
      "password_file": "missing"}, "--from-password-file"),
])
def test_every_failure_is_one_line_naming_the_flag(pki, servers, kw, expected):
    with pytest.raises(UserError) as caught:
        fetch(servers["mtls"] + "metrics", options(pki, **kw))
    message = str(caught.value)
    assert "\n" not in message and message.startswith("--from") and expected in message, message
    assert PASSWORD not in message and "nope" not in message


def test_bearer_token_file(pki, servers):
    assert fetch(servers["bearer"] + "/api/v1/query", options(pki, bearer_token_file="token")) == \
        b'{"status": "success"}'
    with pytest.raises(UserError, match="answered HTTP 401"):
        fetch(servers["bearer"] + "/api/v1/query", options(pki))
    with pytest.raises(UserError, match="answered HTTP 400 Bad Request: parse error at char 3"):
        fetch(servers["bearer"] + "/api/v1/query?query=x(", options(pki, bearer_token_file="token"))


def test_credentials_never_follow_a_redirect_elsewhere(pki, servers):
    with pytest.raises(UserError, match="redirected to http://example.invalid; not followed"):
        fetch(servers["bearer"] + "/elsewhere", options(pki, bearer_token_file="token"))


def test_url_credentials_work_but_are_never_shown(pki, servers):
    url = servers["mtls"].replace("https://", f"https://alice:{PASSWORD.replace(' ', '%20')}@") + "health"
    ok = options(pki, ca_file="ca.crt", cert_file="client.crt", key_file="client.key")
    assert fetch(url, ok).startswith(b"ok")
    with pytest.raises(UserError) as caught:
        fetch(url.replace("alice", "mallory"), ok)
    assert "mallory" not in str(caught.value) and "staple" not in str(caught.value)


def test_flags_define_and_read_back():
    parser = argparse.ArgumentParser()
    add_client_flags(parser, "prometheus", "Prometheus")
    args = parser.parse_args(["--prometheus-ca-file", "ca.pem", "--prometheus-bearer-token-file", "t"])
    opts = client_options(args, "prometheus", timeout=3.0)
    assert (opts.flag, opts.ca_file, opts.bearer_token_file, opts.timeout) == ("--prometheus", "ca.pem", "t", 3.0)
    with pytest.raises(UserError, match="--prometheus-cert-file and --prometheus-key-file: give both"):
        client_options(parser.parse_args(["--prometheus-cert-file", "c.pem"]), "prometheus")


def test_recommend_reads_a_secured_exporter_with_its_flags(pki, servers, capsys):
    """`exporter recommend --from https://...` with --from-ca-file, a client certificate and basic auth."""
    pytest.importorskip("scipy")
    from exporter.cli import main

    url = servers["mtls"].rstrip("/")
    secured = ["--from-ca-file", pki.path("ca.crt"), "--from-cert-file", pki.path("client.crt"),
               "--from-key-file", pki.path("client.key"), "--from-username", "alice",
               "--from-password-file", pki.path("password")]
    assert main(["recommend", "--from", url, *secured, "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["workloads"] and any(url in source for source in plan["sources"]), plan["sources"]
    assert main(["recommend", "--from", url, *secured[:6], "--format", "json"]) == 2  # no basic auth
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"exporter: error: --from {url}: answered HTTP 401") and "\n" not in err, err
    assert PASSWORD not in err
