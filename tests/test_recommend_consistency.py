"""No verdict of a plan is contradicted by its own numbers (exporter.recommend.plan_check), on every
shipped workload file and on the histories the simulator really produces; one number format in
every text output."""

from __future__ import annotations

import copy
import json

import pytest

from exporter.recommend import command, plan_check
from tests.sim_snapshots import SCENARIOS, shared_series

REPO = SCENARIOS.parent.parent
WORKLOAD_FILES = sorted((REPO / "examples" / "workloads").glob("*.yaml"))
# Every scenario with a fleet the planner reads (fault demos aside), watched every 30 s.
HISTORIES = ["churn-node-a", "churn-node-b", "k8s-shared-node", "h100-mixed-node", "a100-40gb-two-3g",
             "h200-mig", "wan22-h100-mps-staggered", "wan22-h100-mps-together", "wan22-h100-mps-solo"]


def run(capsys, *args) -> str:
    assert command.main(list(args)) == 0
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def series(run_shared_dir):
    """scenario -> snapshot series file written from the simulator (played once per run with
    test_recommend_operator's fleet, four of the same scenarios at the same times)."""
    return {name: shared_series(run_shared_dir, SCENARIOS / f"{name}.yaml", [float(t) for t in range(0, 1800, 30)])
            for name in HISTORIES}


@pytest.mark.parametrize("path", WORKLOAD_FILES, ids=lambda p: p.stem)
def test_shipped_workload_files_give_plans_that_never_contradict_themselves(path, capsys):
    doc = json.loads(run(capsys, "--workloads", str(path), "--format", "json"))
    assert plan_check.check_plan(doc) == []
    assert any(d["verdict"] != "dedicated" for p in doc["models"] for d in p["mps_alternative"]["devices"]) \
        or len(doc["workloads"]) == 1
    for fmt in ("text", "markdown", "html", "mig-parted", "gpu-operator"):
        assert plan_check.number_format(run(capsys, "--workloads", str(path), "--format", fmt)) == [], fmt


@pytest.mark.parametrize("name", HISTORIES)
def test_simulated_histories_give_plans_that_never_contradict_themselves(name, series, capsys):
    doc = json.loads(run(capsys, "--snapshot", f"node-a={series[name]}", "--format", "json"))
    assert plan_check.check_plan(doc) == []
    for fmt in ("text", "markdown"):
        assert plan_check.number_format(run(capsys, "--snapshot", f"node-a={series[name]}", "--format", fmt)) == []


def test_all_histories_together_as_one_fleet(series, capsys):
    args = [a for i, name in enumerate(HISTORIES) for a in ("--snapshot", f"node-{i}={series[name]}")]
    doc = json.loads(run(capsys, *args, "--format", "json"))
    assert plan_check.check_plan(doc) == []
    assert doc["shared_now"], "the histories hold MPS devices: their advice is checked too"


def test_the_checker_catches_each_kind_of_contradiction(capsys):
    """Each rule can fail: a plan edited to contradict itself is refused, naming the device."""
    doc = json.loads(run(capsys, "--workloads", str(REPO / "examples/workloads/mixed-inference.yaml"),
                         "--format", "json"))
    devices = doc["models"][0]["mps_alternative"]["devices"]
    fits = next(i for i, d in enumerate(devices) if d["verdict"] == "fits")
    dedicated = next(i for i, d in enumerate(devices) if d["verdict"] == "dedicated")

    def broken(edit) -> list[str]:
        bad = copy.deepcopy(doc)
        edit(bad["models"][0])
        return plan_check.check_plan(bad)

    def overfull(m):  # limits that add up to more than the GPU, judged fits (issue 23's first case)
        d = m["mps_alternative"]["devices"][fits]
        d["footprint_bytes"] = d["usable_bytes"] + 1
    assert any("room left" in p for p in broken(overfull))

    def no_room(m):
        m["mps_alternative"]["devices"][fits]["room_left_bytes"] = 0
    assert any("room left" in p for p in broken(no_room))

    def env_on_dedicated(m):
        m["mps_alternative"]["devices"][dedicated]["clients"][0]["env"] = {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1M"}
    assert any("carries an MPS environment" in p for p in broken(env_on_dedicated))

    def low_limit(m):
        c = m["mps_alternative"]["devices"][fits]["clients"][0]
        c["env"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=1M"
    assert any("below its peak" in p for p in broken(low_limit))

    def silent_span(m):
        m["gpus_per_node"] = 1
        for w in m["workloads"]:
            if w["gpus_per_instance"] > 1:
                w["nodes_per_instance"] = 2
    assert any("spans 2 nodes" in p for p in broken(silent_span))

    def slot_too_small(m):
        i = m["gpus"][0]["instances"][0]
        i["need_bytes"] = i["memory_bytes"] + 1
    assert any("needs" in p for p in broken(slot_too_small))
    assert plan_check.number_format("1,250 GPUs beside 1500") == ["1,250"]


def test_a_model_parallel_job_wider_than_a_node_says_it_spans_nodes(tmp_path, capsys):
    """26 GPUs of a 2 TB model on 8-GPU nodes: four nodes, said once, and each GPU holds an even share
    (not 'full')."""
    plan = tmp_path / "big.yaml"
    plan.write_text("gpu_models: [H100-80GB]\nworkloads:\n  - {name: giant, memory: 2000GiB}\n"
                    "  - {name: small, count: 3, memory: 10GiB}\n")
    doc = json.loads(run(capsys, "--workloads", str(plan), "--format", "json"))
    assert plan_check.check_plan(doc) == []
    (m,) = doc["models"]
    giant = next(w for w in m["workloads"] if w["name"] == "giant")
    assert giant["gpus_per_instance"] == 26 and giant["nodes_per_instance"] == 4
    assert any(r.startswith("giant: spans 4 nodes") for r in m["reasons"])
    parts = [i for g in m["gpus"] for i in g["instances"] if (i["workload_at_peak"] or "").startswith("giant")]
    assert len(parts) == 26 and all(i["need_bytes"] == -(-giant["need_bytes"] // 26) for i in parts)
    dedicated = [d for d in m["mps_alternative"]["devices"] if d["verdict"] == "dedicated"]
    assert any("spans 4 nodes" in r for r in dedicated[0]["reasons"])
