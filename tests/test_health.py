"""GPU health (issue 21): the shipped health-node scenario through both backends.

Expected values are computed from the scenario file itself (its timelines and events), so a
change of the scenario changes the expectation; boards without a feature must export no
series for it (absent, never 0).
"""

from __future__ import annotations

import logging

import pytest

from dcgm_helpers import NV_HOSTENGINE, Run, scrape_at, value, write_scenario
from exporter.backend.choose import DcgmOptions
from exporter.collectors.health import HealthCollector
from exporter.errors import UserError
from exporter.sim.model import timeline_value
from exporter.sim.piecewise import integral
from exporter.sim.scenario import load_scenario
from exporter.snapshot import DeviceHealth, GpuInfo, NvLink, Snapshot
from tests.conftest import SCENARIOS

HEALTH_NODE = SCENARIOS / "health-node.yaml"
BACKENDS = ("nvml", "dcgm")


def truth(t: float) -> dict:
    """What GPU 0 and 1 of health-node report at virtual time t, from the scenario file."""
    spec = load_scenario(HEALTH_NODE)
    out = {}
    for gpu in (0, 1):
        g = spec.gpus[gpu]

        def at(timeline, default=0.0):
            return timeline_value(timeline, t) if timeline else default

        def flag(timeline):
            return float(bool([v for when, v in timeline if when <= t][-1])) if timeline else 0.0

        out[gpu] = {
            "replays": float(round(at(g.pcie_replays))),
            "correctable": float(round(at(g.remapped_rows_correctable))),
            "uncorrectable": float(round(at(g.remapped_rows_uncorrectable))),
            "pending": flag(g.row_remap_pending),
            "failure": flag(g.row_remap_failure),
            "power": at(g.power_violation_seconds),
            "thermal": at(g.thermal_violation_seconds),
        }
    xids = [e for e in spec.events if e.kind == "xid" and e.at <= t]
    out["last_xid"] = float(xids[-1].xid) if xids else None
    return out


@pytest.fixture(scope="module", params=BACKENDS)
def at_250(request):
    """Both backends polled every 10 s from 200 s to 250 s (the XIDs at 240 s and 250 s are seen)."""
    return request.param, scrape_at(HEALTH_NODE, request.param, list(range(200, 251, 10)))


def test_values_equal_the_scenario(at_250):
    backend, series = at_250
    expected = truth(250)
    for gpu in (0, 1):
        want = expected[gpu]
        got = {
            "replays": value(series, "gpushare_gpu_pcie_replay_errors_total", gpu=str(gpu)),
            "correctable": value(series, "gpushare_gpu_remapped_rows_total", gpu=str(gpu), kind="correctable"),
            "uncorrectable": value(series, "gpushare_gpu_remapped_rows_total", gpu=str(gpu), kind="uncorrectable"),
            "pending": value(series, "gpushare_gpu_row_remap_pending", gpu=str(gpu)),
            "failure": value(series, "gpushare_gpu_row_remap_failure", gpu=str(gpu)),
            "power": value(series, "gpushare_gpu_clock_event_duration_seconds_total", gpu=str(gpu), reason="power"),
            "thermal": value(series, "gpushare_gpu_clock_event_duration_seconds_total", gpu=str(gpu),
                             reason="thermal"),
        }
        assert got == pytest.approx(want), (backend, gpu)
    assert expected[0]["uncorrectable"] == 1 and expected[0]["pending"] == 1  # the scenario injects them
    assert value(series, "gpushare_gpu_last_xid", gpu="0") == expected["last_xid"] == 63
    assert value(series, "gpushare_gpu_last_xid", gpu="1") is None  # no XID there: absent, not 0
    # PCIe: byte counters since driver load, the integral of the scenario's bytes/s
    rx = load_scenario(HEALTH_NODE).gpus[0].pcie_rx_bytes_per_second
    assert value(series, "gpushare_gpu_pcie_receive_bytes_total", gpu="0") == int(integral(rx, 250))
    assert value(series, "gpushare_gpu_pcie_receive_bytes_total", gpu="0") == 6 * 1024**3 * (250 - 15)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pcie_rate_comes_from_two_polls_counters(backend):
    """No 20 ms nvmlDeviceGetPcieThroughput sample: the byte counters ride in the one
    field-values call, and the snapshot's bytes/s is their difference over the driver's
    timestamps: absent on the first poll, the scenario's rate after the second."""
    with Run(HEALTH_NODE, backend, interval=10.0) as run:
        run.poll(20)
        first = run.snapshot.gpus[0].health
        run.poll(40)  # the ramp (0 -> 6 GiB/s over 0..30 s) then flat: mean over 20..40 s
        second = run.snapshot.gpus[0].health
        run.poll(50)
        third = run.snapshot.gpus[0].health
        assert run.backend.nvml.caller.calls_by_name["nvmlDeviceGetPcieThroughput"] == 0
    assert first.pcie_rx_bytes_per_second is None and first.pcie_rx_bytes is not None
    rx = load_scenario(HEALTH_NODE).gpus[0].pcie_rx_bytes_per_second
    assert second.pcie_rx_bytes_per_second == pytest.approx((integral(rx, 40) - integral(rx, 20)) / 20)
    assert third.pcie_rx_bytes_per_second == pytest.approx(6 * 1024**3)
    assert third.pcie_tx_bytes_per_second == pytest.approx(2 * 1024**3)


def test_clock_event_times_ride_in_the_field_values_call():
    """The six violation times come from NVML_FI_DEV_PERF_POLICY_* in the poll's one
    field-values call: no nvmlDeviceGetViolationStatus, every policy present on every GPU."""
    with Run(HEALTH_NODE, "nvml", interval=10.0) as run:
        run.poll(240)
        run.poll(250)
        calls = run.backend.nvml.caller.calls_by_name
        assert calls["nvmlDeviceGetViolationStatus"] == 0
        assert calls["nvmlDeviceGetFieldValues"] == 2 * 4  # one per GPU per poll
        for gpu in run.snapshot.gpus:
            assert sorted(gpu.health.clock_event_seconds) == sorted(
                ["power", "thermal", "sync_boost", "board_limit", "low_utilization", "reliability"])
        assert run.snapshot.gpus[0].health.clock_event_seconds["power"] == pytest.approx(truth(250)[0]["power"])


def test_nvlink_errors_are_summed_over_links_by_type():
    """One gpushare_gpu_nvlink_errors_total per GPU and type (no link label), the sum of the
    snapshot's per-link counts; a type no link reports has no series, a GPU without links none."""
    links = (NvLink(link=0, active=True, tx_bytes=1, rx_bytes=2, errors={"replay": 2, "crc_flit": 5}),
             NvLink(link=1, active=True, tx_bytes=3, rx_bytes=4, errors={"replay": 1}),
             NvLink(link=2, active=False, tx_bytes=None, rx_bytes=None, errors={}))
    gpus = (GpuInfo(index=0, uuid="GPU-a", name="H100", pci_bus_id="0", up=True, health=DeviceHealth(nvlinks=links)),
            GpuInfo(index=1, uuid="GPU-b", name="L4", pci_bus_id="1", up=True))
    snapshot = Snapshot(timestamp=0.0, backend="nvml", driver_version="580", poll_duration_seconds=0.0, gpus=gpus)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in HealthCollector(lambda: snapshot).collect() for s in family.samples}
    errors = {dict(labels)["gpu"] + "/" + dict(labels)["type"]: v for (name, labels), v in samples.items()
              if name == "gpushare_gpu_nvlink_errors_total"}
    assert errors == {"0/replay": 3, "0/crc_flit": 5}
    assert all("link" not in dict(labels) for (name, labels) in samples if name == "gpushare_gpu_nvlink_errors_total")
    assert len([k for k in samples if k[0] == "gpushare_gpu_nvlink_up"]) == 3  # per link stays per link


def test_boards_without_a_feature_export_no_series(at_250):
    backend, series = at_250
    l4, t4 = {"gpu": "2"}, {"gpu": "3"}
    for family in ("gpushare_gpu_memory_temperature_celsius", "gpushare_gpu_remapped_rows_total",
                   "gpushare_gpu_row_remap_pending", "gpushare_gpu_row_remap_failure", "gpushare_gpu_nvlink_up",
                   "gpushare_gpu_nvlink_transmit_bytes_total", "gpushare_gpu_nvlink_errors_total",
                   "gpushare_gpu_retired_pages_total", "gpushare_gpu_vgpu_license_status"):
        assert not [k for k in series if k[0] == family and ("gpu", "2") in k[1]], (backend, family, "L4")
    # T4: page retirement (0 pages), no row remapper, no NVLink
    assert value(series, "gpushare_gpu_retired_pages_total", cause="double_bit_ecc", **t4) == 0
    assert value(series, "gpushare_gpu_remapped_rows_total", kind="correctable", **t4) is None
    assert value(series, "gpushare_gpu_nvlink_up", link="0", **t4) is None
    # H100 SXM: 18 links up; A100 PCIe: 12 links present, none up (no bridge)
    links = {gpu: [v for (n, ls), v in series.items() if n == "gpushare_gpu_nvlink_up" and ("gpu", gpu) in ls]
             for gpu in ("0", "1")}
    assert links == {"0": [1.0] * 18, "1": [0.0] * 12}
    assert value(series, "gpushare_gpu_memory_temperature_celsius", **l4) is None
    assert value(series, "gpushare_gpu_memory_temperature_celsius", gpu="0") is not None
    assert value(series, "gpushare_gpu_retired_pages_total", cause="single_bit_ecc", gpu="0") is None  # Hopper


@pytest.mark.parametrize("backend", BACKENDS)
def test_mig_with_instances_has_no_remapped_rows(backend):
    """NVML: remapped rows NotSupported while MIG has instances (header); DCGM blanks them alike."""
    series = scrape_at(SCENARIOS / "h200-mig.yaml", backend, [88, 89, 90])
    assert not [k for k in series if k[0] == "gpushare_gpu_remapped_rows_total"]
    assert value(series, "gpushare_gpu_memory_temperature_celsius", gpu="0") is not None


def test_nvlink_counters_are_read_once_a_minute_and_remaps_every_poll():
    """NVLink states and error counters (4 calls per link) are read on the first poll and then
    once a minute (docs/metrics.md); remapped rows every poll, so the rows remapped at 2m show
    at once."""
    counts, rows = [], []
    with Run(HEALTH_NODE, "nvml", interval=10.0) as run:
        for t in (100, 150, 161):
            series = run.poll(t)
            counts.append(run.backend.nvml.caller.calls_by_name["nvmlDeviceGetNvLinkErrorCounter"])
            rows.append(value(series, "gpushare_gpu_remapped_rows_total", gpu="0", kind="correctable"))
    per_read = 4 * (18 + 12)  # H100 SXM5 and A100 PCIe links; the L4 and T4 have none
    assert counts == [per_read, per_read, 2 * per_read]
    assert rows == [0, 2, 2]


def test_a_lost_gpu_keeps_its_last_xid():
    """faults-demo: XID 31 on GPU 0 at 3m, GPU 0 lost at 8m: up=0 and its last XID, nothing else."""
    with Run(SCENARIOS / "faults-demo.yaml", "nvml", interval=5.0) as run:
        for t in (170, 185, 490):
            series = run.poll(t)
    assert value(series, "gpushare_gpu_up", gpu="0") == 0
    assert value(series, "gpushare_gpu_last_xid", gpu="0") == 31
    assert value(series, "gpushare_gpu_last_xid_timestamp_seconds", gpu="0") is not None
    assert value(series, "gpushare_gpu_memory_temperature_celsius", gpu="0") is None


@pytest.mark.parametrize("bad, message", [
    ({"row_remap_pending": [["0s", 0], ["1m", 2]]}, r"row_remap_pending\[1\]\[1\]: must be 0 or 1"),
    ({"pcie_replays": [["0s", 5], ["1m", 2]]}, r"pcie_replays"),
    ({"power_violation_seconds": -1}, r"power_violation_seconds"),
])
def test_bad_health_keys_are_one_line(tmp_path, bad, message):
    path = write_scenario(tmp_path, {"name": "bad", "duration": "5m", "gpus": [{"model": "H100-80GB", **bad}]})
    with pytest.raises(UserError, match=message) as info:
        load_scenario(path)
    assert "\n" not in str(info.value)


def test_embedded_engine_rides_through_a_version_mismatch(tmp_path, caplog):
    """docs/scenarios.md: embedded engines are not affected by version_mismatch: no reconnect,
    no warning, DCGM available throughout."""
    path = write_scenario(tmp_path, {
        "name": "vm", "duration": "5m", "gpus": [{"model": "A100-80GB"}],
        "processes": [{"pid": 1, "cmdline": "python a.py", "gpu": 0, "memory": "1GiB", "sm_active": 0.5}],
        "dcgm": {"faults": [{"kind": "version_mismatch", "at": "1m", "until": "2m"}]}})
    caplog.set_level(logging.INFO, logger="exporter.backend")
    with Run(path, "dcgm", interval=5.0) as run:
        for t in range(0, 180, 5):
            series = run.poll(t)
            assert value(series, "gpushare_exporter_source_available", source="dcgm") == 1, t
    connects = [r for r in caplog.records if r.getMessage().startswith("connected to")]
    assert len(connects) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "dcgm" in r.getMessage()]


@pytest.mark.parametrize("options, period", [
    (DcgmOptions(interval=1.0), 1.0),  # embedded: the exporter is the only client
    (DcgmOptions(interval=1.0, address=NV_HOSTENGINE), 5.0),  # shared: not every second for everyone
    (DcgmOptions(interval=30.0, address=NV_HOSTENGINE), 30.0),
    (DcgmOptions(interval=1.0, address=NV_HOSTENGINE, update_interval=2.0), 2.0),
    (DcgmOptions(interval=1.0, update_interval=0.01), 0.1),  # DCGM's floor
])
def test_update_interval_asked_of_dcgm(options, period):
    assert options.watch_interval() == period


def test_shared_engine_watches_at_the_update_interval(tmp_path):
    """What the simulated nv-hostengine is asked: every watch at the derived period, not 1 s."""
    path = write_scenario(tmp_path, {"name": "w", "duration": "5m", "gpus": [{"model": "A100-80GB"}]})
    with Run(path, "dcgm", address=NV_HOSTENGINE, interval=1.0) as run:
        run.poll(0)
        run.poll(1)
        engine = run.backend.dcgm_lib._impl._standalone
        periods = {seconds for seconds, _ in engine.watches.values()}
    assert periods == {5.0}


def test_narrowed_profiling_is_one_line_for_several_gpus(tmp_path, monkeypatch, caplog):
    """Two A100s that cannot collect the eight profiling fields in one pass (-38): one warning
    naming both GPUs, not one per GPU."""
    from exporter.sim.fakedcgm import hostwatch

    original = hostwatch.WatchCalls._profiling_watch_status
    monkeypatch.setattr(hostwatch.WatchCalls, "_profiling_watch_status",
                        lambda self, gpu, profiling: -38 if len(profiling) > 4 else original(self, gpu, profiling))
    path = write_scenario(tmp_path, {"name": "two", "duration": "5m",
                                     "gpus": [{"model": "A100-80GB"}, {"model": "A100-80GB"}]})
    caplog.set_level(logging.WARNING, logger="exporter.backend")
    scrape_at(path, "dcgm", [0, 5, 10], interval=5.0)
    lines = [r.getMessage() for r in caplog.records if "(-38)" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("GPUs 0, 1: ")


def test_last_xid_is_stamped_with_the_poll_that_saw_it():
    """NVML events carry no time: the XID is stamped with the host clock of the drain that found
    it (in simulation the simulated host's clock: boot time + virtual time)."""
    with Run(HEALTH_NODE, "nvml", interval=5.0) as run:
        run.poll(235)
        run.poll(245)  # XID 48 at 4m
        series = run.poll(255)  # XID 63 at 4m10s
        epoch = run.snapshot.simulation.epoch
    assert value(series, "gpushare_gpu_last_xid", gpu="0") == 63
    assert value(series, "gpushare_gpu_last_xid_timestamp_seconds", gpu="0") == epoch + 255
    assert value(series, "gpushare_gpu_xid_errors_total", gpu="0", xid="48") == 1  # the per-code counter stays


def test_nvlinks_built_by_their_dict_are_the_records_init_builds(monkeypatch):
    """The reader fills each NvLink's __dict__ (frozen_maker's fast way, inline): the records equal
    those NvLink's own __init__ builds from the same values, field by field in field order, still
    frozen, and a poll through __init__ (as for a class frozen_maker would refuse) gives the same
    snapshot."""
    from exporter.backend import nvml_health

    def links_at(times):
        with Run(HEALTH_NODE, "nvml", interval=10.0) as run:
            for t in times:
                run.poll(t)
            return [gpu.health.nvlinks for gpu in run.snapshot.gpus]

    fast = links_at((100, 110))
    assert nvml_health._NVLINK_BY_DICT and sum(map(len, fast)) == 18 + 12
    for link in (link for links in fast for link in links):
        built = NvLink(**vars(link))
        assert type(link) is NvLink and link == built and list(vars(link)) == list(vars(built))
        with pytest.raises(AttributeError):
            link.tx_bytes = 0
    assert all(link.tx_bytes is not None and link.active is not None for links in fast for link in links)
    monkeypatch.setattr(nvml_health, "_NVLINK_BY_DICT", False)
    assert links_at((100, 110)) == fast
