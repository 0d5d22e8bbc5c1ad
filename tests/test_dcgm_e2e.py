"""`exporter serve --backend dcgm` as a process, scraped while its host engine goes away and comes back.

The same path a user takes: the CLI, the poller at real-time pace (60x virtual), the HTTP
server. The scenario's nv-hostengine stops for one virtual minute; every scrape must carry the
GPU and MIG series, DCGM's source must go to 0 and come back by itself, and the A100's
per-instance activity must return after it.
"""

from __future__ import annotations

import time

import pytest

from dcgm_helpers import parse, value, write_scenario
from tests.promstack import Exporter

pytestmark = pytest.mark.e2e


def test_serve_recovers_from_a_host_engine_restart(tmp_path):
    data = {"name": "e2e-dcgm", "duration": "10m",
            "gpus": [{"model": "A100-80GB", "mig": [{"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]}],
            "processes": [{"pid": 71, "cmdline": "python a.py", "gpu": 0, "mig": 0, "memory": "5GiB", "sm_active": 0.7},
                          {"pid": 72, "cmdline": "python b.py", "gpu": 0, "mig": 1, "memory": "5GiB", "sm_active": 0.2}],
            "dcgm": {"faults": [{"kind": "hostengine_down", "at": "2m", "until": "3m"}]}}
    exporter = Exporter(write_scenario(tmp_path, data), speed=60, interval=0.5,
                        extra_args=["--backend", "dcgm", "--dcgm-address", "127.0.0.1:5555"])
    seen = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            series = parse(exporter.metrics())
            t = value(series, "gpushare_simulation_time_seconds")
            seen.append((t, value(series, "gpushare_exporter_source_available", source="dcgm"),
                         value(series, "gpushare_mig_sm_active_ratio", gi="2"), series))
            if t is not None and t >= 320:
                break
            time.sleep(0.25)
    finally:
        exporter.stop()
    assert seen[-1][0] >= 320, "the scenario did not get past the restart in time"
    for t, _, _, series in seen:  # never stops: power, memory, MIG instances, processes
        assert value(series, "gpushare_gpu_power_watts") is not None, t
        assert value(series, "gpushare_mig_memory_used_bytes", gi="2") is not None, t
        assert value(series, "gpushare_process_memory_used_bytes", pid="71") is not None, t
    assert any(130 <= t < 180 and available == 0 for t, available, _, _ in seen)  # gone while down
    assert any(t < 110 and sm == pytest.approx(0.7) for t, _, sm, _ in seen)  # activity before
    after = [(t, available, sm) for t, available, sm, _ in seen if t >= 300]  # 2 min after: reconnected
    print(after)
    assert after and all(available == 1 and sm == pytest.approx(0.7) for _, available, sm in after)
    assert value(seen[-1][3], "gpushare_exporter_build_info", backend="dcgm") == 1
