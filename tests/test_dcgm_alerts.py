"""The MIG advice alerts fire on A100 and A30 through the DCGM backend, from the exporter's own output.

A scenario runs for 7 virtual hours through ``exporter serve``'s poller (forecasts included),
one poll every 5 minutes; every series it exports becomes promtool input, and the shipped
recording and advice rules are evaluated on it. Through DCGM the compute-bound instance and
the oversized one are found; through NVML (no activity on these GPUs) neither alert can fire,
which is why docs/alerts.md lists them as needing an activity source.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from dcgm_helpers import parse, write_scenario
from exporter.backend.choose import DcgmOptions
from exporter.backend.sim import SimBackend
from exporter.commands.serve import make_poller
from exporter.foresight.state import Foresight

ALERTS = Path(__file__).resolve().parent.parent / "alerts"
STEP = 300  # seconds between polls (and between promtool samples)
HOURS = 7

LAYOUTS = {
    # (profile, start) of the busy instance, then of the oversized one
    "A100-80GB": [("3g.40gb", 0), ("3g.40gb", 4)],
    "A30": [("2g.12gb", 0), ("2g.12gb", 2)],
}


def advice_scenario(model: str) -> dict:
    busy, idle = LAYOUTS[model]
    return {"name": f"advice-{model}", "duration": f"{HOURS + 1}h",
            "gpus": [{"model": model, "mig": [{"profile": busy[0], "start": busy[1]},
                                               {"profile": idle[0], "start": idle[1]}]}],
            "processes": [
                # Trains flat out: SMs 96 % busy, most of the instance's memory in use.
                {"pid": 4100, "cmdline": "python train.py --epochs 90", "gpu": 0, "mig": 0,
                 "memory": "9GiB", "sm_active": 0.96, "tensor_active": 0.7},
                # A small embedding service: 1 GiB and 15 % of the SMs of its instance.
                {"pid": 4200, "cmdline": "python embed.py --port 8080", "gpu": 0, "mig": 1,
                 "memory": "1GiB", "sm_active": 0.15}]}


def history(path: Path, backend: str) -> dict[tuple, list[float]]:
    """Every exported series (self-metrics aside) sampled every STEP virtual seconds."""
    sim = SimBackend(path, backend=backend, dcgm=DcgmOptions(interval=STEP))
    poller = make_poller(sim, float(STEP), Foresight())
    sim.open()
    series: dict[tuple, list] = {}
    try:
        points = HOURS * 3600 // STEP + 1
        for n in range(points):
            sim.step_to(n * STEP)
            assert poller.poll_once(), poller.stats.last_error
            text = poller.exposition.body(openmetrics_format=False, gzipped=False).decode()
            for key, value in parse(text).items():
                if not key[0].startswith("gpushare_exporter_"):
                    series.setdefault(key, [None] * points)[n] = value
    finally:
        sim.close()
    return series


def promtool_input(series: dict[tuple, list[float]]) -> list[dict]:
    out = []
    for (name, labels), values in sorted(series.items()):
        text = ",".join(f'{k}="{v}"' for k, v in (("job", "gpushare"), ("instance", "node1:18474"), *labels))
        out.append({"series": f"{name}{{{text}}}",
                    "values": " ".join("_" if v is None else repr(float(v)) for v in values)})
    return out


def firing(tmp_path: Path, series, promtool: str, expected: list[dict]) -> subprocess.CompletedProcess:
    test = {"rule_files": [str(ALERTS / "gpushare-recording.yml"), str(ALERTS / "gpushare-advice.yml")],
            "evaluation_interval": "1m", "group_eval_order": ["gpushare.recording", "gpushare.advice"],
            "tests": [{"interval": f"{STEP}s", "input_series": promtool_input(series),
                       "promql_expr_test": [{
                           "expr": 'count by (alertname, gpu, gi, profile) '
                                   '(ALERTS{alertstate="firing", alertname=~"MigInstance.*"})',
                           "eval_time": f"{HOURS}h", "exp_samples": expected}]}]}
    path = tmp_path / "advice.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    return subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("model", sorted(LAYOUTS))
def test_mig_advice_alerts_fire_through_dcgm(tmp_path, promtool, model):
    path = write_scenario(tmp_path, advice_scenario(model))
    series = history(path, "dcgm")
    gis = {dict(labels)["profile"] + "@" + dict(labels)["placement_start"]: dict(labels)["gi"]
           for (name, labels) in series if name == "gpushare_mig_info"}
    (busy_profile, busy_start), (idle_profile, idle_start) = LAYOUTS[model]
    expected = [
        {"labels": f'{{alertname="MigInstanceComputeBound", gpu="0", gi="{gis[f"{busy_profile}@{busy_start}"]}", '
                   f'profile="{busy_profile}"}}', "value": 1},
        {"labels": f'{{alertname="MigInstanceOversized", gpu="0", gi="{gis[f"{idle_profile}@{idle_start}"]}", '
                   f'profile="{idle_profile}"}}', "value": 1},
    ]
    result = firing(tmp_path, series, promtool, expected)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("model", sorted(LAYOUTS))
def test_mig_advice_alerts_cannot_fire_through_nvml(tmp_path, promtool, model):
    """Same GPU, NVML only: no gpushare_mig_sm_active_ratio, so neither advice alert fires."""
    series = history(write_scenario(tmp_path, advice_scenario(model)), "nvml")
    assert not [name for name, _ in series if name == "gpushare_mig_sm_active_ratio"]
    result = firing(tmp_path, series, promtool, [])
    assert result.returncode == 0, result.stdout + result.stderr
