"""SVG pictures: one GPU's slices, an MPS timeline with axes, and the legend explaining both.

A GPU is drawn as NVIDIA draws MIG: a row of compute slices (7 on A100/H100/H200/B200) over
a row of memory slices (8). Each instance colours its slices with the colour of the workload
holding it at the peak moment and carries a number that the list under the picture names in
full; an instance free at the peak is white with a dashed outline, slices in no instance are
grey (stranded), and a dark bar under an instance shows how much of its memory the
workload's need fills. Compute slices sit under their memory: an instance of c compute slices
starting at memory slice s takes compute slices min(s, C - c) .. +c, which reproduces every
valid layout without overlap.
"""

from __future__ import annotations

import hashlib
import math
from html import escape

from exporter.recommend.mps import MpsAdvice
from exporter.recommend.result import GpuPlan

WIDTH = 336
STRANDED = "#b0b0b0"
FONT = 'font-family="sans-serif"'


def colour(name: str) -> str:
    """A stable, light colour per workload: its instances ("llama #1", "llama #2") share it."""
    kind = name.split(" #", 1)[0].split(" (", 1)[0]
    hue = int(hashlib.sha1(kind.encode()).hexdigest()[:6], 16) % 360
    return f"hsl({hue},60%,68%)"


def gpu_svg(g: GpuPlan, memory_slices: int, compute_slices: int) -> str:
    """One GPU: compute slices on top, memory slices below, instances coloured and numbered."""
    m_slices, c_slices = max(1, memory_slices), max(1, compute_slices)
    cw, mw = WIDTH / c_slices, WIDTH / m_slices
    top, row = 4, 30
    height = top + 2 * row + 8
    title = f"{g.node} gpu{g.index}: {g.config or g.change}"
    parts = [f'<svg class="gpu" xmlns="http://www.w3.org/2000/svg" width="{WIDTH + 8}" height="{height}" '
             f'viewBox="-4 0 {WIDTH + 8} {height}" role="img" aria-label="{escape(title)}">']
    used_c, used_m = set(), set()
    for n, i in enumerate(g.instances, 1):
        full = i.profile == "full"
        m0, msz = (0, m_slices) if full else (i.start, i.memory_slices)
        csz = c_slices if full else i.compute_slices
        c0 = 0 if full else min(i.start, c_slices - csz)
        used_c.update(range(c0, c0 + csz))
        used_m.update(range(m0, m0 + msz))
        fill = colour(i.workload) if i.workload else "#ffffff"
        dash = "" if i.workload else ' stroke-dasharray="4 3"'
        holder = i.workload or "free at the peak moment"
        tip = f"<title>{escape(f'{n}. {i.profile}: {holder}')}</title>"
        parts.append(f'<rect x="{c0 * cw:.1f}" y="{top}" width="{csz * cw - 2:.1f}" height="{row - 4}" '
                     f'fill="{fill}" stroke="#333"{dash}>{tip}</rect>')
        parts.append(f'<rect x="{m0 * mw:.1f}" y="{top + row}" width="{msz * mw - 2:.1f}" height="{row - 4}" '
                     f'fill="{fill}" stroke="#333"{dash}>{tip}</rect>')
        if i.workload and i.need_bytes and i.memory_bytes:  # how much of the instance the need fills
            frac = min(1.0, i.need_bytes / i.memory_bytes)
            parts.append(f'<rect x="{m0 * mw:.1f}" y="{top + 2 * row - 9}" width="{(msz * mw - 2) * frac:.1f}" '
                         f'height="5" fill="#222" opacity="0.6"/>')
        parts.append(f'<text x="{c0 * cw + 4:.1f}" y="{top + 17}" font-size="11" {FONT}>{escape(i.profile)}</text>')
        parts.append(f'<text x="{m0 * mw + 4:.1f}" y="{top + row + 16}" font-size="12" font-weight="bold" '
                     f'{FONT}>{n}</text>')
    for c in sorted(set(range(c_slices)) - used_c):
        parts.append(f'<rect x="{c * cw:.1f}" y="{top}" width="{cw - 2:.1f}" height="{row - 4}" fill="{STRANDED}">'
                     "<title>compute slice in no instance</title></rect>")
    for m in sorted(set(range(m_slices)) - used_m):
        parts.append(f'<rect x="{m * mw:.1f}" y="{top + row}" width="{mw - 2:.1f}" height="{row - 4}" '
                     f'fill="{STRANDED}"><title>memory slice in no instance (stranded)</title></rect>')
    parts.append("</svg>")
    return "".join(parts)


def legend_svg() -> str:
    """What the colours, the dashes, the grey and the dark bar mean."""
    items = [
        ('<rect x="0" y="2" width="26" height="14" fill="hsl(200,60%,68%)" stroke="#333"/>',
         "instance held by a workload at the peak moment (colour = workload)"),
        ('<rect x="0" y="2" width="26" height="14" fill="#fff" stroke="#333" stroke-dasharray="4 3"/>',
         "instance free at the peak moment (spare, or used at other times)"),
        (f'<rect x="0" y="2" width="26" height="14" fill="{STRANDED}"/>', "slice in no instance: stranded"),
        ('<rect x="0" y="9" width="26" height="5" fill="#222" opacity="0.6"/>',
         "dark bar: the workload's need (peak + margin) as a share of the instance's memory"),
        ('<text x="0" y="14" font-size="11" font-family="sans-serif">3g</text>',
         "top row: compute slices (SMs); bottom row: memory slices; numbers refer to the list under each GPU"),
    ]
    height = 22 * len(items)
    parts = [f'<svg class="legend" xmlns="http://www.w3.org/2000/svg" width="720" height="{height}" '
             'role="img" aria-label="legend">']
    for k, (shape, text) in enumerate(items):
        parts.append(f'<g transform="translate(0,{k * 22})">{shape}'
                     f'<text x="36" y="14" font-size="12" {FONT}>{escape(text)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def _ticks(top: float, n: int = 4) -> list[float]:
    """Round tick values from 0 to about ``top``."""
    if top <= 0:
        return [0.0]
    raw = top / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [k * step for k in range(int(top // step) + 1)]


def _time_label(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def stagger_svg(a: MpsAdvice) -> str:
    """Summed memory over time against the capacity (axes in minutes and GiB), client bars below."""
    clients = [c for c in a.clients if c.duration_seconds]
    if not clients or not a.curve:
        return ""
    end = max((c.start_offset_seconds or 0) + c.duration_seconds for c in clients)
    left, chart, bar, width = 46, 90, 14, 600
    plot = width - left - 10
    height = chart + 34 + len(clients) * (bar + 3) + 6
    top_bytes = max(a.capacity_bytes, max(v for _, v in a.curve)) * 1.08
    x = lambda t: left + plot * t / max(end, 1e-9)  # noqa: E731
    y = lambda v: 8 + chart * (1 - v / top_bytes)  # noqa: E731
    parts = [f'<svg class="stagger" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="MPS memory over time on {escape(a.device)}">']
    for gib in _ticks(top_bytes / 2**30):
        yy = y(gib * 2**30)
        parts.append(f'<line x1="{left}" x2="{left + plot}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#eee"/>'
                     f'<text x="{left - 4}" y="{yy + 4:.1f}" font-size="10" text-anchor="end" {FONT}>{gib:g}</text>')
    parts.append(f'<text x="4" y="12" font-size="10" {FONT}>GiB</text>')
    base = 8 + chart
    parts.append(f'<line x1="{left}" x2="{left + plot}" y1="{base}" y2="{base}" stroke="#333"/>'
                 f'<line x1="{left}" x2="{left}" y1="8" y2="{base}" stroke="#333"/>')
    scale = 60.0 if end >= 120 else 1.0
    for t in _ticks(end / scale, 6):
        xx = x(t * scale)
        parts.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{base}" y2="{base + 4}" stroke="#333"/>'
                     f'<text x="{xx:.1f}" y="{base + 15}" font-size="10" text-anchor="middle" {FONT}>'
                     f'{_time_label(t * scale)}</text>')
    points = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in a.curve)
    parts.append(f'<polyline points="{points}" fill="none" stroke="#1f5fa8" stroke-width="2">'
                 "<title>memory of all clients together</title></polyline>")
    cap = y(a.capacity_bytes)
    parts.append(f'<line x1="{left}" x2="{left + plot}" y1="{cap:.1f}" y2="{cap:.1f}" stroke="#c0392b" '
                 f'stroke-dasharray="5 3"/><text x="{left + plot}" y="{cap - 3:.1f}" font-size="10" '
                 f'text-anchor="end" fill="#c0392b" {FONT}>device memory {a.capacity_bytes / 2**30:.1f} GiB</text>')
    for k, c in enumerate(clients):
        t0 = c.start_offset_seconds or 0
        yy = base + 24 + k * (bar + 3)
        parts.append(f'<rect x="{x(t0):.1f}" y="{yy}" width="{x(t0 + c.duration_seconds) - x(t0):.1f}" '
                     f'height="{bar}" fill="{colour(c.workload)}"><title>{escape(c.workload)} starts '
                     f'+{t0:g} s, runs {c.duration_seconds:g} s</title></rect>')
        parts.append(f'<text x="{x(t0) + 3:.1f}" y="{yy + 11}" font-size="10" {FONT}>'
                     f"{escape(c.workload)}  +{_time_label(t0)}</text>")
    parts.append("</svg>")
    return "".join(parts)
