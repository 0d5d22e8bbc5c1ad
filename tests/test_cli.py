"""The exporter CLI: flags, config errors, no-GPU hint, snapshot JSON, clean shutdown on signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from exporter import __version__, cli, commands
from exporter.errors import NoGpuError
from snapshot_samples import rich_snapshot

REPO = Path(__file__).resolve().parent.parent
HINT = "--simulate wan22-h100-mps-together"


class FakeBackend:
    name = "fake"

    def __init__(self, fail_open: Exception | None = None) -> None:
        self.fail_open = fail_open
        self.opened = False
        self.closed = False

    def open(self):
        if self.fail_open is not None:
            raise self.fail_open
        self.opened = True

    def poll(self):
        return rich_snapshot()

    def close(self):
        self.closed = True


def run_main(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys):
    """--version prints the package version and exits 0."""
    code, out, _ = run_main(capsys, "--version")
    assert code == 0 and out.strip() == f"exporter {__version__}"


def test_missing_command(capsys):
    """No subcommand is a usage error: exit 2, one line naming the commands."""
    code, _, err = run_main(capsys, )
    assert code == 2 and err.startswith("exporter: error: missing command") and "serve" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    "flag, value",
    [("--interval", "0"), ("--interval", "soon"), ("--listen", "localhost"), ("--speed", "-1"),
     ("--log-format", "xml"), ("--backend", "cuda"), ("--gpu-timeout", "nan")],
)
def test_bad_flag_values(capsys, flag, value):
    """A bad flag value is one 'exporter: error:' line naming the flag, exit 2, no usage dump."""
    code, _, err = run_main(capsys, "serve", flag, value)
    assert code == 2
    assert err.startswith("exporter: error: serve: argument " + flag) and err.count("\n") == 1


def test_unknown_flag(capsys):
    """An unknown flag is reported the same way."""
    code, _, err = run_main(capsys, "serve", "--colour", "blue")
    assert code == 2 and "--colour" in err and err.startswith("exporter: error:")


def test_bad_config_file(capsys, tmp_path):
    """A config file with a bad value exits 2 naming the file and key."""
    config = tmp_path / "c.yaml"
    config.write_text("interval: -1\n")
    code, _, err = run_main(capsys, "serve", "--config", str(config))
    assert code == 2 and f"{config}: interval:" in err


def test_dcgm_backend_without_bindings(capsys, tmp_path):
    """--backend dcgm where DCGM's bindings are not: one line naming where it looked and what to install."""
    code, _, err = run_main(capsys, "serve", "--backend", "dcgm", "--dcgm-bindings", str(tmp_path),
                            "--listen", "127.0.0.1:0")
    assert code == 2 and err.count("\n") == 1
    assert f"--backend dcgm: DCGM Python bindings not found (looked in {tmp_path})" in err
    assert "datacenter-gpu-manager-4-core" in err


def test_simulate_missing_file(capsys, tmp_path):
    """--simulate with a path that does not exist is a one-line error."""
    code, _, err = run_main(capsys, "serve", "--simulate", str(tmp_path / "none.yaml"))
    assert code == 2 and "none.yaml: no such file" in err


@pytest.mark.parametrize("command", ["serve", "snapshot"])
def test_no_gpu_exits_2_with_simulate_hint(capsys, monkeypatch, command):
    """Without a driver, serve/snapshot print one line with the --simulate command to try, exit 2."""
    monkeypatch.setattr(commands, "make_backend", lambda *a, **k: FakeBackend(NoGpuError("NVML library not found")))
    code, _, err = run_main(capsys, command, "--listen", "127.0.0.1:0") if command == "serve" else run_main(
        capsys, command
    )
    assert code == 2
    assert err.startswith("exporter: error: NVML library not found") and f"exporter {command} {HINT}" in err
    assert err.count("\n") == 1


def test_real_no_gpu_path_in_subprocess():
    """On this GPU-less machine the real NVML backend makes `exporter serve` exit 2 with the hint."""
    pytest.importorskip("exporter.backend.nvml")
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "serve", "--listen", "127.0.0.1:0"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )
    if result.returncode == 0:
        pytest.skip("a GPU driver is present here")
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("exporter: error:") and "--simulate" in last
    assert "Traceback" not in result.stderr


def test_snapshot_prints_json_with_string_keys(capsys, monkeypatch):
    """snapshot prints one poll as JSON: tuple keys become 'a/b', nested dataclasses become objects."""
    backend = FakeBackend()
    monkeypatch.setattr(commands, "make_backend", lambda *a, **k: backend)
    code, out, _ = run_main(capsys, "snapshot")
    assert code == 0 and backend.closed
    data = json.loads(out)
    assert data["call_errors"]["nvmlDeviceGetPowerUsage/GpuIsLost"] == 2
    assert data["simulation"]["oom_kills"] == {"0/": 1, "1/2": 0}
    assert data["gpus"][0]["processes"][1]["pid"] == 201
    assert data["gpus"][0]["xid_errors"] == {"79": 1}


def test_snapshot_at_needs_simulate(capsys):
    """--at without --simulate is a one-line usage error."""
    code, _, err = run_main(capsys, "snapshot", "--at", "30")
    assert code == 2 and "--at" in err and "--simulate" in err


def test_snapshot_at_rejects_negative(capsys):
    """--at must be a non-negative number of seconds."""
    code, _, err = run_main(capsys, "snapshot", "--at", "-5")
    assert code == 2 and "argument --at" in err


SERVE_WITH_FAKE = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from exporter import cli, commands
    from snapshot_samples import rich_snapshot

    class Fake:
        name = "fake"
        def open(self): pass
        def poll(self): return rich_snapshot()
        def close(self): print("backend closed", file=sys.stderr, flush=True)

    commands.make_backend = lambda *a, **k: Fake()
    sys.exit(cli.main(sys.argv[1:]))
    """
)


def start_serving(*extra: str) -> tuple[subprocess.Popen, str]:
    code = SERVE_WITH_FAKE.format(tests=str(REPO / "tests"))
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "serve", "--listen", "127.0.0.1:0", "--interval", "0.05", *extra],
        cwd=REPO, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        if "listening on http://" in line:
            url = line[line.index("http://"):].split()[0]
            return proc, url
    proc.kill()
    raise AssertionError("server did not report its URL: " + proc.stderr.read())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_shuts_down_cleanly_on_signal(sig):
    """serve answers /metrics, then on SIGTERM/SIGINT closes the backend and exits 0."""
    proc, url = start_serving()
    try:
        body = b""
        for _ in range(100):
            try:
                with urllib.request.urlopen(url + "metrics", timeout=5) as response:
                    body = response.read()
                break
            except urllib.error.HTTPError as exc:  # 503 until the first poll lands
                assert exc.code == 503
                time.sleep(0.05)
        assert b"gpushare_gpu_up" in body
        proc.send_signal(sig)
        rest = proc.stderr.read()
        assert proc.wait(timeout=30) == 0
        assert "backend closed" in rest and "Traceback" not in rest
    finally:
        if proc.poll() is None:
            proc.kill()


def test_json_logs_are_json_lines():
    """--log-format json makes every log line a JSON object with level, logger and msg."""
    proc, _ = start_serving("--log-format", "json")
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=30) == 0
    lines = [line for line in rest.splitlines() if line.startswith("{")]
    assert lines, rest
    for line in lines:
        entry = json.loads(line)
        assert {"time", "level", "logger", "msg"} <= set(entry)


def test_nvml_backend_gets_procfs_and_timeout(monkeypatch, tmp_path):
    """--procfs and --gpu-timeout reach the NVML backend's constructor."""
    import exporter.backend.nvml as nvml

    seen = {}

    class Recording:
        def __init__(self, **kwargs):
            seen.update(kwargs)

    monkeypatch.setattr(nvml, "NvmlBackend", Recording)
    settings = commands.load_settings(None, {"procfs": str(tmp_path), "gpu_timeout": 1.5})
    commands.make_backend(settings)
    identifier = seen.pop("identifier")
    assert seen == {"procfs_root": str(tmp_path), "gpu_timeout": 1.5}
    assert identifier.rules == settings.workload_rules


def test_procfs_must_be_a_directory(capsys, tmp_path):
    """A --procfs that is not a directory is a one-line error."""
    code, _, err = run_main(capsys, "serve", "--procfs", str(tmp_path / "missing"))
    assert code == 2 and "not a directory" in err


def test_port_in_use_is_a_one_line_error(capsys, monkeypatch):
    """Listening on a port that is taken exits 2 naming --listen, before any poll (the backend is never
    opened, so no poll output comes before the one line)."""
    import socket

    backend = FakeBackend()
    monkeypatch.setattr(commands, "make_backend", lambda *a, **k: backend)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = run_main(capsys, "serve", "--listen", f"127.0.0.1:{port}")
    assert code == 2 and err.startswith(f"exporter: error: --listen 127.0.0.1:{port}: cannot listen")
    assert err.count("\n") == 1
    assert not backend.opened or backend.closed


def test_snapshot_at_past_the_scenario_end_reads_the_last_state(capsys):
    """--at beyond the scenario's duration reads the state at its end (as serve's clock stops there); it
    used to stop with an internal error (time cannot go back)."""
    code, out, err = run_main(capsys, "snapshot", "--simulate", "a100-40gb-two-3g", "--at", "1800")
    assert code == 0, err
    assert json.loads(out)["simulation"]["time_seconds"] == 900.0  # the scenario's duration: 15m
