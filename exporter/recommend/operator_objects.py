"""What the GPU Operator and the device plugin read, built from a Recommendation (plain data).

- the MIG manager's config (mig-parted format, ``version: v1``, ``mig-configs``): exactly the
  configs the labels name (one ``node-<node>`` per existing node, one per layout of the GPUs to
  add) plus ``all-disabled``, the operator's default for nodes without a label;
- the device plugin's configs (k8s-device-plugin ``api/config/v1``: ``version``, ``flags.migStrategy``,
  ``sharing.timeSlicing`` / ``sharing.mps`` with ``resources: [{name, replicas}]``), one per distinct
  node setting: the groups the plan keeps sharing as now get replicas (MPS on a whole GPU stays MPS;
  in a MIG instance it becomes time-slicing: the device plugin's MPS does not support MIG devices,
  nvml_facts section 3.5), replicas >= 2 as the plugin requires;
- one ``nvidia.com/mig.config`` and one ``nvidia.com/device-plugin.config`` label per node that
  changes, in the rollout's order; nodes left alone get none;
- per Kubernetes owner (workload keys ``k8s:<namespace>/<owner>/<container>``) sharing a device
  under MPS now: its MPS environment as a strategic-merge patch of the pod template, and its start
  offsets where the advice staggers.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict

from exporter import catalog
from exporter.recommend import rollout
from exporter.recommend.outputs_migparted import build as migparted_build, label_safe
from exporter.recommend.result import GpuPlan, Recommendation

MIG_CONFIGMAP = "gpushare-mig-parted-config"
PLUGIN_CONFIGMAP = "gpushare-device-plugin-config"
NAMESPACE = "gpu-operator"
MIG_LABEL = "nvidia.com/mig.config"
PLUGIN_LABEL = "nvidia.com/device-plugin.config"
DEFAULT_MIG_CONFIG = "all-disabled"  # the operator's migManager.config.default


def _sharing(rec: Recommendation, gpus: list[GpuPlan]) -> tuple[dict, list[str]]:
    """A device plugin config for these GPUs (one node's, or the new GPUs of one config) + notes."""
    modes = {key: (mode, n) for key, mode, n in rec.sharing}
    wanted: dict[tuple[str, str], int] = {}
    notes = []
    for g in gpus:
        for i in g.instances:
            if not (i.workload or "").startswith("as now: "):
                continue
            key = i.workload[len("as now: "):]
            mode, n = modes.get(key, ("time-slicing", len(i.members)))
            if n < 2:
                continue
            resource = "nvidia.com/gpu" if i.profile == "full" else f"nvidia.com/mig-{i.profile}"
            kind = "mps" if mode == "mps" and i.profile == "full" else "timeSlicing"
            if mode == "mps" and kind != "mps":
                notes.append(f"{key}: MPS in a MIG instance is not run by the device plugin: time-sliced "
                             "replicas here; start an MPS daemon inside the instance yourself for MPS")
            wanted[(kind, resource)] = max(wanted.get((kind, resource), 0), n)
    for (_, resource), n in sorted(wanted.items()):  # the plugin selects no devices: replicas cover them all
        profile = "full" if resource == "nvidia.com/gpu" else resource.removeprefix("nvidia.com/mig-")
        unshared = [g for g in gpus for i in g.instances
                    if i.profile == profile and not (i.workload or "").startswith("as now: ")]
        if unshared:
            notes.append(f"{resource} x{n} applies to every such device of the node: "
                         + ", ".join(sorted({f"gpu{g.index}" for g in unshared})) + " would be shared too")
    kinds = {k for k, _ in wanted}
    if len(kinds) > 1:  # the plugin runs one strategy per node: time-slicing covers both
        notes.append("MPS and time-slicing are exclusive per node: every shared resource here is time-sliced")
        wanted = {("timeSlicing", r): n for (_, r), n in wanted.items()}
    config: dict = {"version": "v1",
                    "flags": {"migStrategy": "mixed" if any(g.mig_enabled for g in gpus) else "none"}}
    for (kind, resource), n in sorted(wanted.items()):
        config.setdefault("sharing", {}).setdefault(kind, {"resources": []})["resources"].append(
            {"name": resource, "replicas": n})
    return config, notes


def _config_name(config: dict) -> str:
    parts = [config["flags"]["migStrategy"]]
    for kind, spec in sorted(config.get("sharing", {}).items()):
        for r in spec["resources"]:
            parts.append(f"{'mps' if kind == 'mps' else 'ts'}-{r['name'].split('/', 1)[1]}-x{r['replicas']}")
    name = "-".join(parts)
    if len(name) > 58 or label_safe(name) != name:  # a label value holds 63: keep it unique with a digest
        digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:10]
        name = label_safe(name)[:47].rstrip("-_.") + "-" + digest
    return name


def owner_settings(rec: Recommendation) -> list[dict]:
    """Per Kubernetes owner on a device shared under MPS now: env patch and start offsets."""
    mps_devices = {key for key, mode, _ in rec.sharing if mode == "mps"}
    owners: dict[tuple, dict] = {}
    for a in rec.shared_now:
        if a.device not in mps_devices or a.verdict in ("too-big", "dedicated"):
            continue
        for c in a.clients:
            base = c.workload.rsplit(" #", 1)[0] if " #" in c.workload else c.workload
            if not base.startswith("k8s:") or base.count("/") != 2:
                continue
            namespace, owner, container = base[4:].split("/")
            entry = owners.setdefault((namespace, owner, container), {
                "namespace": namespace, "owner": owner, "container": container, "device": a.device,
                "verdict": a.verdict, "limit": c.pinned_limit, "threads": c.active_thread_percentage,
                "start_offsets_seconds": []})
            entry["threads"] = max(entry["threads"], c.active_thread_percentage)
            if c.start_offset_seconds is not None:
                entry["start_offsets_seconds"].append(c.start_offset_seconds)
    out = []
    for (namespace, owner, container), e in sorted(owners.items()):
        patch = {"spec": {"template": {"spec": {"containers": [{"name": container, "env": [
            {"name": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "value": e["limit"]},
            {"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": str(e["threads"])}]}]}}}}
        text = json.dumps(patch, separators=(",", ":"), sort_keys=False)
        out.append({
            "namespace": namespace, "owner": owner, "container": container, "device": e["device"],
            "verdict": e["verdict"], "pod_template_patch": patch,
            # the key keeps the owner's name, not its kind: find it among the kinds with a pod template
            "command": f"kubectl -n {namespace} patch $(kubectl -n {namespace} get deployment,statefulset,daemonset "
                       f"-o name | grep -x '.*/{owner}') --type strategic -p '{text}'",
            "start_offsets_seconds": sorted(e["start_offsets_seconds"]),
        })
    return out


def build(rec: Recommendation) -> dict:
    """Every object and label, plus the rollout, as plain data."""
    names: dict[str, str] = {}
    mig_doc, _ = migparted_build(rec, names, released=False)  # a GPU the plan does not use keeps its layout
    mig_doc["mig-configs"].setdefault(DEFAULT_MIG_CONFIG, [{"devices": "all", "mig-enabled": False}])
    plan = rollout.plan_rollout(rec)
    by_node = rollout.node_gpus(rec)
    plugin_configs: dict[str, dict] = {}
    notes: list[str] = []
    labels = []
    for step in plan["steps"]:
        node = step["node"]
        config, why = _sharing(rec, [g for _, g in by_node[node]])
        name = _config_name(config)
        plugin_configs[name] = config
        notes += [f"{node}: {n}" for n in why]
        labels.append({"node": node, "wave": step["wave"], MIG_LABEL: names[node], PLUGIN_LABEL: name})
    new_by_config: dict[str, list[GpuPlan]] = defaultdict(list)
    for p in rec.plans:
        if catalog.MODELS[p.model].mig_capable:
            for g in p.gpus:
                if g.node == "new":
                    new_by_config[g.config].append(g)
    new_nodes = []
    for config_name, gpus in sorted(new_by_config.items()):
        config, why = _sharing(rec, gpus)
        name = _config_name(config)
        plugin_configs[name] = config
        notes += [f"new GPUs ({config_name}): {n}" for n in why]
        new_nodes.append({"gpus": len(gpus), MIG_LABEL: config_name, PLUGIN_LABEL: name})
    default = {"version": "v1", "flags": {"migStrategy": "mixed"}}
    plugin_configs.setdefault(_config_name(default), default)
    return {
        "namespace": NAMESPACE,
        "mig_configmap": MIG_CONFIGMAP, "mig_parted_config": mig_doc,
        "device_plugin_configmap": PLUGIN_CONFIGMAP, "device_plugin_default": _config_name(default),
        "device_plugin_configs": dict(sorted(plugin_configs.items())),
        "labels": labels, "new_nodes": new_nodes, "rollout": plan,
        "owner_settings": owner_settings(rec), "notes": list(dict.fromkeys(notes)),
    }
