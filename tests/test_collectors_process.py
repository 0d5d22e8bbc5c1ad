"""ProcessCollector and MpsCollector: per-process and MPS series."""

from __future__ import annotations

import dataclasses

from prometheus_client import CollectorRegistry

from exporter.collectors.mps import MpsCollector
from exporter.collectors.process import ProcessCollector, process_sharing
from exporter.snapshot import ProcessInfo
from snapshot_samples import GIB, UUID0, UUID1, UUID2, mig_gpu, mps_gpu, rich_snapshot


def registry_for(snapshot, *collectors, mode: str = "pid") -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    for cls in collectors or (ProcessCollector, MpsCollector):
        registry.register(cls(lambda: snapshot, mode))
    return registry


def proc(gpu: str, uuid: str, gi: str, pid: int, name: str, sharing: str, workload: str = "",
         namespace: str = "", pod: str = "", container: str = "") -> dict[str, str]:
    return {"gpu": gpu, "uuid": uuid, "gi": gi, "pid": str(pid), "process": name, "sharing": sharing,
            "workload": workload, "namespace": namespace, "pod": pod, "container": container}


def test_process_memory_and_sharing_labels():
    """MPS clients say mps, MIG+MPS clients mig+mps, plain MIG processes mig; memory is per process."""
    registry = registry_for(rich_snapshot())
    value = registry.get_sample_value
    assert value("gpushare_process_memory_used_bytes", proc("0", UUID0, "", 201, "python3", "mps")) == 20 * GIB
    assert value("gpushare_process_memory_used_bytes", proc("1", UUID1, "2", 301, "python3", "mig+mps")) == 2 * GIB
    assert value("gpushare_process_memory_used_bytes", proc("1", UUID1, "1", 400, "train", "mig")) == 11 * GIB


def test_plain_process_takes_gpu_sharing_mode():
    """A non-MPS process outside MIG is labelled with its GPU's sharing mode."""
    gpu = dataclasses.replace(mps_gpu(), sharing="time_slicing", mps_servers=())
    plain = ProcessInfo(9, "python3", "", 0, None, None, 1)
    assert process_sharing(gpu, plain) == "time_slicing"


def test_sm_utilization_only_where_known():
    """SM utilization is exported for pid 201 and absent for 202 (None) and MIG processes."""
    registry = registry_for(rich_snapshot())
    value = registry.get_sample_value
    assert value("gpushare_process_sm_utilization_ratio", proc("0", UUID0, "", 201, "python3", "mps")) == 0.35
    assert value("gpushare_process_sm_utilization_ratio", proc("0", UUID0, "", 202, "python3", "mps")) is None


def test_no_cmdline_in_labels():
    """The command line (free text) never becomes a label value."""
    registry = registry_for(rich_snapshot())
    values = {v for f in registry.collect() for s in f.samples for v in s.labels.values()}
    assert not any("train.py" in v or " " in v for v in values)


def test_lost_gpu_processes_not_exported():
    """Processes of a GPU that is down are not exported."""
    registry = registry_for(rich_snapshot())
    assert not any(s.labels.get("uuid") == UUID2 for f in registry.collect() for s in f.samples)


def test_mps_server_info_and_client_counts():
    """One server info per MPS device; client counts per device (whole GPU, or the MIG instance)."""
    registry = registry_for(rich_snapshot(), MpsCollector)
    value = registry.get_sample_value
    assert value("gpushare_mps_server_info", {"gpu": "0", "uuid": UUID0, "gi": "", "pid": "100"}) == 1
    assert value("gpushare_mps_server_info", {"gpu": "1", "uuid": UUID1, "gi": "2", "pid": "300"}) == 1
    assert value("gpushare_mps_clients", {"gpu": "0", "uuid": UUID0, "gi": ""}) == 2
    assert value("gpushare_mps_clients", {"gpu": "1", "uuid": UUID1, "gi": "2"}) == 1
    assert value("gpushare_mps_clients", {"gpu": "1", "uuid": UUID1, "gi": "1"}) is None  # GI 1 runs no MPS


def test_server_without_clients_reports_zero():
    """An MPS server with no clients yet shows gpushare_mps_clients 0, not an absent series."""
    gpu = dataclasses.replace(mps_gpu(), processes=mps_gpu().processes[:1])
    snapshot = dataclasses.replace(rich_snapshot(), gpus=(gpu,))
    registry = registry_for(snapshot, MpsCollector)
    assert registry.get_sample_value("gpushare_mps_clients", {"gpu": "0", "uuid": UUID0, "gi": ""}) == 0


def test_client_limits_with_process_labels():
    """Client memory limits and thread ratios carry the process labels; None limits are skipped."""
    registry = registry_for(rich_snapshot(), MpsCollector)
    value = registry.get_sample_value
    p201 = proc("0", UUID0, "", 201, "python3", "mps")
    p202 = proc("0", UUID0, "", 202, "python3", "mps")
    p301 = proc("1", UUID1, "2", 301, "python3", "mig+mps")
    assert value("gpushare_mps_client_memory_limit_bytes", p201) == 40 * GIB
    assert value("gpushare_mps_client_memory_limit_bytes", p202) is None
    assert value("gpushare_mps_client_active_thread_ratio", p202) == 0.25
    assert value("gpushare_mps_client_active_thread_ratio", p301) == 1.0


def test_mps_server_is_not_a_client():
    """The server process gets no client-limit series."""
    registry = registry_for(rich_snapshot(), MpsCollector)
    pids = {
        s.labels["pid"]
        for f in registry.collect()
        if f.name.startswith("gpushare_mps_client_")
        for s in f.samples
    }
    assert pids == {"201", "202", "301"}


def test_mig_process_with_server_labelled_mig_mps():
    """The MPS server on a MIG instance counts as MIG+MPS, not plain MIG."""
    server = mig_gpu().processes[0]
    assert process_sharing(mig_gpu(), server) == "mig+mps"


def test_identity_labels_name_workload_and_pod():
    """Process and MPS-client series carry the workload label and the pod the backend resolved."""
    gpu = mps_gpu()
    client = next(p for p in gpu.processes if p.pid == 201)
    long_key = "python3 serve.py --model meta-llama/Llama-3.1-8B-Instruct --max-batch 64"
    tagged = dataclasses.replace(client, workload=long_key, namespace="inference", pod="llm-7d9f8b6c4-x2k9p",
                                 container="server")
    gpu = dataclasses.replace(gpu, processes=tuple(tagged if p.pid == 201 else p for p in gpu.processes))
    snapshot = dataclasses.replace(rich_snapshot(), gpus=(gpu,))
    value = registry_for(snapshot).get_sample_value
    from exporter.foresight.workload import workload_label

    label = workload_label(long_key)
    assert len(label) <= 48 and label != long_key  # cut, with a hash suffix
    labels = proc("0", UUID0, "", 201, "python3", "mps", label, "inference", "llm-7d9f8b6c4-x2k9p", "server")
    assert value("gpushare_process_memory_used_bytes", labels) == 20 * GIB
    assert value("gpushare_mps_client_memory_limit_bytes", labels) == 40 * GIB
