"""DCGM backend bench: the exporter's own CPU per poll through --backend dcgm next to --backend nvml.

    python bench/dcgm_bench.py            # 4 scenarios, 20 measured polls each (~1 minute)
    python bench/dcgm_bench.py --smoke    # 1 scenario, 3 polls (the smoke test)
    python bench/dcgm_bench.py --only a100-40gb --only a30   # the one-GPU MIG nodes only

Both backends run in this process on the same simulated host (fake libnvidia-ml, and for
DCGM the simulated host engine and fake bindings), polled as ``exporter serve`` polls
(forecasts included), one virtual second apart after a warm-up (identity, MIG table, DCGM
entity mapping and watches). Figures are medians per poll:

    exporter CPU = total CPU - simulated NVML library - simulated DCGM host engine - simulation advance

taken poll by poll (then the median), so a slow host-engine call in one poll and a slow
exporter in another do not cancel out: on the MIG nodes the simulated host engine is most
of a DCGM poll's CPU, and medians of the parts taken apart made the ratio swing by 0.5x.

The simulated libraries stand in for work a real driver and a real host engine do in C (a
real embedded host engine runs in the exporter's process too, on its own threads, without
the GIL); what remains is what the exporter itself costs: pynvml and DCGM binding wrappers,
the readers, merging, collectors and rendering. NVML calls go through the exporter's choke
point (NvmlCaller), DCGM calls through DcgmCaller. Speed is never asserted; these are figures.

For the DCGM/NVML ratio on the one-GPU nodes prefer bench/dcgm_pairs.py: the two backends here
run one after the other, and a poll of about 1 ms moves by 2-3x from one run to the next on a
shared machine; dcgm_pairs polls them in turn in one process and takes the ratio pair by pair.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from statistics import median

HERE = Path(__file__).resolve().parent
# PYTHONPATH first: `PYTHONPATH=/other/checkout python bench/dcgm_bench.py` measures that checkout's
# exporter with this bench (before/after in one session).
sys.path[:0] = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + [str(HERE.parent), str(HERE)]

import yaml  # noqa: E402

from exporter.sim.fakedcgm import hostengine  # noqa: E402
from perf.anatomy import FakeLibTimer, _patched, _Span  # noqa: E402

SCENARIOS = HERE.parent / "examples" / "scenarios"


class EngineTimer:
    """Thread CPU seconds spent inside the simulated DCGM library (every C symbol it answers).

    The fake bindings cache each symbol after its first look-up, as the real ones do, so the
    timer wraps the library's one door for every call (``FakeDcgmLib.invoke``, looked up on the
    class at each call): symbols cached before ``install`` are timed too. A checkout whose fake
    library has no ``invoke`` (before the sixth pass) looks every symbol up on every call; there
    the look-up is wrapped, as this timer did then."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()
        self._original = None
        self._attribute = "invoke" if hasattr(hostengine.FakeDcgmLib, "invoke") else "__getattr__"

    def install(self) -> None:
        original = self._original = getattr(hostengine.FakeDcgmLib, self._attribute)
        timer = self

        def timed_call(fn, *args):
            start = time.thread_time()
            try:
                return fn(*args)
            finally:
                with timer._lock:
                    timer.seconds += time.thread_time() - start

        if self._attribute == "invoke":
            def timed_invoke(lib, name, method, args):
                return timed_call(original, lib, name, method, args)
            setattr(hostengine.FakeDcgmLib, "invoke", timed_invoke)
            return

        def timed_getattr(lib, name):
            symbol = original(lib, name)

            def timed(*args):
                return timed_call(symbol, *args)
            return timed

        hostengine.FakeDcgmLib.__getattr__ = timed_getattr

    def uninstall(self) -> None:
        if self._original is not None:
            setattr(hostengine.FakeDcgmLib, self._attribute, self._original)
            self._original = None


def a100_node(tmp: Path, gpus: int = 8) -> Path:
    """gpus x A100-80GB, each split into seven 1g.10gb instances with one busy process each."""
    data = {"name": f"a100x{gpus}-7x1g", "duration": "2h",
            "gpus": [{"model": "A100-80GB", "mig": [{"profile": "1g.10gb", "start": s} for s in range(7)]}
                     for _ in range(gpus)],
            "processes": [{"pid": 50_000 + 10 * g + i, "cmdline": f"python3 infer.py --shard {g}-{i}", "gpu": g,
                           "mig": i, "memory": "6GiB", "sm_active": 0.5, "tensor_active": 0.3, "dram_active": 0.2}
                          for g in range(gpus) for i in range(7)]}
    path = tmp / "a100x8-7x1g.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def setup(path: Path, backend_kind: str, start_at: float, warmup: int = 4):
    """(backend, poller, advance) after ``warmup`` polls, as the measured polls run them:
    ``advance()`` moves the simulation one virtual second on. Close the backend after."""
    from exporter.backend.choose import DcgmOptions
    from exporter.backend.sim import SimBackend
    from exporter.commands.serve import make_poller
    from exporter.foresight.state import Foresight
    from exporter.prerender import PrerenderPlan

    backend = SimBackend(path, backend=backend_kind, dcgm=DcgmOptions(interval=1.0))
    clock = [start_at]
    backend.step_to(start_at)

    def advance():
        clock[0] += 1.0
        backend.step_to(clock[0])

    poller = make_poller(backend, 1.0, Foresight())
    backend.open()
    try:
        for _ in range(warmup):
            advance()
            poller.poll_once()
    except BaseException:
        backend.close()
        raise
    poller._prerender = PrerenderPlan()  # no scraper: the measured polls encode nothing
    return backend, poller, advance


def cost(path: Path, backend_kind: str, start_at: float, polls: int, warmup: int = 4) -> dict:
    """Median per-poll figures of one backend on one scenario."""
    backend, poller, advance = setup(path, backend_kind, start_at, warmup)
    timer, nvml_timer = EngineTimer(), FakeLibTimer()
    try:
        inner = backend.inner
        caller = backend.nvml.caller
        sim_span = _Span()
        rows = []
        gc.collect()  # garbage of earlier runs in this process would slow these polls (GC passes)
        timer.install()
        nvml_timer.install()
        with _patched(backend.sim, "advance_to", sim_span.wrap(backend.sim.advance_to)):
            for _ in range(polls):
                advance()
                api_before = sum(caller.calls_by_name.values())
                marks = (time.process_time(), nvml_timer.seconds, timer.seconds, sim_span.seconds)
                poller.poll_once()
                total, nvml, engine, sim = (after - before for after, before in zip(
                    (time.process_time(), nvml_timer.seconds, timer.seconds, sim_span.seconds), marks))
                rows.append({"total": total, "nvml": nvml, "engine": engine, "sim": sim,
                             "exporter": max(0.0, total - nvml - engine - sim),
                             "api": sum(caller.calls_by_name.values()) - api_before,
                             "dcgm": inner.dcgm_calls_last_poll if backend_kind == "dcgm" else 0})

        def mid(key):
            return median(row[key] for row in rows)

        # The lower quartile as well: on a busy machine other jobs only add to a poll's CPU
        # (cache and core sharing), so the quieter polls say more about the code than the median.
        quartile = sorted(row["exporter"] for row in rows)[len(rows) // 4]
        return {"exporter_cpu_ms": 1000 * mid("exporter"), "exporter_cpu_ms_q1": 1000 * quartile,
                "total_cpu_ms": 1000 * mid("total"),
                "fake_nvml_ms": 1000 * mid("nvml"), "fake_dcgm_ms": 1000 * mid("engine"),
                "nvml_calls": rows[-1]["api"], "dcgm_calls": mid("dcgm"), "backend": backend.name,
                "samples": sum(1 for line in poller.exposition.text.splitlines() if not line.startswith(b"#"))}
    finally:
        timer.uninstall()
        nvml_timer.uninstall()
        backend.close()


def decode_cost(path: Path, start_at: float, rounds: int = 7) -> dict:
    """CPU of turning one poll's dcgmEntitiesGetLatestValues results into Readings: value by value
    through the bindings' attributes (Decoder.__call__, the path before issue 22) next to the
    batched Decoder.entity_readings the session uses. Thread CPU, median of ``rounds``."""
    from exporter.backend.choose import DcgmOptions
    from exporter.backend.dcgm_values import Decoder
    from exporter.backend.sim import SimBackend

    backend = SimBackend(path, backend="dcgm", dcgm=DcgmOptions(interval=1.0))
    backend.step_to(start_at)
    backend.open()
    try:
        for step in range(1, 4):
            backend.step_to(start_at + step)
            backend.poll()
        session = backend.inner.source.session
        if session is None or not hasattr(Decoder, "entity_readings"):
            return {}
        captured = []
        original = session.caller.run

        def run(name, fn, *args):
            out = original(name, fn, *args)
            if name == "dcgmEntitiesGetLatestValues":
                captured.append(out)
            return out

        session.caller.run = run
        backend.step_to(start_at + 4)
        backend.poll()
        session.caller.run = original
        decoder = Decoder(session.b)

        def one_by_one():
            for values in captured:
                out: dict = {}
                for fv in values:
                    out.setdefault((fv.entityGroupId, fv.entityId), {})[fv.fieldId] = decoder(fv)

        def batched():
            for values in captured:
                decoder.entity_readings(values)

        def cpu(fn, repeat=20):
            times = []
            for _ in range(rounds):
                start = time.thread_time()
                for _ in range(repeat):
                    fn()
                times.append((time.thread_time() - start) / repeat)
            return 1000 * median(times)

        batches = [b for b in getattr(session, "_batches", {}).values() if hasattr(b, "decode")]

        def planned():  # dcgm_batch.Batch.decode: the read set's plan (the session's path since the fourth pass)
            for batch in batches:
                batch.decode()

        return {"values": sum(len(v) for v in captured), "one_by_one_ms": cpu(one_by_one), "batched_ms": cpu(batched),
                "planned_ms": cpu(planned) if batches else None}
    finally:
        backend.close()


def render(rows: list[dict]) -> str:
    lines = ["== DCGM backend poll cost next to NVML's (median per poll; exporter CPU excludes the simulated "
             "driver, host engine and simulation)",
             f"{'scenario':<24} {'backend':<7} {'exporter CPU ms':>15} {'vs nvml':>8} {'samples':>7} "
             f"{'NVML calls':>10} {'DCGM calls':>10} {'sim NVML ms':>11} {'sim DCGM ms':>11} {'us/series':>9}"]
    for row in rows:
        ratio = row["exporter_cpu_ms"] / row["nvml_cpu_ms"] if row["nvml_cpu_ms"] else float("nan")
        lines.append(f"{row['scenario']:<24} {row['backend']:<7} {row['exporter_cpu_ms']:>15.2f} {ratio:>7.2f}x "
                     f"{row['samples']:>7} {row['nvml_calls']:>10} {row['dcgm_calls']:>10g} {row['fake_nvml_ms']:>11.2f} "
                     f"{row['fake_dcgm_ms']:>11.2f} {1000 * row['exporter_cpu_ms'] / max(1, row['samples']):>9.1f}")
    lines.append("samples: series on /metrics (the DCGM rows include the pipe activity NVML cannot give "
                 "pre-Hopper); calls: through the exporter's choke points")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dcgm_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="one scenario, three polls (harness check)")
    parser.add_argument("--polls", type=int, default=20, help="measured polls per scenario and backend")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--only", metavar="TEXT", action="append",
                        help="only the scenarios whose label contains TEXT (repeatable), e.g. --only a100-40gb --only a30")
    parser.add_argument("--decode", action="store_true",
                        help="also time decoding one poll's DCGM values: value by value vs batched")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    tmp = Path(tempfile.mkdtemp(prefix="gpushare-dcgm-bench-"))
    cases = [("a100-40gb-two-3g@300s", SCENARIOS / "a100-40gb-two-3g.yaml", 300.0)]
    if not args.smoke:
        cases += [("a30-mig-dcgm@240s", SCENARIOS / "a30-mig-dcgm.yaml", 240.0),
                  ("h100-mixed-node@600s", SCENARIOS / "h100-mixed-node.yaml", 600.0),
                  ("8xA100 7x1g MIG", a100_node(tmp), 60.0)]
    if args.only:
        cases = [case for case in cases if any(text in case[0] for text in args.only)]
    polls = 3 if args.smoke else args.polls
    rows = []
    for label, path, start_at in cases:
        print(f"[dcgm-bench] {label}", file=sys.stderr, flush=True)
        nvml = cost(path, "nvml", start_at, polls)
        dcgm = cost(path, "dcgm", start_at, polls)
        for row in (nvml, dcgm):
            rows.append({"scenario": label, "nvml_cpu_ms": nvml["exporter_cpu_ms"], **row})
    print(render(rows))
    if args.decode:
        print("== decoding one poll's DCGM values into Readings (CPU ms; value by value = before issue 22)")
        for label, path, start_at in cases:
            figures = decode_cost(path, start_at)
            if figures:
                print(f"{label:<24} {figures['values']:>4} values  value by value {figures['one_by_one_ms']:.3f}  "
                      f"batched {figures['batched_ms']:.3f}  ({figures['one_by_one_ms'] / figures['batched_ms']:.1f}x)"
                      + (f"  read set's plan {figures['planned_ms']:.3f}" if figures.get("planned_ms") else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
