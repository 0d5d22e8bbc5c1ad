"""`--prometheus URL --window 7d`: a time-resolved demand from the exporter's history.

Every query is listed in docs/recommend.md ("Prometheus queries"). In short, at the window's
end E (``--at``, else now, rounded down to the step):

- the fleet: ``gpushare_gpu_info`` / ``gpushare_mig_info`` now (current MIG layouts), and
  ``last_over_time(...[W])`` for GPUs that stopped reporting;
- per chunk of nodes, per (node, uuid, gi, workload): instance peaks, instance and sample
  counts, SM use, and how many instances ran at once on each device;
- per workload, fleet-wide: the ``--quantile`` of its instances' peaks;
- time-resolved, per chunk (``query_range``, step S): the most instances of each workload
  alive in each step, ``max_over_time(count by (workload, process) (...)[S:R])`` where R is
  the scrape interval, so two jobs that ran one after another in a step count once;
  presence of each node (scrape gaps), and for devices shared by several instances at once
  their per-workload counts and summed memory.

A series is an instance: every distinct series of gpushare_process_memory_used_bytes with the
same (node, uuid, gi, workload) is one running instance, whatever other label tells them
apart (``pid`` today, a pod or replica label when the exporter aggregates).
"""

from __future__ import annotations

import math
import re
import sys
import time

import numpy as np

from exporter.errors import UserError
from exporter.recommend import promql, prometheus_demand, prometheus_fleet
from exporter.recommend.demand import Demand
from exporter.recommend.promql import MEMORY, NOT_MPS_SERVER, SM_UTIL, once, one_of, selector

CHUNK_NODES = 50  # nodes per query: bounded answers on big fleets, a progress step each
MAX_POINTS = 2000  # time points of the time-resolved counts (Prometheus allows 11,000)
DEFAULT_RESOLUTION = 15.0  # scrape interval assumed when the history does not tell
_WINDOW_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
MPS_SHARING = 'sharing=~"mps|mig[+]mps"'
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def parse_window(text: str, flag: str = "--window") -> int:
    """Seconds in a Prometheus-style duration such as '7d', '12h', '1d12h', '90m'."""
    parts = re.findall(r"(\d+)([wdhms])", str(text))
    if not parts or "".join(n + u for n, u in parts) != str(text).strip() or not sum(int(n) for n, _ in parts):
        raise UserError(f"{flag} {text}: expected a duration such as 7d, 12h, 1d12h or 90m")
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


class History:
    """The window being read: its end, step and resolution, and the queries that read it."""

    def __init__(self, client: promql.Client, node_label: str, seconds: int, at: float | None, scope: str = ""):
        if not _LABEL_NAME.match(node_label):
            raise UserError(f"--node-label {node_label}: not a Prometheus label name")
        self.client, self.node_label, self.seconds = client, node_label, seconds
        self.scope = scope  # a matcher every query carries (one cluster's series), or ""
        now = time.time() if at is None else at
        self.requested = seconds
        self.resolution = self._resolution(now, seconds)
        # The grid covers the history Prometheus holds, not the window asked for: a week's window
        # over a day of data keeps the day's fine steps.
        held = self._held_seconds(now, seconds)
        self.step = max(self.resolution, float(math.ceil(held / MAX_POINTS)))
        self.end = math.floor(now / self.step) * self.step  # the same window for runs within one step
        self.points = max(1, int(math.ceil(min(seconds, held + self.step) / self.step)))
        self.seconds = int(self.points * self.step)
        self.w = f"{self.seconds}s"
        self.times = self.end - self.step * np.arange(self.points - 1, -1, -1)

    def _held_seconds(self, now: float, seconds: int) -> float:
        """How far back the history reaches within the window (to a thousandth of the window)."""
        coarse = max(self.resolution, math.ceil(seconds / 1000))
        first = [promql.value(s) for s in self.client.query(
            f"min(min_over_time(timestamp({self.info})[{seconds}s:{coarse:g}s]))", now)]
        first = [t for t in first if t is not None]
        if not first:
            return float(seconds)
        return float(min(seconds, max(self.resolution, now - first[0] + coarse)))

    def _resolution(self, now: float, seconds: int) -> float:
        """The scrape interval: the shortest span / samples of a gpushare_gpu_info series over the last ten
        minutes (a series that changed labels midway has fewer samples, not a longer interval)."""
        span = min(seconds, 600)
        intervals = []
        for s in self.client.query(f"count_over_time({self.info}[{span}s])", now):
            n = promql.value(s)
            if n and n >= 2:
                intervals.append(span / n)
        if not intervals:
            return DEFAULT_RESOLUTION
        return float(max(1, round(min(intervals))))

    @property
    def info(self) -> str:
        return selector("gpushare_gpu_info", self.scope)

    def nodes(self, nodes) -> str:
        """The matchers of ``nodes`` (node-label values) within the scope."""
        return ",".join(m for m in (self.scope, one_of(self.node_label, nodes)) if m)

    def instant(self, query: str) -> list:
        return self.client.query(query, self.end)

    def series(self, query: str) -> list[tuple[dict, np.ndarray]]:
        """``query`` over the window: (labels, values on self.times, NaN where absent) per series."""
        start = float(self.times[0])
        out = []
        for s in self.client.query_range(query, start, self.end, self.step):
            values = np.full(self.points, np.nan)
            try:
                pairs = np.array(s.get("values") or [], dtype=float).reshape(-1, 2)
            except ValueError:
                pairs = np.zeros((0, 2))
            k = np.rint((pairs[:, 0] - start) / self.step).astype(int)
            inside = (k >= 0) & (k < self.points)
            values[k[inside]] = pairs[inside, 1]
            out.append((s.get("metric", {}), values))
        return out

    @property
    def fresh_seconds(self) -> float:
        """How old a sample may be and its series still count as running: one scrape interval plus a
        little jitter. Live scrapes end a series at once (staleness markers); history without
        them (backfilled, remote-read) would otherwise keep a finished job alive for 5 minutes and
        count it together with the job that followed it."""
        return self.resolution + max(1.0, 0.1 * self.resolution)

    def fresh_memory(self, *matchers: str) -> str:
        return promql.fresh(MEMORY, *matchers, NOT_MPS_SERVER, seconds=self.fresh_seconds)


def load_prometheus(url: str, window: str, **options) -> Demand:
    """The demand Prometheus saw over ``window``, when it holds one fleet (see load_clusters)."""
    clusters = load_clusters(url, window, **options)
    if len(clusters) > 1:
        raise UserError(f"--prometheus {url}: holds {len(clusters)} clusters (label cluster): plan them apart")
    return clusters[0][1]


def load_clusters(url: str, window: str, *, node_label: str = "instance", at: float | None = None,
                  cluster: str | None = None, **options) -> list[tuple[str | None, Demand]]:
    """The demand per cluster. A Thanos Query or Mimir holding several clusters (external label ``cluster``)
    is read one cluster at a time, each exactly as a Prometheus holding that cluster alone (node names
    such as gpu-node-1 repeat from cluster to cluster, and a cluster's workloads run on its own nodes):
    [(name, demand), ...] sorted by name. [(None, demand)] when the label is absent or names one cluster
    (the plan is then the same as without it); ``cluster`` reads that one only."""
    client = promql.Client(url)
    seconds = parse_window(window)
    hist = History(client, node_label, seconds, at)
    names = cluster_names(hist)
    if cluster is not None:
        if cluster not in names:
            known = ", ".join(n or '""' for n in names) if names else "none: no series has a cluster label"
            raise UserError(f"--cluster {cluster}: not a cluster at --prometheus {client.url} (clusters: {known})")
        names = [cluster]
    elif len(names) < 2:
        return [(None, _load(client, hist, window, **options))]
    out = []
    for name in names:
        own = promql.Client(url)  # each plan counts its own queries, as if read alone
        scoped = History(own, node_label, seconds, at, scope=f"cluster={promql.string(name)}")
        out.append((name, _load(own, scoped, window, cluster=name, **options)))
    return out


def cluster_names(hist: History) -> list[str]:
    """The values of the ``cluster`` label on gpushare_gpu_info over the window ("" for series without
    it beside some with it); [] when no series has it, or when it is the node label itself."""
    if hist.node_label == "cluster":
        return []
    rows = hist.instant(f"count by (cluster) (last_over_time({hist.info}[{hist.w}]))")
    names = sorted({s.get("metric", {}).get("cluster", "") for s in rows})
    return [] if names in ([], [""]) else names


def _load(client: promql.Client, hist: History, window: str, *, cluster: str | None = None,
          margin: float | None = None, quantile: float | None = None, min_window: float = 0.0,
          progress_stream=None, progress: bool | None = None) -> Demand:
    """The demand of the fleet in ``hist``'s scope."""
    fleet = prometheus_fleet.FleetFromHistory(hist.node_label, hist.times)
    mig = selector("gpushare_mig_info", hist.scope)
    fleet.read_gpus(hist.instant(hist.info), hist.instant(f"last_over_time({hist.info}[{hist.w}])"),
                    hist.instant(mig), hist.instant(f"last_over_time({mig}[{hist.w}])"))
    if not fleet.models:
        raise UserError(f"--prometheus {client.url}: no gpushare_gpu_info series in the last {window}: "
                        "is the exporter scraped?")
    chunks = fleet.chunks(CHUNK_NODES)
    where = "" if cluster is None else f"cluster {cluster}: "
    bar = Progress(2 * len(chunks) + 1, f"prometheus {where}{len(fleet.nodes)} nodes", progress_stream, progress)
    for nodes in chunks:
        _read_devices(hist, fleet, nodes)
        bar.step()
    L = hist.node_label
    fleet.read_quantiles(hist.instant(
        f"quantile by (workload, process) ({fleet_quantile(quantile)}, "
        f"{once(f'max_over_time({selector(MEMORY, hist.scope, NOT_MPS_SERVER)}[{hist.w}])', L)})"))
    bar.step()
    for nodes in chunks:
        _read_counts(hist, fleet, nodes, L)
        bar.step()
    held = "" if hist.seconds >= hist.requested else f", history held: {hist.seconds} s"
    named = "" if cluster is None else f"cluster {cluster}, "
    fleet.source(f"prometheus {client.url} ({named}window {window} to {_iso(hist.end)}{held}, step {hist.step:g} s, "
                 f"{len(fleet.nodes)} node{'s' if len(fleet.nodes) != 1 else ''}, {client.requests} queries)")
    return prometheus_demand.to_demand(fleet, hist, margin=margin, quantile=fleet_quantile(quantile),
                                      min_window=min_window)


def fleet_quantile(q: float | None) -> float:
    from exporter.recommend.demand import DEFAULT_PEAK_QUANTILE

    return DEFAULT_PEAK_QUANTILE if q is None else q


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _read_devices(hist: History, fleet, nodes: list[str]) -> None:
    """Per (node, uuid, gi, workload) peaks, instances, samples and SM use; per device concurrency."""
    L, w = hist.node_label, hist.w
    sel = hist.nodes(nodes)
    group = f"{L}, uuid, gi, workload, process"
    mem = selector(MEMORY, sel, NOT_MPS_SERVER)
    fleet.read_groups(
        peaks=hist.instant(f"max by ({group}) (max_over_time({mem}[{w}]))"),
        instances=hist.instant(f"count by ({group}) ({once(f'max_over_time({mem}[{w}])', L)})"),
        samples=hist.instant(f"sum by ({group}) ({once(f'count_over_time({mem}[{w}])', L)})"),
        util=hist.instant(f"avg by ({group}) (avg_over_time({selector(SM_UTIL, sel, NOT_MPS_SERVER)}[{w}]))"),
        together=hist.instant(f"max_over_time(count by ({L}, uuid, gi) ({once(hist.fresh_memory(sel), L)})"
                              f"[{w}:{hist.resolution:g}s])"),
        mps=hist.instant(f"count by ({L}, uuid, gi) "
                         f"({once(f'last_over_time({selector(MEMORY, sel, MPS_SHARING)}[{w}])', L)})"),
        gpu_active=hist.instant(f"avg_over_time(gpushare_gpu_sm_active_ratio{{{sel}}}[{w}])"),
        mig_active=hist.instant(f"avg_over_time(gpushare_mig_sm_active_ratio{{{sel}}}[{w}])"),
        gpu_tensor=hist.instant(f"avg_over_time(gpushare_gpu_tensor_active_ratio{{{sel}}}[{w}])"),
        mig_tensor=hist.instant(f"avg_over_time(gpushare_mig_tensor_active_ratio{{{sel}}}[{w}])"),
        mig_memory=hist.instant(f"last_over_time(gpushare_mig_memory_total_bytes{{{sel}}}[{w}])"),
        oom=hist.instant(f"max by ({L}, gpu, gi) (max_over_time(gpushare_simulation_oom_kills_total{{{sel}}}[{w}]))"),
    )


def _read_counts(hist: History, fleet, nodes: list[str], L: str) -> None:
    """Instances alive per step: per workload over the chunk, filled across each node's gaps."""
    sel = hist.nodes(nodes)
    span = f"[{hist.step:g}s:{hist.resolution:g}s]"
    device = f"{L}, uuid, gi, workload, process"
    fleet.read_counts(hist.series(
        f"max_over_time(count by (workload, process) ({once(hist.fresh_memory(sel), L)}){span})"))
    for keys in fleet.several_classes(nodes):  # keys on devices of several sizes: counted per device
        fleet.read_device_counts(hist.series(
            f"max_over_time(count by ({device}) ({once(hist.fresh_memory(sel, keys), L)}){span})"))
    # Scrape gaps: only nodes with fewer gpushare_gpu_info samples than their time in the history
    # allows are read step by step (on a healthy fleet, none).
    suspects = fleet.short_of_samples(hist.instant(f"max by ({L}) (count_over_time(gpushare_gpu_info{{{sel}}}"
                                                   f"[{hist.w}]))"), hist.seconds, hist.resolution)
    gaps = []
    if suspects:
        info = promql.fresh("gpushare_gpu_info", hist.nodes(suspects), seconds=hist.fresh_seconds)
        gaps = fleet.read_presence(hist.series(f"max_over_time(count by ({L}) ({info}){span})"), suspects)
    if gaps:
        fleet.fill_gaps(hist.series(
            f"max_over_time(count by ({device}) ({once(hist.fresh_memory(hist.nodes(gaps)), L)}){span})"))
    shared = fleet.shared_uuids(nodes)
    if shared:
        uuids = one_of("uuid", shared)
        fleet.read_shared(
            hist.series(f"max_over_time(count by ({L}, uuid, gi, workload, process) "
                        f"({once(hist.fresh_memory(sel, uuids), L)}){span})"),
            hist.series(f"max_over_time(sum by ({L}, uuid, gi) ({once(hist.fresh_memory(sel, uuids), L)}){span})"))
        _read_timelines(hist, fleet, nodes)


def _read_timelines(hist: History, fleet, nodes: list[str]) -> None:
    """Memory over the whole life of instances on shared devices (start and end inside the window),
    for the MPS stagger advice; at most prometheus_fleet.MAX_TIMELINE_DEVICES devices in all."""
    for node, uuid, gi in fleet.timeline_devices(nodes):
        sel = (hist.scope, f"{hist.node_label}={promql.string(node)}", f"uuid={promql.string(uuid)}",
               f"gi={promql.string(gi)}")
        series = hist.client.query_range(hist.fresh_memory(*sel), float(hist.times[0]) - hist.step, hist.end,
                                         hist.resolution if hist.seconds / hist.resolution <= 10000
                                         else hist.step)
        fleet.read_timelines(node, uuid, gi, series, float(hist.times[0]) - hist.step, hist.end,
                             hist.resolution)

