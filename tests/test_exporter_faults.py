"""The exporter (SimBackend -> NvmlBackend -> Poller -> /metrics) under each fault of the
fault model, without a restart: one backend and one poller per test, polled on the virtual
clock. Checks what is exported: which series go absent and come back, and what the
self-metrics count. Expected values come from the scenario each test writes.
"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.backend import nvml as nvml_backend
from exporter.backend.sim import SimBackend
from exporter.poller import Poller
from exporter.sim.scenario import parse_scenario

GIB = 2**30


class Exporter:
    """A SimBackend and the Poller that serves it, stepped by hand on the virtual clock."""

    def __init__(self, data: dict, start_at: float = 0.0, gpu_timeout: float = 5.0):
        self.backend = SimBackend(parse_scenario({"name": "faults", **data}, "faults.yaml"), gpu_timeout=gpu_timeout)
        self.backend.step_to(start_at)
        self.backend.open()
        self.poller = Poller(self.backend, interval=1.0)

    def at(self, t: float) -> bool:
        """Poll at virtual time t; True when the poll succeeded."""
        self.backend.step_to(t)
        return self.poller.poll_once()

    def samples(self, name: str, **labels) -> list:
        """Samples of ``name`` whose labels include ``labels``."""
        found = []
        for family in text_string_to_metric_families(self.poller.exposition.text.decode()):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == str(v) for k, v in labels.items()):
                    found.append(s)
        return found

    def value(self, name: str, **labels):
        found = self.samples(name, **labels)
        assert len(found) <= 1, found
        return found[0].value if found else None

    def close(self):
        self.backend.close()  # safe twice


@pytest.fixture
def exporter():
    made = []

    def start(data, **kwargs):
        made.append(Exporter(data, **kwargs))
        return made[-1]

    yield start
    for e in made:
        e.close()


def test_lost_gpu_goes_down_then_a_reset_brings_it_back_with_counters_restarted(exporter):
    """gpu_up 0 and no readings while lost (GpuIsLost counted); after the reset: up again, the
    energy counter restarted, the old MIG instances' series gone and the new ones there."""
    e = exporter({
        "gpus": [{"model": "H100-80GB", "power_watts": 300},
                 {"model": "A100-40GB", "power_watts": 200, "mig": [{"profile": "3g.20gb"}, {"profile": "3g.20gb"}]}],
        "processes": [{"pid": 31, "name": "job", "gpu": 1, "mig": 0, "memory": "2GiB"}],
        "events": [{"at": 10, "gpu_lost": {"gpu": 1}},
                   {"at": 30, "gpu_reset": {"gpu": 1, "mig": [{"profile": "7g.40gb"}]}}]})
    assert e.at(8)
    uuid1 = e.samples("gpushare_gpu_up", gpu=1)[0].labels["uuid"]
    energy_before = e.value("gpushare_gpu_energy_joules_total", gpu=1)
    old_mig = {s.labels["profile"] for s in e.samples("gpushare_mig_info", gpu=1)}
    assert energy_before == pytest.approx(200 * 8) and old_mig == {"3g.20gb"}
    for t in range(11, 30):  # lost long enough for the exporter to enumerate again
        assert e.at(t)
        assert e.value("gpushare_gpu_up", gpu=1, uuid=uuid1) == 0  # keeps its identity while lost
    assert e.backend.nvml.discoveries >= 1
    assert e.value("gpushare_gpu_up", gpu=1) == 0 and e.value("gpushare_gpu_up", gpu=0) == 1
    assert e.value("gpushare_gpu_power_watts", gpu=1) is None
    assert sum(s.value for s in e.samples("gpushare_exporter_poll_errors_total", error="GpuIsLost")) > 0
    assert e.at(35)
    assert e.value("gpushare_gpu_up", gpu=1, uuid=uuid1) == 1
    assert e.value("gpushare_gpu_energy_joules_total", gpu=1) == pytest.approx(200 * 5)
    assert {s.labels["profile"] for s in e.samples("gpushare_mig_info", gpu=1)} == {"7g.40gb"}
    assert e.samples("gpushare_process_memory_used_bytes", pid=31) == []


def test_removed_gpu_disappears_and_the_rest_renumber(exporter):
    """After a hot removal the GPU is down a few polls, then the exporter enumerates again:
    its series are gone and the remaining GPU is index 0, with no restart."""
    e = exporter({"gpus": [{"model": "H100-80GB"}, {"model": "L40S"}], "events": [{"at": 10, "gpu_removed": {"gpu": 0}}]})
    assert e.at(5)
    removed = e.samples("gpushare_gpu_up", gpu=0)[0].labels["uuid"]
    kept = e.samples("gpushare_gpu_up", gpu=1)[0].labels["uuid"]
    t = 10
    while e.samples("gpushare_gpu_up", uuid=removed) and t < 30:
        assert e.at(t)
        t += 1
    assert t <= 10 + nvml_backend.REDISCOVER_DOWN_POLLS + 1
    assert e.samples("gpushare_gpu_up", uuid=removed) == []
    assert e.value("gpushare_gpu_up", gpu=0, uuid=kept) == 1
    assert e.samples("gpushare_gpu_info", gpu=0)[0].labels["name"] == "NVIDIA L40S"
    assert e.backend.nvml.discoveries == 1


def test_attached_gpu_appears_at_the_next_periodic_enumeration(exporter, monkeypatch):
    """A GPU attached while the exporter runs is found by the periodic re-enumeration."""
    monkeypatch.setattr(nvml_backend, "REDISCOVER_EVERY_POLLS", 5)
    e = exporter({"gpus": [{"model": "L4"}, {"model": "L4", "present": False}],
                  "events": [{"at": 2, "gpu_attached": {"gpu": 1}}]})
    counts = []
    for t in range(1, 9):
        assert e.at(t)
        counts.append(len(e.samples("gpushare_gpu_up")))
    assert counts[0] == 1 and counts[-1] == 2


@pytest.mark.parametrize("error", ["DriverNotLoaded", "NoPermission", "LibraryNotFound", "LibRmVersionMismatch"])
def test_nvml_init_failure_at_start_is_retried_without_restart(exporter, error):
    """Started while NVML cannot start (driver not loaded, device files not yet accessible,
    library being installed): polls fail (counted, no GPU series), then the GPUs appear
    once nvmlInit succeeds; the failed inits are in the self-metrics."""
    e = exporter({"gpus": [{"model": "A30"}],
                  "events": [{"at": 0, "nvml_init_failure": {"error": error, "until": "20s"}}]})
    assert not e.at(5) and not e.at(10)
    assert e.value("gpushare_exporter_polls_total", result="error") == 2
    assert e.value("gpushare_gpu_up", gpu=0) is None
    assert e.at(20)
    assert e.value("gpushare_gpu_up", gpu=0) == 1
    assert e.value("gpushare_exporter_poll_errors_total", call="nvmlInit", error=error) == 3


def test_driver_mismatch_running_exporter_keeps_reading_and_a_late_one_waits(exporter):
    """An upgrade under a running exporter does not stop it (its library stays loaded); an
    exporter started during the mismatch polls in error until the new module is loaded,
    then reports the new driver version."""
    scenario = {"driver_version": "580.95.05", "gpus": [{"model": "H100-80GB"}],
                "events": [{"at": 10, "driver_mismatch": {"version": "580.105.08", "until": "40s"}}]}
    running = exporter(scenario)
    for t in (5, 15, 30):
        assert running.at(t)
    assert running.samples("gpushare_gpu_info")[0].labels["driver_version"] == "580.95.05"
    running.close()  # one simulated host per process (pynvml's library is global)
    late = exporter(scenario, start_at=20)
    assert not late.at(20)
    assert late.value("gpushare_exporter_poll_errors_total", call="nvmlInit", error="LibRmVersionMismatch") is None
    assert late.at(40)
    assert late.samples("gpushare_gpu_info")[0].labels["driver_version"] == "580.105.08"
    assert late.value("gpushare_exporter_poll_errors_total", call="nvmlInit", error="LibRmVersionMismatch") == 2


def test_process_with_na_memory_has_no_memory_series(exporter):
    """N/A usedGpuMemory: the process is exported (identity) without a memory value."""
    e = exporter({"gpus": [{"model": "H100-80GB"}],
                  "processes": [{"pid": 41, "name": "hidden", "gpu": 0, "memory": "3GiB", "memory_na": True},
                                {"pid": 42, "name": "shown", "gpu": 0, "memory": "1GiB"}]})
    assert e.at(5)
    assert e.value("gpushare_process_memory_used_bytes", pid=41) is None
    assert e.value("gpushare_process_memory_used_bytes", pid=42) == GIB
    assert e.value("gpushare_gpu_memory_used_bytes", gpu=0) == 4 * GIB
    assert e.samples("gpushare_process_sm_utilization_ratio", pid=41)


def test_mps_server_death_removes_the_server_and_its_clients(exporter):
    """After the MPS server dies (no restart): no server series, no client series, sharing
    no longer mps; nothing counted as OOM."""
    e = exporter({"gpus": [{"model": "H100-80GB", "mps": True, "compute_mode": "exclusive_process"}],
                  "processes": [{"pid": 51, "name": "c1", "gpu": 0, "memory": "2GiB"},
                                {"pid": 52, "name": "c2", "gpu": 0, "start": 20, "memory": "2GiB"}],
                  "events": [{"at": 10, "mps_server_death": {"gpu": 0}}]})
    assert e.at(5)
    assert e.samples("gpushare_mps_server_info") and e.value("gpushare_mps_clients", gpu=0) == 1
    assert e.at(25)
    assert e.samples("gpushare_mps_server_info") == []
    assert e.samples("gpushare_process_memory_used_bytes") == []
    assert e.samples("gpushare_gpu_info")[0].labels["sharing"] == "idle"
    assert sum(s.value for s in e.samples("gpushare_simulation_oom_kills_total")) == 0


def test_half_done_repartition_exports_what_exists(exporter):
    """A repartition that failed after its first instance: only that instance is exported; the
    GPU instance left without a compute instance still takes capacity."""
    e = exporter({"gpus": [{"model": "H100-80GB", "mig": [{"profile": "7g.80gb"}]}],
                  "events": [{"at": 10, "mig_reconfigure": {"gpu": 0, "fails_after": 2, "mig": [
                      {"profile": "3g.40gb", "start": 4}, {"profile": "2g.20gb", "start": 0, "compute_instance": False},
                      {"profile": "2g.20gb", "start": 2}]}}]})
    assert e.at(5)
    assert [s.labels["profile"] for s in e.samples("gpushare_mig_info")] == ["7g.80gb"]
    assert e.at(15)
    assert [s.labels["profile"] for s in e.samples("gpushare_mig_info")] == ["3g.40gb"]
    assert e.value("gpushare_mig_free_capacity", profile="2g.20gb") == 1
    assert e.value("gpushare_mig_free_capacity", profile="3g.40gb") == 0


def test_fault_on_one_mig_instance_spares_its_sibling(exporter):
    """Every call on MIG instance 1 fails for a while: its memory series go, instance 0 keeps
    its own; errors are counted; afterwards both are back."""
    e = exporter({"gpus": [{"model": "A100-80GB", "mig": [{"profile": "3g.40gb"}, {"profile": "3g.40gb"}]}],
                  "processes": [{"pid": 61, "name": "a", "gpu": 0, "mig": 0, "memory": "1GiB"},
                                {"pid": 62, "name": "b", "gpu": 0, "mig": 1, "memory": "2GiB"}],
                  "events": [{"at": 10, "fault": {"call": "*", "gpu": 0, "mig": 1, "error": "Unknown", "until": "20s"}}]})
    assert e.at(5)
    gis = {s.labels["gi"]: s.value for s in e.samples("gpushare_mig_memory_used_bytes")}
    assert sorted(gis.values()) == [GIB, 2 * GIB]
    assert e.at(12)
    assert list(e.samples("gpushare_mig_memory_used_bytes")[i].value for i in range(1)) == [GIB]
    assert e.value("gpushare_process_memory_used_bytes", pid=61) == GIB
    assert e.value("gpushare_process_memory_used_bytes", pid=62) is None
    assert sum(s.value for s in e.samples("gpushare_exporter_poll_errors_total", error="Unknown")) > 0
    assert e.at(25)
    assert sorted(s.value for s in e.samples("gpushare_mig_memory_used_bytes")) == [GIB, 2 * GIB]


def test_random_call_failures_are_counted_and_reproducible(exporter):
    """A 30 % per-call failure on power reads: some polls lack the power series, the errors
    counter says how many, and the same seed gives the same count."""
    scenario = {"seed": 3, "gpus": [{"model": "H100-80GB", "power_watts": 250}],
                "events": [{"at": 0, "fault": {"call": "nvmlDeviceGetPowerUsage", "error": "Unknown", "probability": 0.3}}]}
    counts = []
    for _ in range(2):
        e = exporter(scenario)
        missing = sum(1 for t in range(1, 41) if e.at(t) and e.value("gpushare_gpu_power_watts", gpu=0) is None)
        errors = e.value("gpushare_exporter_poll_errors_total", call="nvmlDeviceGetPowerUsage", error="Unknown")
        assert errors == missing and 4 <= missing <= 22
        assert e.value("gpushare_gpu_up", gpu=0) == 1
        counts.append(missing)
    assert counts[0] == counts[1]


def test_slow_but_successful_calls(exporter):
    """A delay-only fault shorter than --gpu-timeout only slows the poll; a longer one reports
    the GPU down (timeout) for that poll, and it is up again afterwards."""
    e = exporter({"gpus": [{"model": "L4", "power_watts": 40}],
                  "events": [{"at": 10, "fault": {"call": "nvmlDeviceGetPowerUsage", "error": "Success",
                                                   "delay": "0.05s", "until": "20s"}},
                             {"at": 20, "fault": {"call": "nvmlDeviceGetPowerUsage", "error": "Success",
                                                   "delay": "0.6s", "until": "30s"}}]}, gpu_timeout=0.3)
    assert e.at(12)
    assert e.value("gpushare_gpu_power_watts", gpu=0) == 40
    assert e.at(22)
    assert e.value("gpushare_gpu_up", gpu=0) == 0
    import time

    time.sleep(0.5)  # let the hung read finish
    assert e.at(31)
    assert e.value("gpushare_gpu_up", gpu=0) == 1
