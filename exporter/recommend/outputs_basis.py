"""What a plan rests on, and the number and time formats every recommend output shares.

Apart from outputs_text so that the outputs which quote the basis (mig-parted, GPU Operator)
and the text/markdown renderer, which embeds the GPU Operator section, import it without a
circle.
"""

from __future__ import annotations

import time

from exporter.recommend.result import Recommendation

GIB = 2**30


def gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GIB:.1f} GiB"


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"  # one number format: no separators


def duration(seconds: float) -> str:
    """'7d', '1h 30m', '45 s'."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return " ".join(parts[:2])


def moment(t: float | None, clock: str) -> str:
    if t is None:
        return "-"
    if clock == "scenario":
        return f"t={t:.0f} s"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def basis_lines(rec: Recommendation) -> list[str]:
    """What the plan rests on, one fact a line."""
    b = rec.basis
    lines = [("" if rec.stamp.startswith("undated") else "plan of ") + f"{rec.stamp}, exporter {rec.version}"]
    if b.start is not None:
        workloads = len(rec.workloads)
        lines.append(f"window {duration(b.window_seconds)} ({moment(b.start, b.clock)} to {moment(b.end, b.clock)}): "
                     f"{plural(b.samples, 'memory sample')}, {plural(b.instances, 'instance')} of "
                     f"{plural(workloads, 'workload')} on {plural(b.nodes, 'node')}")
        peaks = sorted({(p.model, p.peak_moment) for p in rec.plans if p.peak_moment is not None})
        if peaks:
            lines.append("peak moment: " + "; ".join(f"{m} {moment(t, b.clock)}" for m, t in peaks))
        lines.append("scrape gaps: " + ("none" if not b.gaps else f"{len(b.gaps)}, held at the larger count on "
                                        "either side (" + "; ".join(b.gaps[:3])
                                        + (f"; {len(b.gaps) - 3} more" if len(b.gaps) > 3 else "") + ")"))
        if b.learned_profiles:
            lines.append(f"learned profiles raised the size of {plural(b.learned_profiles, 'workload')}")
    else:
        lines.append(f"a plan of {plural(len(rec.workloads), 'workload')} (nothing observed)")
    if rec.margin_text:
        lines.append(rec.margin_text)
    lines += mig_sizes_lines(rec)
    if rec.draft:
        lines.append(f"DRAFT: only {duration(b.window_seconds)} of history (less than the minimum "
                     f"{duration(b.min_window_seconds)}, --min-window): a longer window may see higher peaks "
                     "and more jobs at once")
    return lines


def mig_sizes_lines(rec: Recommendation) -> list[str]:
    """Which MIG profile sizes the plan assumed, and from where (sizes differ by driver)."""
    from exporter import catalog  # here, not at the top: keeps this module's imports as they are

    keys = sorted({p.model for p in rec.plans if p.model in catalog.MODELS and catalog.MODELS[p.model].mig_capable})
    return [f"MIG sizes assumed: {catalog.MODELS[k].sizes_basis}" for k in keys]
