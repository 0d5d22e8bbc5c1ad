"""`--format mig-parted`: a config file nvidia-mig-parted applies (``version: v1``).

One named config per distinct layout (``all-1g.20gb``, ``custom-2x1g.10gb-1x2g.20gb-...``,
``all-disabled``), each with ``devices: all`` and a ``device-filter`` of the PCI device IDs
of the models that use it (profile names like 1g.10gb exist on several models with other
sizes). A node whose GPUs get different layouts also gets a config of its own, one entry
per layout with the GPU indices in ``devices``. Schema facts (mig-parted api/spec/v1):
``devices`` is "all" or a list of ints, ``mig-enabled`` is required, ``mig-devices`` is
required when enabled and must be empty when not; no other keys.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

import yaml

from exporter import catalog
from exporter.recommend.result import GpuPlan, Recommendation


def _mig_devices(gpu: GpuPlan) -> dict[str, int]:
    counts: dict[str, int] = {}
    for i in gpu.instances:
        counts[i.profile] = counts.get(i.profile, 0) + 1
    return dict(sorted(counts.items()))


def _entry(gpu: GpuPlan, devices, filters) -> dict:
    entry: dict = {"devices": devices}
    if filters:
        entry["device-filter"] = sorted(filters)
    entry["mig-enabled"] = gpu.mig_enabled
    if gpu.mig_enabled:
        entry["mig-devices"] = _mig_devices(gpu)
    return entry


def label_safe(text: str) -> str:
    """A Kubernetes label value (the nvidia.com/mig.config label names the config)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text).strip("-_.")[:63] or "node"


def build(rec: Recommendation) -> tuple[dict, list[str]]:
    """The mig-parted document and comment lines saying which GPU gets which config."""
    configs: dict[str, dict[tuple, dict]] = defaultdict(dict)  # name -> layout key -> entry info
    per_node: dict[str, list[GpuPlan]] = defaultdict(list)
    comments = []
    new: Counter = Counter()
    for plan in rec.plans:
        pci = f"0x{catalog.MODELS[plan.model].pci_device_id:08X}"
        for gpu in plan.gpus:
            if gpu.change == "release":
                continue
            key = (gpu.mig_enabled, tuple(_mig_devices(gpu).items()))
            slot = configs[gpu.config].setdefault(key, {"gpu": gpu, "filters": set()})
            slot["filters"].add(pci)
            if gpu.node != "new":
                per_node[gpu.node].append(gpu)
            else:
                new[(plan.model, gpu.config)] += 1
    doc: dict = {"version": "v1", "mig-configs": {}}
    for name in sorted(configs):
        doc["mig-configs"][name] = [
            _entry(slot["gpu"], "all", slot["filters"]) for slot in configs[name].values()
        ]
    for node in sorted(per_node):
        gpus = per_node[node]
        comments.append(f"{node}: " + ", ".join(f"gpu{g.index}={g.config} ({g.change})" for g in gpus))
        if len({g.config for g in gpus}) < 2:
            continue
        groups: dict[tuple, list[GpuPlan]] = defaultdict(list)
        for g in gpus:
            groups[(g.mig_enabled, tuple(_mig_devices(g).items()))].append(g)
        name = f"node-{label_safe(node)}"
        doc["mig-configs"][name] = [
            _entry(g[0], sorted(x.index for x in g), ()) for g in groups.values()
        ]
        comments.append(f"  {node} mixes layouts: label it nvidia.com/mig.config={name}")
    comments += [f"{n} new {model} GPU(s): {config}" for (model, config), n in sorted(new.items())]
    return doc, comments


def render_migparted(rec: Recommendation) -> str:
    doc, comments = build(rec)
    if not doc["mig-configs"]:
        doc["mig-configs"]["all-disabled"] = [{"devices": "all", "mig-enabled": False}]
        comments.append("no GPU in the plan: nothing to partition")
    head = ["# nvidia-mig-parted config written by `exporter recommend`.",
            "# Apply on a node: nvidia-mig-parted apply -f THIS_FILE -c <config>",
            "# (or label the node nvidia.com/mig.config=<config> for the GPU operator's mig-manager).",
            *(f"#   {c}" for c in comments)]
    return "\n".join(head) + "\n" + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
