"""Puts planned GPUs on the fleet's GPUs: the planner decided how many keep their layout, this
module decides which.

1. A planned GPU marked ``keep`` goes to a fleet GPU whose current layout has the same slots
   (the GPU of a group kept together first, then the lowest node and index); its instances
   take that GPU's positions and names (a ``1g.10gb+me`` stays one): nothing to drain.
2. The other planned GPUs go to the remaining fleet GPUs: first on nodes where no GPU keeps its
   layout (a node is drained as a whole to change one GPU, so a node that keeps some is best left
   alone), idle ones first (nothing to drain), then node by node, sorted by configuration so a
   node tends to get one: "reconfigure".
3. Planned GPUs beyond the fleet are "new"; fleet GPUs no plan needs are "release".
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace

from exporter.catalog import GpuModel
from exporter.recommend.demand import FleetGpu
from exporter.recommend.result import GpuPlan

SHARING_WORDS = {"mps": "MPS", "time_slicing": "time-slicing", "exclusive": "one process at a time",
                 "idle": "idle"}


def describe(gpu: FleetGpu | None, layout=None) -> str:
    """What a fleet GPU is now: 'MIG off, MPS' or 'MIG 2x3g.40gb'."""
    layout = gpu.layout if gpu is not None else layout
    if layout is None:
        how = SHARING_WORDS.get(gpu.sharing if gpu is not None else "", "")
        return "MIG off" + (f", {how}" if how else "")
    counts = Counter(p for p, _ in layout)
    return ("MIG " + " + ".join(f"{n}x{p}" if n > 1 else p for p, n in sorted(counts.items()))
            if counts else "MIG on, no instances")


def _kept_at(plan: GpuPlan, fleet_gpu: FleetGpu) -> GpuPlan:
    """``plan`` on ``fleet_gpu``, at its current positions and profile names."""
    instances = plan.instances
    if plan.mig_enabled and fleet_gpu.layout:
        spots = defaultdict(list)
        for profile, start in sorted(fleet_gpu.layout):
            spots[profile.removesuffix("+me")].append((profile, start))
        moved = []
        for inst in plan.instances:
            profile, start = spots[inst.profile].pop(0)
            moved.append(replace(inst, profile=profile, start=start))
        instances = tuple(sorted(moved, key=lambda i: i.start))
    return replace(plan, node=fleet_gpu.node, index=fleet_gpu.index, change="keep", instances=instances,
                   current=describe(fleet_gpu))


def assign(model: GpuModel, planned: list[tuple[GpuPlan, tuple, bool, tuple | None]],
           existing: list[tuple[FleetGpu, tuple | None]]) -> list[GpuPlan]:
    """``planned`` (plan, pattern, keep, preferred (node, index)) on ``existing`` (GPU, current
    pattern) of one model, plus releases for the fleet GPUs left over."""
    ordered = sorted(existing, key=lambda e: (e[0].node, e[0].index))
    free = {(g.node, g.index): (g, p) for g, p in ordered}
    out: list[GpuPlan | None] = [None] * len(planned)
    for i, (plan, pattern, keep, prefer) in enumerate(planned):
        if not keep:
            continue
        candidates = [(g, p) for g, p in free.values() if p == pattern]
        if not candidates:
            continue
        chosen = next((c for c in candidates if prefer and (c[0].node, c[0].index) == prefer), candidates[0])
        del free[(chosen[0].node, chosen[0].index)]
        out[i] = _kept_at(plan, chosen[0])
    rest = sorted((i for i, p in enumerate(out) if p is None), key=lambda i: (planned[i][0].config, i))
    # The GPU Operator's MIG manager drains a whole node to change any of its GPUs: repartition GPUs
    # of nodes that keep no layout first (nothing kept is disturbed), then idle GPUs before busy ones.
    kept_nodes = {p.node for p in out if p is not None}
    remaining = sorted(free.values(), key=lambda e: (e[0].node in kept_nodes, e[0].sharing != "idle",
                                                     e[0].node, e[0].index))
    for i in rest:
        if not remaining:
            break
        gpu, _ = remaining.pop(0)
        del free[(gpu.node, gpu.index)]
        out[i] = replace(planned[i][0], node=gpu.node, index=gpu.index, change="reconfigure",
                         current=describe(gpu))
    new = 0
    for i, p in enumerate(out):
        if p is None:
            out[i] = replace(planned[i][0], node="new", index=new, change="new")
            new += 1
    released = [GpuPlan(model.key, g.node, g.index, "all-disabled", False, (), "release", 0,
                        "not needed by the plan: MIG disabled, free for other work", describe(g))
                for g, _ in free.values()]
    placed = sorted(out, key=lambda g: (g.node == "new", g.node, g.index))
    return [*placed, *sorted(released, key=lambda g: (g.node, g.index))]


def settle(placed: list[GpuPlan], where: dict[str, set[tuple[str, int]]], capacity: int) -> list[GpuPlan]:
    """Occupants moved, among instances of the same profile, onto GPUs where they run now.

    The planner decides how many instances of each profile hold what at the peak moment, not
    which GPU holds which; here an instance held by a workload (or a group kept as it runs now)
    goes to a GPU it ran on when one has a matching instance. ``where`` maps an occupant label
    to the (node, GPU index) pairs it ran on. Stranded memory follows the occupants.
    """
    slots: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for gi, g in enumerate(placed):
        if g.change == "release":
            continue
        for ii, inst in enumerate(g.instances):
            slots[inst.profile.removesuffix("+me")].append((gi, ii))
    instances = [list(g.instances) for g in placed]
    for spots in slots.values():
        held = [instances[gi][ii] for gi, ii in spots]
        occupants = [i for i in held if i.workload]
        free = list(spots)
        order: list[tuple[tuple[int, int], object]] = []
        rest = []
        for occ in occupants:
            homes = where.get(occ.workload, set())
            spot = next((s for s in free if (placed[s[0]].node, placed[s[0]].index) in homes), None)
            if spot is None:
                rest.append(occ)
            else:
                free.remove(spot)
                order.append((spot, occ))
        order += list(zip(free, rest + [None] * (len(free) - len(rest))))
        for (gi, ii), occ in order:
            slot = instances[gi][ii]
            instances[gi][ii] = replace(slot, workload=occ.workload if occ else None,
                                        need_bytes=occ.need_bytes if occ else None,
                                        shortfall_sms=occ.shortfall_sms if occ else 0,
                                        members=occ.members if occ else ())
    out = []
    for g, insts in zip(placed, instances):
        if g.change == "release":
            out.append(g)
            continue
        covered = sum(i.memory_bytes for i in insts)
        stranded = max(0, capacity - covered) + sum(max(0, i.memory_bytes - i.need_bytes)
                                                    for i in insts if i.need_bytes is not None)
        out.append(replace(g, instances=tuple(insts), stranded_bytes=stranded))
    return out
