"""`--format mig-parted`: a config file nvidia-mig-parted applies (``version: v1``).

- ``node-<node>``, one per existing node: one entry per distinct layout with the node's GPU
  indices in ``devices``, released GPUs included (``mig-enabled: false``, explicitly, so no
  ``devices: all`` entry can catch them by accident). Label the node with it.
- one config per layout of the GPUs to add (``all-1g.20gb``, ``custom-...``, ``all-disabled``):
  ``devices: all``, for new nodes.
- every entry has a ``device-filter`` listing every PCI device id of the models that use it,
  SXM and PCIe variants alike (a device that matches no filter is silently skipped by
  mig-parted). Profile names such as 1g.10gb exist on several models with other sizes.

Schema facts (NVIDIA/mig-parted api/spec/v1 spec.go, pkg/types): top-level keys ``version``
(``v1``) and ``mig-configs`` (a non-empty map of non-empty lists); entry keys ``devices``
("all" or a list of ints, required), ``device-filter`` (a string or a list of strings, each
``0x<device><vendor>``), ``mig-enabled`` (bool, required), ``mig-devices`` (profile -> count,
required when enabled, empty when not); no other keys.
"""

from __future__ import annotations

import re
from collections import defaultdict

import yaml

from exporter import catalog
from exporter.recommend.outputs_basis import basis_lines
from exporter.recommend.result import GpuPlan, Recommendation

# PCI device ids (device << 16 | vendor) per catalog model, every variant with the same MIG
# profiles (shared/reference/nvml_facts.md section 2.3): SXM and PCIe, NVL.
PCI_DEVICE_IDS: dict[str, tuple[int, ...]] = {
    "A30": (0x20B710DE,),
    "A100-40GB": (0x20B010DE, 0x20F110DE),  # SXM4, PCIe
    "A100-80GB": (0x20B210DE, 0x20B510DE),  # SXM4, PCIe
    "H100-80GB": (0x233010DE, 0x233110DE),  # SXM5, PCIe
    "H100-NVL": (0x232110DE, 0x233A10DE),  # H100 NVL, H800 NVL
    "H200": (0x233510DE, 0x233B10DE),  # SXM, NVL
    "B200": (0x290110DE,),
}


def device_ids(model: str) -> list[str]:
    """Every PCI device id of ``model``, as mig-parted's device-filter writes them."""
    ids = set(PCI_DEVICE_IDS.get(model, ())) | {catalog.MODELS[model].pci_device_id}
    return [f"0x{i:08X}" for i in sorted(ids)]


def _mig_devices(gpu: GpuPlan) -> dict[str, int]:
    counts: dict[str, int] = {}
    for i in gpu.instances:
        counts[i.profile] = counts.get(i.profile, 0) + 1
    return dict(sorted(counts.items()))


def layout_text(gpu: GpuPlan) -> str:
    """'MIG 3g.40gb + 2x1g.10gb' or 'MIG off': a layout described, never a config name."""
    if not gpu.mig_enabled:
        return "MIG off"
    return "MIG " + " + ".join(p if n == 1 else f"{n}x{p}" for p, n in _mig_devices(gpu).items())


def _layout_key(gpu: GpuPlan) -> tuple:
    return (gpu.mig_enabled, tuple(_mig_devices(gpu).items()) if gpu.mig_enabled else ())


def _entry(gpu: GpuPlan, devices, filters) -> dict:
    entry: dict = {"devices": devices, "device-filter": sorted(filters), "mig-enabled": gpu.mig_enabled}
    if gpu.mig_enabled:
        entry["mig-devices"] = _mig_devices(gpu)
    return entry


def label_safe(text: str) -> str:
    """A Kubernetes label value (the nvidia.com/mig.config label names the config)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text).strip("-_.")[:58].strip("-_.") or "node"


def build(rec: Recommendation, names: dict[str, str] | None = None, released: bool = True) -> tuple[dict, list[str]]:
    """The mig-parted document and comment lines saying which node takes which config (``names``,
    when given, receives node -> config name). ``released=False`` leaves released GPUs out of the
    node configs (mig-parted then does not touch them: the GPU Operator output's least disruption)."""
    doc: dict = {"version": "v1", "mig-configs": {}}
    comments: list[str] = []
    new_configs: dict[str, dict[tuple, dict]] = defaultdict(dict)
    per_node: dict[str, list[GpuPlan]] = defaultdict(list)
    for plan in rec.plans:
        if not catalog.MODELS[plan.model].mig_capable:
            comments.append(f"{plan.model}: no MIG, nothing to configure ({len(plan.gpus)} GPUs)")
            continue
        for gpu in plan.gpus:
            if gpu.node == "new":
                slot = new_configs[gpu.config].setdefault(_layout_key(gpu), {"gpu": gpu, "filters": set(), "n": 0})
                slot["filters"].update(device_ids(plan.model))
                slot["n"] += 1
            elif released or gpu.change != "release":
                per_node[gpu.node].append(gpu)
    names = {} if names is None else names
    for node in sorted(per_node):
        name = f"node-{label_safe(node)}"
        while name in names.values() or name in new_configs:
            name += "-x"
        names[node] = name
        groups: dict[tuple, list[GpuPlan]] = defaultdict(list)
        for g in per_node[node]:  # released GPUs in entries of their own
            groups[(g.change == "release", *_layout_key(g))].append(g)
        doc["mig-configs"][name] = [
            _entry(gs[0], sorted(x.index for x in gs), device_ids(gs[0].model))
            for _, gs in sorted(groups.items(), key=lambda kv: min(x.index for x in kv[1]))
        ]
        # The layout in words, not a config name: only the configs this file defines are named.
        changes = ", ".join(f"gpu{g.index} {g.change} {layout_text(g)}"
                            for g in sorted(per_node[node], key=lambda g: g.index))
        comments.append(f"{node}: label nvidia.com/mig.config={name}  ({changes})")
        released = sorted(g.index for g in per_node[node] if g.change == "release")
        if released:
            comments.append(f"  released on {node}: " + ", ".join(f"gpu{i}" for i in released)
                            + " (MIG disabled, listed by index so no other entry catches them)")
    for config in sorted(new_configs):
        slots = new_configs[config]
        doc["mig-configs"][config] = [_entry(s["gpu"], "all", s["filters"]) for s in slots.values()]
        count = sum(s["n"] for s in slots.values())
        comments.append(f"{count} new GPU{'s' if count != 1 else ''}: {config}")
    return doc, comments


def render_migparted(rec: Recommendation) -> str:
    doc, comments = build(rec)
    if not doc["mig-configs"]:
        doc["mig-configs"]["all-disabled"] = [{"devices": "all", "mig-enabled": False}]
        comments.append("no MIG GPU in the plan: nothing to partition")
    head = ["# nvidia-mig-parted config written by `exporter recommend`.",
            *(f"# {line}" for line in basis_lines(rec)),
            "# input: " + "; ".join(rec.sources)]
    if rec.draft:
        head.append("# DRAFT: review before applying; the history behind it is shorter than --min-window.")
    head += ["# Apply on a node: nvidia-mig-parted apply -f THIS_FILE -c <config>, or label the node",
             "# nvidia.com/mig.config=<config> for the GPU operator's mig-manager. Drain a GPU before it is",
             "# reconfigured or released: mig-parted destroys the instances it replaces.",
             *(f"#   {c}" for c in comments)]
    return "\n".join(head) + "\n" + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
