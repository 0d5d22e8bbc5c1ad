"""Puts planned GPUs on the fleet's GPUs, changing as few as possible.

1. A planned layout that a GPU already has (same profiles, any positions) stays there, at
   that GPU's positions: nothing to drain or repartition (change "keep").
2. The other planned GPUs go to the remaining GPUs node by node, sorted by configuration so
   a node tends to get one configuration (mig-parted applies one per node label):
   "reconfigure".
3. Planned GPUs beyond the fleet are "new"; fleet GPUs no plan needs are "release".
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace

from exporter.catalog import GpuModel
from exporter.recommend.demand import FleetGpu
from exporter.recommend.result import GpuPlan


def _profiles(gpu: GpuPlan) -> Counter | None:
    return Counter(i.profile for i in gpu.instances) if gpu.mig_enabled else None


def _current(fleet_gpu: FleetGpu) -> Counter | None:
    return None if fleet_gpu.layout is None else Counter(p for p, _ in fleet_gpu.layout)


def _key(counts: Counter | None) -> tuple | None:
    return None if counts is None else tuple(sorted(counts.items()))


def describe(layout) -> str:
    """Human form of a current layout: 'MIG off' or '2x3g.40gb'."""
    if layout is None:
        return "MIG off"
    counts = Counter(p for p, _ in layout)
    return " + ".join(f"{n}x{p}" for p, n in sorted(counts.items())) or "MIG on, no instances"


def _at(plan: GpuPlan, fleet_gpu: FleetGpu, change: str) -> GpuPlan:
    instances = plan.instances
    if change == "keep" and plan.mig_enabled:
        starts = defaultdict(list)
        for profile, start in sorted(fleet_gpu.layout or ()):
            starts[profile].append(start)
        instances = tuple(replace(i, start=starts[i.profile].pop(0)) for i in plan.instances)
        instances = tuple(sorted(instances, key=lambda i: i.start))
    return replace(plan, node=fleet_gpu.node, index=fleet_gpu.index, change=change,
                   instances=instances, current=describe(fleet_gpu.layout))


def assign(model: GpuModel, planned: list[GpuPlan], existing: list[FleetGpu]) -> list[GpuPlan]:
    """``planned`` placed on ``existing`` (same model), plus releases for unused GPUs."""
    ordered = sorted(existing, key=lambda g: (g.node, g.index))
    by_layout: dict[tuple | None, list[FleetGpu]] = defaultdict(list)
    for g in reversed(ordered):  # popped from the end: lowest node/index first
        by_layout[_key(_current(g))].append(g)
    taken: set[tuple[str, int]] = set()
    out: list[GpuPlan | None] = [None] * len(planned)
    for i, plan in enumerate(planned):  # 1. keep what is already right
        same = by_layout.get(_key(_profiles(plan)))
        if same:
            match = same.pop()
            out[i] = _at(plan, match, "keep")
            taken.add((match.node, match.index))
    free = [g for g in ordered if (g.node, g.index) not in taken]
    free.reverse()
    rest = sorted((i for i, p in enumerate(out) if p is None), key=lambda i: (planned[i].config, i))
    for i in rest:  # 2. repartition the others, node by node
        if free:
            out[i] = _at(planned[i], free.pop(), "reconfigure")
    new = 0
    for i, p in enumerate(out):  # 3. beyond the fleet
        if p is None:
            new += 1
            out[i] = replace(planned[i], node="new", index=new - 1, change="new")
    released = [
        GpuPlan(model.key, g.node, g.index, "", g.layout is not None, (), "release", 0,
                "not needed by the plan", describe(g.layout))
        for g in reversed(free)
    ]
    placed = sorted(out, key=lambda g: (g.node == "new", g.node, g.index))
    return [*placed, *released]
