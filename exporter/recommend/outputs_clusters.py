"""Plans of several clusters in one output: `recommend --prometheus` over a Thanos Query or Mimir holding
several clusters (label ``cluster``) plans each cluster's fleet apart, and every format names the cluster
of each plan. Node names repeat from cluster to cluster, so a node is (cluster, node).

- text, markdown, html: one section per cluster, in cluster order;
- json, yaml: ``{"clusters": {NAME: plan, ...}}``, each plan as a single-fleet run writes it;
- mig-parted, gpu-operator: one YAML stream, each cluster's part headed by a comment naming it and
  separated by ``---``. ConfigMaps and node labels live in each cluster: apply each part to its own
  cluster, or run once per cluster with ``--cluster NAME`` for a file ``kubectl apply -f`` takes whole.
"""

from __future__ import annotations

import json
import re
from html import escape

import yaml

from exporter.recommend import outputs_data


def shown(name: str) -> str:
    """A cluster's name as printed ("" stands for the series without the label, beside others with it)."""
    return name if name else "(no cluster label)"


def render_clusters(plans: list, fmt: str, render) -> str:
    """``plans``: [(cluster, Recommendation)] sorted by cluster; ``render(rec, fmt)`` writes one plan."""
    if fmt in ("json", "yaml"):
        doc = {"clusters": {name: outputs_data.to_dict(rec) for name, rec in plans}}
        if fmt == "json":
            return json.dumps(doc, indent=2) + "\n"
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        return yaml.dump(doc, Dumper=dumper, sort_keys=False, width=120)
    if fmt == "html":
        return _html(plans, render)
    parts = []
    for name, rec in plans:
        text = render(rec, fmt)
        if fmt == "text":
            parts.append(f"=== cluster {shown(name)} ===\n{text}")
        elif fmt == "markdown":
            parts.append(f"# Cluster {shown(name)}\n\n{text}")
        else:  # mig-parted, gpu-operator: YAML streams
            parts.append(f"# ===== cluster {shown(name)}: apply to this cluster only "
                         f"(`--cluster {name}` writes this part alone) =====\n{text}")
    return ("\n" if fmt in ("text", "markdown") else "---\n").join(parts)


def _html(plans: list, render) -> str:
    """One page: the first plan's head, then each plan's body under a heading naming its cluster."""
    pages = [render(rec, "html") for _, rec in plans]
    head = pages[0][:pages[0].index("<body>") + len("<body>")]
    head = re.sub(r"<title>[^<]*</title>", "<title>GPU sharing plans per cluster</title>", head)
    bodies = [f"<section><h1>Cluster {escape(shown(name))}</h1>"
              f"{page[page.index('<body>') + len('<body>'):page.rindex('</body>')]}</section>"
              for (name, _), page in zip(plans, pages)]
    return head + "".join(bodies) + "</body></html>\n"
