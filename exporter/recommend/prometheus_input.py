"""`--prometheus URL --window 7d`: demand from the exporter's history in Prometheus.

Instant queries through /api/v1/query (over the window with *_over_time):
- ``last_over_time(gpushare_gpu_info[W])``: GPUs, their product names and MIG mode;
- ``last_over_time(gpushare_mig_info[W])``: MIG instances (profile, placement, SMs);
- per chunk of nodes: ``max_over_time(gpushare_process_memory_used_bytes[W])`` (peaks),
  ``avg_over_time(gpushare_process_sm_utilization_ratio[W])``, the device SM and tensor
  activity, MIG instance memory, and how many processes ran at once per device;
- /api/v1/query_range for the processes of devices shared by several at once, whose
  memory timelines drive the stagger advice.
The node is the ``--node-label`` label (default ``instance``, the scrape target). A progress
bar goes to stderr when it is a terminal.
"""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict

from exporter.errors import UserError
from exporter.recommend.observed import ObservedFleet

CHUNK_NODES = 25  # nodes per query: bounded answers on big fleets, a progress step each
TIMEOUT_SECONDS = 60.0
_WINDOW_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_window(text: str) -> int:
    """Seconds in a Prometheus-style duration such as '7d', '12h', '1d12h', '90m'."""
    parts = re.findall(r"(\d+)([wdhms])", str(text))
    if not parts or "".join(n + u for n, u in parts) != str(text).strip() or not sum(int(n) for n, _ in parts):
        raise UserError(f"--window {text}: expected a duration such as 7d, 12h, 1d12h or 90m")
    return sum(int(n) * _WINDOW_UNITS[u] for n, u in parts)


class Progress:
    """A one-line progress bar on ``stream``; silent unless enabled."""

    def __init__(self, total: int, label: str, stream=None, enabled: bool | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.total, self.label, self.done = max(total, 1), label, 0
        self.enabled = enabled if enabled is not None else bool(getattr(self.stream, "isatty", lambda: False)())

    def step(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        if self.enabled:
            filled = int(30 * self.done / self.total)
            self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total}")
            if self.done == self.total:
                self.stream.write("\n")
            self.stream.flush()


class PrometheusClient:
    def __init__(self, url: str, timeout: float = TIMEOUT_SECONDS):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise UserError(f"--prometheus {url}: expected an http(s) URL such as http://prometheus:9090")
        self.url, self.timeout = url.rstrip("/"), timeout

    def _get(self, path: str, params: dict) -> list:
        target = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(target, timeout=self.timeout) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            body = exc.read()
            try:
                message = json.loads(body).get("error", "")
            except ValueError:
                message = ""
            raise UserError(f"--prometheus {self.url}: HTTP {exc.code} for {params['query']!r}: "
                            f"{message or exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise UserError(f"--prometheus {self.url}: cannot reach it: {getattr(exc, 'reason', exc)}") from None
        try:
            doc = json.loads(body)
        except ValueError:
            raise UserError(f"--prometheus {self.url}: answer to {params['query']!r} is not JSON") from None
        if doc.get("status") != "success":
            raise UserError(f"--prometheus {self.url}: {params['query']!r} failed: {doc.get('error', doc)}")
        return doc.get("data", {}).get("result", [])

    def query(self, promql: str) -> list:
        return self._get("/api/v1/query", {"query": promql})

    def query_range(self, promql: str, start: float, end: float, step: float) -> list:
        return self._get("/api/v1/query_range",
                         {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})


def _value(series) -> float | None:
    try:
        v = float(series["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return v if v == v else None  # NaN -> None


def load_prometheus(url: str, window: str, fleet: ObservedFleet, node_label: str = "instance",
                    progress_stream=None, progress: bool | None = None) -> None:
    """Add the fleet Prometheus saw over ``window`` to ``fleet``."""
    client = PrometheusClient(url)
    seconds = parse_window(window)
    w = f"{seconds}s"
    gpus = client.query(f"last_over_time(gpushare_gpu_info[{w}])")
    if not gpus:
        raise UserError(f"--prometheus {url}: no gpushare_gpu_info series in the last {window}: "
                        "is the exporter scraped?")
    mig = defaultdict(dict)
    for s in client.query(f"last_over_time(gpushare_mig_info[{w}])"):
        m = s["metric"]
        mig[(m.get(node_label, ""), m.get("uuid", ""))][m.get("gi", "")] = m
    models = {}
    for s in gpus:
        m = s["metric"]
        node, uuid = m.get(node_label, ""), m.get("uuid", "")
        try:
            index = int(m.get("gpu", ""))
        except ValueError:
            continue
        model = fleet.gpu(node, index, m.get("name", ""), uuid)
        if model is None:
            continue
        models[(node, uuid)] = (model, index)
        if m.get("mig_mode") in ("true", "1", "True"):
            fleet.layout(node, index, tuple(sorted(
                (gi["profile"], int(gi.get("placement_start", 0))) for gi in mig[(node, uuid)].values())))
    nodes = sorted({node for node, _ in models})
    bar = Progress(len(nodes), f"prometheus {len(nodes)} nodes", progress_stream, progress)
    end = time.time()
    for i in range(0, len(nodes), CHUNK_NODES):
        chunk = nodes[i:i + CHUNK_NODES]
        _load_chunk(client, fleet, chunk, node_label, w, mig, models, end, seconds)
        bar.step(len(chunk))
    fleet.source(f"prometheus {url} (window {window}, {len(nodes)} nodes)")


def _pid(labels: dict) -> int | None:
    try:
        return int(labels.get("pid", ""))
    except ValueError:
        return None


def _by(series_list, node_label, *labels):
    out = {}
    for s in series_list:
        m = s["metric"]
        out[(m.get(node_label, ""), *(m.get(x, "") for x in labels))] = _value(s)
    return out


def _load_chunk(client, fleet, chunk, node_label, w, mig, models, end, seconds):
    sel = f'{node_label}=~"{"|".join(re.escape(n) for n in chunk)}"'
    memory = client.query(f"max_over_time(gpushare_process_memory_used_bytes{{{sel}}}[{w}])")
    util = _by(client.query(f"avg_over_time(gpushare_process_sm_utilization_ratio{{{sel}}}[{w}])"),
               node_label, "uuid", "pid")
    active = {**_by(client.query(f"avg_over_time(gpushare_gpu_sm_active_ratio{{{sel}}}[{w}])"), node_label, "uuid"),
              **_by(client.query(f"avg_over_time(gpushare_mig_sm_active_ratio{{{sel}}}[{w}])"), node_label, "uuid", "gi")}
    tensor = {**_by(client.query(f"avg_over_time(gpushare_gpu_tensor_active_ratio{{{sel}}}[{w}])"), node_label, "uuid"),
              **_by(client.query(f"avg_over_time(gpushare_mig_tensor_active_ratio{{{sel}}}[{w}])"), node_label, "uuid", "gi")}
    mig_memory = _by(client.query(f"last_over_time(gpushare_mig_memory_total_bytes{{{sel}}}[{w}])"),
                     node_label, "uuid", "gi")
    step = max(15, seconds // 1000)
    together = _by(client.query(
        f"max_over_time(count by ({node_label}, uuid, gi) (gpushare_process_memory_used_bytes{{{sel}}})[{w}:{step}s])"),
        node_label, "uuid", "gi")
    per_device = defaultdict(list)
    for s in memory:
        m = s["metric"]
        if m.get("process") == "nvidia-cuda-mps-server" or _pid(m) is None:
            continue
        per_device[(m.get(node_label, ""), m.get("uuid", ""), m.get("gi", ""))].append(s)
    for (node, uuid, gi), series in per_device.items():
        if (node, uuid) not in models:
            continue
        model, index = models[(node, uuid)]
        inst = mig[(node, uuid)].get(gi) if gi else None
        sms = int(inst.get("sm_count", 0)) if inst else model.sm_count
        capacity = mig_memory.get((node, uuid, gi)) if gi else model.memory_capacity_bytes
        device = f"{node} gpu{index}" + (f" gi{gi} ({inst.get('profile')})" if inst else "")
        dev_key = (node, uuid, gi) if gi else (node, uuid)
        concurrent = (together.get((node, uuid, gi)) or 1) > 1
        for s in series:
            m = s["metric"]
            pid = _pid(m)
            u = util.get((node, uuid, m.get("pid", "")))
            a = active.get(dev_key)
            sm = u * sms if u is not None else (a * sms / len(series) if a is not None else None)
            fleet.sample(node=node, uuid=uuid, pid=pid, name=m.get("process", "pid"), model=model.key,
                         device=device, timestamp=None, memory=_value(s),
                         sms=sm, tensor=tensor.get(dev_key) if len(series) == 1 else None,
                         mps=m.get("sharing") in ("mps", "mig+mps"), capacity=capacity, device_sms=sms)
        if concurrent:
            fleet.mark_shared(device, [(node, uuid, _pid(x["metric"])) for x in series])
            _timelines(client, fleet, node_label, node, uuid, gi, end, seconds, step)


def _timelines(client, fleet, node_label, node, uuid, gi, end, seconds, step):
    """Memory timelines of the processes on one shared device, kept when start and end are seen.

    Only fresh samples count: without the ``timestamp()`` filter a finished process would
    linger for Prometheus's 5-minute lookback and its timeline would grow a false tail.
    """
    sel = f'{node_label}="{node}",uuid="{uuid}",gi="{gi}"'
    metric = f"gpushare_process_memory_used_bytes{{{sel}}}"
    fresh = min(120, max(30, 2 * step))
    query = f"{metric} and (time() - timestamp({metric}) < {fresh})"
    start = end - seconds
    for s in client.query_range(query, start, end, step):
        values = [(float(t), float(v)) for t, v in s.get("values", [])]
        if _pid(s["metric"]) is None or len(values) < 3 or values[0][0] <= start + step or values[-1][0] >= end - step:
            continue  # started before the window or still running: not a whole life
        t0 = values[0][0]
        points = [(t - t0, int(v)) for t, v in values] + [(values[-1][0] + step - t0, int(values[-1][1]))]
        fleet.set_timeline(node, uuid, _pid(s["metric"]), points)
