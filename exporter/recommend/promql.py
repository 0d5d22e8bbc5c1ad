"""PromQL text for `recommend --prometheus`: label matchers that survive any label value.

Two escapings stack in a regex matcher: RE2's (``.`` in a node name must be ``\\.``) and
the PromQL string literal's (a backslash must be written ``\\\\``, since PromQL strings
take Go's escapes and reject ``\\.`` and ``\\-`` as unknown). Node names such as
``gpu-node-1.example:18474`` (Prometheus's default ``instance`` label) need both.
"""

from __future__ import annotations

import json

from exporter.errors import UserError
from exporter.recommend import http_fetch

RE2_SPECIAL = set("\\.+*?()|[]{}^$")
MEMORY = "gpushare_process_memory_used_bytes"
SM_UTIL = "gpushare_process_sm_utilization_ratio"
NOT_MPS_SERVER = 'process!="nvidia-cuda-mps-server"'
# The exporter's own labels that tell one running instance of a workload from another on a device.
INSTANCE_LABELS = "uuid, gi, workload, process, pid, namespace, pod, container, replica"


def string(value: str) -> str:
    """A PromQL double-quoted string literal holding exactly ``value``."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def re2_escape(value: str) -> str:
    """``value`` as an RE2 pattern matching itself only (only RE2's special characters escaped)."""
    return "".join("\\" + c if c in RE2_SPECIAL else c for c in value)


def one_of(label: str, values) -> str:
    """A matcher for ``label`` equal to any of ``values`` (``=`` for one, an anchored regex else)."""
    values = sorted(set(values))
    if len(values) == 1:
        return f"{label}={string(values[0])}"
    return f"{label}=~{string('|'.join(re2_escape(v) for v in values))}"


def selector(metric: str, *matchers: str) -> str:
    inner = ",".join(m for m in matchers if m)
    return f"{metric}{{{inner}}}" if inner else metric


def once(expr: str, node_label: str) -> str:
    """``expr`` (process series) with the stored copies of each instance folded to one: a GPU scraped
    twice (a ServiceMonitor and a PodMonitor, two jobs, HA replicas read without deduplication) stores
    each series twice, differing only in labels the exporter does not set (job, service, endpoint, a
    replica label), and every count or sum over instances must see it once."""
    return f"max by ({node_label}, {INSTANCE_LABELS}) ({expr})"


def fresh(metric: str, *matchers: str, seconds: float) -> str:
    """``metric`` keeping only series sampled in the last ``seconds``: a series that stopped
    (no staleness marker, as in backfilled data) does not linger for the 5-minute lookback."""
    sel = selector(metric, *matchers)
    return f"({sel} and (time() - timestamp({sel}) < {seconds:g}))"


# Thanos Query merges the series of HA replicas (differing only in its --query.replica-label labels) when
# asked with dedup=true, its documented default, stated here so that a querier configured otherwise still
# merges; Prometheus and Mimir ignore the parameter. Copies left over (no replica label configured, two
# monitors, two jobs) are folded in PromQL by once().
DEDUP = {"dedup": "true"}


class Client:
    """Prometheus's HTTP API through http_fetch (the one place HTTP requests are made)."""

    def __init__(self, url: str, timeout: float = http_fetch.DEFAULT_TIMEOUT_SECONDS):
        self.url = http_fetch.check_url(url, "--prometheus", "http://prometheus:9090")
        self.timeout = timeout
        self.requests = 0

    def _get(self, path: str, params: dict) -> list:
        self.requests += 1
        place = f"--prometheus {self.url}"
        body = http_fetch.get(self.url + path, params, self.timeout, place=f"{place}: {params['query']!r}",
                             accept="application/json")
        try:
            doc = json.loads(body)
        except ValueError:
            raise UserError(f"{place}: answer to {params['query']!r} is not JSON") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            error = doc.get("error", doc) if isinstance(doc, dict) else doc
            raise UserError(f"{place}: {params['query']!r} failed: {error}")
        result = doc.get("data", {}).get("result", [])
        return result if isinstance(result, list) else []

    def query(self, promql: str, at: float) -> list:
        return self._get("/api/v1/query", {"query": promql, "time": f"{at:.3f}", **DEDUP})

    def query_range(self, promql: str, start: float, end: float, step: float) -> list:
        return self._get("/api/v1/query_range",
                         {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}", **DEDUP})


def value(series) -> float | None:
    """The value of an instant-query sample; None for NaN or a malformed one."""
    try:
        v = float(series["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return v if v == v else None

