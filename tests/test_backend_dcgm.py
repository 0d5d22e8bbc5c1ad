"""The DCGM backend on the simulated DCGM: pipe activity per GPU and per MIG GPU instance.

Scenarios are written here (not the shipped ones) with distinct, constant activity per pipe
and per instance, so each exported value can be traced to the process that produced it.
"""

from __future__ import annotations

import pytest

from dcgm_helpers import Run, names, scrape_at, value, write_scenario
from exporter.catalog import resolve_model
from exporter.snapshot import ACTIVITY_FIELDS

PIPES = ("sm_active", "sm_occupancy", "tensor_active", "fp64_active", "fp32_active", "fp16_active", "dram_active")


def mig_scenario(model: str, layout: list[tuple[str, int]], seed: float) -> dict:
    """One MIG GPU, one process per instance, every pipe at a different constant level."""
    processes = []
    for n, _ in enumerate(layout):
        levels = {pipe: round(seed + 0.07 * n + 0.03 * k, 3) for k, pipe in enumerate(PIPES)}
        processes.append({"pid": 1000 + n, "cmdline": f"python job{n}.py", "gpu": 0, "mig": n,
                          "memory": "2GiB", **levels})
    return {"name": f"{model}-mig", "duration": "30m",
            "gpus": [{"model": model, "mig": [{"profile": p, "start": s} for p, s in layout]}],
            "processes": processes}


CASES = {
    "A100-80GB": [("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3)],
    "A100-40GB": [("4g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)],
    "A30": [("2g.12gb", 0), ("1g.6gb", 2), ("1g.6gb", 3)],
}


@pytest.fixture(params=sorted(CASES))
def mig_case(request, tmp_path):
    data = mig_scenario(request.param, CASES[request.param], seed=0.11)
    return request.param, data, write_scenario(tmp_path, data)


def test_pipe_activity_per_gpu_instance_through_dcgm(mig_case):
    """A100/A30 (no GPM): every pipe of every GPU instance is exported through DCGM, with the
    value the instance's process runs at, on the GI ids and profiles NVML reports."""
    model, data, path = mig_case
    series = scrape_at(path, "dcgm", [60, 61, 62])
    infos = [dict(labels) for name, labels in series if name == "gpushare_mig_info"]
    assert len(infos) == len(CASES[model])
    for info in infos:
        process = next(p for p in data["processes"]
                       if CASES[model][p["mig"]] == (info["profile"], int(info["placement_start"])))
        for pipe in PIPES:
            got = value(series, f"gpushare_mig_{pipe}_ratio", gi=info["gi"], profile=info["profile"])
            assert got == pytest.approx(process[pipe], abs=1e-9), (model, info["gi"], pipe)
        # The graphics engine counts as busy whenever a kernel runs (the simulator's rule).
        assert value(series, "gpushare_mig_graphics_active_ratio", gi=info["gi"]) == pytest.approx(process["sm_active"])


def test_gpu_level_activity_is_the_sm_weighted_instances(mig_case):
    """GPU-level SM activity under MIG: instances weighted by their SMs over the GPU's SMs."""
    model, data, path = mig_case
    series = scrape_at(path, "dcgm", [60, 61, 62])
    gpu_model = resolve_model(model)
    expected = sum(p["sm_active"] * gpu_model.profile(CASES[model][p["mig"]][0]).sm_count
                   for p in data["processes"]) / gpu_model.sm_count
    assert value(series, "gpushare_gpu_sm_active_ratio", gpu="0") == pytest.approx(expected)


def test_no_activity_series_through_nvml_on_ampere(mig_case):
    """Through NVML the same A100/A30 has no activity series at all: absent, not zero."""
    _, _, path = mig_case
    series = scrape_at(path, "nvml", [60, 61, 62])
    assert not {n for n in names(series) if n.endswith("_active_ratio") or n.endswith("_occupancy_ratio")}
    assert "gpushare_mig_memory_used_bytes" in names(series)  # the instances are there, their activity is not


def test_labels_equal_nvml_backend(mig_case):
    """Every series both backends export carries the same label sets (gi, profile, uuid, ...)."""
    _, _, path = mig_case
    nvml = scrape_at(path, "nvml", [60, 61, 62])
    dcgm = scrape_at(path, "dcgm", [60, 61, 62])
    for family in {n for n in names(nvml)} & {n for n in names(dcgm)} - {"gpushare_exporter_build_info"}:
        if family.startswith("gpushare_exporter_"):
            continue
        labels_nvml = {ls for n, ls in nvml if n == family}
        labels_dcgm = {ls for n, ls in dcgm if n == family}
        assert labels_nvml == labels_dcgm, family
    mig_labels = {ls for n, ls in nvml if n == "gpushare_mig_memory_used_bytes"}
    assert mig_labels == {ls for n, ls in dcgm if n == "gpushare_mig_sm_active_ratio"}


def test_dcgm_gpu_ids_need_not_be_nvml_indices(tmp_path):
    """DCGM numbering GPUs differently from NVML (matched by UUID) changes no label or value."""
    data = {"name": "two", "duration": "10m",
            "gpus": [{"model": "A100-80GB", "mig": [{"profile": "7g.80gb"}]}, {"model": "A30"}],
            "processes": [{"pid": 1, "cmdline": "a", "gpu": 0, "mig": 0, "memory": "1GiB", "sm_active": 0.8},
                          {"pid": 2, "cmdline": "b", "gpu": 1, "memory": "1GiB", "sm_active": 0.3}],
            "dcgm": {"gpu_ids": [1, 0]}}
    path = write_scenario(tmp_path, data)
    series = scrape_at(path, "dcgm", [30, 31, 32])
    nvml = scrape_at(path, "nvml", [30, 31, 32])
    assert value(series, "gpushare_mig_sm_active_ratio", gpu="0", gi="0") == pytest.approx(0.8)
    assert value(series, "gpushare_gpu_sm_active_ratio", gpu="1") == pytest.approx(0.3)
    # NVML reads the energy counter every 10 s (GpuReader._energy_joules): compare a first poll.
    first = scrape_at(path, "dcgm", [30]), scrape_at(path, "nvml", [30])
    for gpu in ("0", "1"):  # device fields from DCGM land on the same GPU as NVML's
        for family in ("gpushare_gpu_power_watts", "gpushare_gpu_temperature_celsius"):
            assert value(series, family, gpu=gpu) == value(nvml, family, gpu=gpu), (family, gpu)
        energy = [value(s, "gpushare_gpu_energy_joules_total", gpu=gpu) for s in first]
        assert energy[0] == energy[1] and energy[0] > 0, gpu
    assert value(series, "gpushare_gpu_power_watts", gpu="0") != value(series, "gpushare_gpu_power_watts", gpu="1")


def test_activity_follows_a_mig_reconfigure(tmp_path):
    """After a reconfigure DCGM renumbers its GPU-instance entities: the backend maps them
    again and the new instance's activity appears under its NVML GI id."""
    data = {"name": "reconf", "duration": "10m",
            "gpus": [{"model": "A100-80GB", "mig": [{"profile": "3g.40gb", "start": 0},
                                                     {"profile": "3g.40gb", "start": 4}]}],
            "processes": [{"pid": 1, "cmdline": "a", "gpu": 0, "mig": 0, "end": "2m", "memory": "1GiB",
                           "sm_active": 0.5},
                          {"pid": 2, "cmdline": "b", "gpu": 0, "mig": 0, "start": "3m", "memory": "1GiB",
                           "sm_active": 0.9}],
            "events": [{"at": "3m", "mig_reconfigure": {"gpu": 0, "mig": [{"profile": "7g.80gb"}]}}]}
    with Run(write_scenario(tmp_path, data), "dcgm") as run:
        for t in (100, 101, 102):
            series = run.poll(t)
        assert value(series, "gpushare_mig_sm_active_ratio", gi="2") == pytest.approx(0.5)
        for t in range(180, 186):
            series = run.poll(t)
        assert value(series, "gpushare_mig_sm_active_ratio", gi="0", profile="7g.80gb") == pytest.approx(0.9)
        assert value(series, "gpushare_mig_sm_active_ratio", gi="2") is None


def test_unsupported_profiling_field_is_absent_not_zero(tmp_path):
    """A GPU without FP64 metrics (dcgm.unsupported_fields) exports no fp64 series; the rest stay."""
    data = mig_scenario("A100-80GB", [("7g.80gb", 0)], seed=0.2)
    data["dcgm"] = {"unsupported_fields": [{"gpu": 0, "fields": [1006]}]}
    series = scrape_at(write_scenario(tmp_path, data), "dcgm", [60, 61, 62])
    assert value(series, "gpushare_mig_fp64_active_ratio", gi="0") is None
    assert value(series, "gpushare_gpu_fp64_active_ratio", gpu="0") is None
    assert value(series, "gpushare_mig_tensor_active_ratio", gi="0") == pytest.approx(data["processes"][0]["tensor_active"])
    assert value(series, "gpushare_exporter_source_available", source="dcgm_profiling") == 1


def test_every_activity_field_is_named_in_the_snapshot():
    """The backend's profiling table covers every Activity field the collectors export."""
    from exporter.backend.dcgm_values import PROFILING_FIELDS

    assert set(PROFILING_FIELDS.values()) == set(ACTIVITY_FIELDS)


def test_merge_copies_equal_dataclasses_replace(tmp_path):
    """The DCGM backend's cheap copy (exporter.backend.dcgm.replace) gives what dataclasses.replace
    gives for every kind of object a poll merges (Snapshot, GpuInfo, DeviceHealth, MIG instances),
    and leaves classes it does not fit, and names that are not fields, to dataclasses.replace."""
    import dataclasses

    from exporter.backend.dcgm import replace

    path = write_scenario(tmp_path, mig_scenario("A30", CASES["A30"], seed=0.2))
    run = Run(path, "dcgm")
    try:
        run.poll(60)
        snapshot = run.snapshot
    finally:
        run.close()
    gpu = snapshot.gpus[0]
    objects = [(snapshot, {"backend": "x", "gpus": ()}), (gpu, {"dcgm_gpu_id": 7, "power_watts": 1.5}),
               (gpu.health, {"pcie_replay_errors": 3}), (gpu.mig_instances[0], {"profile": "7g.80gb"}),
               (gpu.mig_instances[0].activity, {"sm_active": 0.25, "dram_active": 0.0})]
    for obj, changes in objects:
        copy = replace(obj, **changes)
        assert copy == dataclasses.replace(obj, **changes) and copy is not obj and type(copy) is type(obj)
        assert obj != copy and vars(copy).keys() == vars(obj).keys()  # the original is untouched
    with pytest.raises(TypeError):
        replace(gpu, no_such_field=1)

    # A __post_init__ still runs on the copy: tests/test_poll_records.py (replace lives in exporter.frozen).
    @dataclasses.dataclass(frozen=True)
    class Cached:
        ratio: float

    cached = Cached(0.5)
    object.__setattr__(cached, "memo", "kept by a cached property")
    assert replace(cached, ratio=0.25) == Cached(0.25) and "memo" not in vars(replace(cached, ratio=0.25))


def test_merged_activity_equals_the_dataclass_built_one():
    """The merge's Activity (exporter.backend.dcgm.activity, built as a copy) is the one
    Activity(**activity_values(...)) builds, and clamps as min(1.0, max(0.0, v)) does, to
    the float: 0, -0.0, NaN, above 1, below 0, an int, blank and absent fields."""
    from exporter.backend.dcgm import activity
    from exporter.backend.dcgm_values import PROFILING_FIELDS, activity_values
    from exporter.snapshot import Activity

    cases = [{}, {1002: 0.5, 1004: None}, {1001: 0.0, 1002: -0.0, 1003: float("nan"), 1004: 1.0000001,
                                           1005: -0.25, 1006: 1, 1007: 1.0, 1008: 3e-9}]
    for values in cases:
        fast, built = activity(values), Activity(**activity_values(values))
        assert type(fast) is Activity and repr(fast) == repr(built) and list(vars(fast)) == list(vars(built))
        for fid, pipe in PROFILING_FIELDS.items():
            value = values.get(fid)
            expected = None if value is None else min(1.0, max(0.0, float(value)))
            assert repr(getattr(fast, pipe)) == repr(expected), (fid, value)
    assert repr(activity(cases[2])) == repr(Activity(**activity_values(cases[2])))
