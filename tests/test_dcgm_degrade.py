"""Degrade, never die: DCGM failures leave everything else served and resume by themselves.

Each test plays a scenario with a ``dcgm.faults`` window through the DCGM backend on the
simulated DCGM and checks, poll by poll, what goes, what stays and what comes back.
"""

from __future__ import annotations

import logging

import pytest

from dcgm_helpers import NV_HOSTENGINE, Run, scrape_at, value, write_scenario
from exporter.errors import UserError

A100_UUID = "GPU-0a100000-0000-4000-8000-000000000000"
H100_UUID = "GPU-0b100000-0000-4000-8000-000000000000"


def scenario(tmp_path, dcgm: dict | None = None, name: str = "degrade.yaml"):
    """An A100 with two MIG instances (activity only via DCGM) and an H100 (GPM too), all busy."""
    data = {"name": "degrade", "duration": "20m",
            "gpus": [{"model": "A100-80GB", "uuid": A100_UUID,
                      "mig": [{"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]},
                     {"model": "H100-80GB", "uuid": H100_UUID}],
            "processes": [
                {"pid": 11, "cmdline": "python a.py", "gpu": 0, "mig": 0, "memory": "8GiB", "sm_active": 0.6},
                {"pid": 12, "cmdline": "python b.py", "gpu": 0, "mig": 1, "memory": "4GiB", "sm_active": 0.3},
                {"pid": 13, "cmdline": "python c.py", "gpu": 1, "memory": "9GiB", "sm_active": 0.4}]}
    if dcgm is not None:
        data["dcgm"] = dcgm
    return write_scenario(tmp_path, data, name)


def always_served(series, t) -> None:
    """What must never stop, whatever DCGM does."""
    for uuid in (A100_UUID, H100_UUID):
        assert value(series, "gpushare_gpu_up", uuid=uuid) == 1, t
        for family in ("gpushare_gpu_power_watts", "gpushare_gpu_temperature_celsius",
                       "gpushare_gpu_memory_used_bytes", "gpushare_gpu_energy_joules_total"):
            assert value(series, family, uuid=uuid) is not None, (family, t)
    for pid in ("11", "12", "13"):
        assert value(series, "gpushare_process_memory_used_bytes", pid=pid) is not None, (pid, t)
    for gi in ("1", "2"):
        assert value(series, "gpushare_mig_memory_used_bytes", gi=gi) is not None, (gi, t)
    assert value(series, "gpushare_exporter_source_available", source="nvml") == 1


def a100_activity(series):
    return [value(series, "gpushare_mig_sm_active_ratio", gi=gi) for gi in ("2", "1")]  # mig 0 at slice 0 is GI 2


def test_profiling_lock_taken_and_released_mid_run(tmp_path, caplog):
    """Nsight takes the performance counters at 2m and gives them back at 4m: A100 activity goes
    (absent, not 0) and comes back; the H100's (GPM, no perfmon) and everything else never stop."""
    path = scenario(tmp_path, {"faults": [{"kind": "profiling_lock", "at": "2m", "until": "4m"}]})
    caplog.set_level(logging.INFO, logger="exporter.backend")
    states = {}
    with Run(path, "dcgm", interval=10.0) as run:
        for t in range(0, 400, 10):
            series = run.poll(t)
            always_served(series, t)
            states[t] = (a100_activity(series), value(series, "gpushare_gpu_sm_active_ratio", uuid=H100_UUID),
                         value(series, "gpushare_exporter_source_available", source="dcgm_profiling"),
                         value(series, "gpushare_exporter_source_available", source="dcgm"))
    for t in range(20, 120, 10):
        assert states[t] == ([pytest.approx(0.6), pytest.approx(0.3)], pytest.approx(0.4), 1, 1), t
    for t in range(130, 240, 10):  # blank from 2m on; reported unavailable from the second blank poll
        assert states[t][0] == [None, None] and states[t][1] == pytest.approx(0.4) and states[t][3] == 1, t
        assert states[t][2] == 0, t
    for t in range(250, 400, 10):
        assert states[t] == ([pytest.approx(0.6), pytest.approx(0.3)], pytest.approx(0.4), 1, 1), t
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([w for w in warnings if "dcgm_profiling unavailable" in w]) == 1, warnings  # once, not per poll
    assert any("dcgm_profiling available again" in r.getMessage() for r in caplog.records)


def test_profiling_lock_held_at_start_then_released(tmp_path, caplog):
    """The watch fails with -37 while another tool holds the counters; it is retried and activity starts."""
    path = scenario(tmp_path, {"faults": [{"kind": "profiling_lock", "until": "1m"}]})
    caplog.set_level(logging.WARNING, logger="exporter.backend")
    with Run(path, "dcgm", interval=5.0) as run:
        series = [run.poll(t) for t in range(0, 120, 5)]
        backend = run.backend.inner
        assert a100_activity(series[5]) == [None, None]
        assert value(series[5], "gpushare_exporter_source_available", source="dcgm_profiling") == 0
        assert value(series[-1], "gpushare_exporter_source_available", source="dcgm_profiling") == 1
        assert value(series[5], "gpushare_gpu_sm_active_ratio", uuid=H100_UUID) == pytest.approx(0.4)
        assert a100_activity(series[-1]) == [pytest.approx(0.6), pytest.approx(0.3)]
        assert backend.source.caller.calls_by_name["dcgmWatchFields"] > 3  # it was retried
    for s in series:
        always_served(s, None)
    assert any("profiling module busy (-37)" in r.getMessage() and "Nsight" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("address", [NV_HOSTENGINE, None], ids=["nv-hostengine", "embedded"])
def test_host_engine_goes_away_and_comes_back(tmp_path, address):
    """nv-hostengine stops at 2m and is back at 3m: NVML reads power, clocks... meanwhile (values
    equal to the NVML backend's), the H100 keeps its activity through GPM, the A100 loses it;
    once the engine is back the backend reconnects, rewatches, and DCGM activity returns."""
    path = scenario(tmp_path, {"faults": [{"kind": "hostengine_down", "at": "2m", "until": "3m"}]})
    with Run(path, "dcgm", address=address, interval=5.0) as dcgm, Run(path, "nvml", interval=5.0) as nvml:
        for t in range(0, 300, 5):
            series, reference = dcgm.poll(t), nvml.poll(t)
            always_served(series, t)
            available = value(series, "gpushare_exporter_source_available", source="dcgm")
            if 125 <= t < 180:
                assert available == 0 and a100_activity(series) == [None, None], t
                assert "not reachable" in dcgm.snapshot.sources["dcgm"].reason
                assert value(series, "gpushare_gpu_power_watts", uuid=A100_UUID) == \
                    value(reference, "gpushare_gpu_power_watts", uuid=A100_UUID)
            if 135 <= t < 180:  # GPM needs two samples after taking over
                assert value(series, "gpushare_gpu_sm_active_ratio", uuid=H100_UUID) == pytest.approx(0.4), t
            if t >= 180 + 5 * 2:  # reconnect is retried every 5 s; one more poll for a full window
                assert available == 1 and a100_activity(series) == [pytest.approx(0.6), pytest.approx(0.3)], t
                assert value(series, "gpushare_exporter_source_available", source="dcgm_profiling") == 1


def test_version_mismatch_then_matching_engine(tmp_path, caplog):
    """A host engine of another DCGM version answers -12: logged once with what to do, NVML
    serves meanwhile, and the backend connects once a matching engine is back."""
    path = scenario(tmp_path, {"faults": [{"kind": "version_mismatch", "at": "1m", "until": "2m"}]})
    caplog.set_level(logging.WARNING, logger="exporter.backend")
    with Run(path, "dcgm", address=NV_HOSTENGINE, interval=5.0) as run:
        for t in range(0, 200, 5):
            series = run.poll(t)
            always_served(series, t)
            if 65 <= t < 120:
                assert value(series, "gpushare_exporter_source_available", source="dcgm") == 0
                assert "API version mismatch" in run.snapshot.sources["dcgm"].reason
        assert a100_activity(series) == [pytest.approx(0.6), pytest.approx(0.3)]
    messages = [r.getMessage() for r in caplog.records if "source dcgm unavailable" in r.getMessage()]
    assert len(messages) == 1 and "same version" in messages[0]


def test_embedded_engine_without_root_under_mig(tmp_path):
    """Non-root embedded DCGM refuses to start while MIG is on (-29): the reason says so and
    how to fix it; NVML serves everything else. nv-hostengine (root) is fine."""
    path = scenario(tmp_path, {"root": False})
    with Run(path, "dcgm", interval=5.0) as run:
        for t in range(0, 60, 5):
            series = run.poll(t)
            always_served(series, t)
        reason = run.snapshot.sources["dcgm"].reason
        assert "-29" in reason and "root" in reason and "--dcgm-address" in reason
        assert value(series, "gpushare_exporter_source_available", source="dcgm") == 0
        assert value(series, "gpushare_gpu_sm_active_ratio", uuid=H100_UUID) == pytest.approx(0.4)  # GPM
    series = scrape_at(path, "dcgm", [0, 5, 10], address=NV_HOSTENGINE, interval=5.0)
    assert a100_activity(series) == [pytest.approx(0.6), pytest.approx(0.3)]


def test_profiling_module_missing(tmp_path):
    """Without DCGM's profiling package (-33) device fields still come from DCGM, Hopper's
    activity from NVML's GPM, and the reason names the package to install."""
    path = scenario(tmp_path, {"profiling_module": False})
    with Run(path, "dcgm", interval=5.0) as run:
        for t in range(0, 60, 5):
            series = run.poll(t)
            always_served(series, t)
        assert value(series, "gpushare_exporter_source_available", source="dcgm") == 1
        assert value(series, "gpushare_exporter_source_available", source="dcgm_profiling") == 0
        assert "proprietary" in run.snapshot.sources["dcgm_profiling"].reason
        assert a100_activity(series) == [None, None]
        assert value(series, "gpushare_gpu_sm_active_ratio", uuid=H100_UUID) == pytest.approx(0.4)
        # Power is DCGM's field: NVML read it only in the first poll, before the watches existed (once per GPU).
        assert run.backend.nvml.caller.calls_by_name["nvmlDeviceGetPowerUsage"] == 2


def test_dcgm_3x_connects_with_connect_v2(tmp_path):
    """DCGM 3.x has no dcgmConnect_v3: the backend falls back to dcgmConnect_v2."""
    path = scenario(tmp_path, {"version": "3.3.9"})
    # a shared nv-hostengine samples every 5 s at least (--dcgm-update-interval): poll at that pace
    with Run(path, "dcgm", address=NV_HOSTENGINE, interval=5.0) as run:
        for t in (0, 5, 10):
            series = run.poll(t)
        assert run.backend.dcgm_lib.call_counts["dcgmConnect_v2"] == 1
        assert "dcgmConnect_v3" not in run.backend.dcgm_lib.call_counts
    assert a100_activity(series) == [pytest.approx(0.6), pytest.approx(0.3)]


def test_auto_picks_dcgm_when_an_engine_answers(tmp_path):
    path = scenario(tmp_path, {})
    with Run(path, "auto") as run:
        series = run.poll(0)
        assert run.backend.name == "dcgm" and "answered" in run.backend.reason
        assert value(series, "gpushare_exporter_build_info", backend="dcgm") == 1


def test_auto_picks_nvml_and_says_why(tmp_path):
    """No dcgm section: the simulated host has no DCGM. A mismatching nv-hostengine: NVML, with the reason."""
    with Run(scenario(tmp_path), "auto") as run:
        series = run.poll(0)
        assert run.backend.name == "nvml" and "has no DCGM" in run.backend.reason
        assert value(series, "gpushare_exporter_build_info", backend="nvml") == 1
        assert run.snapshot.backend_reason == run.backend.reason
    path = scenario(tmp_path, {"faults": [{"kind": "version_mismatch"}]}, name="mismatch.yaml")
    with Run(path, "auto", address=NV_HOSTENGINE) as run:
        run.poll(0)
        assert run.backend.name == "nvml" and "API version mismatch" in run.backend.reason


def test_backend_dcgm_on_a_host_without_dcgm_is_one_line(tmp_path):
    path = scenario(tmp_path, {"installed": False})
    with pytest.raises(UserError, match=r"^--backend dcgm: the simulated host has no DCGM \(.*installed: false\)$"):
        Run(path, "dcgm")


def test_profiling_fields_that_need_several_passes_are_narrowed(tmp_path, monkeypatch, caplog):
    """A GPU that cannot collect all eight profiling fields in one pass (-38) gets the widest set it
    can: SM, tensor, DRAM and graphics activity still come, the warning says which were dropped."""
    from exporter.sim.fakedcgm import hostwatch

    original = hostwatch.WatchCalls._profiling_watch_status

    def at_most_four(self, gpu, profiling):
        return -38 if len(profiling) > 4 else original(self, gpu, profiling)

    monkeypatch.setattr(hostwatch.WatchCalls, "_profiling_watch_status", at_most_four)
    caplog.set_level(logging.WARNING, logger="exporter.backend")
    series = scrape_at(scenario(tmp_path, {}), "dcgm", [0, 5, 10], interval=5.0)
    assert a100_activity(series) == [pytest.approx(0.6), pytest.approx(0.3)]
    assert value(series, "gpushare_mig_tensor_active_ratio", gi="2") is not None
    assert value(series, "gpushare_mig_fp64_active_ratio", gi="2") is None  # dropped: absent, not 0
    assert value(series, "gpushare_exporter_source_available", source="dcgm_profiling") == 1
    assert any("in one pass (-38)" in r.getMessage() for r in caplog.records)
