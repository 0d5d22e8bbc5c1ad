"""The NVML choke point: not-available mapping, warn once, error counting, caching."""

from __future__ import annotations

import logging

import pynvml
import pytest

from backend_fakelib import GPU_IS_LOST, NOT_FOUND, NOT_SUPPORTED, FakeGpu, FakeNvmlLib
from exporter.backend.nvml import NA, DeviceTag, GpuLostError, Missing, NvmlCaller, NvmlCallError

NO_PERMISSION, UNKNOWN = 4, 999
TAG = DeviceTag("NVIDIA H100 80GB HBM3", "GPU-a")


@pytest.fixture
def lib(monkeypatch):
    """A one-GPU fake library installed as pynvml.nvmlLib for the test's duration."""
    fake = FakeNvmlLib([FakeGpu()])
    monkeypatch.setattr(pynvml, "nvmlLib", fake)
    pynvml._nvmlGetFunctionPointer_cache.clear()
    yield fake
    pynvml._nvmlGetFunctionPointer_cache.clear()


@pytest.fixture
def handle(lib):
    return pynvml.nvmlDeviceGetHandleByIndex(0)


def test_value_passes_through(lib, handle):
    """A successful call returns pynvml's value unchanged and counts one call."""
    caller = NvmlCaller(pynvml)
    caller.begin_poll()
    assert caller.call("nvmlDeviceGetPowerUsage", handle, gpu=TAG) == 350_000
    assert caller.calls_this_poll == 1


def test_not_supported_is_na_and_warns_once_per_model(lib, handle, caplog):
    """NotSupported gives NA and a single WARNING per (call, GPU model), however often asked."""
    lib.fail[("nvmlDeviceGetPowerUsage", None)] = NOT_SUPPORTED
    caller = NvmlCaller(pynvml)
    other = DeviceTag("NVIDIA A100-SXM4-40GB", "GPU-b")
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert caller.call("nvmlDeviceGetPowerUsage", handle, gpu=TAG) is NA
        assert caller.call("nvmlDeviceGetPowerUsage", handle, gpu=other) is NA
    messages = [r.getMessage() for r in caplog.records if "nvmlDeviceGetPowerUsage" in r.getMessage()]
    assert len(messages) == 2
    assert "not supported on NVIDIA H100 80GB HBM3; metric omitted" in messages[0]
    assert caller.errors_snapshot() == {}


def test_not_supported_answer_is_cached(lib, handle):
    """After NotSupported the call is not made again for that device (calls per poll stay minimal)."""
    lib.fail[("nvmlDeviceGetPowerUsage", None)] = NOT_SUPPORTED
    caller = NvmlCaller(pynvml)
    for _ in range(5):
        caller.call("nvmlDeviceGetPowerUsage", handle, gpu=TAG)
    assert lib.calls["nvmlDeviceGetPowerUsage"] == 1


def test_not_supported_cache_is_scoped_by_mig_mode(lib, handle):
    """A call unsupported while MIG is on is asked again once the same GPU leaves MIG mode."""
    lib.fail[("nvmlDeviceGetUtilizationRates", None)] = NOT_SUPPORTED
    caller = NvmlCaller(pynvml)
    assert caller.call("nvmlDeviceGetUtilizationRates", handle, gpu=DeviceTag("m", "GPU-a", True)) is NA
    del lib.fail[("nvmlDeviceGetUtilizationRates", None)]
    util = caller.call("nvmlDeviceGetUtilizationRates", handle, gpu=DeviceTag("m", "GPU-a", False))
    assert util.gpu == 50


def test_cache_is_scoped_by_scalar_argument_for_clocks(lib, handle):
    """An unsupported video clock does not hide the graphics clock of the same GPU."""
    caller = NvmlCaller(pynvml)
    lib.fail[("nvmlDeviceGetClockInfo", None)] = NOT_SUPPORTED
    assert caller.call("nvmlDeviceGetClockInfo", handle, pynvml.NVML_CLOCK_VIDEO, gpu=TAG) is NA
    del lib.fail[("nvmlDeviceGetClockInfo", None)]
    assert caller.call("nvmlDeviceGetClockInfo", handle, pynvml.NVML_CLOCK_GRAPHICS, gpu=TAG) == 1980


def test_function_not_found_is_na_for_every_gpu(lib, handle, caplog):
    """A symbol missing from the driver is NA, warned once, and never looked up again."""
    caller = NvmlCaller(pynvml)
    with caplog.at_level(logging.WARNING):
        assert caller.call("nvmlDeviceGetFanSpeed", handle, gpu=TAG) is NA
        assert caller.call("nvmlDeviceGetFanSpeed", handle, gpu=DeviceTag("other", "GPU-b")) is NA
    warnings = [r for r in caplog.records if "nvmlDeviceGetFanSpeed" in r.getMessage()]
    assert len(warnings) == 1 and "not found in the NVIDIA driver library" in warnings[0].getMessage()
    assert caller.calls_by_name["nvmlDeviceGetFanSpeed"] == 1


def test_library_mismatch_is_na(lib, handle):
    """NVMLLibraryMismatchError (unversioned wrapper, old driver) is treated like a missing symbol."""
    lib.absent.add("nvmlDeviceGetComputeRunningProcesses_v3")
    caller = NvmlCaller(pynvml)
    assert caller.call("nvmlDeviceGetComputeRunningProcesses", handle, gpu=TAG) is NA
    assert caller.errors_snapshot() == {}


def test_no_permission_is_na(lib, handle):
    """NoPermission (unprivileged exporter) omits the metric without counting an error."""
    lib.fail[("nvmlDeviceGetMemoryInfo_v2", None)] = NO_PERMISSION
    caller = NvmlCaller(pynvml)
    assert caller.call("nvmlDeviceGetMemoryInfo", handle, pynvml.nvmlMemory_v2, gpu=TAG) is NA
    assert caller.errors_snapshot() == {}


def test_other_errors_are_counted_and_raised(lib, handle):
    """An Unknown error raises NvmlCallError and is counted by (call, error short name) each time."""
    lib.fail[("nvmlDeviceGetPowerUsage", None)] = UNKNOWN
    caller = NvmlCaller(pynvml)
    for _ in range(2):
        with pytest.raises(NvmlCallError) as info:
            caller.call("nvmlDeviceGetPowerUsage", handle, gpu=TAG)
        assert not isinstance(info.value, GpuLostError)
    assert caller.errors_snapshot() == {("nvmlDeviceGetPowerUsage", "Unknown"): 2}
    assert lib.calls["nvmlDeviceGetPowerUsage"] == 2  # failures are not cached: retried


def test_gpu_is_lost_raises_gpu_lost(lib, handle):
    """GpuIsLost raises the GpuLostError subclass and is counted under "GpuIsLost"."""
    lib.fail[("nvmlDeviceGetPowerUsage", None)] = GPU_IS_LOST
    caller = NvmlCaller(pynvml)
    with pytest.raises(GpuLostError) as info:
        caller.call("nvmlDeviceGetPowerUsage", handle, gpu=TAG)
    assert info.value.error == "GpuIsLost"
    assert caller.errors_snapshot() == {("nvmlDeviceGetPowerUsage", "GpuIsLost"): 1}


def test_expected_error_is_missing_not_counted(lib, handle, caplog):
    """An error listed in expect= comes back as Missing, without warning or error count."""
    lib.fail[("nvmlDeviceGetPowerUsage", None)] = NOT_FOUND
    caller = NvmlCaller(pynvml)
    with caplog.at_level(logging.WARNING):
        result = caller.call("nvmlDeviceGetPowerUsage", handle, gpu=TAG, expect=("NotFound",))
    assert isinstance(result, Missing) and result.error == "NotFound" and not result
    assert caller.errors_snapshot() == {} and not caplog.records


def test_expect_takes_precedence_over_not_supported(lib, handle):
    """NotSupported listed in expect= is Missing and not cached (profile enumeration relies on it)."""
    lib.fail[("nvmlDeviceGetPowerUsage", None)] = NOT_SUPPORTED
    caller = NvmlCaller(pynvml)
    for _ in range(2):
        assert isinstance(caller.call("nvmlDeviceGetPowerUsage", handle, gpu=TAG, expect=("NotSupported",)), Missing)
    assert lib.calls["nvmlDeviceGetPowerUsage"] == 2


def test_calls_per_poll_reset(lib, handle):
    """begin_poll() restarts the per-poll count; the per-name count is cumulative."""
    caller = NvmlCaller(pynvml)
    caller.begin_poll()
    caller.call("nvmlDeviceGetPowerUsage", handle, gpu=TAG)
    caller.call("nvmlDeviceGetTemperature", handle, 0, gpu=TAG)
    assert caller.calls_this_poll == 2
    caller.begin_poll()
    caller.call("nvmlDeviceGetPowerUsage", handle, gpu=TAG)
    assert caller.calls_this_poll == 1
    assert caller.calls_by_name["nvmlDeviceGetPowerUsage"] == 2


def _outcome(read):
    """What one read gives: its value (a Missing by its error), or the error class it raised."""
    try:
        value = read()
    except NvmlCallError as exc:
        return type(exc).__name__, exc.error
    return ("Missing", value.error) if isinstance(value, Missing) else value


@pytest.mark.parametrize("code", [None, NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, UNKNOWN, GPU_IS_LOST])
def test_poll_context_calls_the_function_itself_with_calls_outcomes(lib, handle, code):
    """PollContext.get and .raw call a known function themselves (NvmlCaller.ready), not through
    NvmlCaller.call: each outcome (a value, NA, Missing for an expected error, a counted failure
    that marks the section, GpuIsLost raised) is what ``call`` gives, asked three times (an NA
    answer is then remembered: the later asks make no call, either way), counted the same."""
    from exporter.backend.nvml_types import PollContext

    def run(direct: bool):
        lib.fail.pop(("nvmlDeviceGetPowerUsage", None), None)
        caller = NvmlCaller(pynvml)
        caller.begin_poll()
        assert caller.call("nvmlDeviceGetPowerUsage", handle, gpu=TAG) == 350_000  # the function is known
        if code is None:
            lib.fail.pop(("nvmlDeviceGetPowerUsage", None), None)
        else:
            lib.fail[("nvmlDeviceGetPowerUsage", None)] = code
        made_before = lib.calls["nvmlDeviceGetPowerUsage"]
        ctx = PollContext(caller, TAG)
        outcomes = []
        for expect in ((), ("NotFound",), ()):
            if direct:
                assert (caller.ready("nvmlDeviceGetPowerUsage") is None) == (code in (NOT_SUPPORTED, NO_PERMISSION)
                                                                             and len(outcomes) > 0)
                outcomes.append((_outcome(lambda: ctx.raw("gpu", "nvmlDeviceGetPowerUsage", handle, expect=expect)),
                                 _outcome(lambda: ctx.get("gpu", "nvmlDeviceGetPowerUsage", handle, expect=expect))))
            else:  # one call for raw's ask, one for get's
                outcomes.append(tuple(_outcome(lambda: caller.call("nvmlDeviceGetPowerUsage", handle, gpu=TAG,
                                                                   expect=expect)) for _ in range(2)))
        made = lib.calls["nvmlDeviceGetPowerUsage"] - made_before
        return outcomes, made, caller.errors_snapshot(), ctx.failed, ctx.failures, caller.calls_this_poll

    direct, through_call = run(True), run(False)
    # raw and get agree with call: get turns NA into None; a failure is None, its section marked
    failures = 0
    for (raw, get), (for_raw, for_get) in zip(direct[0], through_call[0]):
        failed = isinstance(for_raw, tuple) and for_raw[0] == "NvmlCallError"
        failures += 2 * failed
        assert raw == (None if failed else for_raw)
        assert get == (None if failed or for_get is NA else for_get)
    assert direct[1:3] == through_call[1:3]  # the same calls made, the same failures counted
    assert direct[5] == through_call[5]
    assert direct[3] == ({"gpu"} if failures else set()) and direct[4] == failures
    assert failures == {UNKNOWN: 6, NOT_FOUND: 4}.get(code, 0)


def test_poll_context_asks_again_after_the_reprobe(lib, handle):
    """A call whose NA answer is remembered goes through NvmlCaller.call (no call made) until
    REPROBE_POLLS polls forget it; then PollContext calls it itself again."""
    from exporter.backend.nvml import REPROBE_POLLS
    from exporter.backend.nvml_types import PollContext

    caller = NvmlCaller(pynvml)
    ctx = PollContext(caller, TAG)
    lib.fail[("nvmlDeviceGetPowerUsage", None)] = NOT_SUPPORTED
    assert ctx.get("gpu", "nvmlDeviceGetPowerUsage", handle) is None
    assert caller.ready("nvmlDeviceGetPowerUsage") is None
    del lib.fail[("nvmlDeviceGetPowerUsage", None)]
    for _ in range(REPROBE_POLLS - 1):
        caller.begin_poll()
        assert ctx.get("gpu", "nvmlDeviceGetPowerUsage", handle) is None
    assert lib.calls["nvmlDeviceGetPowerUsage"] == 1
    caller.begin_poll()
    assert caller.ready("nvmlDeviceGetPowerUsage") is not None
    assert ctx.get("gpu", "nvmlDeviceGetPowerUsage", handle) == 350_000
    assert lib.calls["nvmlDeviceGetPowerUsage"] == 2
