"""`--format html`: one self-contained page (inline CSS and SVG, nothing fetched)."""

from __future__ import annotations

from html import escape

from exporter import catalog
from exporter.recommend.mps import MpsAdvice
from exporter.recommend.outputs_text import gib
from exporter.recommend.result import ModelPlan, Recommendation
from exporter.recommend.svg import gpu_svg, stagger_svg

CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}h3{font-size:1em}
.gpus{display:flex;flex-wrap:wrap;gap:12px}.card{border:1px solid #ccc;border-radius:6px;padding:6px}
.card p{margin:2px 0;font-size:12px}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:left}code{font-size:12px}
.k{color:#555}.keep{color:#2e7d32}.reconfigure{color:#b26a00}.new{color:#1f5fa8}.release{color:#777}
"""


def _advice(a: MpsAdvice) -> str:
    rows = "".join(
        f"<tr><td>{escape(c.workload)}</td><td><code>{escape(c.pinned_limit)}</code></td>"
        f"<td><code>{c.active_thread_percentage}</code></td>"
        f"<td>{'-' if c.start_offset_seconds is None else f'+{c.start_offset_seconds:g} s'}</td></tr>"
        for c in a.clients
    )
    reasons = "".join(f"<li>{escape(r)}</li>" for r in a.reasons)
    return (f"<h3>{escape(a.device)}: {escape(a.verdict)}</h3>"
            f"<p class='k'>peaks {gib(a.sum_of_peaks_bytes)} of {gib(a.capacity_bytes)}; "
            f"any {a.max_concurrency} clients at once are safe</p>{stagger_svg(a)}"
            "<table><tr><th>client</th><th>CUDA_MPS_PINNED_DEVICE_MEM_LIMIT</th>"
            f"<th>CUDA_MPS_ACTIVE_THREAD_PERCENTAGE</th><th>start offset</th></tr>{rows}</table>"
            f"<ul>{reasons}</ul>")


def _plan(p: ModelPlan) -> str:
    model = catalog.MODELS[p.model]
    cards = []
    for g in p.gpus:
        caption = g.note or (f"current: {g.current}" if g.current else "")
        cards.append(
            f"<div class='card'>{gpu_svg(g, model.memory_slices, model.compute_slices)}"
            f"<p class='{escape(g.change)}'>{escape(g.change)}</p>"
            f"<p class='k'>{escape(caption)}</p>"
            f"<p class='k'>stranded {gib(g.stranded_bytes)}</p></div>")
    reasons = "".join(f"<li>{escape(r)}</li>" for r in p.reasons)
    tried = "".join(f"<tr><td>{escape(b.name)}</td><td>{'impossible' if b.gpus is None else b.gpus}</td></tr>"
                    for b in p.homogeneous_tried)
    mps = "".join(_advice(a) for a in p.mps)
    return (f"<h2>{escape(p.model)}: {p.gpus_needed} GPUs for {len(p.workloads)} workloads"
            f"{'' if p.optimal else ' (not proven optimal)'}</h2>"
            f"<p>best single configuration <b>{escape(p.homogeneous.name)}</b>: {p.homogeneous.gpus}; "
            f"greedy first-fit: {p.greedy.gpus}; stranded memory {gib(p.stranded_bytes)}; "
            f"compute shortfall {p.shortfall_sms} SMs</p><ul>{reasons}</ul>"
            f"<div class='gpus'>{''.join(cards)}</div>"
            f"<h3>Single configurations</h3><table><tr><th>config</th><th>GPUs</th></tr>{tried}</table>"
            + (f"<h3>MPS alternative: {len(p.mps)} GPUs</h3>{mps}" if p.mps else ""))


def render_html(rec: Recommendation) -> str:
    sources = "; ".join(escape(s) for s in rec.sources)
    shared = "".join(_advice(a) for a in rec.shared_now)
    notes = "".join(f"<li>{escape(n)}</li>" for n in rec.notes)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<title>GPU sharing recommendation</title>"
        f"<style>{CSS}</style></head><body><h1>GPU sharing recommendation</h1>"
        f"<p class='k'>Inputs: {sources}</p>"
        + "".join(_plan(p) for p in rec.plans)
        + (f"<h2>Devices shared now</h2>{shared}" if shared else "")
        + (f"<h2>Notes</h2><ul>{notes}</ul>" if notes else "")
        + "</body></html>\n"
    )
