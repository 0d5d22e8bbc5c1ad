"""DCGM next to NVML, interleaved: the DCGM/NVML ratio of the exporter's CPU per poll, pair by pair.

    python bench/dcgm_pairs.py                         # the one-GPU MIG nodes and the mixed node, 300 pairs
    python bench/dcgm_pairs.py --only a30 --pairs 1000 # one node, more pairs
    python bench/dcgm_pairs.py --same nvml             # A/A: NVML against NVML (the bench's own bias)
    python bench/dcgm_pairs.py --smoke                 # one node, 5 pairs (tests/test_bench_smoke.py)
    PYTHONPATH=<other checkout> python bench/dcgm_pairs.py   # that checkout's exporter
    python bench/dcgm_pairs.py --wash 6000             # experiment: the NVML side gets Python work in
                                                       # place of the host engine's (see Side)
    python bench/dcgm_pairs.py --same nvml --wash 6000 # the wash's cost alone: washed NVML side first
    python bench/dcgm_pairs.py --engine-thread        # the host engine samples on its own schedule, outside
                                                       # the exporter's poll, as AUTO mode's thread does (see Side)

Why: bench/dcgm_bench.py measures each backend in its own run of polls, one after the other.
On a shared 2-core machine a poll of about 1 ms moves by 2-3x from one run to the next (other
jobs, caches, frequency), so its DCGM/NVML ratio on the one-GPU MIG nodes moved between 0.6x
and 3.6x from round to round. Here one process holds both backends on the same scenario (two
simulated hosts at the same virtual time) and polls them alternately, NVML then DCGM, then
DCGM then NVML (the order swapped every pair), one virtual second apart, as ``exporter serve``
polls (dcgm_bench's ``setup``: forecasts included, nothing encoded, serve's GC settings);
both backends are made afresh every ``--block`` pairs (60), from the scenario's start time
again, so every measured poll is in the same stretch of the scenario. Each
pair's two polls run within a few milliseconds of each other, so what the machine does to one
it mostly does to the other; the ratio is taken per pair and the median of those ratios
reported with its interquartile range.

What is measured, per poll: the exporter's CPU =

    process CPU - inside the simulated NVML library - inside the simulated DCGM host engine
                - the simulation's advance (outside the poll anyway)

as dcgm_bench does (the simulated libraries stand in for C code a real driver and host engine
run; the DCGM bindings' Python wrappers, pynvml, the readers, the merge, collectors,
forecasts and the poller are the exporter's). The DCGM side also reports the DCGM backend's own
work inside its polls (DcgmBackend.poll less the NVML poll in it and the host engine's calls),
which bench/dcgm_profile.py --own times in a tight loop out of context. ``--same nvml`` (or dcgm) polls two backends of
the same kind the same way: its ratio, which should be 1.00x, is the bench's own bias and
spread. Speed is never asserted; these are figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

HERE = Path(__file__).resolve().parent
sys.path[:0] = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + [str(HERE.parent), str(HERE)]

import dcgm_bench  # noqa: E402
from perf.anatomy import FakeLibTimer, _Span, serve_gc  # noqa: E402


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(lower quartile, median, upper quartile), each the middle of its half (no interpolation)."""
    ordered = sorted(values)
    n = len(ordered)
    return ordered[(n - 1) // 4], median(ordered), ordered[(3 * (n - 1) + 3) // 4]


class Side:
    """One backend on its own simulated host, polled as serve polls it; each poll's exporter CPU.

    pynvml (``nvmlLib`` and its function-pointer cache) and the fake DCGM bindings (``dcgmLib`` and
    its ``_dcgmGetFunctionPointer_cache``) hold one library per process: each side's are put back before its poll (``activate``,
    outside the measured CPU), so each side calls its own simulated host, its pointers cached
    as in a process of its own."""

    def __init__(self, path: Path, kind: str, start_at: float, timers, wash: int = 0, engine_thread: bool = False):
        """``wash``: an NVML side runs that much unrelated Python (``_wash``) right before its
        NVML backend's poll, where a DCGM side's host engine runs (the simulated host engine is
        Python in this process: 1.5-2 ms a poll between the DCGM read and NVML's); its CPU is taken
        out like the engine's. Whatever the NVML side's exporter CPU gains is what work of that
        size before the reads costs the exporter's code after it (caches run cold).

        ``engine_thread``: the simulation advances before the poll (on both sides), and a DCGM side's
        host engine then samples its watched fields (``FakeDcgmLib.update_due``), outside the
        poll, as a real engine does: the
        exporter starts its embedded engine in AUTO mode, where DCGM's own thread updates the
        watched fields every period apart from the client's calls (nv-hostengine, standalone, is
        another process altogether); the poll's read then copies the latest values. The
        simulated engine otherwise samples lazily inside the read (the same values at the same
        instant: the simulation has no engine thread), so its Python runs in the middle of the
        exporter's poll. The sampling's CPU is reported apart (``engine_thread_ms``)."""
        import pynvml

        self.kind = kind
        pynvml._nvmlGetFunctionPointer_cache = {}  # this side's own (Simulation.install clears it)
        self.backend, self.poller, self.advance = dcgm_bench.setup(path, kind, start_at)
        self.nvml_lib, self.nvml_cache = pynvml.nvmlLib, pynvml._nvmlGetFunctionPointer_cache
        source = getattr(self.backend.inner, "source", None)
        self.structs = source.bindings.structs if source is not None else None
        self.dcgm_lib = self.structs.dcgmLib if self.structs is not None else None
        # the bindings' symbol cache (a checkout whose fake bindings look symbols up every call has none)
        self.dcgm_cache = getattr(self.structs, "_dcgmGetFunctionPointer_cache", None)
        self.sim_span = _Span()
        self._advance_to = self.backend.sim.advance_to
        self.backend.sim.advance_to = self.sim_span.wrap(self._advance_to)
        self.timers = timers  # (fake NVML timer, fake host engine timer): class-wide, both sides
        # The DCGM backend's own work in the poll: DcgmBackend.poll less the NVML backend's poll
        # in it and the host engine's calls (all in DcgmSource.read), poll by poll.
        inner = self.backend.inner
        self.own_span = self.nvml_span = None
        if hasattr(inner, "source"):
            self.own_span, self.nvml_span = _Span(), _Span()
            self._inner_poll, self._nvml_poll = inner.poll, inner.nvml.poll
            inner.poll, inner.nvml.poll = self.own_span.wrap(inner.poll), self.nvml_span.wrap(inner.nvml.poll)
        self.wash_span = _Span()
        self._wash_poll = None
        if wash and self.own_span is None:
            self._wash_poll = inner.poll
            timed_wash = self.wash_span.wrap(_wash)

            def washed_poll():
                timed_wash(wash)
                return self._wash_poll()
            inner.poll = washed_poll
        self.thread_span = _Span()
        lib = getattr(self.backend, "dcgm_lib", None) if self.own_span is not None else None
        if engine_thread:  # both sides: the simulation advances before the poll (its poll's advance is then a no-op)
            step = self.advance
            sample = self.thread_span.wrap(lib.update_due) if lib is not None else None

            def advance_and_sample():
                step()
                self._advance_to(self.backend.virtual_time())
                if sample is not None:
                    before = self.thread_span.seconds
                    sample()
                    self.sampled += self.thread_span.seconds - before
            self.advance = advance_and_sample
        self.sampled = 0.0  # the host engine's sampling since the last poll (engine_thread)
        self.rows: list[dict] = []
        self.expositions: list[bytes] | None = None  # each poll's /metrics less self-timing lines (tests)

    def activate(self) -> None:
        import pynvml

        pynvml.nvmlLib, pynvml._nvmlGetFunctionPointer_cache = self.nvml_lib, self.nvml_cache
        if self.structs is not None:
            self.structs.dcgmLib = self.dcgm_lib
            if self.dcgm_cache is not None:
                self.structs._dcgmGetFunctionPointer_cache = self.dcgm_cache

    def poll(self) -> dict:
        self.activate()
        nvml, engine = self.timers
        spans = (self.own_span, self.nvml_span) if self.own_span is not None else (_Span(), _Span())
        marks = (time.process_time(), nvml.seconds, engine.seconds, self.sim_span.seconds,
                 spans[0].seconds, spans[1].seconds, self.wash_span.seconds)
        self.poller.poll_once()
        total, lib, eng, sim, outer, inner, wash = (after - before for after, before in zip(
            (time.process_time(), nvml.seconds, engine.seconds, self.sim_span.seconds,
             spans[0].seconds, spans[1].seconds, self.wash_span.seconds), marks))
        row = {"exporter": max(0.0, total - lib - eng - sim - wash), "fake_nvml": lib, "fake_dcgm": eng,
               "dcgm_own": max(0.0, outer - inner - eng), "wash": wash, "engine_thread": self.sampled}
        self.sampled = 0.0
        self.rows.append(row)
        if self.expositions is not None:
            from dcgm_bytes import TIMING

            self.expositions.append(b"\n".join(line for line in self.poller.exposition.text.split(b"\n")
                                                if not TIMING.match(line)))
        return row

    @property
    def series(self) -> int:
        return sum(1 for line in self.poller.exposition.text.splitlines() if not line.startswith(b"#"))

    def close(self) -> None:
        self.activate()
        self.backend.sim.advance_to = self._advance_to
        if self.own_span is not None:
            self.backend.inner.poll, self.backend.inner.nvml.poll = self._inner_poll, self._nvml_poll
        if self._wash_poll is not None:
            self.backend.inner.poll = self._wash_poll
        self.backend.close()


def _wash(entries: int) -> int:
    """Python work unrelated to the exporter (a dict of ``entries`` fresh keys and lists), of
    about the simulated host engine's size per poll at a few thousand entries."""
    made = {}
    for i in range(entries):
        made[f"k{i}"] = [i, i * 0.5]
    return len(made)


def interleave(path: Path, start_at: float, pairs: int, kinds=("nvml", "dcgm"), keep: bool = False,
               block: int = 60, wash: int = 0, engine_thread: bool = False) -> dict:
    """``pairs`` pairs of polls of ``kinds[0]`` and ``kinds[1]`` on one scenario; per-pair ratios.

    Both sides are made afresh every ``block`` pairs, from ``start_at`` again: the measured
    polls stay in the same stretch of the scenario (a30-mig-dcgm's profiling lock begins 120 s
    after its start time), and each block's objects land elsewhere in memory, so one unlucky
    layout does not decide the figure. ``keep``: also each side's /metrics after each poll
    (``result["sides"]``: the last block's sides, for the tests)."""
    import pynvml

    nvml_timer, engine_timer = FakeLibTimer(), dcgm_bench.EngineTimer()
    cache = pynvml._nvmlGetFunctionPointer_cache
    nvml_timer.install()
    engine_timer.install()
    sides: list[Side] = []
    rows: tuple[list, list] = ([], [])
    ratios = []
    try:
        done = 0
        while done < pairs:
            for side in reversed(sides):  # the last installed first: each gives back the one before it
                side.close()
            sides = []
            for i, kind in enumerate(kinds):  # the wash on the first side only (with --same nvml: A/B)
                sides.append(Side(path, kind, start_at, (nvml_timer, engine_timer), wash if i == 0 else 0,
                                  engine_thread))
                if keep:
                    sides[-1].expositions = []
            base, other = sides
            with serve_gc():
                for n in range(min(block, pairs - done)):
                    base.advance()
                    other.advance()
                    first, second = (base, other) if n % 2 == 0 else (other, base)
                    a, b = first.poll(), second.poll()
                    row_base, row_other = (a, b) if first is base else (b, a)
                    rows[0].append(row_base)
                    rows[1].append(row_other)
                    if row_base["exporter"] > 0:
                        ratios.append(row_other["exporter"] / row_base["exporter"])
                    done += 1
        q1, mid, q3 = quartiles(ratios)
        out = {"pairs": pairs, "block": block, "ratio_median": mid, "ratio_q1": q1, "ratio_q3": q3, "ratios": ratios,
               "ratio_of_medians": (median(r["exporter"] for r in rows[1]) / median(r["exporter"] for r in rows[0]))}
        for side, side_rows, key in ((sides[0], rows[0], "a"), (sides[1], rows[1], "b")):
            out[key] = {"backend": side.kind, "series": side.series,
                        "exporter_cpu_ms": 1000 * median(r["exporter"] for r in side_rows),
                        "exporter_cpu_ms_q1": 1000 * quartiles([r["exporter"] for r in side_rows])[0],
                        "fake_nvml_ms": 1000 * median(r["fake_nvml"] for r in side_rows),
                        "fake_dcgm_ms": 1000 * median(r["fake_dcgm"] for r in side_rows),
                        "dcgm_backend_own_ms": 1000 * median(r["dcgm_own"] for r in side_rows),
                        "wash_ms": 1000 * median(r["wash"] for r in side_rows),
                        "engine_thread_ms": 1000 * median(r["engine_thread"] for r in side_rows)}
        if keep:
            out["sides"] = sides
        return out
    finally:
        for side in reversed(sides):
            side.close()
        pynvml._nvmlGetFunctionPointer_cache = cache
        engine_timer.uninstall()
        nvml_timer.uninstall()


def render(label: str, result: dict) -> str:
    a, b = result["a"], result["b"]
    return (f"{label:<24} {b['backend']}/{a['backend']} {result['ratio_median']:.3f}x "
            f"(IQR {result['ratio_q1']:.3f}-{result['ratio_q3']:.3f}, {result['pairs']} pairs in blocks of "
            f"{result['block']}; ratio of medians "
            f"{result['ratio_of_medians']:.3f}x)  exporter ms {a['backend']} {a['exporter_cpu_ms']:.3f} / "
            f"{b['backend']} {b['exporter_cpu_ms']:.3f}  series {a['series']} / {b['series']}  "
            f"apart: fake NVML {a['fake_nvml_ms']:.2f} / {b['fake_nvml_ms']:.2f}, "
            f"host engine {a['fake_dcgm_ms']:.2f} / {b['fake_dcgm_ms']:.2f} ms"
            + (f"; DCGM backend's own work in the poll {b['dcgm_backend_own_ms']:.3f} ms" if b["backend"] == "dcgm" else "")
            + "".join(f"; {side['backend']} side's wash {side['wash_ms']:.2f} ms (taken out)"
                      for side in (a, b) if side["wash_ms"])
            + "".join(f"; {side['backend']} side's host engine sampled apart {side['engine_thread_ms']:.2f} ms "
                      f"(outside the poll)" for side in (a, b) if side.get("engine_thread_ms")))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dcgm_pairs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=300, help="pairs of polls per scenario")
    parser.add_argument("--block", type=int, default=60,
                        help="pairs per pair of fresh backends, each block from the scenario's start time again")
    parser.add_argument("--only", metavar="TEXT", action="append",
                        help="only the scenarios whose label contains TEXT (repeatable)")
    parser.add_argument("--all", action="store_true", help="also the 8x A100 all-1g MIG node")
    parser.add_argument("--same", choices=("nvml", "dcgm"), help="A/A: both sides this backend (the bench's bias)")
    parser.add_argument("--smoke", action="store_true", help="one scenario, 5 pairs (harness check)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--wash", type=int, default=0, metavar="ENTRIES",
                        help="experiment: an NVML side runs this much unrelated Python where a DCGM side's "
                             "host engine runs, its CPU taken out (see Side)")
    parser.add_argument("--engine-thread", action="store_true",
                        help="a DCGM side's host engine samples when the simulation advances, outside the poll, "
                             "as AUTO mode's own thread does (see Side)")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    scenarios = dcgm_bench.SCENARIOS
    cases = [("a100-40gb-two-3g@300s", scenarios / "a100-40gb-two-3g.yaml", 300.0),
             ("a30-mig-dcgm@240s", scenarios / "a30-mig-dcgm.yaml", 240.0),
             ("h100-mixed-node@600s", scenarios / "h100-mixed-node.yaml", 600.0)]
    if args.all:
        cases.append(("8xA100 7x1g MIG", dcgm_bench.a100_node(Path(tempfile.mkdtemp(prefix="gpushare-pairs-"))), 60.0))
    if args.smoke:
        cases, args.pairs = cases[:1], 5
    if args.only:
        cases = [case for case in cases if any(text in case[0] for text in args.only)]
    kinds = (args.same, args.same) if args.same else ("nvml", "dcgm")
    print(f"== DCGM/NVML, interleaved pairs in one process (exporter CPU per poll: process CPU minus the "
          f"simulated NVML library, host engine and simulation); median of per-pair ratios [IQR]; "
          f"load average {os.getloadavg()[0]:.2f}")
    results = {}
    for label, path, start_at in cases:
        gc.collect()
        results[label] = interleave(path, start_at, args.pairs, kinds, block=args.block, wash=args.wash,
                                    engine_thread=args.engine_thread)
        print(render(label, results[label]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({label: {k: v for k, v in result.items() if k != "sides"}
                                               for label, result in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
