"""A synthetic Prometheus HTTP API for bench/bench_recommend_scale.py (loopback only).

It holds a generated fleet (nodes x 8 H100s x days of jobs that come and go) as intervals, not
samples, and answers exactly the queries `exporter recommend --prometheus` makes (see
exporter/recommend/prometheus_input.py), computing each answer from the intervals the way
Prometheus would from the scraped samples: peaks, counts, instances alive per step (the most in
each step), presence, sums. Backfilling a real 7-day TSDB of 8,000 GPUs takes far longer than
the planning it is meant to measure on a shared 2-core machine; the queries' shapes and answer
sizes are what matter for recommend's cost, and they are the real ones.
"""

from __future__ import annotations

import json
import re
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import numpy as np

GIB = 2**30
NAME = "NVIDIA H100 80GB HBM3"
BALANCED = (("2g.20gb", 0, 2, 32), ("1g.10gb", 2, 1, 16), ("1g.10gb", 3, 1, 16), ("3g.40gb", 4, 4, 60))
ALL_1G = tuple(("1g.10gb", s, 1, 16) for s in range(7))
MIG_MEMORY = {"1g.10gb": 9.75 * GIB, "2g.20gb": 19.625 * GIB, "3g.40gb": 39.5 * GIB}
SCRAPE = 15.0


# recommend folds the stored copies of each process series (a GPU scraped twice) with
# max by (<node label>, <every label of an instance>) (...); this fleet stores each series once,
# so the fold is the identity and is taken off before the query is matched.
_FOLD = re.compile(r"max by \([a-z_]+, uuid, gi, workload, process, pid, namespace, pod, container, replica\) \(")


def unfold(query: str) -> str:
    """``query`` without recommend's fold of duplicate series (see _FOLD)."""
    while (m := _FOLD.search(query)) is not None:
        depth, end = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(query[end], 0)
            end += 1
        query = query[:m.start()] + query[m.end():end - 1] + query[end:]
    return query


@dataclass
class Series:
    """One process series: its labels, life and peak."""

    node: str
    uuid: str
    gpu: int
    gi: str
    workload: str
    pid: int
    start: float
    end: float
    peak: float
    util: float | None
    sharing: str

    def labels(self) -> dict:
        return {"instance": self.node, "job": "gpushare", "gpu": str(self.gpu), "uuid": self.uuid, "gi": self.gi,
                "pid": str(self.pid), "process": "python3", "sharing": self.sharing, "workload": self.workload,
                "namespace": "", "pod": "", "container": ""}


@dataclass
class Fleet:
    nodes: list[str]
    start: float
    end: float
    gpus: list[dict] = field(default_factory=list)  # gpu_info labels
    migs: list[dict] = field(default_factory=list)  # mig_info labels
    series: list[Series] = field(default_factory=list)
    by_node: dict = field(default_factory=lambda: defaultdict(list))


def generate(nodes: int, days: float, seed: int, end: float) -> Fleet:
    """Each node: 2 balanced MIG GPUs (services in 1g/2g, training runs one after another in 3g), 2
    all-1g.10gb GPUs with short jobs in waves, 3 whole GPUs running batch jobs one after another,
    and one GPU either serving 3-4 replicas of a deployment under MPS (one node in ten) or idle."""
    rng = np.random.default_rng(seed)
    start = end - days * 86400
    fleet = Fleet([f"gpu-node-{n:04d}.dc1.example.com:18474" for n in range(nodes)], start, end)
    pid = 1000
    for n, node in enumerate(fleet.nodes):
        mps = n % 10 == 0
        for g in range(8):
            uuid = f"GPU-{n:04x}{g:02x}00-0000-4000-8000-{n * 8 + g:012x}"
            layout = BALANCED if g < 2 else ALL_1G if g < 4 else None
            sharing = "mig" if layout else ("mps" if g == 7 and mps else "exclusive")
            fleet.gpus.append({"instance": node, "job": "gpushare", "gpu": str(g), "uuid": uuid, "name": NAME,
                               "pci_bus_id": f"00000000:{0x18 + 2 * g:02X}:00.0", "driver_version": "580.95.05",
                               "mig_mode": "enabled" if layout else "disabled",
                               "compute_mode": "exclusive_process" if sharing == "mps" else "default",
                               "sharing": sharing})
            for gi, (profile, s, size, sms) in enumerate(layout or (), start=1):
                fleet.migs.append({"instance": node, "job": "gpushare", "gpu": str(g), "uuid": uuid, "gi": str(gi),
                                   "profile": profile, "ci": "0", "mig_uuid": f"MIG-{uuid[4:]}-{gi}",
                                   "placement_start": str(s), "placement_size": str(size), "sm_count": str(sms)})

            def job(gi, workload, t0, t1, peak, util=0.5, sharing_=sharing):
                nonlocal pid
                pid += 1
                fleet.series.append(Series(node, uuid, g, gi, workload, pid, t0, t1, peak, util, sharing_))

            if g < 2:  # services in 1g/2g all along, training runs one after another in 3g
                job("1", f"svc-embed-{n % 7}", start, end, rng.uniform(12, 17) * GIB, None)
                job("2", f"svc-rerank-{n % 5}", start, end, rng.uniform(6, 8.5) * GIB, None)
                job("3", f"svc-rerank-{(n + 1) % 5}", start, end, rng.uniform(6, 8.5) * GIB, None)
                t = start
                while t < end:
                    length = rng.uniform(2, 8) * 3600
                    job("4", f"train-{n % 11}", t, min(end, t + length), rng.uniform(25, 34) * GIB, None)
                    t += length + rng.uniform(60, 1800)
            elif g < 4:  # waves of short jobs on all-1g.10gb, at most 5 at once
                t = start
                while t < end:
                    width = int(rng.integers(1, 6))
                    length = rng.uniform(0.5, 3) * 3600
                    for gi in range(1, width + 1):
                        job(str(gi), f"embed-batch-{n % 3}", t, min(end, t + length), rng.uniform(5, 8.5) * GIB, None)
                    t += length + rng.uniform(30, 600)
            elif g < 7:  # batch jobs one after another on a whole GPU
                t = start
                while t < end:
                    length = rng.uniform(1, 6) * 3600
                    kind = int(rng.integers(0, 6))
                    job("", f"batch-{kind}", t, min(end, t + length), rng.uniform(20, 70) * GIB, rng.uniform(0.3, 0.9))
                    t += length + rng.uniform(30, 900)
            elif mps:  # replicas of one deployment; a scale-up half way through
                for r in range(4):
                    job("", f"k8s:prod/web-{n % 4}/server", start if r < 3 else (start + end) / 2, end,
                        rng.uniform(15, 17) * GIB, 0.2)
    for s in fleet.series:
        fleet.by_node[s.node].append(s)
    return fleet


def _vector(rows) -> dict:
    return {"status": "success", "data": {"resultType": "vector", "result": rows}}


def _matrix(rows) -> dict:
    return {"status": "success", "data": {"resultType": "matrix", "result": rows}}


def _matched(query: str, label: str, values) -> list[str]:
    """The values a matcher ``label=~"..."`` or ``label="..."`` in ``query`` selects (all when absent)."""
    m = re.search(label + r'(=~|=)("(?:[^"\\]|\\.)*")', query)
    if not m:
        return list(values)
    text = json.loads(m.group(2))
    if m.group(1) == "=":
        return [v for v in values if v == text]
    pattern = re.compile(text)
    return [v for v in values if pattern.fullmatch(v)]


def _most_alive(intervals: list[tuple[float, float]], times: np.ndarray, step: float) -> np.ndarray:
    """For each step (t - step, t], the most intervals [start, end] alive at one moment."""
    if not intervals:
        return np.zeros(len(times))
    starts = np.array([a for a, _ in intervals])
    ends = np.array([b for _, b in intervals])
    events = np.concatenate([starts, ends + 1e-6])
    deltas = np.concatenate([np.ones(len(starts)), -np.ones(len(ends))])
    order = np.argsort(events, kind="stable")
    events, running = events[order], np.cumsum(deltas[order])
    # alive at each bucket's start, then the largest running count of events inside the bucket
    lo = np.searchsorted(events, times - step, side="right")
    hi = np.searchsorted(events, times, side="right")
    at_start = np.where(lo > 0, running[np.maximum(lo - 1, 0)], 0)
    out = at_start.astype(float)
    inside = np.flatnonzero(hi > lo)
    if len(inside):
        # Buckets are consecutive, so [lo, next non-empty lo) holds exactly a bucket's events.
        peaks = np.maximum.reduceat(running[:hi[inside[-1]]], lo[inside])
        out[inside] = np.maximum(out[inside], peaks)
    return out


class Api:
    """Answers recommend's queries from a Fleet."""

    def __init__(self, fleet: Fleet):
        self.fleet = fleet
        self.queries = 0
        self.lock = threading.Lock()

    def _nodes(self, query: str) -> list[str]:
        return _matched(query, "instance", self.fleet.nodes)

    def _series(self, query: str) -> list[Series]:
        nodes = set(self._nodes(query))
        out = [s for n in nodes for s in self.fleet.by_node[n]]
        if 'uuid=~"' in query or 'uuid="' in query:
            wanted = set(_matched(query, "uuid", {s.uuid for s in out}))
            out = [s for s in out if s.uuid in wanted]
        if 'gi="' in query:
            wanted = set(_matched(query, "gi", {s.gi for s in out}))
            out = [s for s in out if s.gi in wanted]
        if "sharing=~" in query:
            out = [s for s in out if s.sharing in ("mps", "mig+mps")]
        return out

    def instant(self, query: str, at: float) -> dict:
        query = unfold(query)
        f = self.fleet
        if query.startswith("count_over_time(gpushare_gpu_info"):
            return _vector([{"metric": g, "value": [at, "40"]} for g in f.gpus])
        if query.startswith("min(min_over_time(timestamp(gpushare_gpu_info)"):
            return _vector([{"metric": {}, "value": [at, str(f.start)]}])
        if query in ("gpushare_gpu_info",) or query.startswith("last_over_time(gpushare_gpu_info["):
            return _vector([{"metric": g, "value": [at, "1"]} for g in f.gpus])
        if query == "gpushare_mig_info" or query.startswith("last_over_time(gpushare_mig_info["):
            return _vector([{"metric": m, "value": [at, "1"]} for m in f.migs])
        if query.startswith("quantile by (workload, process)"):
            peaks = defaultdict(list)
            for s in f.series:
                peaks[s.workload].append(s.peak)
            q = float(re.search(r"\(([0-9.]+), max_over_time", query).group(1))
            return _vector([{"metric": {"workload": w, "process": "python3"},
                             "value": [at, str(float(np.quantile(v, q)))]} for w, v in sorted(peaks.items())])
        series = self._series(query)
        key = lambda s: (s.node, s.uuid, s.gi, s.workload)  # noqa: E731
        groups = defaultdict(list)
        for s in series:
            groups[key(s)].append(s)

        def rows(value):
            out = []
            for (node, uuid, gi, workload), members in sorted(groups.items()):
                v = value(members)
                if v is not None:
                    out.append({"metric": {"instance": node, "uuid": uuid, "gi": gi, "workload": workload,
                                           "process": "python3"}, "value": [at, str(v)]})
            return _vector(out)

        if query.startswith("max by (instance, uuid, gi, workload, process) (max_over_time(gpushare_process_memory"):
            return rows(lambda m: max(s.peak for s in m))
        if query.startswith("count by (instance, uuid, gi, workload, process) (max_over_time"):
            return rows(len)
        if query.startswith("sum by (instance, uuid, gi, workload, process) (count_over_time"):
            return rows(lambda m: sum(int((s.end - s.start) / SCRAPE) + 1 for s in m))
        if query.startswith("avg by (instance, uuid, gi, workload, process) (avg_over_time(gpushare_process_sm_util"):
            return rows(lambda m: None if m[0].util is None else float(np.mean([s.util for s in m])))
        if query.startswith("max_over_time(count by (instance, uuid, gi)"):
            devices = defaultdict(list)
            for s in series:
                devices[(s.node, s.uuid, s.gi)].append((s.start, s.end))
            out = []
            for (node, uuid, gi), intervals in sorted(devices.items()):
                most = _most_alive(intervals, np.array([f.end]), f.end - f.start)[0]
                out.append({"metric": {"instance": node, "uuid": uuid, "gi": gi}, "value": [at, str(most)]})
            return _vector(out)
        if query.startswith("count by (instance, uuid, gi) (last_over_time"):
            devices = sorted({(s.node, s.uuid, s.gi) for s in series})
            return _vector([{"metric": {"instance": n, "uuid": u, "gi": g}, "value": [at, "1"]} for n, u, g in devices])
        if query.startswith("last_over_time(gpushare_mig_memory_total_bytes"):
            nodes = set(self._nodes(query))
            return _vector([{"metric": {**m, "job": "gpushare"}, "value": [at, str(MIG_MEMORY[m["profile"]])]}
                            for m in f.migs if m["instance"] in nodes])
        return _vector([])  # activity ratios, OOM kills: none in this fleet

    def range(self, query: str, start: float, end: float, step: float) -> dict:
        query = unfold(query)
        times = np.arange(start, end + step / 2, step)
        stamp = [float(t) for t in times]

        def out(metric, counts):
            keep = np.flatnonzero(counts > 0)
            return {"metric": metric, "values": [[stamp[k], f"{counts[k]:g}"] for k in keep]}

        if "gpushare_gpu_info" in query:
            return _matrix([out({"instance": n}, np.full(len(times), 8.0)) for n in self._nodes(query)])
        series = self._series(query)
        if query.startswith("max_over_time(count by (workload, process)"):
            per = defaultdict(list)
            for s in series:
                per[s.workload].append((s.start, s.end))
            return _matrix([out({"workload": w, "process": "python3"}, _most_alive(v, times, step))
                            for w, v in sorted(per.items())])
        if query.startswith("max_over_time(count by (instance, uuid, gi, workload, process)"):
            per = defaultdict(list)
            for s in series:
                per[(s.node, s.uuid, s.gi, s.workload)].append((s.start, s.end))
            return _matrix([out({"instance": n, "uuid": u, "gi": g, "workload": w, "process": "python3"},
                                _most_alive(v, times, step)) for (n, u, g, w), v in sorted(per.items())])
        if query.startswith("max_over_time(sum by (instance, uuid, gi)"):
            per = defaultdict(list)
            for s in series:
                per[(s.node, s.uuid, s.gi)].append(s)
            rows = []
            for (n, u, g), members in sorted(per.items()):
                total = np.zeros(len(times))
                for s in members:
                    total += s.peak * ((times >= s.start) & (times - step <= s.end))
                rows.append(out({"instance": n, "uuid": u, "gi": g}, total))
            return _matrix(rows)
        if query.startswith("((gpushare_process_memory_used_bytes") or query.startswith("(gpushare_process_memory"):
            rows = []
            for s in series:
                if s.end - s.start < 3 * step:
                    continue
                values = s.peak * ((times >= s.start) & (times <= s.end))
                rows.append(out(s.labels(), values))
            return _matrix(rows)
        return _matrix([])


def serve(fleet: Fleet) -> tuple[ThreadingHTTPServer, Api]:
    """Start the API on 127.0.0.1 (a free port) in a daemon thread."""
    api = Api(fleet)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802
            parts = urlsplit(self.path)
            q = {k: v[0] for k, v in parse_qs(parts.query).items()}
            with api.lock:
                api.queries += 1
            if parts.path == "/api/v1/query":
                body = api.instant(q["query"], float(q.get("time", fleet.end)))
            elif parts.path == "/api/v1/query_range":
                body = api.range(q["query"], float(q["start"]), float(q["end"]), float(q["step"]))
            else:
                body = {"status": "error", "error": "not found"}
            data = json.dumps(body, separators=(",", ":")).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, api
