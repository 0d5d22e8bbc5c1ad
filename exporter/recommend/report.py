"""Builds a Recommendation from a Demand: per GPU model, the optimum, baselines and MPS advice."""

from __future__ import annotations

import math
from collections import defaultdict

from exporter import catalog
from exporter.catalog import MIB, GpuModel
from exporter.errors import UserError
from exporter.recommend import baselines, fleet_map, mps, mps_pack
from exporter.recommend.demand import Demand, Workload
from exporter.recommend.patterns import config_name, model_patterns
from exporter.recommend.planner import plan_mig
from exporter.recommend.result import GpuPlan, InstancePlan, ModelPlan, Recommendation

GIB = 2**30


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


def recommend(demand: Demand) -> Recommendation:
    """The whole answer for ``demand``."""
    groups = group_by_model(demand)
    plans = tuple(plan_for_model(catalog.MODELS[key], groups[key], demand) for key in sorted(groups))
    by_name = {w.name: w for w in demand.workloads}
    shared_now = tuple(
        mps.advise(s.key, catalog.MODELS[s.model], s.capacity_bytes, s.sms,
                   [by_name[n] for n in s.workloads if n in by_name])
        for s in demand.shared
    )
    notes = list(demand.notes)
    unpinned = [w for w in demand.workloads if not w.gpu_model]
    if unpinned and len(plans) > 1:
        notes.append(f"{len(unpinned)} workload(s) name no GPU model: each model's plan is an alternative")
    return Recommendation(plans, shared_now, demand.workloads, demand.sources, tuple(notes))


def _whole_gpu(model: GpuModel, w: Workload | None, note: str = "") -> InstancePlan:
    return InstancePlan(
        profile="full", start=0, memory_slices=model.memory_slices or 1,
        compute_slices=model.compute_slices or 1, memory_bytes=model.memory_capacity_bytes,
        sms=model.sm_count, workload=w.name if w else None,
        need_bytes=w.memory_need_bytes if w else None,
        shortfall_sms=max(0, w.sms_on(model) - model.sm_count) if w else 0,
    )


def _dedicated(model: GpuModel, workloads: list[Workload]) -> tuple[list[GpuPlan], list[str]]:
    """MIG-off GPUs for workloads no profile holds; those larger than a GPU span several."""
    plans, reasons = [], []
    capacity = model.memory_capacity_bytes
    for w in workloads:
        k = max(1, math.ceil(w.memory_need_bytes / capacity))
        if k == 1:
            note = "dedicated: larger than the largest MIG profile" if model.mig_capable else "whole GPU"
            plans.append(GpuPlan(model.key, "new", None, "all-disabled", False, (_whole_gpu(model, w),),
                                 "new", capacity - w.memory_need_bytes, note))
            continue
        bigger = [m.key for m in catalog.MODELS.values() if m.memory_capacity_bytes >= w.memory_need_bytes]
        reasons.append(
            f"{w.name} needs {w.memory_need_bytes / GIB:.1f} GiB, more than one {model.key} "
            f"({capacity / GIB:.1f} GiB): {k} GPUs with model parallelism"
            + (f", or one {' / '.join(bigger)}" if bigger else ""))
        for part in range(k):
            share = min(capacity, w.memory_need_bytes - part * capacity)
            plans.append(GpuPlan(model.key, "new", None, "all-disabled", False, (_whole_gpu(model, w),),
                                 "new", capacity - share, f"dedicated: {part + 1} of {k} GPUs for {w.name}"))
    return plans, reasons


def plan_for_model(model: GpuModel, workloads: list[Workload], demand: Demand) -> ModelPlan:
    """Optimum, baselines, MPS alternative and fleet mapping for one GPU model."""
    reasons: list[str] = []
    if model.mig_capable:
        mp = model_patterns(model.key)
        in_mig = [w for w in workloads if w.memory_need_mib <= mp.full_memory_mib]
        solution = plan_mig(mp, in_mig)
        too_big = [w for w in workloads if w.memory_need_mib > mp.full_memory_mib]
        by_name = {w.name: w for w in in_mig}
        gpus = [_mig_gpu(model, mp, g, by_name) for g in solution.gpus]
        homog, tried = baselines.best_homogeneous(mp, in_mig)
        greedy, _ = baselines.greedy_first_fit(mp, in_mig)
        optimal, minimal, stats = solution.optimal, solution.layouts_minimal, solution
        stranded = solution.stranded_mib * MIB
    else:
        in_mig, too_big, gpus, tried = [], list(workloads), [], ()
        homog = greedy = baselines.Baseline("one workload per GPU", 0)
        optimal, minimal, stats, stranded = True, True, None, 0
        reasons.append(f"{model.key} has no MIG: one workload per GPU, or MPS (below)")
    dedicated, why = _dedicated(model, too_big)
    reasons += why
    extra = len(dedicated)
    stranded += sum(g.stranded_bytes for g in dedicated)
    existing = [g for g in demand.gpus if g.model == model.key]
    placed = fleet_map.assign(model, [*gpus, *dedicated], existing)
    needed = len(gpus) + extra
    homog = _plus(homog, extra)
    greedy = _plus(greedy, extra)
    fitting = [w for w in workloads if w.peak_memory_bytes <= model.memory_capacity_bytes]
    alternative = tuple(mps_pack.pack(model, fitting)) if len(fitting) > 1 else ()
    reasons += _reasons(model, workloads, needed, extra, homog, greedy, alternative, existing, stats, optimal)
    shortfall = sum(i.shortfall_sms for g in placed for i in g.instances)
    return ModelPlan(
        model=model.key, workloads=tuple(w.name for w in workloads), gpus_needed=needed,
        dedicated_gpus=extra, available_gpus=len(existing), optimal=optimal, layouts_minimal=minimal,
        stranded_bytes=stranded, shortfall_sms=shortfall, homogeneous=homog,
        homogeneous_tried=tuple(_plus(b, extra) for b in tried), greedy=greedy, mps=alternative,
        gpus=tuple(placed), solve_seconds=stats.solve_seconds if stats else 0.0,
        classes=stats.classes if stats else 0, patterns=stats.patterns if stats else 0,
        reasons=tuple(reasons),
    )


def _plus(b: baselines.Baseline, extra: int) -> baselines.Baseline:
    return baselines.Baseline(b.name, None if b.gpus is None else b.gpus + extra, b.reason)


def _mig_gpu(model: GpuModel, mp, planned, by_name: dict[str, Workload]) -> GpuPlan:
    """A planner GPU as a GpuPlan; a lone 7g holding one workload becomes MIG off."""
    instances = []
    for (name, start), wname in zip(planned.layout, planned.workloads):
        p = model.profile(name)
        w = by_name.get(wname) if wname else None
        instances.append(InstancePlan(
            profile=name, start=start, memory_slices=p.memory_slices, compute_slices=p.slice_count,
            memory_bytes=p.memory_mib * MIB, sms=p.sm_count, workload=wname,
            need_bytes=w.memory_need_bytes if w else None,
            shortfall_sms=max(0, w.sms_on(model) - p.sm_count) if w else 0))
    if len(instances) == 1 and instances[0].memory_slices == model.memory_slices and instances[0].workload:
        w = by_name[instances[0].workload]
        return GpuPlan(model.key, "new", None, "all-disabled", False, (_whole_gpu(model, w),), "new",
                       model.memory_capacity_bytes - w.memory_need_bytes,
                       "whole GPU: MIG off gives it all memory and SMs")
    covered = sum(i.memory_bytes for i in instances)
    stranded = mp.full_memory_mib * MIB - covered + sum(
        i.memory_bytes - i.need_bytes for i in instances if i.need_bytes is not None)
    return GpuPlan(model.key, "new", None, config_name(mp, planned.pattern), True, tuple(instances),
                   "new", stranded)


def _reasons(model, workloads, needed, extra, homog, greedy, alternative, existing, stats, optimal):
    out = []
    if stats is not None and stats.classes:
        proof = "optimal" if optimal else "best found in the time limit (not proven optimal)"
        out.append(f"{len(workloads)} workloads need {needed} {model.key} GPUs ({proof}; "
                   f"{stats.classes} workload classes x {stats.patterns} layouts, "
                   f"solved in {stats.solve_seconds * 1000:.0f} ms)")
    if extra:
        out.append(f"{extra} GPU(s) with MIG off for workloads larger than any MIG profile")
    if homog.gpus is not None and model.mig_capable:
        out.append(f"best single configuration {homog.name}: {homog.gpus} GPUs; "
                   f"greedy first-fit: {greedy.gpus} GPUs")
    if alternative:
        staggered = sum(1 for a in alternative if a.verdict == "stagger")
        out.append(f"MPS alternative: {len(alternative)} whole GPUs"
                   + (f" ({staggered} need staggered starts)" if staggered else "")
                   + "; MPS has no memory isolation and one client's fault ends all on the GPU")
    if existing:
        if needed <= len(existing):
            out.append(f"the fleet has {len(existing)} {model.key} GPUs: {len(existing) - needed} can be released")
        else:
            out.append(f"the fleet has {len(existing)} {model.key} GPUs: {needed - len(existing)} short")
    return out
