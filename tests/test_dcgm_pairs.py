"""bench/dcgm_pairs.py: the interleaved DCGM/NVML bench (issue 22, item 3).

Never asserts on speed: that the harness runs and reports, and that two backends polled in
turn in one process each see their own simulated host (the same /metrics, poll by poll, as a
backend polled alone), so the pairs compare what two separate exporters would export.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"


def _bench_modules():
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    import dcgm_bench
    import dcgm_bytes
    import dcgm_pairs

    return dcgm_bench, dcgm_bytes, dcgm_pairs


def _metrics(poller, timing) -> bytes:
    return b"\n".join(line for line in poller.exposition.text.split(b"\n") if not timing.match(line))


def test_pairs_smoke_reports_ratio_with_quartiles():
    out = subprocess.run([sys.executable, str(BENCH / "dcgm_pairs.py"), "--smoke"], cwd=REPO,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "process CPU minus the simulated NVML library, host engine and simulation" in out.stdout
    match = re.search(r"a100-40gb-two-3g@300s\s+dcgm/nvml ([\d.]+)x \(IQR ([\d.]+)-([\d.]+), 5 pairs in blocks of 60;.*"
                      r"series (\d+) / (\d+)\s+apart: fake NVML [\d.]+ / [\d.]+, host engine ([\d.]+) / ([\d.]+) ms",
                      out.stdout)
    assert match, out.stdout
    ratio, q1, q3 = map(float, match.groups()[:3])
    assert q1 <= ratio <= q3
    nvml_series, dcgm_series = int(match[4]), int(match[5])
    assert dcgm_series > nvml_series > 100  # DCGM adds the pipe activity of the A100 and its GPU instances
    assert float(match[6]) == 0 < float(match[7])  # only the DCGM side calls the host engine
    assert re.search(r"DCGM backend's own work in the poll [\d.]+ ms", out.stdout)


def test_interleaved_sides_export_what_each_backend_exports_alone():
    dcgm_bench, dcgm_bytes, dcgm_pairs = _bench_modules()
    logging.disable(logging.WARNING)
    try:
        path = dcgm_bench.SCENARIOS / "a30-mig-dcgm.yaml"
        alone = {}
        for kind in ("nvml", "dcgm"):
            backend, poller, advance = dcgm_bench.setup(path, kind, 240.0)
            try:
                alone[kind] = []
                for _ in range(3):
                    advance()
                    poller.poll_once()
                    alone[kind].append(_metrics(poller, dcgm_bytes.TIMING))
            finally:
                backend.close()
        result = dcgm_pairs.interleave(path, 240.0, 5, keep=True, block=2)  # blocks of 2, 2 and 1 pairs
        assert [len(side.expositions) for side in result["sides"]] == [1, 1]
        result = dcgm_pairs.interleave(path, 240.0, 3, keep=True)
        for kind, side in zip(("nvml", "dcgm"), result["sides"]):
            assert side.kind == kind
            assert side.expositions == alone[kind]
        assert alone["dcgm"][0] != alone["nvml"][0]
        assert result["pairs"] == 3 and result["ratio_q1"] <= result["ratio_median"] <= result["ratio_q3"]
    finally:
        logging.disable(logging.NOTSET)


def test_engine_timer_takes_calls_through_symbols_cached_before_it():
    """The fake bindings cache symbols (as the real ones do), so the host-engine timer cannot wrap
    the look-up: a symbol cached before ``install`` is still timed, every call of it, and
    ``uninstall`` puts the library's own door back."""
    dcgm_bench, _, _ = _bench_modules()
    from exporter.sim.fakedcgm import hostengine

    logging.disable(logging.WARNING)
    backend, poller, advance = dcgm_bench.setup(dcgm_bench.SCENARIOS / "a30-mig-dcgm.yaml", "dcgm", 240.0)
    timer = dcgm_bench.EngineTimer()
    original = hostengine.FakeDcgmLib.invoke
    try:
        structs = backend.inner.source.bindings.structs
        assert "dcgmEntitiesGetLatestValues" in structs._dcgmGetFunctionPointer_cache  # cached in warm-up
        lib = backend.dcgm_lib
        calls = sum(lib.call_counts.values())
        seen = []
        timer.install()
        timed = hostengine.FakeDcgmLib.invoke

        def counted(self, name, method, args):  # every call that reaches the timed door
            seen.append(name)
            return timed(self, name, method, args)

        hostengine.FakeDcgmLib.invoke = counted
        for _ in range(3):
            advance()
            poller.poll_once()
        hostengine.FakeDcgmLib.invoke = timed
        assert seen and len(seen) == sum(lib.call_counts.values()) - calls
        assert seen.count("dcgmEntitiesGetLatestValues") >= 3 and timer.seconds > 0
    finally:
        timer.uninstall()
        hostengine.FakeDcgmLib.invoke = original
        backend.close()
        logging.disable(logging.NOTSET)
    assert hostengine.FakeDcgmLib.invoke is original


def test_wash_runs_on_the_nvml_side_only_is_taken_out_and_leaves_what_it_exports():
    """--wash (an experiment): the NVML side runs the wash before its NVML poll, its CPU is taken
    out of that side's exporter CPU, the DCGM side has none, each side still exports what its
    backend exports polled alone, and closing the side puts the backend's poll back."""
    dcgm_bench, dcgm_bytes, dcgm_pairs = _bench_modules()
    logging.disable(logging.WARNING)
    try:
        path = dcgm_bench.SCENARIOS / "a100-40gb-two-3g.yaml"
        washed = dcgm_pairs.interleave(path, 300.0, 4, keep=True, wash=20000)
        plain = dcgm_pairs.interleave(path, 300.0, 4, keep=True)
    finally:
        logging.disable(logging.NOTSET)
    nvml_side, dcgm_side = washed["sides"]
    assert washed["b"]["wash_ms"] == 0 < washed["a"]["wash_ms"]  # a 20,000-entry wash: milliseconds
    # taken out: the NVML side's exporter CPU is far below the wash it ran in the same polls
    assert washed["a"]["exporter_cpu_ms"] < washed["a"]["wash_ms"]
    assert [row["wash"] > 0 for row in nvml_side.rows] == [True] * 4
    assert plain["a"]["wash_ms"] == 0
    for side, other in zip(washed["sides"], plain["sides"]):
        assert side.expositions == other.expositions  # the wash changes nothing exported
    timers = (dcgm_pairs.FakeLibTimer(), dcgm_bench.EngineTimer())
    side = dcgm_pairs.Side(path, "nvml", 300.0, timers, wash=10)
    inner = side.backend.inner
    assert inner.poll != type(inner).poll.__get__(inner)  # washed while the side is open
    side.close()
    assert inner.poll == type(inner).poll.__get__(inner)  # closed: the backend's own poll again


def test_engine_thread_samples_apart_and_leaves_what_each_side_exports():
    """--engine-thread: the DCGM side's host engine samples when the simulation advances, outside
    the poll (its CPU reported apart), the NVML side has none, and each side exports what it
    exports with the engine sampling lazily inside the read."""
    dcgm_bench, dcgm_bytes, dcgm_pairs = _bench_modules()
    logging.disable(logging.WARNING)
    try:
        path = dcgm_bench.SCENARIOS / "a30-mig-dcgm.yaml"
        apart = dcgm_pairs.interleave(path, 240.0, 4, keep=True, engine_thread=True)
        plain = dcgm_pairs.interleave(path, 240.0, 4, keep=True)
    finally:
        logging.disable(logging.NOTSET)
    nvml_side, dcgm_side = apart["sides"]
    assert [row["engine_thread"] > 0 for row in dcgm_side.rows] == [True] * 4
    assert [row["engine_thread"] for row in nvml_side.rows] == [0.0] * 4
    assert apart["b"]["engine_thread_ms"] > 0 == plain["b"]["engine_thread_ms"]
    for side, other in zip(apart["sides"], plain["sides"]):
        assert side.expositions == other.expositions
