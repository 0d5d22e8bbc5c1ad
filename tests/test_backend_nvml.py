"""NvmlBackend on a small fake libnvidia-ml: units, failures, timeouts, processes, XIDs."""

from __future__ import annotations

import threading
from collections import Counter

import pynvml
import pytest

from backend_fakelib import GPU_IS_LOST, FakeGpu, FakeNvmlLib, FakeProc
from exporter.backend.base import Backend
from exporter.backend.nvml import NvmlBackend, NvmlUnavailable
from exporter.errors import NoGpuError, UserError

GIB, MIB = 2**30, 2**20
UNKNOWN, DRIVER_NOT_LOADED = 999, 9


@pytest.fixture
def install(monkeypatch):
    """Install a FakeNvmlLib as pynvml.nvmlLib; restored after the test."""

    def _install(lib):
        monkeypatch.setattr(pynvml, "nvmlLib", lib)
        pynvml._nvmlGetFunctionPointer_cache.clear()
        return lib

    yield _install
    pynvml._nvmlGetFunctionPointer_cache.clear()


def two_gpus() -> FakeNvmlLib:
    return FakeNvmlLib([FakeGpu(uuid="GPU-aaaa", bus_id=b"00000000:01:00.0"),
                        FakeGpu(uuid="GPU-bbbb", bus_id=b"00000000:02:00.0", power_mw=100_500)])


def opened(lib, install, **kwargs) -> NvmlBackend:
    install(lib)
    backend = NvmlBackend(pynvml, **kwargs)
    backend.open()
    return backend


def write_proc(root, pid, *, comm="", argv=(), env=None):
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "comm").write_text(comm + "\n")
    (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in (env or {}).items()))


def test_backend_satisfies_protocol():
    """NvmlBackend is a Backend named "nvml"."""
    assert isinstance(NvmlBackend(pynvml), Backend) and NvmlBackend.name == "nvml"


def test_units_are_converted_to_base_units(install):
    """mW -> W, mJ -> J, MHz -> Hz, percent -> ratio; memory stays bytes."""
    gpu = FakeGpu(power_mw=350_250, limit_mw=700_000, energy_mj=12_345_678, temp_c=61,
                  clocks_mhz=(1980, 1755, 2619, 1545), util_gpu=75, util_mem=20)
    backend = opened(FakeNvmlLib([gpu]), install)
    info = backend.poll().gpus[0]
    assert info.up and info.error is None
    assert info.power_watts == pytest.approx(350.25)
    assert info.power_limit_watts == pytest.approx(700.0)
    assert info.energy_joules == pytest.approx(12_345.678)
    assert info.temperature_celsius == 61.0
    assert info.clocks_hertz == {"graphics": 1980e6, "sm": 1755e6, "memory": 2619e6, "video": 1545e6}
    assert info.utilization_ratio == pytest.approx(0.75)
    assert info.memory_utilization_ratio == pytest.approx(0.20)


def test_identity_is_read(install):
    """Name, UUID, index and PCI bus id (bytes in the struct) come back as strings."""
    backend = opened(two_gpus(), install)
    snap = backend.poll()
    assert [g.index for g in snap.gpus] == [0, 1]
    assert [g.uuid for g in snap.gpus] == ["GPU-aaaa", "GPU-bbbb"]
    assert snap.gpus[1].pci_bus_id == "00000000:02:00.0"
    assert snap.gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert snap.driver_version == "580.95.05" and snap.backend == "nvml"


def test_memory_v2_reports_reserved_separately(install):
    """With the v2 struct, used excludes the reserved memory, which has its own field."""
    gpu = FakeGpu(total=80 * GIB, reserved=512 * MIB, used=10 * GIB)
    info = opened(FakeNvmlLib([gpu]), install).poll().gpus[0]
    assert (info.memory_total_bytes, info.memory_used_bytes) == (80 * GIB, 10 * GIB)
    assert info.memory_reserved_bytes == 512 * MIB
    assert info.memory_free_bytes == 80 * GIB - 512 * MIB - 10 * GIB


def test_memory_falls_back_to_v1(install):
    """Without nvmlDeviceGetMemoryInfo_v2 the v1 values are used and reserved is unknown."""
    lib = FakeNvmlLib([FakeGpu(total=80 * GIB, reserved=512 * MIB, used=10 * GIB)])
    lib.absent.add("nvmlDeviceGetMemoryInfo_v2")
    info = opened(lib, install).poll().gpus[0]
    assert info.memory_used_bytes == 10 * GIB + 512 * MIB  # v1 used = reserved + allocated
    assert info.memory_reserved_bytes is None


def test_clock_event_reasons_limited_to_supported(install):
    """Only supported reasons appear; each is True when its bit is set in the current mask."""
    gpu = FakeGpu(reasons_supported=0x1 | 0x4 | 0x40, reasons_current=0x4)
    info = opened(FakeNvmlLib([gpu]), install).poll().gpus[0]
    assert info.clock_event_reasons == {"gpu_idle": False, "sw_power_cap": True, "hw_thermal_slowdown": False}


def test_ecc_and_compute_mode(install):
    """Volatile ECC totals are exported by kind; compute mode 3 is exclusive_process."""
    info = opened(FakeNvmlLib([FakeGpu(ecc=(7, 2), compute_mode=3)]), install).poll().gpus[0]
    assert info.ecc_errors == {"corrected": 7, "uncorrected": 2}
    assert info.compute_mode == "exclusive_process"
    assert info.mig_mode is None  # GetMigMode NotSupported: not MIG-capable


def test_failing_call_marks_section_and_counts(install):
    """An Unknown error on power leaves power None, fails the gpu section, and is counted."""
    lib = two_gpus()
    lib.fail[("nvmlDeviceGetPowerUsage", 0)] = UNKNOWN
    snap = opened(lib, install).poll()
    assert snap.gpus[0].up and snap.gpus[0].power_watts is None
    assert snap.gpus[0].temperature_celsius == 61.0  # the rest of the GPU is still read
    assert snap.gpus[1].power_watts == pytest.approx(100.5)
    assert snap.section_ok == {"gpu": False, "mig": True, "process": True, "mps": True}
    assert snap.call_errors == {("nvmlDeviceGetPowerUsage", "Unknown"): 1}


def test_gpu_lost_is_down_for_the_poll_and_recovers(install):
    """GpuIsLost marks only that GPU down (identity kept); it is read again once it answers."""
    lib = two_gpus()
    backend = opened(lib, install)
    backend.poll()
    lib.fail[("nvmlDeviceGetPowerUsage", 1)] = GPU_IS_LOST
    snap = backend.poll()
    lost = snap.gpus[1]
    assert (lost.up, lost.error, lost.uuid, lost.pci_bus_id) == (False, "GpuIsLost", "GPU-bbbb", "00000000:02:00.0")
    assert snap.gpus[0].up
    assert snap.call_errors[("nvmlDeviceGetPowerUsage", "GpuIsLost")] == 1
    assert snap.section_ok["gpu"] is False
    del lib.fail[("nvmlDeviceGetPowerUsage", 1)]
    again = backend.poll()
    assert again.gpus[1].up and again.section_ok["gpu"] is True


def test_hung_gpu_times_out_without_piling_up_threads(install):
    """A GPU stuck in a call is down with error "timeout"; the others are read; no thread or read is added."""
    lib = two_gpus()
    release = threading.Event()
    lib.block[1] = release
    backend = opened(lib, install, gpu_timeout=0.2)
    threads_at_open = threading.active_count()
    try:
        first = backend.poll()
        assert first.gpus[0].up and first.gpus[0].power_watts == pytest.approx(350.0)
        assert (first.gpus[1].up, first.gpus[1].error, first.gpus[1].uuid) == (False, "timeout", "GPU-bbbb")
        power_reads = lib.calls["nvmlDeviceGetPowerUsage"]
        second = backend.poll()
        assert second.gpus[1].error == "timeout" and second.gpus[0].up
        assert threading.active_count() == threads_at_open  # workers are reused, never added per poll
        # GPU 0's read only: the second poll did not start another read of GPU 1
        assert lib.calls["nvmlDeviceGetPowerUsage"] == power_reads + 1
        assert first.section_ok["gpu"] is False
    finally:
        release.set()
    assert backend._workers[1].done.wait(5)
    del lib.block[1]
    assert backend.poll().gpus[1].up
    backend.close()


def test_gpus_after_a_hung_one_are_read_in_the_same_poll(install):
    """The GPUs of a poll are read on one reader thread: when GPU 1 of 3 hangs, GPU 2 is handed
    to another reader and read in that poll; later polls read the others without re-queueing
    the hung GPU, with no thread added; once the call returns every GPU is read again."""
    lib = FakeNvmlLib([FakeGpu(uuid="GPU-aaaa"), FakeGpu(uuid="GPU-bbbb"), FakeGpu(uuid="GPU-cccc", power_mw=200_000)])
    release = threading.Event()
    lib.block[1] = release
    backend = opened(lib, install, gpu_timeout=0.2)
    threads_at_open = threading.active_count()
    try:
        first = backend.poll()
        assert [(g.up, g.error) for g in first.gpus] == [(True, None), (False, "timeout"), (True, None)]
        assert first.gpus[2].power_watts == pytest.approx(200.0)
        for _ in range(3):
            again = backend.poll()
            assert [(g.up, g.error) for g in again.gpus] == [(True, None), (False, "timeout"), (True, None)]
        assert threading.active_count() == threads_at_open
    finally:
        release.set()
    assert backend._workers[1].done.wait(5)
    del lib.block[1]
    assert all(g.up for g in backend.poll().gpus)
    assert threading.active_count() <= threads_at_open
    backend.close()


def test_xid_events_counted_cumulatively(install):
    """XIDs drained each poll add to per-code counts kept since start."""
    lib = FakeNvmlLib([FakeGpu(xids=[79, 48, 79])])
    backend = opened(lib, install)
    assert backend.poll().gpus[0].xid_errors == {79: 2, 48: 1}
    lib.gpus[0].xids.append(48)
    assert backend.poll().gpus[0].xid_errors == {79: 2, 48: 2}


def test_steady_state_poll_makes_only_needed_calls(install):
    """After the first poll, an idle whole GPU costs exactly one call per value read."""
    lib = FakeNvmlLib([FakeGpu()])
    backend = opened(lib, install)
    backend.poll()
    before = Counter(lib.calls)
    backend.poll()
    made = Counter(lib.calls)
    made.subtract(before)
    expected = {
        "nvmlEventSetWait_v2": 1,  # drain: first answer is Timeout
        "nvmlDeviceGetMemoryInfo_v2": 1, "nvmlDeviceGetUtilizationRates": 1, "nvmlDeviceGetComputeMode": 1,
        "nvmlDeviceGetPowerUsage": 1, "nvmlDeviceGetEnforcedPowerLimit": 1, "nvmlDeviceGetTemperature": 1,
        "nvmlDeviceGetClockInfo": 4, "nvmlDeviceGetCurrentClocksEventReasons": 1,
        "nvmlDeviceGetTotalEccErrors": 2, "nvmlDeviceGetComputeRunningProcesses_v3": 1,
    }  # MIG mode (NotSupported), supported reasons, identity and GPM support are cached; the
    # energy counter was read by the first poll, under ENERGY_READ_SECONDS ago
    assert {k: v for k, v in made.items() if v} == expected
    assert backend.calls_last_poll == sum(expected.values())


def test_energy_is_read_every_ten_seconds_and_held_in_between(install):
    """One energy read costs ~4 ms of CPU on a real H100: the counter is read when 10 s have
    passed on the backend's clock and the last reading is exported in between."""
    now = [1000.0]
    gpu = FakeGpu()
    lib = FakeNvmlLib([gpu])
    backend = opened(lib, install, clock=lambda: now[0])

    def poll():
        before = lib.calls["nvmlDeviceGetTotalEnergyConsumption"]
        joules = backend.poll().gpus[0].energy_joules
        return joules, lib.calls["nvmlDeviceGetTotalEnergyConsumption"] - before

    assert poll() == (gpu.energy_mj / 1000, 1)
    gpu.energy_mj += 5_000
    now[0] += 9.9
    assert poll() == (12_345.678, 0)  # held: the reading of 9.9 s ago
    now[0] += 0.1
    assert poll() == (12_350.678, 1)
    now[0] -= 60  # the clock stepped back: read again rather than hold for a minute
    gpu.energy_mj += 1_000
    assert poll() == (12_351.678, 1)
    now[0] += 10
    lib.fail[("nvmlDeviceGetTotalEnergyConsumption", None)] = pynvml.NVML_ERROR_UNKNOWN
    assert poll() == (None, 1)  # a failed read: absent, not the old reading
    del lib.fail[("nvmlDeviceGetTotalEnergyConsumption", None)]
    now[0] += 1
    assert poll() == (12_351.678, 1)  # and asked again at the next poll


def test_sharing_modes_from_process_count(install, tmp_path):
    """0 processes -> idle, 1 -> exclusive, 2 -> time_slicing."""
    lib = FakeNvmlLib([FakeGpu(uuid="GPU-a"), FakeGpu(uuid="GPU-b", procs=[FakeProc(10, GIB, "python3")]),
                       FakeGpu(uuid="GPU-c", procs=[FakeProc(11, GIB, "a"), FakeProc(12, GIB, "b")])])
    snap = opened(lib, install, procfs_root=str(tmp_path)).poll()
    assert [g.sharing for g in snap.gpus] == ["idle", "exclusive", "time_slicing"]


def test_process_metadata_and_vanished_process(install, tmp_path):
    """Name is the basename of NVML's name; a process gone from NVML and /proc is kept with its memory."""
    write_proc(tmp_path, 10, comm="python3", argv=["/usr/bin/python3", "train.py", "--lr", "1e-4"],
               env={"CUDA_VISIBLE_DEVICES": "0", "SECRET_TOKEN": "x", "KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    lib = FakeNvmlLib([FakeGpu(procs=[FakeProc(10, 3 * GIB, "/usr/bin/python3"), FakeProc(11, 2 * GIB, "")])])
    procs = opened(lib, install, procfs_root=str(tmp_path)).poll().gpus[0].processes
    assert [p.pid for p in procs] == [10, 11]
    alive, gone = procs
    assert (alive.name, alive.cmdline) == ("python3", "/usr/bin/python3 train.py --lr 1e-4")
    assert alive.environ == {"CUDA_VISIBLE_DEVICES": "0"}  # only the variables the exporter uses
    assert (alive.gi, alive.ci, alive.gpu_index, alive.used_memory_bytes) == (None, None, 0, 3 * GIB)
    assert (gone.name, gone.cmdline, gone.used_memory_bytes) == ("", "", 2 * GIB)
    assert alive.sm_utilization_ratio is None  # NotFound: no utilization samples


def test_name_falls_back_to_proc_comm(install, tmp_path):
    """When NVML cannot name a pid but /proc can, /proc/<pid>/comm is used."""
    write_proc(tmp_path, 20, comm="worker", argv=["./worker"])
    lib = FakeNvmlLib([FakeGpu(procs=[FakeProc(20, GIB, "")])])
    assert opened(lib, install, procfs_root=str(tmp_path)).poll().gpus[0].processes[0].name == "worker"


def test_mps_roles_limits_and_sharing(install, tmp_path):
    """The MPS server is flagged, clients get their env limits for this device, sharing is mps."""
    write_proc(tmp_path, 30, argv=["python3"], env={"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=30G",
                                                    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25"})
    server = FakeProc(40, 60 * MIB, "nvidia-cuda-mps-server")
    client = FakeProc(30, 5 * GIB, "python3", mps=True)
    lib = FakeNvmlLib([FakeGpu(procs=[client, server])])
    info = opened(lib, install, procfs_root=str(tmp_path)).poll().gpus[0]
    by_pid = {p.pid: p for p in info.processes}
    assert by_pid[40].is_mps_server and not by_pid[40].is_mps_client
    assert by_pid[30].is_mps_client and not by_pid[30].is_mps_server
    assert by_pid[30].mps_memory_limit_bytes == 30 * GIB
    assert by_pid[30].mps_active_thread_ratio == pytest.approx(0.25)
    assert [(s.pid, s.gi) for s in info.mps_servers] == [(40, None)]
    assert info.sharing == "mps"


def test_mps_list_not_asked_without_server(install, tmp_path):
    """Without an MPS server on the device the MPS process list is not queried."""
    lib = FakeNvmlLib([FakeGpu(procs=[FakeProc(10, GIB, "python3")])])
    opened(lib, install, procfs_root=str(tmp_path)).poll()
    assert lib.calls["nvmlDeviceGetMPSComputeRunningProcesses_v3"] == 0


def test_open_without_library_is_one_line_no_gpu_error(monkeypatch):
    """No libnvidia-ml.so.1: open() raises NoGpuError (a UserError) with a one-line reason."""

    def no_library(*args, **kwargs):
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "CDLL", no_library)
    with pytest.raises(NoGpuError) as info:
        NvmlBackend(pynvml).open()
    assert isinstance(info.value, UserError)
    assert "libnvidia-ml.so.1 not found" in str(info.value) and "\n" not in str(info.value)


def test_open_driver_not_loaded_is_retried_by_each_poll(install):
    """DriverNotLoaded from nvmlInit does not end the exporter: each poll fails with that
    reason (counted as an nvmlInit error) until the driver is loaded, then GPUs appear."""
    lib = FakeNvmlLib([FakeGpu()])
    lib.fail[("nvmlInitWithFlags", None)] = DRIVER_NOT_LOADED
    install(lib)
    backend = NvmlBackend(pynvml)
    backend.open()
    with pytest.raises(NvmlUnavailable, match="kernel driver is not loaded"):
        backend.poll()
    del lib.fail[("nvmlInitWithFlags", None)]
    snapshot = backend.poll()
    assert [g.up for g in snapshot.gpus] == [True]
    assert snapshot.call_errors[("nvmlInit", "DriverNotLoaded")] == 2


def test_open_with_zero_gpus(install):
    """A driver that sees no GPU is a NoGpuError, and NVML is shut down again."""
    lib = install(FakeNvmlLib([]))
    with pytest.raises(NoGpuError, match="no NVIDIA GPU"):
        NvmlBackend(pynvml).open()
    assert lib.calls["nvmlShutdown"] == 1


def test_close_frees_event_sets_and_is_idempotent(install):
    """close() frees the XID event set, shuts NVML down once, and may be called twice."""
    lib = FakeNvmlLib([FakeGpu()])
    backend = opened(lib, install)
    backend.poll()
    backend.close()
    backend.close()
    assert lib.calls["nvmlEventSetFree"] == 1 and lib.calls["nvmlShutdown"] == 1


def test_poll_before_open_is_an_error():
    """Polling an unopened backend is a programming error, not a silent empty snapshot."""
    with pytest.raises(RuntimeError):
        NvmlBackend(pynvml).poll()


def test_pci_gpu_count_reads_nvidia_display_and_3d_controllers(tmp_path):
    """/sys/bus/pci/devices: NVIDIA (0x10de) VGA or 3D controllers count; audio functions,
    other vendors and unreadable entries do not; no /sys at all is None (unknown)."""
    from exporter.backend.nvml import pci_gpu_count

    for name, vendor, pci_class in [("0000:18:00.0", "0x10de", "0x030200"), ("0000:3b:00.0", "0x10de", "0x030000"),
                                    ("0000:3b:00.1", "0x10de", "0x040300"), ("0000:00:02.0", "0x8086", "0x030000")]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "vendor").write_text(vendor + "\n")
        (tmp_path / name / "class").write_text(pci_class + "\n")
    (tmp_path / "0000:00:1f.0").mkdir()  # no vendor file
    assert pci_gpu_count(str(tmp_path)) == 2
    assert pci_gpu_count(str(tmp_path / "missing")) is None
