"""`exporter snapshot --from URL`: the latest poll of a running exporter, the bytes its
/api/v1/snapshot serves, without opening a driver (the cheap form of the documented
``while sleep 15; do exporter snapshot >> node.jsonl; done`` loop, docs/performance.md)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.e2e


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _exporter(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "exporter", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.fixture(scope="module")
def serving():
    """A simulated exporter that polls once and then not for an hour: its snapshot holds still."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "serve", "--simulate", "k8s-shared-node",
                             "--interval", "3600", "--listen", f"127.0.0.1:{port}"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    body = None
    while time.monotonic() < deadline and body is None:
        if proc.poll() is not None:
            pytest.fail(f"exporter exited early ({proc.returncode}): {proc.stderr.read()}")
        try:
            with urllib.request.urlopen(base + "/api/v1/snapshot", timeout=5) as response:
                body = response.read()
        except OSError:  # not listening yet, or 503 before its first poll
            time.sleep(0.1)
    try:
        assert body is not None, "the exporter never served a snapshot"
        yield base, body
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_prints_the_bytes_the_exporter_serves(serving):
    base, body = serving
    out = _exporter("snapshot", "--from", base)
    assert out.returncode == 0, out.stderr
    assert out.stdout.encode() == body + b"\n"  # one line: appending makes a JSON-lines file
    document = json.loads(out.stdout)
    assert document["gpus"] and document["pod_devices"]  # the scenario's pods, as the exporter saw them
    # the full path is accepted too; --pretty indents the same document
    pretty = _exporter("snapshot", "--from", base + "/api/v1/snapshot/", "--pretty")
    assert pretty.returncode == 0 and pretty.stdout.count("\n") > 10 and json.loads(pretty.stdout) == document


@pytest.mark.parametrize("extra, flag", [(("--simulate", "k8s-shared-node"), "--simulate"), (("--at", "5"), "--at"),
                                         (("--backend", "nvml"), "--backend")])
def test_from_with_a_driver_flag_is_one_line(serving, extra, flag):
    out = _exporter("snapshot", "--from", serving[0], *extra)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith(f"exporter: error: {flag}: not meaningful together with --from URL")
    assert out.stderr.count("\n") == 1


def test_from_nothing_listening_or_not_an_exporter(serving):
    closed = f"http://127.0.0.1:{_free_port()}"
    out = _exporter("snapshot", "--from", closed)
    assert out.returncode == 2 and out.stderr.startswith(f"exporter: error: --from {closed}/api/v1/snapshot: ")
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    # an HTTP server that is not an exporter: its 404 is named, one line
    out = _exporter("snapshot", "--from", serving[0] + "/nothing-here")
    assert out.returncode == 2 and "404" in out.stderr and out.stderr.count("\n") == 1
