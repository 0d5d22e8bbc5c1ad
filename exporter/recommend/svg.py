"""SVG pictures: one GPU's slices, and an MPS stagger as a small timeline.

A GPU is drawn as NVIDIA draws MIG: a row of compute slices (7 on A100/H100/H200/B200) over
a row of memory slices (8). Each instance colours its slices with its workload's colour,
a free instance is white with a dashed outline, and slices in no instance are grey
(stranded). Compute slices sit under their memory: an instance of c compute slices starting
at memory slice s takes compute slices min(s, C - c) .. +c, which reproduces every valid
layout without overlap.
"""

from __future__ import annotations

import hashlib
from html import escape

from exporter.recommend.mps import MpsAdvice
from exporter.recommend.result import GpuPlan

WIDTH = 336
STRANDED = "#b0b0b0"


def colour(name: str) -> str:
    """A stable, light colour per workload kind: replicas ("llama#1", "llama#2") share it."""
    kind = name.split("#", 1)[0]
    hue = int(hashlib.sha1(kind.encode()).hexdigest()[:6], 16) % 360
    return f"hsl({hue},60%,68%)"


def gpu_svg(g: GpuPlan, memory_slices: int, compute_slices: int) -> str:
    """One GPU: compute slices on top, memory slices below, instances coloured."""
    m_slices, c_slices = max(1, memory_slices), max(1, compute_slices)
    cw, mw = WIDTH / c_slices, WIDTH / m_slices
    top, row = 16, 34
    title = f"{g.node} gpu{g.index}: {g.config or g.change}"
    parts = [f'<svg class="gpu" xmlns="http://www.w3.org/2000/svg" width="{WIDTH + 8}" height="{top + 2 * row + 14}" '
             f'viewBox="-4 0 {WIDTH + 8} {top + 2 * row + 14}" role="img" aria-label="{escape(title)}">',
             f'<text x="0" y="11" font-size="11" font-family="sans-serif">{escape(title)}</text>']
    used_c, used_m = set(), set()
    for i in g.instances:
        full = i.profile == "full"
        m0, msz = (0, m_slices) if full else (i.start, i.memory_slices)
        csz = c_slices if full else i.compute_slices
        c0 = 0 if full else min(i.start, c_slices - csz)
        used_c.update(range(c0, c0 + csz))
        used_m.update(range(m0, m0 + msz))
        fill = colour(i.workload) if i.workload else "#ffffff"
        dash = "" if i.workload else ' stroke-dasharray="4 3"'
        label = escape(f"{i.profile} {i.workload or 'free'}")
        tip = f"<title>{label}</title>"
        parts.append(f'<rect x="{c0 * cw:.1f}" y="{top}" width="{csz * cw - 2:.1f}" height="{row - 4}" '
                     f'fill="{fill}" stroke="#333"{dash}>{tip}</rect>')
        parts.append(f'<rect x="{m0 * mw:.1f}" y="{top + row}" width="{msz * mw - 2:.1f}" height="{row - 4}" '
                     f'fill="{fill}" stroke="#333"{dash}>{tip}</rect>')
        if i.workload and i.need_bytes and i.memory_bytes:  # how much of the slice the peak fills
            frac = min(1.0, i.need_bytes / i.memory_bytes)
            parts.append(f'<rect x="{m0 * mw:.1f}" y="{top + 2 * row - 8}" width="{(msz * mw - 2) * frac:.1f}" '
                         f'height="4" fill="#333" opacity="0.55"/>')
        text = escape((i.workload or "free")[: max(4, int(msz * mw / 6.5))])
        parts.append(f'<text x="{m0 * mw + 3:.1f}" y="{top + row + 14}" font-size="10" '
                     f'font-family="sans-serif">{text}</text>')
        parts.append(f'<text x="{c0 * cw + 3:.1f}" y="{top + 14}" font-size="10" '
                     f'font-family="sans-serif">{escape(i.profile)}</text>')
    for c in set(range(c_slices)) - used_c:
        parts.append(f'<rect x="{c * cw:.1f}" y="{top}" width="{cw - 2:.1f}" height="{row - 4}" fill="{STRANDED}">'
                     "<title>stranded compute slice</title></rect>")
    for m in set(range(m_slices)) - used_m:
        parts.append(f'<rect x="{m * mw:.1f}" y="{top + row}" width="{mw - 2:.1f}" height="{row - 4}" '
                     f'fill="{STRANDED}"><title>stranded memory slice</title></rect>')
    parts.append(f'<text x="0" y="{top + 2 * row + 10}" font-size="9" font-family="sans-serif" fill="#555">'
                 f"compute slices (top), memory slices (bottom)</text></svg>")
    return "".join(parts)


def stagger_svg(a: MpsAdvice) -> str:
    """Client bars from start offset to end, and the summed memory against the capacity."""
    clients = [c for c in a.clients if c.duration_seconds]
    if not clients or not a.curve:
        return ""
    end = max((c.start_offset_seconds or 0) + c.duration_seconds for c in clients)
    bar, chart = 12, 60
    height = len(clients) * (bar + 2) + chart + 24
    x = lambda t: 4 + (WIDTH - 8) * t / max(end, 1e-9)  # noqa: E731
    top = max(a.capacity_bytes, max(v for _, v in a.curve)) * 1.05
    y = lambda v: chart + 4 - chart * v / top  # noqa: E731
    parts = [f'<svg class="stagger" xmlns="http://www.w3.org/2000/svg" width="{WIDTH + 8}" height="{height}" '
             f'role="img" aria-label="MPS stagger on {escape(a.device)}">']
    points = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in a.curve)
    parts.append(f'<polyline points="{points}" fill="none" stroke="#1f5fa8" stroke-width="1.5"/>')
    parts.append(f'<line x1="4" x2="{WIDTH - 4}" y1="{y(a.capacity_bytes):.1f}" y2="{y(a.capacity_bytes):.1f}" '
                 'stroke="#c0392b" stroke-dasharray="5 3"><title>device memory</title></line>')
    for k, c in enumerate(clients):
        t0 = c.start_offset_seconds or 0
        yy = chart + 10 + k * (bar + 2)
        parts.append(f'<rect x="{x(t0):.1f}" y="{yy}" width="{x(t0 + c.duration_seconds) - x(t0):.1f}" '
                     f'height="{bar}" fill="{colour(c.workload)}"><title>{escape(c.workload)} '
                     f'+{t0:g}s</title></rect>')
        parts.append(f'<text x="{x(t0) + 2:.1f}" y="{yy + 10}" font-size="9" font-family="sans-serif">'
                     f"{escape(c.workload)} +{t0:g}s</text>")
    parts.append("</svg>")
    return "".join(parts)
