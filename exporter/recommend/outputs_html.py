"""`--format html`: one self-contained page (inline CSS and SVG, nothing fetched).

Top to bottom: the stamp (plan date and exporter version), the basis, a side-by-side summary
of every GPU model planned, how to apply the plan, a legend, then per model its workloads, its
GPUs (a picture each, with the instances named in full under it) and the MPS alternative, the
devices shared now, and the notes.
"""

from __future__ import annotations

from html import escape

from exporter import catalog
from exporter.recommend.mps import MpsAdvice, size_text
from exporter.recommend.mps_pack import gpus_needed
from exporter.recommend import operator_objects as ops
from exporter.recommend.outputs_migparted import label_safe
from exporter.recommend.outputs_operator import MAX_NAMED, label_command, objects_yaml, owner_lines
from exporter.recommend.outputs_text import basis_lines, duration, gib, plural
from exporter.recommend.result import GpuPlan, ModelPlan, Recommendation
from exporter.recommend.svg import colour, gpu_svg, legend_svg, stagger_svg

CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;background:#fff;max-width:1400px}
h1{font-size:1.4em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:1.6em}h3{font-size:1em}
.stamp{color:#555;margin-top:0}.draft{background:#fff3cd;border:1px solid #e0b000;padding:6px 10px}
.gpus{display:flex;flex-wrap:wrap;gap:12px}.card{border:1px solid #ccc;border-radius:6px;padding:8px;width:344px}
.card h4{margin:0 0 4px 0;font-size:13px}.card ol{margin:4px 0 0 0;padding-left:20px;font-size:12px}
.card li{overflow-wrap:anywhere}.card p{margin:2px 0;font-size:12px}
table{border-collapse:collapse;font-size:13px;margin:6px 0}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left}
th{background:#f4f4f4}td.num{text-align:right}code{font-size:12px}.k{color:#555}
.swatch{display:inline-block;width:11px;height:11px;border:1px solid #333;margin-right:4px;vertical-align:middle}
.keep{color:#2e7d32}.reconfigure{color:#b26a00}.new{color:#1f5fa8}.release{color:#777}
"""


def _advice(a: MpsAdvice) -> str:
    if a.verdict == "dedicated":
        return f"<h3>{escape(a.device)}: {a.gpus} whole GPUs</h3><p class='k'>{escape('; '.join(a.reasons))}</p>"
    rows = "".join(
        f"<tr><td><span class='swatch' style='background:{colour(c.workload)}'></span>{escape(c.workload)}</td>"
        f"<td><code>{escape(c.pinned_limit)}</code> (peak {gib(c.peak_bytes)} + {c.margin_ratio:.0%})</td>"
        f"<td><code>{c.active_thread_percentage}</code></td>"
        f"<td>{'-' if c.start_offset_seconds is None else f'+{c.start_offset_seconds:g} s'}</td></tr>"
        for c in a.clients
    )
    reasons = "".join(f"<li>{escape(r)}</li>" for r in a.reasons)
    return (f"<h3>{escape(a.device)}: {escape(a.verdict)}</h3>"
            f"<p class='k'>limits {gib(a.limits_sum_bytes)} in all; at most {gib(a.together_bytes)} and "
            f"{plural(a.clients_at_once, 'client')} at one time"
            + (f"; staggered {gib(a.staggered_peak_bytes)} with contexts" if a.staggered_peak_bytes else
               f"; with contexts {gib(a.footprint_bytes)}")
            + f" of {gib(a.usable_bytes)} usable"
            + ("" if a.room_left_bytes is None else f", {size_text(a.room_left_bytes)} left")
            + f"; any {a.max_concurrency} clients at once are safe</p>{stagger_svg(a)}"
            "<table><tr><th>client</th><th>CUDA_MPS_PINNED_DEVICE_MEM_LIMIT</th>"
            f"<th>CUDA_MPS_ACTIVE_THREAD_PERCENTAGE</th><th>start offset</th></tr>{rows}</table>"
            f"<ul>{reasons}</ul>")


def _card(g: GpuPlan, model) -> str:
    items = []
    for i in g.instances:
        who = escape(i.workload) if i.workload else "<span class='k'>free at the peak moment</span>"
        fill = f" <span class='k'>{gib(i.need_bytes)} of {gib(i.memory_bytes)}</span>" if i.need_bytes else \
            f" <span class='k'>{gib(i.memory_bytes)}</span>"
        members = f"<br><span class='k'>{escape(', '.join(i.members))}</span>" if i.members else ""
        short = f" <span class='reconfigure'>{i.shortfall_sms} SMs short</span>" if i.shortfall_sms else ""
        items.append(f"<li><b>{escape(i.profile)}</b> {who}{fill}{short}{members}</li>")
    body = f"<ol>{''.join(items)}</ol>" if items else ""
    head = f"{escape(g.node)} gpu{g.index}" if g.node != "new" else f"new GPU {g.index + 1 if g.index is not None else ''}"
    now = f"<p class='k'>now: {escape(g.current)}</p>" if g.current else ""
    return (f"<div class='card'><h4>{head} <span class='{escape(g.change)}'>{escape(g.change)}</span> "
            f"<code>{escape(g.config)}</code></h4>{now}"
            f"{gpu_svg(g, model.memory_slices, model.compute_slices) if g.instances else ''}{body}"
            f"<p class='k'>{escape(g.note)}</p><p class='k'>stranded {gib(g.stranded_bytes)}</p></div>")


def _plan(p: ModelPlan) -> str:
    model = catalog.MODELS[p.model]
    workloads = "".join(
        f"<tr><td><span class='swatch' style='background:{colour(w.name)}'></span>{escape(w.name)}</td>"
        f"<td class='num'>{w.count}</td><td class='num'>{gib(w.need_bytes)}"
        f"{f' x {w.gpus_per_instance} GPUs' if w.gpus_per_instance > 1 else ''}</td><td>{escape(w.slots or '-')}</td></tr>"
        for w in p.workloads)
    reasons = "".join(f"<li>{escape(r)}</li>" for r in p.reasons)
    tried = "".join(f"<tr><td>{escape(b.name)}</td><td class='num'>{'impossible' if b.gpus is None else b.gpus}</td>"
                    f"<td>{escape(b.reason)}</td></tr>" for b in p.homogeneous_tried)
    mps = "".join(_advice(a) for a in p.mps)
    return (f"<h2>{escape(p.model)}: {plural(p.gpus_needed, 'GPU')} for {plural(len(p.workloads), 'workload')}"
            f"{'' if p.optimal else ' (not proven optimal)'}</h2><ul>{reasons}</ul>"
            "<table><tr><th>workload</th><th>most at once</th><th>per instance (peak + margin)</th>"
            f"<th>slots at the peak moment</th></tr>{workloads}</table>"
            f"<p>stranded memory {gib(p.stranded_bytes)}; compute shortfall {plural(p.shortfall_sms, 'SM')}</p>"
            f"<div class='gpus'>{''.join(_card(g, model) for g in p.gpus)}</div>"
            + (f"<h3>Single configurations</h3><table><tr><th>config</th><th>GPUs</th><th></th></tr>{tried}</table>"
               if tried else "")
            + (f"<h3>MPS alternative: {plural(gpus_needed(list(p.mps)), 'GPU')}</h3>{mps}" if p.mps else ""))


def _summary(rec: Recommendation) -> str:
    """Every model side by side (one column per model: the comparison at a glance)."""
    rows = [
        ("GPUs", lambda p: str(p.gpus_needed)),
        ("of which MIG off", lambda p: str(p.gpus_mig_off)),
        ("fleet now", lambda p: str(p.available_gpus) if p.available_gpus else "-"),
        ("kept / reconfigured / released / added", lambda p: f"{p.kept} / {p.reconfigured} / {p.released} / {p.added}"),
        ("stranded memory", lambda p: gib(p.stranded_bytes)),
        ("compute shortfall", lambda p: plural(p.shortfall_sms, "SM")),
        ("best single configuration", lambda p: f"{p.homogeneous.name}: {p.homogeneous.gpus if p.homogeneous.gpus is not None else '-'}"),
        ("greedy first-fit", lambda p: str(p.greedy.gpus if p.greedy.gpus is not None else "-")),
        ("MPS alternative", lambda p: str(gpus_needed(list(p.mps))) if p.mps else "-"),
    ]
    head = "".join(f"<th>{escape(p.model)}</th>" for p in rec.plans)
    body = "".join(f"<tr><th>{escape(name)}</th>" + "".join(f"<td>{escape(f(p))}</td>" for p in rec.plans) + "</tr>"
                   for name, f in rows)
    return f"<h2>Summary</h2><table><tr><th></th>{head}</tr>{body}</table>"


def _how_to_apply(rec: Recommendation) -> str:
    nodes = sorted({g.node for p in rec.plans for g in p.gpus if g.node != "new"
                    and catalog.MODELS[p.model].mig_capable})
    example = nodes[0] if nodes else "NODE"
    steps = [
        "Write the mig-parted config: <code>exporter recommend SAME INPUTS --format mig-parted -o mig.yaml</code> "
        "(the same input gives the same plan).",
        "Drain the GPUs marked <span class='reconfigure'>reconfigure</span> or <span class='release'>release</span>: "
        "their instances are destroyed. GPUs marked <span class='keep'>keep</span> are not touched.",
        f"With the GPU operator: <code>kubectl label node {escape(example)} "
        f"nvidia.com/mig.config=node-{escape(label_safe(example))} --overwrite</code> (one config per node, "
        "listed at the top of mig.yaml; new nodes take the config named for their layout).",
        "Or all of it on Kubernetes: <code>exporter recommend SAME INPUTS --format gpu-operator -o gpu-operator.yaml"
        "</code>, <code>kubectl apply -f gpu-operator.yaml</code>, then the labels wave by wave as the rollout "
        "below lists them (nodes left alone need none).",
        "Without it: copy mig.yaml to the node and run <code>nvidia-mig-parted apply -f mig.yaml -c "
        f"node-{escape(label_safe(example))}</code>.",
        "For MPS devices, set the client variables shown (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, "
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) and start offsets where given.",
    ]
    return "<h2>How to apply</h2><ol>" + "".join(f"<li>{s}</li>" for s in steps) + "</ol>"


def _step_row(step: dict, label: dict) -> str:
    seen = step["disrupted_workloads"]
    named = ", ".join(seen[:MAX_NAMED]) + (f" and {len(seen) - MAX_NAMED} more" if len(seen) > MAX_NAMED else "")
    serving = "; ".join(f"{m}: {c} of {step['peak_demand_gpus'][m]}" for m, c in step["capacity_gpus"].items())
    flag = "" if step["capacity_kept"] else " <span class='reconfigure'>below the peak: do it outside the peak</span>"
    gpus = ", ".join(f"gpu{i}" for i in step["gpus_reconfigured"])
    return (f"<tr><td class='num'>{step['wave']}</td><td>{escape(step['node'])}</td><td>{escape(gpus)}</td>"
            f"<td>{escape(named or 'none seen')}</td><td>{escape(serving)}{flag}</td>"
            f"<td><code>{escape(label_command(label))}</code></td></tr>")


def _operator(rec: Recommendation) -> str:
    """The rollout wave by wave, per-owner settings and the objects to apply."""
    objs = ops.build(rec)
    plan = objs["rollout"]
    labels = {e["node"]: e for e in objs["labels"]}
    rows = "".join(_step_row(s, labels[s["node"]]) for s in plan["steps"])
    new = "".join(f"<li>{n['gpus']} new GPUs: <code>{escape(ops.MIG_LABEL)}={escape(n[ops.MIG_LABEL])}</code>, "
                  f"<code>{escape(ops.PLUGIN_LABEL)}={escape(n[ops.PLUGIN_LABEL])}</code> (first)</li>"
                  for n in objs["new_nodes"])
    alone = (f"<p class='k'>left alone (layout kept, no label change): {escape(', '.join(plan['left_alone']))}</p>"
             if plan["left_alone"] else "")
    owners = "".join(f"<li>{escape(line)}</li>" for line in owner_lines(objs))
    notes = "".join(f"<li>{escape(n)}</li>" for n in objs["notes"])
    return ("<h2>Rollout on Kubernetes (GPU Operator)</h2>"
            f"<p class='k'>{escape(plan['basis'])}</p><ul>{new}</ul>"
            + ("<table><tr><th>wave</th><th>node</th><th>GPUs reconfigured</th><th>GPU pods evicted (workloads)</th>"
               f"<th>GPUs serving of the peak</th><th>label</th></tr>{rows}</table>" if rows else "")
            + alone + (f"<h3>MPS settings per owner</h3><ul>{owners}</ul>" if owners else "")
            + (f"<ul class='k'>{notes}</ul>" if notes else "")
            + f"<h3>Objects to apply</h3><pre>{escape(objects_yaml(objs))}</pre>")


def render_html(rec: Recommendation) -> str:
    sources = "; ".join(escape(s) for s in rec.sources)
    basis = "".join(f"<li>{escape(line)}</li>" for line in basis_lines(rec)[1:] if not line.startswith("DRAFT"))
    stamp = (rec.stamp[0].upper() + rec.stamp[1:]) if rec.stamp.startswith("undated") else f"Plan of {rec.stamp}"
    shared = "".join(_advice(a) for a in rec.shared_now)
    notes = "".join(f"<li>{escape(n)}</li>" for n in rec.notes)
    draft = (f"<p class='draft'><b>Draft.</b> Only {escape(duration(rec.basis.window_seconds))} of history, less "
             f"than the minimum {escape(duration(rec.basis.min_window_seconds))} (--min-window): a longer window may "
             "see higher peaks and more jobs at once. Review it before applying.</p>" if rec.draft else "")
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>GPU sharing plan of {escape(rec.stamp)}</title>"
        f"<style>{CSS}</style></head><body><h1>GPU sharing recommendation</h1>"
        f"<p class='stamp'>{escape(stamp)} &middot; gpushare-exporter {escape(rec.version)}</p>{draft}"
        f"<p class='k'>Inputs: {sources}</p><ul class='k'>{basis}</ul>"
        + _summary(rec) + _how_to_apply(rec)
        + f"<h2>Legend</h2>{legend_svg()}"
        + "".join(_plan(p) for p in rec.plans)
        + (f"<h2>Devices shared now</h2>{shared}" if shared else "")
        + _operator(rec)
        + (f"<h2>Notes</h2><ul>{notes}</ul>" if notes else "")
        + "</body></html>\n"
    )
