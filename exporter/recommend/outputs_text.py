"""`--format text` (default) and `--format markdown`: tables a person reads, with the reasons."""

from __future__ import annotations

from collections import Counter

from exporter.recommend.mps import MpsAdvice
from exporter.recommend.result import GpuPlan, ModelPlan, Recommendation

GIB = 2**30
MAX_GPU_ROWS = 40  # beyond this a model's GPUs are summarised by configuration
MAX_MPS_DEVICES = 10  # MPS alternative devices listed in full; the rest are counted


def gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GIB:.1f} GiB"


def instance_text(g: GpuPlan) -> str:
    parts = []
    for i in g.instances:
        who = i.workload or "free"
        fill = f" {i.need_bytes / GIB:.1f}/{i.memory_bytes / GIB:.1f}G" if i.need_bytes else ""
        short = f" -{i.shortfall_sms}SM" if i.shortfall_sms else ""
        where = "" if i.profile == "full" else f"@{i.start}"
        parts.append(f"{i.profile}{where} {who}{fill}{short}")
    return " | ".join(parts) or "-"


def gpu_rows(p: ModelPlan) -> list[tuple[str, ...]]:
    """(GPU, change, config, instances) rows, or a summary by configuration on big fleets."""
    if len(p.gpus) <= MAX_GPU_ROWS:
        return [(f"{g.node} gpu{g.index}", g.change, g.config or "-", g.note or instance_text(g))
                for g in p.gpus]
    counts = Counter((g.config or "-", g.change) for g in p.gpus)
    return [(f"{n} GPUs", change, config, "(every GPU: --format json)")
            for (config, change), n in sorted(counts.items())]


def advice_lines(a: MpsAdvice) -> list[str]:
    head = (f"{a.device}: {a.verdict}; peaks {gib(a.sum_of_peaks_bytes)} of {gib(a.capacity_bytes)}"
            + (f", staggered peak {gib(a.staggered_peak_bytes)}" if a.staggered_peak_bytes else "")
            + f"; any {a.max_concurrency} at once are safe")
    lines = [head]
    for c in a.clients:
        start = "" if c.start_offset_seconds is None else f"  start +{c.start_offset_seconds:g}s"
        lines.append(f"    {c.workload}: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={c.pinned_limit} "
                     f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={c.active_thread_percentage}{start}")
    lines += [f"    why: {r}" for r in a.reasons]
    return lines


def _headline(p: ModelPlan) -> str:
    proof = "optimal" if p.optimal else "not proven optimal"
    return (f"{p.model}: {len(p.workloads)} workloads -> {p.gpus_needed} GPUs ({proof}); "
            f"best single config {p.homogeneous.name}: {_n(p.homogeneous.gpus)}; "
            f"greedy first-fit: {_n(p.greedy.gpus)}; MPS: {len(p.mps) or '-'}")


def _n(v: int | None) -> str:
    return "impossible" if v is None else str(v)


def _table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1]  # noqa: E731
    return [fmt(header), *(fmt(r) for r in rows)]


def render_text(rec: Recommendation) -> str:
    out = ["exporter recommend: " + "; ".join(rec.sources), ""]
    for p in rec.plans:
        out.append(_headline(p))
        out += ["  " + line for line in _table(gpu_rows(p), ("GPU", "change", "config", "instances"))]
        out.append(f"  stranded memory {gib(p.stranded_bytes)}, compute shortfall {p.shortfall_sms} SMs")
        out += [f"  - {r}" for r in p.reasons]
        if p.mps:
            out.append(f"  MPS alternative: {len(p.mps)} GPUs")
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
    for p in rec.plans:
        out += [f"## {p.model}", "", _headline(p), "",
                "| GPU | change | config | instances |", "|---|---|---|---|"]
        out += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in gpu_rows(p)]
        out += ["", f"Stranded memory {gib(p.stranded_bytes)}, compute shortfall {p.shortfall_sms} SMs.", ""]
        out += [f"- {r}" for r in p.reasons]
        if p.mps:
            out += ["", f"### MPS alternative: {len(p.mps)} GPUs", "",
                    "| device | client | CUDA_MPS_PINNED_DEVICE_MEM_LIMIT | CUDA_MPS_ACTIVE_THREAD_PERCENTAGE | start offset |",
                    "|---|---|---|---|---|"]
            out += _md_clients(p.mps[:MAX_MPS_DEVICES])
            if len(p.mps) > MAX_MPS_DEVICES:
                out += ["", f"... and {len(p.mps) - MAX_MPS_DEVICES} more GPUs (--format json)."]
        out.append("")
    if rec.shared_now:
        out += ["## Devices shared now", "",
                "| device | client | CUDA_MPS_PINNED_DEVICE_MEM_LIMIT | CUDA_MPS_ACTIVE_THREAD_PERCENTAGE | start offset |",
                "|---|---|---|---|---|"]
        out += _md_clients(rec.shared_now)
        out += [""] + [f"- {a.device}: {a.verdict}: {'; '.join(a.reasons)}" for a in rec.shared_now] + [""]
    out += [f"> note: {n}" for n in rec.notes]
    return "\n".join(out).rstrip() + "\n"


def _md_clients(advice) -> list[str]:
    rows = []
    for a in advice:
        for c in a.clients:
            start = "-" if c.start_offset_seconds is None else f"+{c.start_offset_seconds:g} s"
            rows.append(f"| {_md_escape(a.device)} | {_md_escape(c.workload)} | `{c.pinned_limit}` | "
                        f"{c.active_thread_percentage} | {start} |")
    return rows
