"""First-run bases (exporter.foresight.basis): declared sizes, the LLM rule, trends, scaling, calibration."""

from __future__ import annotations

import pytest

from exporter.foresight.basis import (
    recent_fall,
    calibrated_profile,
    declared_bytes,
    is_steady,
    scaled_profile,
    trend,
    workload_of,
)
from exporter.foresight.profiles import WorkloadProfile
from exporter.sizing import rule_sized_bytes

GiB = 2**30


def profile(key: str, peak: int, device: int, timeline=None) -> WorkloadProfile:
    timeline = timeline or ((0.0, peak // 2), (100.0, peak))
    return WorkloadProfile(key, peak, 100.0, 200.0, 1, 40, timeline, 0.0, device_bytes=device)


@pytest.mark.parametrize("value,expected", [
    ("30GiB", 30 * GiB),
    ("8B fp16", rule_sized_bytes(8e9, "fp16")),
    ("70b int4", rule_sized_bytes(70e9, "int4")),
    ("350M", rule_sized_bytes(350e6, "fp16")),  # precision defaults to half
    ("8B", rule_sized_bytes(8e9, "fp16")),  # eight billion parameters, not eight bytes
    ("2GB", 2 * 10**9),
    ("lots", None),  # unusable: ignored, not an error that stops the exporter
    ("8B fp13", None),
    ("", None),
])
def test_declared_size_from_the_environment(value, expected):
    assert declared_bytes({"GPUSHARE_EXPECTED_PEAK": value}) == expected


def test_no_declaration_without_the_variable():
    """Model names in command lines are not read: only what the process declares counts."""
    assert declared_bytes({}) is None


def test_profile_keys_name_their_workload():
    assert workload_of("python3 serve.py@79GiB") == "python3 serve.py"
    assert workload_of("k8s:ml/web/server@10GiB") == "k8s:ml/web/server"
    assert workload_of("email me@host") == "email me@host"  # not a device size


def test_scaled_keeps_bytes_unless_the_workload_sizes_itself():
    """33 of 79 GiB needs its bytes anywhere; 72 of 79 GiB (vLLM style) takes its share of the device."""
    needs = scaled_profile([profile("job@79GiB", 33 * GiB, 79 * GiB)], 40 * GiB)
    assert needs.peak_bytes == 33 * GiB
    sizes_itself = scaled_profile([profile("srv@79GiB", 72 * GiB, 79 * GiB)], 40 * GiB)
    assert sizes_itself.peak_bytes == int(72 * GiB * 40 / 79)
    too_big = scaled_profile([profile("job@79GiB", 50 * GiB, 79 * GiB)], 20 * GiB)  # running in 20 GiB: must scale
    assert too_big.peak_bytes == int(50 * GiB * 20 / 79)


def test_scaled_takes_the_nearest_size():
    candidates = [profile("j@10GiB", 5 * GiB, 10 * GiB), profile("j@79GiB", 30 * GiB, 79 * GiB)]
    assert scaled_profile(candidates, 70 * GiB).peak_bytes == 30 * GiB


def test_calibration_rescales_to_the_level_the_run_holds():
    """A run steady at 2.7 GiB where its scaled profile holds 5.5 GiB is half its size, peak included."""
    scaled = profile("d@20GiB", 10 * GiB, 20 * GiB, ((0.0, 5 * GiB), (300.0, 10 * GiB)))
    calibrated = calibrated_profile(scaled, int(2.5 * GiB), 150.0)
    assert calibrated.peak_bytes == 5 * GiB and calibrated.timeline[-1] == (300.0, 5 * GiB)
    assert calibrated_profile(scaled, 1 * GiB, 150.0) is None  # a fifth: another kind of run


def test_loading_then_plateau_is_no_trend_and_a_leak_is():
    load = [(float(a), min(a, 60) * GiB // 6) for a in range(0, 400, 5)]  # 10 GiB by 60 s, then flat
    assert trend(load, 395.0) == (0.0, 0.0)
    leak = [(float(a), 5 * GiB + a * 2**20) for a in range(0, 400, 5)]  # 1 MiB/s for ever
    slope, horizon = trend(leak, 395.0)
    assert slope == pytest.approx(2**20, rel=0.05) and horizon == pytest.approx(395.0 / 4)


def test_a_spiky_server_is_no_trend():
    """Spikes in the newest third raise no floor."""
    spiky = [(float(a), 8 * GiB if a % 60 < 10 else 4 * GiB) for a in range(0, 400, 5)]
    assert trend(spiky, 395.0) == (0.0, 0.0)


def test_a_leak_never_falls_and_a_server_in_load_waves_gives_memory_back():
    """recent_fall: (least held, largest fall below an earlier high) over the last 5 minutes,
    loading left out. A leak or a plateau has fallen 0; load waves have fallen by their depth."""
    leak = [(float(a), 5 * GiB + a * 2**20) for a in range(0, 400, 5)]
    assert recent_fall(leak, 395.0)[1] == 0
    waves = [(float(a), 8 * GiB if (a // 60) % 2 else 4 * GiB) for a in range(0, 400, 5)]
    assert recent_fall(waves, 395.0) == (4 * GiB, 4 * GiB)
    assert recent_fall([(0.0, GiB), (30.0, 2 * GiB)], 30.0) is None  # still loading


def test_steady_needs_30_s_level_within_2_percent():
    flat = [(float(a), 10 * GiB) for a in range(0, 100, 5)]
    assert is_steady(flat, 10 * GiB)
    assert not is_steady(flat[:5], 10 * GiB)  # 20 s of samples: not enough
    rising = flat + [(100.0, 11 * GiB)]
    assert not is_steady(rising, 11 * GiB)
