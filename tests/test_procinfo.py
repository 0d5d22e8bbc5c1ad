"""/proc reading and MPS environment parsing."""

from __future__ import annotations

import pytest

from exporter.backend.procinfo import (
    DeviceRef,
    ProcFs,
    client_ordinal,
    mps_memory_limit,
    mps_thread_ratio,
    parse_mem_limits,
    parse_size,
    select_environ,
)

GIB, MIB = 2**30, 2**20
GPU0 = DeviceRef(nvml_index=0, gpu_uuid="GPU-11111111-aaaa-bbbb-cccc-000000000000")
GPU1 = DeviceRef(nvml_index=1, gpu_uuid="GPU-22222222-aaaa-bbbb-cccc-000000000000")
MIG = DeviceRef(nvml_index=1, gpu_uuid=GPU1.gpu_uuid, mig_uuid="MIG-33333333-aaaa-bbbb-cccc-000000000000", gi=2, ci=0)


@pytest.mark.parametrize("text, expected", [
    ("30G", 30 * GIB), ("512M", 512 * MIB), ("512MB", 512 * MIB), ("1g", GIB), ("2GiB", 2 * GIB),
    (" 4G ", 4 * GIB), ("64K", 64 * 1024),
])
def test_parse_size_binary_units(text, expected):
    """G and M are GiB and MiB as in CUDA; case and a B/iB suffix do not matter."""
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "G", "1024", "1.5G", "-1G", "10X"])
def test_parse_size_rejects(text):
    """A missing unit, a fraction or junk gives None rather than a guessed size."""
    assert parse_size(text) is None


def test_parse_mem_limits_list_and_skip_junk():
    """Comma-separated key=size pairs; malformed entries are skipped, good ones kept."""
    assert parse_mem_limits("0=1G,1=512M,bogus,2=,GPU-x=2G") == [("0", GIB), ("1", 512 * MIB), ("GPU-x", 2 * GIB)]


def test_limit_by_ordinal_without_visible_devices():
    """Without CUDA_VISIBLE_DEVICES an ordinal is the NVML index."""
    env = {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1G,1=512M"}
    assert mps_memory_limit(env, GPU0) == GIB
    assert mps_memory_limit(env, GPU1) == 512 * MIB


def test_limit_ordinal_through_visible_device_index():
    """CUDA_VISIBLE_DEVICES=1 makes NVML GPU 1 the client's ordinal 0."""
    env = {"CUDA_VISIBLE_DEVICES": "1", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=30G"}
    assert mps_memory_limit(env, GPU1) == 30 * GIB
    assert mps_memory_limit(env, GPU0) is None  # GPU 0 is not visible to this client


def test_limit_ordinal_through_visible_device_uuids():
    """UUID entries (full or prefix) in CUDA_VISIBLE_DEVICES are resolved to positions."""
    env = {"CUDA_VISIBLE_DEVICES": "GPU-22222222,GPU-11111111-aaaa-bbbb-cccc-000000000000",
           "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=2G,1=3G"}
    assert mps_memory_limit(env, GPU1) == 2 * GIB
    assert mps_memory_limit(env, GPU0) == 3 * GIB


def test_limit_ordinal_inside_container_view():
    """In a container, NVIDIA_VISIBLE_DEVICES decides what ordinal 0 is."""
    env = {"NVIDIA_VISIBLE_DEVICES": GPU1.gpu_uuid, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4G"}
    assert mps_memory_limit(env, GPU1) == 4 * GIB
    assert mps_memory_limit(env, GPU0) is None


def test_limit_ordinal_container_view_then_cuda_visible_devices():
    """CUDA_VISIBLE_DEVICES indices count within the container's NVIDIA_VISIBLE_DEVICES list."""
    env = {"NVIDIA_VISIBLE_DEVICES": "0,1", "CUDA_VISIBLE_DEVICES": "1", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=5G"}
    assert mps_memory_limit(env, GPU1) == 5 * GIB
    assert mps_memory_limit(env, GPU0) is None


def test_limit_container_view_all_means_host_order():
    """NVIDIA_VISIBLE_DEVICES=all leaves ordinals equal to NVML indices."""
    env = {"NVIDIA_VISIBLE_DEVICES": "all", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "1=6G"}
    assert mps_memory_limit(env, GPU1) == 6 * GIB


def test_limit_keyed_by_gpu_uuid():
    """A GPU UUID key applies to that GPU only, whatever the ordinals."""
    env = {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"{GPU1.gpu_uuid}=8G"}
    assert mps_memory_limit(env, GPU1) == 8 * GIB
    assert mps_memory_limit(env, GPU0) is None


def test_limit_on_mig_instance_by_ordinal_zero():
    """A client on a MIG instance sees it as ordinal 0, whatever the parent's NVML index."""
    env = {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=5G"}
    assert mps_memory_limit(env, MIG) == 5 * GIB


def test_limit_on_mig_instance_by_mig_uuid():
    """A MIG UUID key applies to that instance; the parent GPU UUID does not."""
    assert mps_memory_limit({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"{MIG.mig_uuid}=6G"}, MIG) == 6 * GIB
    assert mps_memory_limit({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"{GPU1.gpu_uuid}=6G"}, MIG) is None


def test_mig_ordinal_through_visible_mig_uuid_list():
    """With two MIG UUIDs visible, the instance at position 1 takes the ordinal-1 limit."""
    env = {"CUDA_VISIBLE_DEVICES": f"MIG-99999999,{MIG.mig_uuid}", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1G,1=7G"}
    assert mps_memory_limit(env, MIG) == 7 * GIB


def test_mig_legacy_visible_form():
    """The legacy MIG-GPU-<uuid>/<gi>/<ci> form names the instance."""
    env = {"CUDA_VISIBLE_DEVICES": f"MIG-{GPU1.gpu_uuid}/2/0"}
    assert client_ordinal(env, MIG) == 0
    assert client_ordinal({"CUDA_VISIBLE_DEVICES": f"MIG-{GPU1.gpu_uuid}/3/0"}, MIG) is None


def test_no_limit_variable():
    """Without the variable there is no limit (None, not 0)."""
    assert mps_memory_limit({}, GPU0) is None


@pytest.mark.parametrize("value, expected", [("25", 0.25), ("100", 1.0), ("12.5", 0.125)])
def test_thread_percentage(value, expected):
    """CUDA_MPS_ACTIVE_THREAD_PERCENTAGE becomes a ratio."""
    assert mps_thread_ratio({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": value}) == pytest.approx(expected)


@pytest.mark.parametrize("value", ["0", "150", "abc", ""])
def test_thread_percentage_invalid(value):
    """Out-of-range or unparsable percentages give None."""
    assert mps_thread_ratio({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": value}) is None


def test_select_environ_keeps_only_the_variables_the_exporter_uses():
    """Only the named variables the exporter reads are kept (others may hold secrets)."""
    env = {"CUDA_VISIBLE_DEVICES": "0", "AWS_SECRET_ACCESS_KEY": "s", "KUBERNETES_PORT": "443", "PATH": "/bin",
           "CUDA_API_TOKEN": "t", "POD_NAME_SECRET": "x", "POD_NAME": "web-0"}
    assert select_environ(env) == {"CUDA_VISIBLE_DEVICES": "0", "POD_NAME": "web-0"}


def test_procfs_reads_and_missing_pid(tmp_path):
    """comm/cmdline/environ are parsed; a missing pid gives None everywhere."""
    d = tmp_path / "42"
    d.mkdir()
    (d / "comm").write_text("python3\n")
    (d / "cmdline").write_bytes(b"python3\0-c\0print(1)\0")
    (d / "environ").write_bytes(b"A=1\0HF_TOKEN=hf_x\0CUDA_VISIBLE_DEVICES=x=y\0POD_NAME=\xff\0")
    fs = ProcFs(str(tmp_path))
    assert fs.comm(42) == "python3"
    assert fs.cmdline(42) == "python3 -c print(1)"
    assert fs.environ(42) == {"CUDA_VISIBLE_DEVICES": "x=y", "POD_NAME": "\ufffd"}  # only the variables used
    assert (fs.comm(43), fs.cmdline(43), fs.environ(43)) == (None, None, None)


def test_procfs_zombie_has_no_cmdline(tmp_path):
    """An empty cmdline (zombie or kernel thread) is None, not an empty string."""
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cmdline").write_bytes(b"")
    assert ProcFs(str(tmp_path)).cmdline(7) is None


def test_unreadable_environ_is_said_once(tmp_path, monkeypatch, caplog):
    """A permission error on other users' environ is one warning naming the fix, not silence."""
    import builtins

    from exporter.backend.procinfo import ProcFs

    for pid in (11, 12):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "environ").write_bytes(b"A=1\0")
    real_open = builtins.open

    def denied(path, *args, **kwargs):
        if str(path).endswith("environ"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", denied)
    procfs = ProcFs(str(tmp_path))
    assert procfs.environ(11) is None and procfs.environ(12) is None
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "CAP_SYS_PTRACE" in warnings[0] and "environ" in warnings[0]
