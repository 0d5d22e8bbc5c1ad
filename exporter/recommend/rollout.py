"""Rollout order: which nodes to relabel, in which order, and what each one disrupts.

The GPU Operator's MIG manager evicts every GPU pod of a node before it changes the node's MIG
layout (and restarts the device plugin), so a node is the unit of disruption. Per node:

- *left alone*: every GPU keeps its layout (a released GPU, one the plan does not use, keeps
  its layout too: the GPU Operator output leaves it out of the node's config): no label change,
  no eviction;
- *relabelled*: the workloads seen on its GPUs are disrupted (all of them, not only those on
  the GPUs that change: the manager drains the node's GPU clients).

Capacity model (stated in the output): a node being reconfigured serves nothing; every other
fleet GPU of the model and every GPU added serves, whatever its layout (the old layout served
today's load, the new one the plan's). New GPUs come first. Nodes go in *waves*: least
disrupted first, as many nodes at once as keep the GPUs serving at or above the plan's peak
demand (the GPUs the plan needs at its peak moment). A node whose GPUs alone take capacity
below the peak goes in a wave of its own, flagged: reconfigure it outside the peak.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from exporter import catalog
from exporter.recommend.result import GpuPlan, Recommendation


def changes_layout(g: GpuPlan) -> bool:
    """Whether applying the plan changes this fleet GPU's MIG layout."""
    # A released GPU keeps whatever layout it has: the plan does not use it, so nothing is evicted for it.
    return g.node != "new" and g.change == "reconfigure"


def node_gpus(rec: Recommendation) -> dict[str, list[tuple[str, GpuPlan]]]:
    """Existing node -> [(model, GPU plan)] for MIG-capable models."""
    out: dict[str, list[tuple[str, GpuPlan]]] = defaultdict(list)
    for p in rec.plans:
        if not catalog.MODELS[p.model].mig_capable:
            continue
        for g in p.gpus:
            if g.node != "new":
                out[g.node].append((p.model, g))
    return dict(out)


def disrupted(rec: Recommendation) -> dict[str, list[str]]:
    """Node -> workloads seen on its GPUs (their pods are evicted when the node is reconfigured)."""
    out: dict[str, set[str]] = defaultdict(set)
    for w in rec.workloads:
        for node, _ in w.gpus_seen:
            out[node].add(w.name)
    return {n: sorted(ws) for n, ws in out.items()}


def plan_rollout(rec: Recommendation) -> dict:
    """The rollout as plain data (docs/recommend.md "Rollout")."""
    nodes = node_gpus(rec)
    changing = {n: gs for n, gs in nodes.items() if any(changes_layout(g) for _, g in gs)}
    left_alone = sorted(set(nodes) - set(changing))
    seen = disrupted(rec)
    serving, need = {}, {}
    for p in rec.plans:
        if catalog.MODELS[p.model].mig_capable:
            serving[p.model] = p.available_gpus + p.added
            need[p.model] = p.gpus_needed
    added = {p.model: p.added for p in rec.plans if p.added and catalog.MODELS[p.model].mig_capable}
    offline = {n: Counter(model for model, _ in gs) for n, gs in changing.items()}
    order = sorted(changing, key=lambda n: (len(seen.get(n, ())), len(changing[n]), n))
    waves: list[tuple[list[str], Counter]] = []  # nodes, GPUs offline per model
    for n in order:
        for nodes_in, off in waves:
            if all(serving[m] - off[m] - offline[n][m] >= need[m] for m in serving):
                nodes_in.append(n)
                off.update(offline[n])
                break
        else:
            waves.append(([n], Counter(offline[n])))
    steps = []
    for k, (wave, off) in enumerate(waves, 1):
        cap = {m: serving[m] - off[m] for m in sorted(serving)}
        for n in wave:
            steps.append({
                "wave": k, "node": n,
                "gpus_reconfigured": sorted(g.index for _, g in changing[n] if changes_layout(g)),
                "gpus_offline": len(changing[n]),
                "disrupted_workloads": seen.get(n, []),
                "capacity_gpus": cap, "peak_demand_gpus": dict(sorted(need.items())),
                "capacity_kept": all(c >= need[m] for m, c in cap.items()),
            })
    return {
        "basis": "one node's GPUs serve nothing while the MIG manager reconfigures it; every other fleet GPU "
                 "and every added GPU serves; capacity must stay at or above the GPUs the plan needs at its peak",
        "add_first": dict(sorted(added.items())),
        "steps": steps,
        "left_alone": left_alone,
    }
