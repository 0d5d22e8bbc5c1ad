"""Secrets in command lines are never served or logged: the rules, and the whole path through the
simulator (a scenario process started with --api-key=..., --password x, HF_TOKEN=..., https://user:pw@host)
to /metrics (the workload label), /api/v1/snapshot, `exporter snapshot` and the log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from exporter import redact
from exporter.errors import UserError
from exporter.foresight.workload import normalize_cmdline, workload_key, workload_label
from exporter.redact import Redactor, looks_secret, redact_cmdline
from exporter.snapshot_json import dumps
from snapshot_samples import rich_snapshot

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRETS = ("sk-live-4f9a", "hunter2-pw", "hf_Zq81token", "s3cret-pw", "ghp_tok9", "Bearer-value-77")


@pytest.mark.parametrize("cmdline, expected", [
    ("python serve.py --api-key=sk-live-4f9a --port 80", "python serve.py --api-key=*** --port 80"),
    ("python train.py --password hunter2-pw --epochs 3", "python train.py --password *** --epochs 3"),
    ("env HF_TOKEN=hf_Zq81token python run.py", "env HF_TOKEN=*** python run.py"),
    ("python get.py https://bob:s3cret-pw@data.example/x", "python get.py https://***@data.example/x"),
    ("git clone https://ghp_tok9@github.com/o/r", "git clone https://***@github.com/o/r"),
    ("app --db=pg://h/db?sslmode=require&password=s3cret-pw", "app --db=pg://h/db?sslmode=require&password=***"),
    ("curl -H Authorization: Bearer Bearer-value-77 x", "curl -H Authorization: Bearer *** x"),
    ("java -Djavax.net.ssl.keyStorePassword=s3cret-pw -jar a.jar", "java -Djavax.net.ssl.keyStorePassword=*** -jar a.jar"),
    ("python a.py --secretKey X --clientSecret=Y --aws_secret_access_key Z",
     "python a.py --secretKey *** --clientSecret=*** --aws_secret_access_key ***"),
    ("vllm serve m --max-tokens 512 --tokenizer t --max-num-batched-tokens 8192",
     "vllm serve m --max-tokens 512 --tokenizer t --max-num-batched-tokens 8192"),
    ("python x.py --token", "python x.py --token"),
    ("python x.py --password --verbose", "python x.py --password --verbose"),
    ("", ""),
])
def test_builtin_rules(cmdline, expected):
    assert redact_cmdline(cmdline) == expected
    assert redact_cmdline(expected) == expected  # idempotent


@pytest.mark.parametrize("name, secret", [
    ("--api-key", True), ("HF_TOKEN", True), ("DB_PASSWORD", True), ("passwd", True), ("apiKey", True),
    ("--client-secret", True), ("GOOGLE_APPLICATION_CREDENTIALS", True), ("--auth", True),
    ("--max-tokens", False), ("--tokenizer", False), ("--model", False), ("--keep-alive", False),
    ("--passes", False), ("CUDA_VISIBLE_DEVICES", False),
])
def test_secret_names(name, secret):
    assert looks_secret(name) is secret


def test_extra_patterns_replace_matches_or_groups():
    redactor = Redactor([r"sk-[A-Za-z0-9]+", r"--license (\S+)"])
    assert redactor.redact("run sk-abc --license L-1 x") == "run *** --license *** x"


def test_bad_extra_pattern_is_a_user_error():
    with pytest.raises(UserError, match=r"redact_patterns\[1\]: invalid regular expression"):
        redact.configure(["ok", "(unclosed"])
    redact.configure(())


def test_workload_keys_and_labels_never_hold_secrets():
    for cmdline in ("python serve.py --api-key=sk-live-4f9a", "python t.py --password hunter2-pw",
                    "HF_TOKEN=hf_Zq81token python r.py", "python g.py https://bob:s3cret-pw@h/x"):
        key = workload_key(cmdline, "python")
        for text in (key, workload_label(key), normalize_cmdline(cmdline)):
            assert not any(secret in text for secret in SECRETS), text


def test_snapshot_json_redacts_whatever_the_source():
    """A snapshot built elsewhere (another backend, an old file) is redacted on the way out."""
    snap = rich_snapshot()
    gpu = snap.gpus[0]
    proc = gpu.processes[0]
    import dataclasses

    leaky = dataclasses.replace(proc, cmdline="python x.py --api-key=sk-live-4f9a")
    snap = dataclasses.replace(snap, gpus=(dataclasses.replace(gpu, processes=(leaky,)),) + snap.gpus[1:])
    assert "sk-live-4f9a" not in dumps(snap)


SCENARIO = {
    "name": "secrets",
    "duration": "10m",
    "gpus": [{"model": "H100-80GB"}],
    "processes": [
        {"pid": 501, "cmdline": "python serve.py --api-key=sk-live-4f9a --model llama", "gpu": 0, "memory": "2GiB"},
        {"pid": 502, "cmdline": "python train.py --password hunter2-pw", "gpu": 0, "memory": "1GiB"},
        {"pid": 503, "cmdline": "env HF_TOKEN=hf_Zq81token python run.py", "gpu": 0, "memory": "1GiB"},
        {"pid": 504, "cmdline": "python fetch.py https://bob:s3cret-pw@data.example/set", "gpu": 0, "memory": "1GiB",
         "env": {"AWS_SECRET_ACCESS_KEY": "ghp_tok9", "CUDA_VISIBLE_DEVICES": "0"}},
    ],
}


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "secrets.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return path


def _clean(text: str, where: str) -> None:
    leaked = [secret for secret in SECRETS if secret in text]
    assert leaked == [], f"{where} leaks {leaked}"


def test_exporter_snapshot_prints_no_secret(scenario):
    result = subprocess.run([sys.executable, "-m", "exporter", "snapshot", "--simulate", str(scenario), "--at", "30",
                             "--log-level", "debug"], cwd=REPO, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": REPO})
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    cmdlines = {p["pid"]: p["cmdline"] for p in doc["gpus"][0]["processes"]}
    assert cmdlines[501] == "python serve.py --api-key=*** --model llama"
    assert all(set(p["environ"]) <= {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"} for p in doc["gpus"][0]["processes"])
    _clean(result.stdout, "exporter snapshot")
    _clean(result.stderr, "the snapshot log")


def test_serve_shows_no_secret_in_metrics_snapshot_or_log(scenario):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "serve", "--simulate", str(scenario), "--speed", "30",
                             "--interval", "0.5", "--listen", f"127.0.0.1:{port}", "--log-level", "debug"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": REPO, "PYTHONUNBUFFERED": "1"})
    try:
        base = f"http://127.0.0.1:{port}"
        metrics = _wait_for(base + "/metrics", lambda body: "gpushare_process_memory_used_bytes" in body)
        snapshot = _wait_for(base + "/api/v1/snapshot", lambda body: '"pid": 504' in body)
        assert 'workload="python serve.py --api-key=*** --model llama"' in metrics
        _clean(metrics, "/metrics")
        _clean(snapshot, "/api/v1/snapshot")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=20)
    _clean(stderr, "the serve log")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(url: str, ready, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    body = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = response.read().decode()
            if ready(body):
                return body
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} never ready: {body[:300]}")
