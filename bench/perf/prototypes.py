"""Prototypes of the proposed exporter fixes, applied by monkeypatching, to measure their gain.

Nothing here changes exporter/; the bench applies a prototype only when asked
(``--prototype NAME``, or the launcher's ``--prototype``) and labels the figures so. Each
is described in docs/performance.md ("Findings"), with where the real fix belongs.

- ``lean-text``: the Prometheus text format written directly (label names of our metrics
  are known to be valid, so no per-label validation; escaping only when a value needs it).
  Byte-identical to prometheus_client's generate_latest for our families (checked).
- ``prewarm``: the poller renders, right after each poll, every format variant that
  scrapers have asked for, so no scrape renders or gzips in the HTTP event loop.
- ``switch``: sys.setswitchinterval(0.0005): the event loop thread waits at most 0.5 ms
  for the GIL while the poll thread runs Python code (default 5 ms).
- ``one-reader``: NvmlBackend reads one GPU at a time (max_workers=1) instead of one
  thread per GPU at once: fewer threads competing with the event loop for the GIL.
- ``inline-reads``: the GPUs are read one after the other in the poll thread, no thread per
  GPU (measures what the threads cost; drops the hung-GPU timeout, so not a fix as is).
- ``sim-index``: the *simulator's* Engine.alive() looks only at the processes of the asked
  GPU/device (indexed once) instead of scanning and sorting every process of the scenario
  (GPM answers evaluate it 32 times per call): the fake driver gets cheaper, closer to the
  near-zero Python cost a real driver has. Not an exporter fix; it makes the bench fairer.
"""

from __future__ import annotations

import math
import re
import sys

from prometheus_client.exposition import generate_latest

PROTOTYPES = ("lean-text", "prewarm", "switch", "one-reader", "inline-reads", "sim-index")
_LEGACY_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_TYPE_IN_TEXT = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram", "unknown": "untyped"}
_OM_ONLY = ("_created", "_gsum", "_gcount")


def _go_float(value) -> str:
    """Go's float formatting, as the text format wants it (same rules as prometheus_client)."""
    d = float(value)
    if d == math.inf:
        return "+Inf"
    if d == -math.inf:
        return "-Inf"
    if d != d:
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def _label_value(v: str) -> str:
    if "\\" in v or "\n" in v or '"' in v:
        return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return v


def lean_text(families) -> bytes:
    """Prometheus text format 0.0.4 of prometheus_client Metric families."""
    out = []
    for metric in families:
        name = metric.name
        if not _LEGACY_NAME.match(name) or any(s.name.endswith(_OM_ONLY) for s in metric.samples):
            return generate_latest(_Replay(families))  # not the simple case: the library's encoder
        kind = metric.type
        shown = name + "_total" if kind == "counter" else name + "_info" if kind == "info" else name
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {shown} {doc}\n# TYPE {shown} {_TYPE_IN_TEXT.get(kind, kind)}\n")
        for s in metric.samples:
            if s.labels:
                labels = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(s.labels.items()))
                line = f"{s.name}{{{labels}}} {_go_float(s.value)}"
            else:
                line = f"{s.name} {_go_float(s.value)}"
            if s.timestamp is not None:
                line += f" {int(float(s.timestamp) * 1000):d}"
            out.append(line + "\n")
    return "".join(out).encode("utf-8")


class _Replay:
    def __init__(self, families):
        self._families = families

    def collect(self):
        return iter(self._families)


def apply(names) -> None:
    """Monkeypatch the named prototypes into exporter.render / exporter.poller (this process)."""
    unknown = set(names) - set(PROTOTYPES)
    if unknown:
        raise ValueError(f"unknown prototype {sorted(unknown)[0]!r} (known: {', '.join(PROTOTYPES)})")
    from exporter import poller, render

    if "switch" in names:
        sys.setswitchinterval(0.0005)
    if "sim-index" in names:
        _index_simulator()
    if "inline-reads" in names:
        import threading

        from exporter.backend import nvml

        class InlineRun:
            def __init__(self, reader, limiter):
                self.done = threading.Event()
                self.result = reader.read()
                self.done.set()

        nvml._Run = InlineRun
    if "one-reader" in names:
        import threading

        from exporter.backend import nvml

        open_backend = nvml.NvmlBackend.open

        def open_one_reader(self):
            open_backend(self)
            self._limiter = threading.BoundedSemaphore(1)

        nvml.NvmlBackend.open = open_one_reader
    if "lean-text" in names:
        render.generate_latest = lambda registry: lean_text(tuple(registry.collect()))
    if "prewarm" in names:
        wanted: set[tuple[bool, bool]] = set()
        body = render.Exposition.body

        def recording_body(self, *, openmetrics_format: bool, gzipped: bool) -> bytes:
            wanted.add((openmetrics_format, gzipped))
            return body(self, openmetrics_format=openmetrics_format, gzipped=gzipped)

        make = poller.render

        def render_wanted(registry, snapshot, created):
            exposition = make(registry, snapshot, created)
            for om, gz in tuple(wanted):  # in the poll thread, before the swap
                body(exposition, openmetrics_format=om, gzipped=gz)
            return exposition

        render.Exposition.body = recording_body
        poller.render = render_wanted


def _index_simulator() -> None:
    """Engine.alive() over a per-device / per-GPU index of the (static) process list."""
    from exporter.sim.engine import Engine

    def alive(self, t=None, gpu=None, device=None):
        t = self.now if t is None else t
        index = self.__dict__.get("_bench_index")
        if index is None or index[0] != len(self.procs):
            by_device, by_gpu = {}, {}
            for p in sorted(self.procs, key=lambda p: p.pid):
                by_device.setdefault(p.device, []).append(p)
                by_gpu.setdefault(p.gpu, []).append(p)
            index = self._bench_index = (len(self.procs), by_device, by_gpu, sorted(self.procs, key=lambda p: p.pid))
        if device is not None:
            pool = index[1].get(device, ())
            return [p for p in pool if p.alive(t) and (gpu is None or p.gpu == gpu)]
        pool = index[2].get(gpu, ()) if gpu is not None else index[3]
        return [p for p in pool if p.alive(t)]

    Engine.alive = alive
