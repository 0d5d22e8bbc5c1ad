"""End to end: `exporter serve --simulate` as a real subprocess, scraped over HTTP.

The fault demo is played at 60x speed: a flaky power call, a 3 s hang on one GPU, a window in
which every call fails, XIDs, MPS server restarts, a live MIG repartition, processes vanishing
between list and query, and finally a lost GPU. Throughout, /metrics must answer 200 with a
page promtool accepts, /health must tell the truth, and the exporter must follow each change
without a restart.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.conftest import REPO, SCENARIOS

pytestmark = pytest.mark.e2e

SAMPLE = re.compile(r'^(\w+)(?:\{([^}]*)\})? (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) for every sample line of a text exposition."""
    out = []
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match:
            name, labels, value = match.groups()
            out.append((name, dict(LABEL.findall(labels or "")), float(value)))
    return out


def value(page, name, **labels) -> float | None:
    for sample_name, sample_labels, sample_value in page:
        if sample_name == name and all(sample_labels.get(k) == v for k, v in labels.items()):
            return sample_value
    return None


@pytest.fixture
def serve_faults_demo():
    """The exporter serving the fault demo at 60x; yields its base URL, stops it at the end."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "serve", "--simulate", str(SCENARIOS / "faults-demo.yaml"),
         "--speed", "60", "--interval", "0.5", "--gpu-timeout", "1", "--listen", f"127.0.0.1:{port}",
         "--log-format", "json"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"exporter exited early ({proc.returncode}): {proc.stderr.read()}")
        try:
            if get(base + "/health")[0] == 200:
                break
        except OSError:
            pass
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("exporter never became healthy")
    yield base, proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_serving_survives_every_fault_and_follows_changes(serve_faults_demo, promtool):
    """Through the whole fault demo every scrape is 200, lint-clean, and tracks the scenario's state."""
    base, proc = serve_faults_demo
    pages = []  # (sim time, parsed page)
    linted = 0
    deadline = time.monotonic() + 40  # the 10 min scenario lasts 10 s at 60x; allow for the 3 s hang
    while time.monotonic() < deadline:
        status, text = get(base + "/metrics")
        assert status == 200, text
        page = samples(text)
        sim_time = value(page, "gpushare_simulation_time_seconds")
        assert sim_time is not None
        if len(pages) % 10 == 0:
            lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
            assert lint.returncode == 0, lint.stdout + lint.stderr
            linted += 1
        health_status, health = get(base + "/health")
        assert health_status == 200, health  # polls keep succeeding even while GPUs fail
        pages.append((sim_time, page))
        if sim_time >= 600:
            break
        time.sleep(0.1)
    assert pages and pages[-1][0] >= 600, "the scenario did not reach its end"
    assert linted >= 3

    def at(lo, hi):
        return [page for t, page in pages if lo <= t < hi]

    # The 3 s hang of GPU 1 (from 2m) shows as GPU 1 down with GPU 0 still read.
    hung = [p for p in at(120, 400) if value(p, "gpushare_gpu_up", gpu="1") == 0]
    assert hung, "the hung GPU was never reported down"
    assert all(value(p, "gpushare_gpu_up", gpu="0") == 1 for p in hung
               if value(p, "gpushare_simulation_time_seconds") < 150)
    # XIDs are counted once each after 3m.
    late = at(200, 480)
    assert late and value(late[-1], "gpushare_gpu_xid_errors_total", gpu="1", xid="43") == 1
    # MPS server pid changes after the restart at 4m, without restarting the exporter.
    def server_pids(lo, hi):
        return {labels["pid"] for page in at(lo, hi) for name, labels, _ in page
                if name == "gpushare_mps_server_info" and labels["gpu"] == "0"}

    before, after = server_pids(60, 240), server_pids(250, 480)
    assert before and after and before.isdisjoint(after)
    # GPU 1 is repartitioned at 5m: three instances (3g, 2g, 1g) become two 3g.20gb.
    profiles_before = {s[1]["profile"] for p in at(60, 110) for s in p if s[0] == "gpushare_mig_info"}
    profiles_after = {s[1]["profile"] for p in at(330, 480) for s in p if s[0] == "gpushare_mig_info"}
    assert profiles_before == {"3g.20gb", "2g.10gb", "1g.5gb"}
    assert profiles_after == {"3g.20gb"}
    # GPU 0 is lost at 8m: reported down, GPU 1 still up, scrape still whole.
    lost = at(500, 601)
    assert lost and value(lost[-1], "gpushare_gpu_up", gpu="0") == 0
    assert value(lost[-1], "gpushare_gpu_up", gpu="1") == 1
    assert value(lost[-1], "gpushare_exporter_poll_errors_total", call="nvmlDeviceGetPowerUsage",
                 error="Unknown") >= 1
    assert proc.poll() is None, "the exporter died"


def test_sigterm_exits_cleanly(serve_faults_demo):
    """SIGTERM stops the server with exit code 0 and no traceback."""
    _, proc = serve_faults_demo
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert "Traceback" not in proc.stderr.read()


def serve_until(args: list[str], cwd, sim_seconds: float, timeout: float = 40.0) -> list[tuple[str, dict, float]]:
    """Run `exporter serve` with ``args`` until its simulation reaches ``sim_seconds``; the last page.
    The callers play at 120x with a poll every 0.25 s: 30 simulated seconds a poll, 7 minutes in 3.5 s."""
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "serve", *args, "--listen", f"127.0.0.1:{port}"],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    page = []
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"exporter exited ({proc.returncode}): {proc.stderr.read()}")
            try:
                status, text = get(f"http://127.0.0.1:{port}/metrics")
            except OSError:
                time.sleep(0.05)
                continue
            page = samples(text) if status == 200 else []
            if (value(page, "gpushare_simulation_time_seconds") or 0) >= sim_seconds:
                return page
            time.sleep(0.1)
        pytest.fail("the simulation did not get far enough")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    return page


def pods_of(page, name="gpushare_process_memory_used_bytes"):
    return {(labels["namespace"], labels["pod"], labels["container"]) for n, labels, _ in page
            if n == name and labels["pod"]}


EXPECTED_AT_7M = {("serving", "llm-7d9f8b6c4-x2k9p", "vllm"), ("batch", "embed-29047446-b9wzn", "embed"),
                  ("research", "notebook-0", "jupyter"), ("video", "wan-render-a", "render"),
                  ("video", "wan-render-a", "upscale"), ("video", "wan-render-b", "render"),
                  ("vision", "detect-5f6g7c8d9-q2w3e", "detector"), ("kube-system", "gpu-burn-node-1", "burn")}


def test_serve_a_shipped_scenario_by_name_shows_pod_labels(tmp_path):
    """From a directory without the checkout, `--simulate k8s-shared-node` (a shipped scenario) serves
    per-container process series with pod labels and per-pod series that add up to the GPUs'."""
    page = serve_until(["--simulate", "k8s-shared-node", "--speed", "120", "--interval", "0.25"], tmp_path, 420)
    assert pods_of(page) >= EXPECTED_AT_7M
    assert all(labels["pid"] == "" for n, labels, _ in page
               if n == "gpushare_process_memory_used_bytes" and labels["pod"])
    used = {labels["uuid"]: v for n, labels, v in page if n == "gpushare_gpu_memory_used_bytes"}
    for uuid in used:
        rows = [v for n, labels, v in page if n == "gpushare_pod_memory_used_bytes" and labels["uuid"] == uuid
                and labels["gi"] == ""]
        mig = any(n == "gpushare_mig_info" and labels["uuid"] == uuid for n, labels, _ in page)
        if rows and not mig:
            assert sum(rows) == pytest.approx(used[uuid])
    assert value(page, "gpushare_namespace_energy_joules_total", namespace="serving") > 0


def test_serve_names_pods_through_a_real_api_server(tmp_path):
    """The API-server client inside `serve`: pods named from a (fake) API server over HTTP, joined on the
    cgroups of the simulated processes; the in-process scenario pods are not used."""
    from exporter.sim.kube import FakeApiServer, pod_objects
    from exporter.sim.scenario import load_scenario

    api = FakeApiServer(pod_objects(load_scenario(SCENARIOS / "k8s-shared-node.yaml"))).start()
    try:
        page = serve_until(["--simulate", str(SCENARIOS / "k8s-shared-node.yaml"), "--speed", "120",
                            "--interval", "0.25", "--kubernetes-api", api.url, "--pod-resources-socket", "off",
                            "--node-name", "sim-node"], tmp_path, 420)
    finally:
        api.close()
    assert pods_of(page) >= EXPECTED_AT_7M
    assert any("watch=1" in r for r in api.requests) and any("watch" not in r for r in api.requests)
