"""`--format gpu-operator`: ConfigMaps the MIG manager and the device plugin read, valid against schemas
built from their upstream Go types (tests/schemas, sources cited there) and Kubernetes' own schemas
(kubernetes-validate); one label per changing node naming configs the objects define; a rollout that
keeps capacity; per-owner MPS patches equal to the advice."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from exporter.recommend import command, rollout
from exporter.recommend.plan_file import parse_plan
from exporter.recommend.report import recommend
from tests.sim_snapshots import SCENARIOS, shared_series, snapshot_lines

SCHEMAS = Path(__file__).resolve().parent / "schemas"
MIG_SCHEMA = json.loads((SCHEMAS / "mig-parted-config-v1.schema.json").read_text())
PLUGIN_SCHEMA = json.loads((SCHEMAS / "device-plugin-config-v1.schema.json").read_text())
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")  # Kubernetes label values
FLEET_SCENARIOS = {"node-k": "k8s-shared-node", "node-a": "churn-node-a", "node-b": "churn-node-b",
                   "node-m": "h100-mixed-node"}


def run(capsys, *args) -> str:
    assert command.main(list(args)) == 0
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def fleet_args(run_shared_dir):
    """Four simulated nodes' histories: MPS, time-slicing and MIG devices, with Kubernetes owners (played
    once per run with test_recommend_consistency's, which watch the same scenarios at the same times)."""
    args = []
    for node, scenario in FLEET_SCENARIOS.items():
        path = shared_series(run_shared_dir, SCENARIOS / f"{scenario}.yaml", [float(t) for t in range(0, 1800, 30)])
        args += ["--snapshot", f"{node}={path}"]
    return args


def labels_of(text: str) -> list[dict]:
    """The `kubectl label node` commands in the output's comments, parsed as kubectl would."""
    out = []
    for line in text.splitlines():
        if "kubectl label node " not in line:
            continue
        words = shlex.split(line[line.index("kubectl label node "):])
        assert words[:3] == ["kubectl", "label", "node"] and words[-1] == "--overwrite"
        pairs = dict(w.split("=", 1) for w in words[4:-1])
        out.append({"node": words[3], **pairs})
    return out


def check_objects(text: str) -> tuple[dict, dict, list[dict]]:
    """Validate every document and label; return (mig-parted config, device plugin configs, labels)."""
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    assert [d["kind"] for d in docs] == ["ConfigMap", "ConfigMap"]
    for d in docs:
        kubernetes_validate.validate(d, "1.33", strict=True)
    mig = yaml.safe_load(docs[0]["data"]["config.yaml"])
    jsonschema.validate(mig, MIG_SCHEMA)
    plugin = {name: yaml.safe_load(body) for name, body in docs[1]["data"].items()}
    for name, config in plugin.items():
        jsonschema.validate(config, PLUGIN_SCHEMA)
        assert len(config.get("sharing", {})) <= 1, f"{name}: MPS and time-slicing are exclusive"
        assert LABEL_VALUE.match(name) and len(name) <= 63
    labels = labels_of(text)
    nodes = [entry["node"] for entry in labels]
    assert len(nodes) == len(set(nodes)), "one label command per node"
    for entry in labels:
        assert entry["nvidia.com/mig.config"] in mig["mig-configs"]
        assert entry["nvidia.com/device-plugin.config"] in plugin
        assert all(LABEL_VALUE.match(v) and len(v) <= 63 for k, v in entry.items() if k != "node")
    return mig, plugin, labels


def test_simulated_fleet_objects_are_valid_and_labels_name_only_their_configs(fleet_args, capsys):
    text = run(capsys, *fleet_args, "--format", "gpu-operator")
    mig, plugin, labels = check_objects(text)
    doc = json.loads(run(capsys, *fleet_args, "--format", "json"))
    ops = doc["gpu_operator"]
    assert ops["mig_parted_config"] == mig
    assert {k: v for k, v in ops["device_plugin_configs"].items()} == plugin
    # a node is labelled exactly when one of its GPUs changes layout; the others are left alone
    changing = {g["node"] for m in doc["models"] for g in m["gpus"] if g["node"] != "new" and g["change"] == "reconfigure"}
    assert {e["node"] for e in labels} == changing
    assert set(ops["rollout"]["left_alone"]) == {g["node"] for m in doc["models"] for g in m["gpus"]} - changing - {"new"}
    # released GPUs are in no node config: mig-parted leaves a GPU no entry names as it is
    for m in doc["models"]:
        for g in m["gpus"]:
            if g["change"] == "release":
                config = mig["mig-configs"].get(f"node-{g['node']}", [])
                assert all(g["index"] not in e["devices"] for e in config)
    # the shared groups the plan keeps get replicas (>= 2) on their resource
    kept = [i for m in doc["models"] for g in m["gpus"] for i in g["instances"] if i.get("members")]
    if kept:
        assert any("sharing" in c for c in plugin.values())


def test_shipped_plans_give_valid_objects_for_new_nodes(capsys):
    for path in sorted((SCENARIOS.parent / "workloads").glob("*.yaml")):
        text = run(capsys, "--workloads", str(path), "--format", "gpu-operator")
        mig, _, labels = check_objects(text)
        assert labels == []  # no node exists yet: new nodes take the config named for their layout
        ops = json.loads(run(capsys, "--workloads", str(path), "--format", "json"))["gpu_operator"]
        assert all(n["nvidia.com/mig.config"] in mig["mig-configs"] for n in ops["new_nodes"])


def fleet_plan(workloads):
    return recommend(parse_plan({
        "gpu_model": "H100-80GB",
        "fleet": [{"node": "n1", "gpu_model": "H100-80GB", "gpus": 4, "layout": {"1g.10gb": 7}},
                  {"node": "n2", "gpu_model": "H100-80GB", "gpus": 4, "layout": {"3g.40gb": 2}},
                  {"node": "n3", "gpu_model": "H100-80GB", "gpus": 4, "layout": {"3g.40gb": 2}}],
        "workloads": workloads}, "fleet.yaml"))


def test_rollout_keeps_capacity_at_the_peak_and_waves_what_it_can():
    """Capacity, recomputed here from the plan's GPUs, never drops below the GPUs the plan needs while
    a wave's nodes are reconfigured; nodes that keep every layout are left out."""
    rec = fleet_plan([{"name": "big", "count": 4, "memory": "35GiB"}, {"name": "mid", "count": 8, "memory": "18GiB"}])
    (p,) = rec.plans
    plan = rollout.plan_rollout(rec)
    changing = {g.node for g in p.gpus if rollout.changes_layout(g)}
    assert {s["node"] for s in plan["steps"]} == changing and changing
    assert set(plan["left_alone"]) == {g.node for g in p.gpus if g.node != "new"} - changing
    for wave in {s["wave"] for s in plan["steps"]}:
        nodes = {s["node"] for s in plan["steps"] if s["wave"] == wave}
        serving = sum(1 for g in p.gpus if g.node not in nodes)
        assert serving >= p.gpus_needed
        assert all(s["capacity_kept"] and s["capacity_gpus"] == {p.model: serving}
                   for s in plan["steps"] if s["wave"] == wave)
    assert [s["wave"] for s in plan["steps"]] == sorted(s["wave"] for s in plan["steps"])


def test_a_node_whose_gpus_alone_hold_the_peak_is_flagged():
    """When taking one node offline leaves fewer GPUs than the peak needs, no order helps: the step says so."""
    rec = fleet_plan([{"name": "big", "count": 4, "memory": "35GiB"}, {"name": "mid", "count": 27, "memory": "18GiB"}])
    plan = rollout.plan_rollout(rec)
    assert plan["steps"] and not all(s["capacity_kept"] for s in plan["steps"])
    flagged = [s for s in plan["steps"] if not s["capacity_kept"]]
    assert all(s["capacity_gpus"]["H100-80GB"] < s["peak_demand_gpus"]["H100-80GB"] for s in flagged)
    assert all(len([x for x in plan["steps"] if x["wave"] == s["wave"]]) == 1 for s in flagged)


def test_owner_settings_carry_the_mps_advice_as_pod_template_patches(fleet_args, capsys):
    doc = json.loads(run(capsys, *fleet_args, "--format", "json"))
    settings = doc["gpu_operator"]["owner_settings"]
    assert settings, "the fleet has Kubernetes pods under MPS"
    advice = {(d["device"], c["workload"].split(" #")[0]): c for d in doc["shared_now"] for c in d["clients"]}
    for s in settings:
        (container,) = s["pod_template_patch"]["spec"]["template"]["spec"]["containers"]
        assert container["name"] == s["container"]
        env = {e["name"]: e["value"] for e in container["env"]}
        client = advice[(s["device"], f"k8s:{s['namespace']}/{s['owner']}/{s['container']}")]
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == client["env"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]
        assert int(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]) >= int(client["env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
        assert s["command"].startswith(f"kubectl -n {s['namespace']} patch ")
        assert json.loads(s["command"].rsplit(" -p ", 1)[1].strip("'")) == s["pod_template_patch"]


def test_start_offsets_per_owner_follow_the_stagger(tmp_path, capsys):
    """Three Wan render pods of one owner on one MPS GPU: its start offsets are the stagger's."""
    scenario = yaml.safe_load((SCENARIOS / "wan22-h100-mps-staggered.yaml").read_text())
    for i, p in enumerate(scenario["processes"]):
        p["pod"] = {"namespace": "video", "name": f"wan-{i}", "container": "render", "resource": "nvidia.com/gpu"}
    path = tmp_path / "wan.yaml"
    path.write_text(yaml.safe_dump(scenario))
    series = tmp_path / "wan.jsonl"
    series.write_text("\n".join(snapshot_lines(path, [float(t) for t in range(0, 840, 15)])) + "\n")
    doc = json.loads(run(capsys, "--snapshot", f"node-w={series}", "--margin", "0", "--format", "json"))
    (shared,) = doc["shared_now"]
    settings = doc["gpu_operator"]["owner_settings"]
    assert shared["verdict"] == "stagger" and [s["owner"] for s in settings] == ["wan"]
    offsets = sorted(c["start_offset_seconds"] for c in shared["clients"])
    assert settings[0]["start_offsets_seconds"] == offsets and offsets[0] == 0 < offsets[-1]


def test_a_group_moved_from_whole_gpu_sharing_into_a_mig_slice_is_told_how_to_share_there(fleet_args, capsys):
    """A group kept as it runs now but planned in a MIG instance while it shares a whole GPU today: the
    plan says MPS must run inside the instance (or time-slicing continues), and the device plugin
    config time-slices that MIG resource (its MPS does not support MIG devices)."""
    doc = json.loads(run(capsys, *fleet_args, "--format", "json"))
    moved = [(i["workload_at_peak"][len("as now: "):], i["profile"]) for m in doc["models"] for g in m["gpus"]
             for i in g["instances"] if (i["workload_at_peak"] or "").startswith("as now: ") and i["profile"] != "full"
             and " gi" not in i["workload_at_peak"]]
    assert moved, "the fleet has a whole-GPU group planned in a MIG slice"
    reasons = [r for m in doc["models"] for r in m["reasons"]]
    plugin = doc["gpu_operator"]["device_plugin_configs"]
    for key, profile in moved:
        (said,) = [r for r in reasons if r.startswith(f"{key}: ")]
        assert f"MIG {profile} instance" in said
        assert "MPS must then run inside that instance" in said or "time-slicing continues" in said
        assert any(r["name"] == f"nvidia.com/mig-{profile}" for c in plugin.values()
                   for r in c.get("sharing", {}).get("timeSlicing", {}).get("resources", []))


def test_mig_parted_comments_name_only_configs_the_file_defines(fleet_args, capsys):
    """Issue 23: node comments named layouts ('all-1g.10gb') that were not configs of the file."""
    text = run(capsys, *fleet_args, "--format", "mig-parted")
    configs = set(yaml.safe_load(text)["mig-configs"])
    comments = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    labelled = set(re.findall(r"nvidia\.com/mig\.config=([^<\s]\S*)", comments))  # not the <config> placeholder
    added = set(re.findall(r"new GPUs?: (\S+)", comments))
    assert labelled and (labelled | added) <= configs
    # a GPU's change is followed by its layout in words ("MIG 3g.40gb + 2x1g.10gb", "MIG off"), not a name
    after = re.findall(r"gpu\d+ (?:keep|reconfigure|release) (\S+)", comments)
    assert after and all(word == "MIG" for word in after)
