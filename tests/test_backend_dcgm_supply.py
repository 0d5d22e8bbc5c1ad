"""The DCGM backend's in-place path: each GPU built by its NVML reader with DCGM's values in it.

DcgmBackend hands each GpuReader what DCGM gives for its GPU (exporter.backend.nvml_types.
Supplied) before NVML is read, so the GpuInfo is built once; a GPU not built that way (down,
timed out, read by a reader that got nothing) is copied with DCGM's values as before
(DcgmBackend._merge_gpu). Both ways must give the same Snapshot to the repr: the same values,
blanks, statuses and errors, the same dict order. These tests poll the same simulated host
twice, once as the backend runs and once with the in-place path switched off, through the
shipped scenarios' faults (profiling lock, host engine down) and a node's faults (a lost GPU,
flaky calls, a MIG reconfigure, hot removal, a driver mismatch).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from exporter.backend import dcgm
from exporter.backend.choose import DcgmOptions
from exporter.backend.sim import SimBackend

SCENARIOS = Path(__file__).resolve().parent.parent / "examples" / "scenarios"


def _polls(path: Path, times, in_place: bool, monkeypatch) -> list:
    """What each poll at ``times`` gives: (gpus, section_ok, call_errors, sources, backend), or the
    exception's type and text where the poll fails."""
    with monkeypatch.context() as patch:
        if not in_place:
            patch.setattr(dcgm, "_supply", lambda *args: None)  # every GPU through the copying merge
        backend = SimBackend(path, backend="dcgm", dcgm=DcgmOptions(interval=1.0))
        backend.step_to(times[0])
        with monkeypatch.context() as clock:  # the same boot time both ways (process start times)
            clock.setattr(time, "time", lambda: 1_800_000_000.0)
            backend.open()
        out = []
        try:
            for t in times:
                backend.step_to(t)
                try:
                    snapshot = backend.poll()
                except Exception as exc:  # noqa: BLE001 - a failing poll must fail the same way both ways
                    out.append((type(exc).__name__, str(exc)))
                    continue
                out.append(repr((snapshot.gpus, snapshot.section_ok, snapshot.call_errors, snapshot.sources,
                                 snapshot.backend, snapshot.pod_devices)))
                readers = backend.inner.nvml.readers
                if not in_place:
                    assert all(reader.supplied is None and reader.filled is None for reader in readers)
        finally:
            backend.close()
    return out


def _same_both_ways(path: Path, times, monkeypatch) -> list:
    fast = _polls(path, times, True, monkeypatch)
    slow = _polls(path, times, False, monkeypatch)
    assert len(fast) == len(slow) == len(times)
    for t, a, b in zip(times, fast, slow):
        assert a == b, f"t={t}"
    return fast


def test_in_place_equals_copy_through_profiling_lock_and_host_engine_down(monkeypatch):
    """a30-mig-dcgm: profiling lock 6m-8m (blank profiling values, then the source says so), host
    engine down 11m-12m (DCGM gives nothing; NVML reads it all), and back."""
    times = [float(t) for t in (*range(355, 366), *range(476, 486), *range(655, 668), *range(716, 728))]
    out = _same_both_ways(SCENARIOS / "a30-mig-dcgm.yaml", times, monkeypatch)
    assert "profiling values blank on GPU 0" in out[times.index(365.0)]  # DCGM's blanks seen
    assert "host engine is not reachable" in out[times.index(662.0)]  # the engine away
    assert "dcgm_gpu_id=0" in out[-1] and "sm_active=0." in out[-1]


def test_in_place_equals_copy_on_a_node_with_faults(tmp_path, monkeypatch):
    """node-faults with DCGM: a GPU lost and reset (down GPUs go the copying way), flaky calls on a
    MIG device, a failed MIG reconfigure (DCGM maps its entities again), hot removal (NVML
    enumerates again mid-poll) and a driver mismatch."""
    data = yaml.safe_load((SCENARIOS / "node-faults.yaml").read_text())
    data["dcgm"] = {"gpu_ids": [3, 2, 1, 0]}  # DCGM numbers GPUs its own way; matched by UUID
    path = tmp_path / "node-faults-dcgm.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    times = [float(t) for t in (*range(25, 30), *range(60, 68), *range(178, 186), *range(298, 306),
                                *range(358, 368), *range(478, 486), *range(538, 546), *range(718, 726))]
    out = _same_both_ways(path, times, monkeypatch)
    assert any("up=False" in poll for poll in out if isinstance(poll, str))  # the lost GPU went the copying way
    assert any("dcgm_gpu_id=3" in poll for poll in out if isinstance(poll, str))


@pytest.mark.parametrize("name, start", [("a100-40gb-two-3g.yaml", 300), ("h100-mixed-node.yaml", 600)])
def test_in_place_equals_copy_on_shipped_nodes(name, start, monkeypatch):
    out = _same_both_ways(SCENARIOS / name, [float(start + n) for n in range(8)], monkeypatch)
    assert "dcgm_gpu_id=0" in out[-1]


def test_merge_copies_a_gpu_whose_dcgm_id_changed_after_the_read(monkeypatch):
    """A GPU built in place keeps its object unless the mapping moved between the read and the
    merge (observe() mapped anew): then only its DCGM id is changed."""
    backend = SimBackend(SCENARIOS / "a100-40gb-two-3g.yaml", backend="dcgm", dcgm=DcgmOptions(interval=1.0))
    backend.step_to(300.0)
    backend.open()
    try:
        for t in (301.0, 302.0, 303.0):
            backend.step_to(t)
            backend.poll()
        inner = backend.inner
        reading = inner.source.read()
        gpu = inner.nvml.readers[0].filled
        assert gpu is not None and gpu.dcgm_gpu_id == 0
        assert inner._merge(inner.nvml.poll(), reading, 0.0).gpus[0] is inner.nvml.readers[0].filled
        session = inner.source.session
        session.gpu_index = {5: 0}  # as discover() leaves it when DCGM renumbers
        snapshot = inner.nvml.poll()
        merged = inner._merge(snapshot, reading, 0.0).gpus[0]
        assert merged is not snapshot.gpus[0] and merged.dcgm_gpu_id == 5
        assert repr(merged) == repr(snapshot.gpus[0]).replace("dcgm_gpu_id=0", "dcgm_gpu_id=5")
    finally:
        backend.close()


def test_clamping_of_infinities_and_ints_matches_min_max():
    """The inlined clamp in dcgm.activity and dcgm_values.activity_values gives min(1.0, max(0.0, v))."""
    from exporter.backend.dcgm_values import PROFILING_FIELDS, activity_values

    values = dict(zip(PROFILING_FIELDS, (float("inf"), float("-inf"), 2, 0, -3, 1.0, 0.999, -1e-300)))
    fast = dcgm.activity(values)
    plain = activity_values(values)
    for fid, pipe in PROFILING_FIELDS.items():
        expected = min(1.0, max(0.0, float(values[fid])))
        assert repr(getattr(fast, pipe)) == repr(plain[pipe]) == repr(expected), (fid, values[fid])
