"""Builds a Recommendation from a Demand: per GPU model the plan, baselines and MPS advice."""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from dataclasses import replace

from exporter import __version__, catalog
from exporter.catalog import MIB, GpuModel
from exporter.errors import UserError
from exporter.recommend import baselines, fleet_map, mps, mps_pack, planner
from exporter.recommend.demand import Demand, SharedDevice, Workload
from exporter.recommend.patterns import model_patterns
from exporter.recommend.report_reasons import gpus_per_node, reasons, spans
from exporter.recommend.result import GpuPlan, InstancePlan, ModelPlan, Recommendation, WorkloadPlan
from exporter.recommend.slots import FULL, ModelSlots, model_slots

GIB = 2**30
GROUP = "group:"
def group_by_model(demand: Demand) -> dict[str, list[Workload]]:
    """Workloads per target model: pinned ones to theirs, the others to every target."""
    targets = list(demand.targets) or sorted({g.model for g in demand.gpus})
    groups: dict[str, list[Workload]] = defaultdict(list)
    for w in demand.workloads:
        if w.gpu_model:
            groups[w.gpu_model].append(w)
        elif not targets:
            raise UserError(f"workload {w.name!r} names no GPU model: give --gpu-model or "
                            "gpu_model: in the plan")
        else:
            for key in targets:
                groups[key].append(w)
    return dict(groups)


def stamp(demand: Demand) -> str:
    """The plan's date, from its input (the end of the observed window): the same input gives
    the same stamp on any machine. A plan file alone carries no date."""
    b = demand.basis
    if b.end is None:
        return "undated plan (no observed input)"
    if b.clock == "scenario":
        return f"scenario time {b.end:.0f} s (window end)"
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(b.end)) + " (window end)"


def recommend(demand: Demand) -> Recommendation:
    """The whole answer for ``demand``."""
    groups = group_by_model(demand)
    plans = tuple(plan_for_model(catalog.MODELS[key], sorted(groups[key], key=lambda w: w.name), demand)
                  for key in sorted(groups))
    shared_now = tuple(shared_advice(s, demand) for s in demand.shared)
    notes = list(demand.notes)
    unpinned = [w for w in demand.workloads if not w.gpu_model]
    if unpinned and len(plans) > 1:
        notes.append(f"{len(unpinned)} workload{'s' if len(unpinned) != 1 else ''} name no GPU model: "
                     "each model's plan is an alternative")
    over = [w for w in demand.workloads if w.max_peak_bytes and w.max_peak_bytes > w.memory_need_bytes]
    for w in over:
        notes.append(f"{w.name}: its largest instance peaked at {w.max_peak_bytes / GIB:.1f} GiB, above the "
                     f"planned {w.memory_need_bytes / GIB:.1f} GiB ({w.sized_by}): raise --quantile to plan for it")
    margins = sorted({w.margin_ratio for w in demand.workloads})
    observed = any(w.memory_cap_bytes is not None or w.instances is not None for w in demand.workloads)
    margin_text = ("margin " + "/".join(f"{m:.0%}" for m in margins) + " on every workload's peak"
                   + ("; for an observed workload never above the smallest device it ran on without an OOM kill"
                      if observed else "") + "; MPS limits: peak + the same margin") if margins else ""
    return Recommendation(plans, shared_now, demand.workloads, demand.sources, tuple(dict.fromkeys(notes)),
                          demand.basis, stamp(demand), __version__, margin_text,
                          tuple((s.key, "mps" if s.mps else "time-slicing", s.concurrency) for s in demand.shared))


def shared_advice(s: SharedDevice, demand: Demand) -> mps.MpsAdvice:
    by_name = {w.name: w for w in demand.workloads}
    clients, together = [], None
    if s.counts is not None:
        alive = {n: c for n, c in s.counts.items() if n in by_name}
        clients = [(by_name[n], int(c.max())) for n, c in sorted(alive.items())]
        # time-resolved: the limits (peak + margin) and contexts of the instances alive at each point
        limits = sum((mps.limit_mib(by_name[n]) * MIB * c for n, c in alive.items()), 0)
        count = sum((c for c in alive.values()), 0)
        if alive:
            return mps.advise(s.key, catalog.MODELS[s.model], s.capacity_bytes, s.sms, clients,
                              together=int(limits.max()), at_once=int(count.max()),
                              footprint=int((limits + count * mps.CONTEXT_BYTES).max()))
    else:
        clients = [(by_name[n], 1) for n in s.workloads if n in by_name]
    return mps.advise(s.key, catalog.MODELS[s.model], s.capacity_bytes, s.sms, clients, together=together)


def _items(ms: ModelSlots, workloads: list[Workload], points: int) -> list[planner.Item]:
    full = ms.slots[ms.full].memory_mib
    items = []
    for w in workloads:
        weight = ms.gpus_per_instance(w.memory_need_bytes) if w.memory_need_mib > full else 1
        # An instance wider than one GPU takes whole GPUs: the full slot's level, even where a
        # MIG profile is larger than MIG off's usable memory (7g.80gb on an H100 on R580).
        items.append(planner.Item(w.name, w.memory_need_mib, w.sms_on(ms.model), weight,
                                  ms.tier(min(w.memory_need_mib, full)), w.alive(points), frozenset(w.slots_seen)))
    return items


def group_need_bytes(s: SharedDevice, workloads: dict[str, Workload]) -> int:
    """Memory a shared device's instances need together: their most at once plus the margin, capped
    at the device they share when no OOM kill was seen there (they ran there together)."""
    margin = max((workloads[n].margin_ratio for n in s.workloads if n in workloads), default=0.0)
    need = math.ceil(s.together_peak_bytes * (1.0 + margin))
    return need if s.oom else max(s.together_peak_bytes, min(need, s.capacity_bytes))


def _groups(ms: ModelSlots, demand: Demand, names: dict[str, Workload]) -> list[planner.Group]:
    out = []
    full = ms.slots[ms.full].memory_mib
    for s in demand.shared:
        if s.model != ms.model.key or s.counts is None or s.alive is None or not s.together_peak_bytes:
            continue
        if not all(n in names for n in s.counts):
            continue
        need = -(-group_need_bytes(s, names) // MIB)
        if need > full:
            continue
        out.append(planner.Group(s.key, need, ms.tier(need), s.alive.astype(int),
                                 {n: c for n, c in s.counts.items()}, (s.profile or FULL).removesuffix("+me")))
    return out


def _instances(ms: ModelSlots, pg: planner.PlannedGpu, names: dict, groups: dict) -> tuple[InstancePlan, ...]:
    model = ms.model
    out = []
    placements = pg.layout or ((FULL, 0),)
    for (profile, start), who in zip(placements, pg.occupants):
        if profile == FULL:
            mem, sms, cs, msl = model.memory_capacity_bytes, model.sm_count, model.compute_slices or 1, \
                model.memory_slices or 1
        else:
            p = model.profile(profile)
            mem, sms, cs, msl = p.memory_mib * MIB, p.sm_count, p.slice_count, p.memory_slices
        need, short, members, label = None, 0, (), who
        if who and who.startswith(GROUP):
            g = groups[who[len(GROUP):]]
            need, members, label = g.need_mib * MIB, tuple(sorted(g.members)), f"as now: {g.key}"
        elif who:
            w = names[_base_name(who)]
            parts = _parts(who)  # a model-parallel instance: an even share on each of its GPUs
            need = -(-w.memory_need_bytes // parts)
            short = max(0, w.sms_on(model) - sms)
        out.append(InstancePlan(profile, start, msl, cs, mem, sms, label, need, short, members))
    return tuple(out)


def _parts(label: str) -> int:
    """GPUs of the instance an occupant label is part of ('big #2 (3 of 26 GPUs)' -> 26), else 1."""
    if label.endswith(" GPUs)") and " of " in label:
        return int(label[label.rindex(" of ") + 4:-len(" GPUs)")])
    return 1


def _base_name(label: str) -> str:
    """The workload name inside an occupant label ('llama #2', 'big (1 of 2 GPUs)')."""
    if label.endswith(" GPUs)") and " (" in label:
        label = label[: label.rindex(" (")]
    if " #" in label:
        head, _, tail = label.rpartition(" #")
        if tail.isdigit():
            label = head
    return label


def plan_for_model(model: GpuModel, workloads: list[Workload], demand: Demand) -> ModelPlan:
    """Plan, baselines, MPS alternative and fleet mapping for one GPU model."""
    ms = model_slots(model.key)
    points = demand.points
    names = {w.name: w for w in workloads}
    items = _items(ms, workloads, points)
    groups = _groups(ms, demand, names)
    existing = [g for g in demand.gpus if g.model == model.key]
    current_patterns = [(g, ms.current_pattern(g.layout)) for g in existing]
    current = Counter(p for _, p in current_patterns if p is not None)
    solution = planner.plan(ms, items, groups, current)
    by_group = {g.key: g for g in groups}
    shared_by_key = {s.key: s for s in demand.shared}
    drafts = []
    for pg in solution.gpus:
        instances = _instances(ms, pg, names, by_group)
        covered = sum(i.memory_bytes for i in instances)
        stranded = max(0, model.memory_capacity_bytes - covered) + sum(
            max(0, i.memory_bytes - i.need_bytes) for i in instances if i.need_bytes is not None)
        prefer = None
        for who in pg.occupants:
            s = shared_by_key.get((who or "")[len(GROUP):]) if who and who.startswith(GROUP) else None
            if s is not None and s.gpu_index is not None:
                prefer = (s.node, s.gpu_index)
        note = _note(pg, instances)
        plan = GpuPlan(model.key, "new", None, ms.name(pg.pattern), not pg.pattern[ms.full], instances, "new",
                       stranded, note)
        drafts.append((plan, pg.pattern, pg.keep, prefer))
    placed = fleet_map.assign(model, drafts, current_patterns)
    placed = fleet_map.settle(placed, _homes(placed, names, shared_by_key), model.memory_capacity_bytes)
    changes = Counter(g.change for g in placed)
    needed = len(solution.gpus)
    mig_off = sum(1 for pg in solution.gpus if pg.pattern[ms.full])
    homog, tried, greedy = _baselines(ms, items)
    alternative = tuple(mps_pack.pack(model, workloads, points)) if sum(w.count for w in workloads) > 1 else ()
    per_node, per_node_basis = gpus_per_node(demand, model.key)
    alternative = tuple(replace(a, reasons=a.reasons + (spans(a.gpus, per_node, per_node_basis),))
                        if a.gpus > per_node else a for a in alternative)
    peak = demand.grid.times[solution.peak_index] if demand.grid is not None and demand.grid.times else None
    table = _workload_table(items, solution, names, groups, solution.peak_index)
    plan = ModelPlan(
        model=model.key, workloads=table, at_once=solution.at_once, gpus_needed=needed, gpus_mig_off=mig_off, available_gpus=len(existing),
        kept=changes["keep"], reconfigured=changes["reconfigure"], released=changes["release"],
        added=changes["new"], groups_kept=solution.kept_groups, optimal=solution.optimal,
        layouts_minimal=solution.layouts_minimal,
        stranded_bytes=sum(g.stranded_bytes for g in placed if g.change != "release"),
        shortfall_sms=solution.shortfall_sms, homogeneous=homog, homogeneous_tried=tuple(tried),
        greedy=greedy, mps=alternative, gpus=tuple(placed), solve_seconds=solution.solve_seconds,
        time_rows=solution.rows, patterns=solution.patterns, peak_moment=peak, reasons=(), gpus_per_node=per_node)
    return replace(plan, reasons=tuple(reasons(model, plan, workloads, (per_node, per_node_basis), shared_by_key)))


def _homes(placed, names: dict[str, Workload], shared: dict[str, SharedDevice]) -> dict[str, set]:
    """Occupant label -> the (node, GPU index) it runs on now."""
    out: dict[str, set] = {}
    for g in placed:
        for i in g.instances:
            if not i.workload or i.workload in out:
                continue
            if i.workload.startswith("as now: "):
                s = shared.get(i.workload[len("as now: "):])
                out[i.workload] = {(s.node, s.gpu_index)} if s is not None and s.gpu_index is not None else set()
            else:
                w = names.get(_base_name(i.workload))
                out[i.workload] = set(w.gpus_seen) if w is not None else set()
    return out


def _note(pg: planner.PlannedGpu, instances) -> str:
    if len(instances) == 1 and instances[0].profile == FULL:
        who = instances[0].workload or ""
        if who.startswith("as now:"):
            return "MIG off: instances that share this device now stay together (MPS / time-slicing)"
        if " of " in who:
            return "MIG off: part of a workload larger than one GPU (model parallel)"
        return "MIG off: the whole GPU"
    return ""


def _workload_table(items, solution, names, groups, peak) -> tuple[WorkloadPlan, ...]:
    at_peak: dict[str, Counter] = defaultdict(Counter)
    for pg in solution.gpus:
        placements = pg.layout or ((FULL, 0),)
        for (profile, _), who in zip(placements, pg.occupants):
            if who and not who.startswith(GROUP):
                at_peak[_base_name(who)][profile] += 1
    kept = set(solution.kept_groups)
    for g in groups:
        if g.key in kept and g.alive[peak]:
            for name, counts in g.members.items():
                if counts[peak]:
                    at_peak[name]["sharing as now"] += int(counts[peak])
    rows = []
    for it in items:
        w = names[it.name]
        slots = ", ".join(f"{n} x {p}" for p, n in sorted(at_peak[it.name].items()))
        rows.append(WorkloadPlan(it.name, w.count, w.memory_need_bytes, it.weight, slots))
    return tuple(rows)


def _baselines(ms: ModelSlots, items: list[planner.Item]):
    if not ms.model.mig_capable:
        none = baselines.Baseline("one workload per GPU", None, "no MIG")
        return none, [], none
    mp = model_patterns(ms.model.key)
    needs = [baselines.Need(it.name, it.need_mib, it.weight, it.counts) for it in items]
    homog, tried = baselines.best_homogeneous(mp, needs)
    greedy, _ = baselines.greedy_first_fit(mp, needs)
    return homog, tried, greedy
