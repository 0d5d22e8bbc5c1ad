"""`--format gpu-operator`: YAML for `kubectl apply -f`, then the `kubectl label` commands in order.

Documents: the MIG manager's ConfigMap (key ``config.yaml``, mig-parted format) and the device
plugin's ConfigMap (one key per config). The labels are not objects: a Node document applied to a
cluster would create a node that does not exist or fight the kubelet over its object, so they are
``kubectl label node`` commands, wave by wave (exporter.recommend.rollout), in comments after the
documents, with what each node disrupts, and the per-owner MPS patches (``kubectl patch``).
"""

from __future__ import annotations

import shlex

import yaml

from exporter.recommend import operator_objects as ops
from exporter.recommend.outputs_basis import basis_lines
from exporter.recommend.result import Recommendation


MAX_NAMED = 8  # disrupted workloads named per node in the text outputs; JSON lists all


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _dump(doc) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


def configmaps(objs: dict) -> list[dict]:
    """The two ConfigMaps as Kubernetes objects."""
    meta = lambda name: {"name": name, "namespace": objs["namespace"],  # noqa: E731
                         "labels": {"app.kubernetes.io/managed-by": "gpushare-exporter"}}
    mig = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(objs["mig_configmap"]),
           "data": {"config.yaml": _dump(objs["mig_parted_config"])}}
    plugin = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(objs["device_plugin_configmap"]),
              "data": {name: _dump(c) for name, c in objs["device_plugin_configs"].items()}}
    return [mig, plugin]


def label_command(entry: dict) -> str:
    return (f"kubectl label node {shlex.quote(entry['node'])} {ops.MIG_LABEL}={entry[ops.MIG_LABEL]} "
            f"{ops.PLUGIN_LABEL}={entry[ops.PLUGIN_LABEL]} --overwrite")


def rollout_lines(objs: dict) -> list[str]:
    """The rollout in words and commands (shared by the markdown and HTML outputs)."""
    plan = objs["rollout"]
    out = [f"capacity model: {plan['basis']}"]
    for n in objs["new_nodes"]:
        out.append(f"first, add {n['gpus']} GPU{'s' if n['gpus'] != 1 else ''}: label the new nodes "
                   f"{ops.MIG_LABEL}={n[ops.MIG_LABEL]} {ops.PLUGIN_LABEL}={n[ops.PLUGIN_LABEL]}")
    by_node = {e["node"]: e for e in objs["labels"]}
    for step in plan["steps"]:
        cap = ", ".join(f"{m} {c} GPUs serving of {step['peak_demand_gpus'][m]} at the peak"
                        for m, c in step["capacity_gpus"].items())
        flag = "" if step["capacity_kept"] else " BELOW THE PEAK: reconfigure it outside the peak"
        gpus = ", ".join(f"gpu{i}" for i in step["gpus_reconfigured"])
        out.append(f"wave {step['wave']}: {label_command(by_node[step['node']])}")
        seen = step["disrupted_workloads"]
        named = ", ".join(seen[:MAX_NAMED]) + (f" and {len(seen) - MAX_NAMED} more (--format json)"
                                                if len(seen) > MAX_NAMED else "")
        out.append(f"  reconfigures {gpus}; evicts the GPU pods of {len(seen)} workload{'s' if len(seen) != 1 else ''}"
                   + (f": {named}" if seen else " (none seen)")
                   + f"; while it runs: {cap}{flag}")
    if plan["left_alone"]:
        out.append("left alone (layout kept, no label change): " + ", ".join(plan["left_alone"]))
    return out


def owner_lines(objs: dict) -> list[str]:
    out = []
    for s in objs["owner_settings"]:
        out.append(f"{s['namespace']}/{s['owner']} container {s['container']} ({s['device']}, {s['verdict']}): "
                   f"{s['command']}")
        if s["start_offsets_seconds"]:
            out.append("  start its instances at offsets: "
                       + ", ".join(f"+{o:g} s" for o in s["start_offsets_seconds"]))
    return out


def objects_yaml(objs: dict) -> str:
    """The documents `kubectl apply -f` takes."""
    return "".join("---\n" + _dump(obj) for obj in configmaps(objs))


def render_gpu_operator(rec: Recommendation) -> str:
    objs = ops.build(rec)
    head = ["# GPU Operator objects written by `exporter recommend` (--format gpu-operator).",
            *(f"# {line}" for line in basis_lines(rec))]
    if rec.draft:
        head.append("# DRAFT: review before applying; the history behind it is shorter than --min-window.")
    head += [
        "# 1. kubectl apply -f THIS_FILE",
        f"# 2. point the operator at them: kubectl patch clusterpolicies.nvidia.com/cluster-policy --type merge -p "
        f"'{{\"spec\":{{\"migManager\":{{\"config\":{{\"name\":\"{objs['mig_configmap']}\"}}}},"
        f"\"devicePlugin\":{{\"config\":{{\"name\":\"{objs['device_plugin_configmap']}\","
        f"\"default\":\"{objs['device_plugin_default']}\"}}}}}}}}'",
        "# 3. label the nodes as listed at the end, wave by wave (the MIG manager evicts a node's GPU pods).",
    ]
    body = objects_yaml(objs)
    tail = ["# Rollout:", *(f"#   {line}" for line in rollout_lines(objs))]
    if objs["owner_settings"]:
        tail += ["# MPS settings per owner (strategic-merge patch of the pod template):",
                 *(f"#   {line}" for line in owner_lines(objs))]
    tail += [f"# note: {n}" for n in objs["notes"]]
    return "\n".join(head) + "\n" + body + "\n".join(tail) + "\n"
