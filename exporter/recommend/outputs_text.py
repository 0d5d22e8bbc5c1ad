"""`--format text` (default) and `--format markdown`: tables a person reads, with the reasons.

The basis (window, samples, workloads, peak moment, gaps) and the summary (GPUs kept,
reconfigured, released, added) are said once, at the top; every format shares them.
"""

from __future__ import annotations

from collections import Counter

from exporter.recommend.mps import MpsAdvice, size_text
from exporter.recommend.outputs_basis import (GIB, basis_lines, duration, gib, mig_sizes_lines,  # noqa: F401 - re-exported
                                              moment, plural)
from exporter.recommend.mps_pack import gpus_needed
from exporter.recommend.result import GpuPlan, ModelPlan, Recommendation

MAX_GPU_ROWS = 40  # beyond this a model's GPUs are summarised by configuration
MAX_MPS_DEVICES = 10  # MPS alternative devices listed in full; the rest are counted
MAX_WORKLOAD_ROWS = 60

def summary_lines(rec: Recommendation) -> list[str]:
    out = []
    for p in rec.plans:
        fleet = (f" (the fleet has {p.available_gpus}): {p.kept} kept, {p.reconfigured} reconfigured, "
                 f"{p.released} released, {p.added} to add") if p.available_gpus else f": {p.added} to add"
        out.append(f"{p.model}: {plural(p.gpus_needed, 'GPU')}{fleet}")
    return out


def instance_text(g: GpuPlan) -> str:
    parts = []
    for i in g.instances:
        who = i.workload or "free at the peak"
        fill = f" {i.need_bytes / GIB:.1f}/{i.memory_bytes / GIB:.1f}G" if i.need_bytes else ""
        short = f" -{i.shortfall_sms}SM" if i.shortfall_sms else ""
        where = "" if i.profile == "full" else f"@{i.start}"
        parts.append(f"{i.profile}{where} {who}{fill}{short}")
    return " | ".join(parts) or "-"


def gpu_rows(p: ModelPlan) -> list[tuple[str, ...]]:
    """(GPU, change, now, config, instances) rows, or a summary by configuration on big fleets."""
    if len(p.gpus) <= MAX_GPU_ROWS:
        return [(f"{g.node} gpu{g.index}", g.change, g.current or "-", g.config or "-",
                 g.note + (": " if g.note and g.instances else "") + instance_text(g) if g.instances else g.note)
                for g in p.gpus]
    counts = Counter((g.config or "-", g.change) for g in p.gpus)
    return [(plural(n, "GPU"), change, "", config, "(every GPU: --format json)")
            for (config, change), n in sorted(counts.items())]


def workload_rows(p: ModelPlan) -> list[tuple[str, ...]]:
    rows = [(w.name, str(w.count), gib(w.need_bytes) + (f" x{w.gpus_per_instance} GPUs" if w.gpus_per_instance > 1
                                                         else ""), w.slots or "-")
            for w in p.workloads[:MAX_WORKLOAD_ROWS]]
    if len(p.workloads) > MAX_WORKLOAD_ROWS:
        rows.append((f"... {len(p.workloads) - MAX_WORKLOAD_ROWS} more (--format json)", "", "", ""))
    return rows


def advice_lines(a: MpsAdvice) -> list[str]:
    if a.verdict == "dedicated":
        head = (f"{a.device}: dedicated, {plural(a.gpus, 'whole GPU')} for {a.clients[0].workload} "
                f"(needs {gib(a.footprint_bytes)} of {gib(a.capacity_bytes)}); no MPS, no limits")
        return [head] + [f"    why: {r}" for r in a.reasons]
    room = "" if a.room_left_bytes is None else f", {size_text(a.room_left_bytes)} left"
    head = (f"{a.device}: {a.verdict}; limits {gib(a.limits_sum_bytes)} in all, at most {gib(a.together_bytes)} "
            f"and {plural(a.clients_at_once, 'client')} at one time"
            + (f"; staggered {gib(a.staggered_peak_bytes)} with contexts" if a.staggered_peak_bytes else
               f"; with contexts {gib(a.footprint_bytes)}")
            + f" of {gib(a.usable_bytes)} usable{room}"
            + f"; any {a.max_concurrency} at once are safe")
    lines = [head]
    for c in a.clients:
        start = "" if c.start_offset_seconds is None else f"  start +{c.start_offset_seconds:g}s"
        lines.append(f"    {c.workload}: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={c.pinned_limit} "
                     f"(peak {gib(c.peak_bytes)} + {c.margin_ratio:.0%}) "
                     f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={c.active_thread_percentage}{start}")
    lines += [f"    why: {r}" for r in a.reasons]
    return lines


def headline(p: ModelPlan) -> str:
    proof = "optimal" if p.optimal else "not proven optimal"
    mps = gpus_needed(list(p.mps)) if p.mps else None
    return (f"{p.model}: {plural(len(p.workloads), 'workload')} -> {plural(p.gpus_needed, 'GPU')} ({proof}); "
            f"best single config {p.homogeneous.name}: {_n(p.homogeneous.gpus)}; "
            f"greedy first-fit: {_n(p.greedy.gpus)}; MPS: {mps if mps is not None else '-'}")


def _n(v: int | None) -> str:
    return "impossible" if v is None else str(v)


def _table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1]  # noqa: E731
    return [fmt(header), *(fmt(r) for r in rows)]


def render_text(rec: Recommendation) -> str:
    out = ["exporter recommend: " + "; ".join(rec.sources)]
    out += ["  " + line for line in basis_lines(rec)]
    out += ["", "Summary:"] + ["  " + line for line in summary_lines(rec)] + [""]
    for p in rec.plans:
        out.append(headline(p))
        out += ["  " + line for line in _table(workload_rows(p), ("workload", "at once", "per instance",
                                                                  "slots at the peak moment"))]
        out.append("")
        out += ["  " + line for line in _table(gpu_rows(p), ("GPU", "change", "now", "config", "instances"))]
        out.append(f"  stranded memory {gib(p.stranded_bytes)}, compute shortfall {plural(p.shortfall_sms, 'SM')}")
        out += [f"  - {r}" for r in p.reasons]
        if p.mps:
            out.append(f"  MPS alternative: {plural(gpus_needed(list(p.mps)), 'GPU')}")
            for a in p.mps[:MAX_MPS_DEVICES]:
                out += ["    " + line for line in advice_lines(a)]
            if len(p.mps) > MAX_MPS_DEVICES:
                verdicts = Counter(a.verdict for a in p.mps[MAX_MPS_DEVICES:])
                out.append(f"    ... {len(p.mps) - MAX_MPS_DEVICES} more ("
                           + ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items())) + "): --format json")
        out.append("")
    if rec.shared_now:
        out.append("Devices shared now (MPS advice):")
        for a in rec.shared_now:
            out += ["  " + line for line in advice_lines(a)]
        out.append("")
    out += [f"note: {n}" for n in rec.notes]
    return "\n".join(out).rstrip() + "\n"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(rec: Recommendation) -> str:
    out = ["# GPU sharing recommendation", "", "Inputs: " + "; ".join(rec.sources), ""]
    out += [f"- {_md_escape(line)}" for line in basis_lines(rec)]
    out += ["", "## Summary", ""] + [f"- {line}" for line in summary_lines(rec)] + [""]
    for p in rec.plans:
        out += [f"## {p.model}", "", headline(p), "",
                "| workload | at once | per instance | slots at the peak moment |", "|---|---|---|---|"]
        out += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in workload_rows(p)]
        out += ["", "| GPU | change | now | config | instances |", "|---|---|---|---|---|"]
        out += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in gpu_rows(p)]
        out += ["", f"Stranded memory {gib(p.stranded_bytes)}, compute shortfall {plural(p.shortfall_sms, 'SM')}.", ""]
        out += [f"- {r}" for r in p.reasons]
        if p.mps:
            out += ["", f"### MPS alternative: {plural(gpus_needed(list(p.mps)), 'GPU')}", "",
                    "| device | client | CUDA_MPS_PINNED_DEVICE_MEM_LIMIT | CUDA_MPS_ACTIVE_THREAD_PERCENTAGE | start offset |",
                    "|---|---|---|---|---|"]
            out += _md_clients(p.mps[:MAX_MPS_DEVICES])
            if len(p.mps) > MAX_MPS_DEVICES:
                out += ["", f"... and {len(p.mps) - MAX_MPS_DEVICES} more (--format json)."]
        out.append("")
    if rec.shared_now:
        out += ["## Devices shared now", "",
                "| device | client | CUDA_MPS_PINNED_DEVICE_MEM_LIMIT | CUDA_MPS_ACTIVE_THREAD_PERCENTAGE | start offset |",
                "|---|---|---|---|---|"]
        out += _md_clients(rec.shared_now)
        out += [""] + [f"- {a.device}: {a.verdict}: {'; '.join(a.reasons)}" for a in rec.shared_now] + [""]
    out += _md_operator(rec)
    out += [f"> note: {n}" for n in rec.notes]
    return "\n".join(out).rstrip() + "\n"


def _md_operator(rec: Recommendation) -> list[str]:
    """Rollout, per-owner settings and the objects to apply (what --format gpu-operator writes)."""
    from exporter.recommend import operator_objects, outputs_operator

    objs = operator_objects.build(rec)
    out = ["## Rollout on Kubernetes (GPU Operator)", ""]
    out += [f"- {line.strip()}" if not line.startswith("  ") else f"  - {line.strip()}"
            for line in outputs_operator.rollout_lines(objs)]
    if objs["owner_settings"]:
        out += ["", "### MPS settings per owner", ""]
        out += [f"- {line.strip()}" for line in outputs_operator.owner_lines(objs)]
    out += [f"- note: {n}" for n in objs["notes"]]
    out += ["", "### Objects to apply (`kubectl apply -f`)", "", "```yaml",
            outputs_operator.objects_yaml(objs).rstrip(), "```", ""]
    return out


def _md_clients(advice) -> list[str]:
    rows = []
    for a in advice:
        for c in a.clients:
            if a.verdict == "dedicated":
                rows.append(f"| {_md_escape(a.device)} | {_md_escape(c.workload)} | none: {a.gpus} whole GPUs "
                            "of its own, no MPS | - | - |")
                continue
            start = "-" if c.start_offset_seconds is None else f"+{c.start_offset_seconds:g} s"
            rows.append(f"| {_md_escape(a.device)} | {_md_escape(c.workload)} | `{c.pinned_limit}` | "
                        f"{c.active_thread_percentage} | {start} |")
    return rows
