"""Parity: every shipped scenario exports the same series through the DCGM and NVML backends.

For each shipped scenario, at the virtual times of tests/test_golden_metrics.py (others: a
minute in and half-way through, and inside every DCGM fault window), both backends poll at
t-2, t-1 and t (by t-1 the DCGM backend has mapped its entities and watched its fields, and
both GPM and DCGM average over [t-1, t] at t). Every sample both export must carry the same
labels and the same value; the only differences allowed are listed here, with why.
"""

from __future__ import annotations

import pytest

from dcgm_helpers import scrape_at
from exporter import __version__
from exporter.backend.nvml_device import ENERGY_READ_SECONDS
from exporter.catalog import resolve_model
from exporter.sim.scenario import load_scenario
from test_golden_metrics import CASES
from tests.conftest import SCENARIOS

ACTIVITY_SUFFIXES = ("_active_ratio", "_occupancy_ratio")
POD_SM_FAMILIES = ("gpushare_pod_sm_share_ratio", "gpushare_pod_sm_seconds_total")
BOOKED_BY_SHARE = ("gpushare_pod_energy_joules_total",)


def only_dcgm_allowed(name: str, labels: dict, gpm_uuids: set[str]) -> bool:
    """Series only the DCGM backend has."""
    if name == "gpushare_exporter_source_available":
        return labels["source"] in ("dcgm", "dcgm_profiling")  # NVML has no DCGM sources
    if name.startswith(("gpushare_gpu_", "gpushare_mig_")) and name.endswith(ACTIVITY_SUFFIXES):
        return labels["uuid"] not in gpm_uuids  # pipe activity where NVML has no GPM (pre-Hopper)
    if name in ("gpushare_namespace_sm_seconds_total", "gpushare_namespace_energy_joules_total"):
        return labels["uuid"] not in gpm_uuids  # a namespace whose only pods are such MIG pods
    if name in POD_SM_FAMILIES or name in BOOKED_BY_SHARE:
        # A pod's SM share of a MIG instance comes from the instance's SM activity, which only
        # DCGM has before Hopper; the shares (and what they book) are then DCGM's alone.
        return labels["uuid"] not in gpm_uuids and labels.get("gi", "") != ""
    return False


def booked_by_dcgm_shares(name: str, labels: dict, gpm_uuids: set[str]) -> bool:
    """SM-seconds and energy booked by SM share on a GPU with MIG pods and no GPM: DCGM knows each
    instance's SM share and books by it; through NVML the unknown shares book nothing (absent for
    such a pod, and missing from its namespace's and the unattributed row's sums)."""
    return (name in ("gpushare_pod_energy_joules_total", "gpushare_namespace_energy_joules_total",
                     "gpushare_namespace_sm_seconds_total")
            and labels["uuid"] not in gpm_uuids)


def excluded(name: str, labels: dict) -> bool:
    """Not compared at all."""
    return (name.endswith("_duration_seconds")  # measured with the real clock
            or name == "gpushare_exporter_build_info"  # its backend label differs: that is the point
            # Which calls fail depends on who makes them: under DCGM the exporter makes fewer NVML
            # calls (DCGM's fields are not read twice), and DCGM's failed values are named dcgm:<id>.
            or name == "gpushare_exporter_poll_errors_total")


def shipped_cases() -> list[tuple[str, float]]:
    cases = []
    for path in sorted(SCENARIOS.glob("*.yaml")):
        spec = load_scenario(path)
        times = set(CASES.get(path.stem, [60, (spec.duration or 600) // 2]))
        if spec.dcgm is not None:
            times |= {f.start + 30 for f in spec.dcgm.faults}
        cases += [(path.stem, t) for t in sorted(times) if not in_random_fault(spec, t)]
    return cases


def in_random_fault(spec, t: float) -> bool:
    """Inside a probabilistic NVML fault: which calls fail is drawn per call, and the DCGM
    backend makes other NVML calls than the NVML backend, so the two cannot fail alike."""
    return any(e.kind == "fault" and e.fault.probability < 1.0
               and e.at <= t and (e.fault.until is None or t - 2 < e.fault.until)
               for e in spec.events)


@pytest.mark.parametrize("scenario,at", shipped_cases())
def test_dcgm_and_nvml_export_the_same_series(scenario, at):
    path = SCENARIOS / f"{scenario}.yaml"
    spec = load_scenario(path)
    gpm_uuids = {g.uuid for g in spec.gpus if resolve_model(g.model).gpm_supported}
    times = [at - 2, at - 1, at]
    nvml = scrape_at(path, "nvml", times)
    dcgm = scrape_at(path, "dcgm", times)
    for key in sorted(set(nvml) - set(dcgm)):
        name, labels = key[0], dict(key[1])
        assert excluded(name, labels), f"only NVML exports {name}{labels}"
    for key in sorted(set(dcgm) - set(nvml)):
        name, labels = key[0], dict(key[1])
        assert excluded(name, labels) or only_dcgm_allowed(name, labels, gpm_uuids), f"only DCGM exports {name}{labels}"
    for key in sorted(set(nvml) & set(dcgm)):
        name, labels = key[0], dict(key[1])
        if excluded(name, labels) or booked_by_dcgm_shares(name, labels, gpm_uuids):
            continue
        if name.endswith("_energy_joules_total"):
            # NVML reads the counter every ENERGY_READ_SECONDS (~4 ms a read on an H100); DCGM's
            # comes with its other fields each poll: NVML's reading, and the joules booked to pods
            # and namespaces from it, may be up to that long behind.
            gpu = (("gpu", labels["gpu"]), ("uuid", labels["uuid"]))
            limit = nvml[("gpushare_gpu_power_limit_watts", gpu)]
            assert nvml[key] - 1e-6 <= dcgm[key] <= nvml[key] + limit * ENERGY_READ_SECONDS, f"{name}{labels}"
            continue
        assert dcgm[key] == pytest.approx(nvml[key], rel=1e-9, abs=1e-9), f"{name}{labels}"
    assert ("gpushare_exporter_build_info", (("backend", "dcgm"), ("version", __version__))) in dcgm


def test_a100_activity_only_through_dcgm():
    """The shipped A100 MIG scenario: per-instance pipe activity through DCGM, none through NVML."""
    path = SCENARIOS / "a100-40gb-two-3g.yaml"
    times = [298, 299, 300]
    nvml = scrape_at(path, "nvml", times)
    dcgm = scrape_at(path, "dcgm", times)
    tensor = {dict(k[1])["gi"]: v for k, v in dcgm.items() if k[0] == "gpushare_mig_tensor_active_ratio"}
    assert tensor == {"1": pytest.approx(0.37), "2": pytest.approx(0.41)}  # the two Triton servers' tensor load
    assert not [k for k in nvml if k[0].startswith("gpushare_mig_") and k[0].endswith("_active_ratio")]
