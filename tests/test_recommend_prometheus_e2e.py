"""`recommend --prometheus` against a real Prometheus holding backfilled exporter history."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

from exporter.recommend.observed import ObservedFleet
from exporter.recommend.prometheus_input import load_prometheus

pytestmark = pytest.mark.e2e
GIB = 2**30


def _openmetrics(now: int) -> str:
    """One H100 node over the last hour: a server all along, a 10-minute job that peaks at the end."""
    start = now - 3600
    base = 'instance="n1:9835",job="gpushare",gpu="0",uuid="GPU-a"'
    lines = ["# TYPE gpushare_gpu_info gauge"]
    lines += [f'gpushare_gpu_info{{{base},name="NVIDIA H100 80GB HBM3",mig_mode="false",sharing="mps"}} 1 {t}'
              for t in range(start, now, 15)]
    lines.append("# TYPE gpushare_process_memory_used_bytes gauge")
    job = range(start + 600, start + 1200, 15)
    lines += [f'gpushare_process_memory_used_bytes{{{base},gi="",pid="1",process="train",sharing="mps"}} '
              f"{(30 if t >= start + 1100 else 10) * GIB} {t}" for t in job]
    lines += [f'gpushare_process_memory_used_bytes{{{base},gi="",pid="2",process="serve",sharing="mps"}} '
              f"{20 * GIB} {t}" for t in range(start, now, 15)]
    lines.append("# TYPE gpushare_process_sm_utilization_ratio gauge")
    lines += [f'gpushare_process_sm_utilization_ratio{{{base},gi="",pid="1",process="train",sharing="mps"}} 0.5 {t}'
              for t in job]
    lines.append("# TYPE gpushare_gpu_sm_active_ratio gauge")
    lines += [f"gpushare_gpu_sm_active_ratio{{{base}}} 0.6 {t}" for t in range(start, now, 15)]
    return "\n".join(lines + ["# EOF"]) + "\n"


def _binary(name: str) -> str:
    """Like conftest.require_binary: skipped on a developer machine, a failure under CI."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} not installed; .ci/run should have installed it")
        pytest.skip(f"{name} not installed (apt-get install prometheus)")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def prometheus(tmp_path, promtool):
    """A Prometheus on 127.0.0.1 serving a TSDB backfilled with promtool; its URL."""
    binary = _binary("prometheus")
    (tmp_path / "history.om").write_text(_openmetrics(int(time.time())))
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(tmp_path / "history.om"),
                    str(tmp_path / "data")], check=True, capture_output=True, timeout=120)
    (tmp_path / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
    port = _free_port()
    proc = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(150):
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("prometheus did not become ready")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_real_prometheus_history(prometheus):
    """The real PromQL: peaks from max_over_time, SMs, the MPS pair running together, and the job's
    timeline ending when its samples stop (not 5 minutes later, Prometheus's lookback)."""
    fleet = ObservedFleet()
    load_prometheus(prometheus, "2h", fleet)
    demand = fleet.to_demand(margin=0.0)
    by_name = {w.name: w for w in demand.workloads}
    train, serve = by_name["n1:9835:train[1]"], by_name["n1:9835:serve[2]"]
    assert train.peak_memory_bytes == 30 * GIB and serve.peak_memory_bytes == 20 * GIB
    assert train.compute_sms == pytest.approx(0.5 * 132)
    assert serve.timeline is None  # alive for the whole window: no start or end seen
    assert 585 <= train.duration_seconds <= 630  # 600 s of samples, give or take one step
    (shared,) = demand.shared
    assert set(shared.workloads) == {train.name, serve.name}
