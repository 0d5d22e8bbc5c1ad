"""The dcgm-exporter output (exporter.compat): rendered from what the simulator really reports
through --backend nvml and --backend dcgm, checked against dcgm-exporter's own files
(tests/fixtures/dcgm-exporter: its default-counters.csv and its Grafana dashboard)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dcgm_helpers import NV_HOSTENGINE, Run, write_scenario
from exporter.compat.dcgm_exporter import DcgmExporterOutput
from exporter.compat.dcgm_fields import DRIVER_VERSION_LABEL, FIELDS, MIB
from exporter.podshare import device_shares

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "dcgm-exporter"
BASE_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName"]
LINE = re.compile(r"^([A-Z0-9_]+)\{(.*)\} (\S+)$")

# A time-sliced H100 shared by two pods (plus a host process), an H100 one pod holds alone, and
# an A100 with two MIG instances, one pod each.
SCENARIO = {
    "name": "compat-node", "duration": "10m",
    "gpus": [{"model": "H100-80GB", "pcie_tx_bytes_per_second": "2GB", "pcie_rx_bytes_per_second": "1GB"},
             {"model": "H100-80GB"},
             {"model": "A100-80GB", "mig": [{"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]}],
    "processes": [
        {"pid": 11, "cmdline": "python serve.py", "gpu": 0, "memory": "20GiB", "sm_active": 0.5, "tensor_active": 0.3,
         "pod": {"namespace": "serving", "name": "llm-0", "container": "vllm", "resource": "nvidia.com/gpu.shared"}},
        {"pid": 12, "cmdline": "python embed.py", "gpu": 0, "memory": "6GiB", "sm_active": 0.2,
         "pod": {"namespace": "batch", "name": "embed-1", "container": "embed", "resource": "nvidia.com/gpu.shared"}},
        {"pid": 13, "cmdline": "gpu_burn 60", "gpu": 0, "memory": "2GiB", "sm_active": 0.1},
        {"pid": 21, "cmdline": "python train.py", "gpu": 1, "memory": "30GiB", "sm_active": 0.8, "tensor_active": 0.6,
         "pod": {"namespace": "research", "name": "train-0", "container": "trainer"}},
        {"pid": 31, "cmdline": "python detect.py", "gpu": 2, "mig": 0, "memory": "8GiB", "sm_active": 0.4,
         "pod": {"namespace": "vision", "name": "detect-0", "container": "detector"}},
        {"pid": 32, "cmdline": "python ocr.py", "gpu": 2, "mig": 1, "memory": "4GiB", "sm_active": 0.3,
         "pod": {"namespace": "vision", "name": "ocr-0", "container": "ocr"}},
    ],
    # DCGM numbers these GPUs its own way: the gpu label must be DCGM's gpuId under --backend dcgm.
    "dcgm": {"version": "4.6.0", "gpu_ids": [2, 0, 1]},
}


def enabled_rows() -> list[tuple[str, str]]:
    """(field, type) of every enabled row of dcgm-exporter's default-counters.csv."""
    rows = []
    with open(FIXTURES / "default-counters.csv", newline="") as handle:
        for row in csv.reader(handle):
            if row and row[0].strip() and not row[0].lstrip().startswith("#"):
                rows.append((row[0].strip(), row[1].strip()))
    return rows


def lines_of(text: str) -> list[tuple[str, list[tuple[str, str]], str]]:
    """(name, [(label, value)] in written order, value) of each sample line."""
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = LINE.match(line)
        assert match, line
        labels = re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"', match.group(2))
        out.append((match.group(1), labels, match.group(3)))
    return out


@pytest.fixture(scope="module", params=["nvml", "dcgm"])
def rendered(request, tmp_path_factory):
    """(backend, snapshot, text) at t=120 s, rendered after two polls (the NVLink rate needs two)."""
    scenario = write_scenario(tmp_path_factory.mktemp("compat"), SCENARIO)
    address = NV_HOSTENGINE if request.param == "dcgm" else None
    with Run(scenario, request.param, address=address) as run:
        output = DcgmExporterOutput("node-a")
        for t in (105, 120):  # 15 s apart: DCGM samples no faster than every 5 s
            run.poll(t)
            output.observe(run.snapshot)
        return request.param, run.snapshot, output.body.decode()


def test_every_enabled_csv_row_is_a_field_with_its_type():
    """The output covers dcgm-exporter's default counters exactly: same names, same order, same types."""
    rows = enabled_rows()
    assert (DRIVER_VERSION_LABEL, "label") in rows
    assert [(f.name, f.type) for f in FIELDS] == [r for r in rows if r[1] != "label"]


def test_text_parses_and_counters_keep_their_names(rendered):
    """Prometheus' text parser reads it; counters are typed counter without a _total suffix."""
    _, _, text = rendered
    families = {f.name: f for f in text_string_to_metric_families(text)}
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    for field in FIELDS:
        if field.name in types:
            assert types[field.name] == field.type
    assert types["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == "counter"
    assert not any(name.endswith("_total") for name in types)
    assert families  # the library parser accepted every line


def test_labels_in_dcgm_exporters_order(rendered):
    backend, snapshot, text = rendered
    for name, labels, _ in lines_of(text):
        keys = [k for k, _ in labels]
        assert keys[:5] == BASE_LABELS, (name, keys)
        rest = keys[5:]
        if rest[:2] == ["GPU_I_PROFILE", "GPU_I_ID"]:
            rest = rest[2:]
        assert rest[:2] == ["hostname", DRIVER_VERSION_LABEL], (name, keys)
        attrs = rest[2:]
        assert attrs == sorted(attrs), (name, keys)
        assert set(attrs) <= {"container", "namespace", "pod", "err_code", "err_msg"}
        values = dict(labels)
        assert values["device"] == f"nvidia{values['gpu']}"
        assert values["hostname"] == "node-a" and values[DRIVER_VERSION_LABEL] == snapshot.driver_version
    gpu_ids = {gpu.uuid: gpu.dcgm_gpu_id for gpu in snapshot.gpus}
    if backend == "dcgm":  # the gpu label is DCGM's gpuId, not the NVML index
        assert [gpu.dcgm_gpu_id for gpu in snapshot.gpus] == SCENARIO["dcgm"]["gpu_ids"]
    else:
        assert all(v is None for v in gpu_ids.values())
    for name, labels, _ in lines_of(text):
        values = dict(labels)
        gpu = next(g for g in snapshot.gpus if g.uuid == values["UUID"])
        assert values["gpu"] == str(gpu.dcgm_gpu_id if backend == "dcgm" else gpu.index)
        assert values["pci_bus_id"] == gpu.pci_bus_id and values["modelName"] == gpu.name


def _samples(text: str, name: str) -> list[tuple[dict, str]]:
    return [(dict(labels), value) for n, labels, value in lines_of(text) if n == name]


def test_units_are_dcgm_exporters(rendered):
    """MHz, mJ, MiB and percent from the snapshot's base units; doubles with six decimals."""
    _, snapshot, text = rendered
    gpu = snapshot.gpus[1]  # the H100 one pod holds: one series per field
    def one(name):
        found = [v for labels, v in _samples(text, name) if labels["UUID"] == gpu.uuid]
        assert len(found) == 1, (name, found)
        return found[0]
    assert one("DCGM_FI_DEV_SM_CLOCK") == str(round(gpu.clocks_hertz["sm"] / 1e6))
    assert one("DCGM_FI_DEV_MEM_CLOCK") == str(round(gpu.clocks_hertz["memory"] / 1e6))
    assert one("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") == str(round(gpu.energy_joules * 1000))
    assert one("DCGM_FI_DEV_FB_USED") == str(gpu.memory_used_bytes // MIB)
    assert one("DCGM_FI_DEV_FB_FREE") == str(gpu.memory_free_bytes // MIB)
    assert one("DCGM_FI_DEV_FB_RESERVED") == str(gpu.memory_reserved_bytes // MIB)
    assert one("DCGM_FI_DEV_GPU_UTIL") == str(round(gpu.utilization_ratio * 100))
    assert one("DCGM_FI_DEV_POWER_USAGE") == f"{gpu.power_watts:f}"
    assert one("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE") == f"{gpu.activity.tensor_active:f}"
    assert float(one("DCGM_FI_DEV_GPU_TEMP")) == gpu.temperature_celsius


def test_a_gpu_one_pod_holds_carries_its_pod_on_every_series(rendered):
    _, snapshot, text = rendered
    uuid = snapshot.gpus[1].uuid
    for name, labels, _ in lines_of(text):
        values = dict(labels)
        if values["UUID"] == uuid:
            assert (values.get("namespace"), values.get("pod"), values.get("container")) == \
                ("research", "train-0", "trainer"), name


def test_a_shared_gpu_gives_each_pod_its_own_memory_and_utilization(rendered):
    """Device series without pod labels; FB_USED and GPU_UTIL once more per pod, with the pod's
    own value (never the device's copied: dcgm-exporter #582/#642); power is not split."""
    _, snapshot, text = rendered
    gpu = snapshot.gpus[0]
    rows = {(r.namespace, r.pod): r for r in device_shares(gpu, snapshot.pod_devices) if r.attributed}
    assert set(rows) == {("serving", "llm-0"), ("batch", "embed-1")}
    for name in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL"):
        samples = [(labels, v) for labels, v in _samples(text, name) if labels["UUID"] == gpu.uuid]
        device = [v for labels, v in samples if "pod" not in labels]
        per_pod = {(labels["namespace"], labels["pod"]): int(v) for labels, v in samples if "pod" in labels}
        assert len(device) == 1 and set(per_pod) == set(rows)
        if name == "DCGM_FI_DEV_FB_USED":
            assert int(device[0]) == gpu.memory_used_bytes // MIB
            assert per_pod == {k: int(r.memory_bytes // MIB) for k, r in rows.items()}
        else:
            assert per_pod == {k: round(r.sm_share * 100) for k, r in rows.items()}
            assert sum(per_pod.values()) < int(device[0])  # the host process's time is nobody's pod's
    power = [labels for labels, _ in _samples(text, "DCGM_FI_DEV_POWER_USAGE") if labels["UUID"] == gpu.uuid]
    assert len(power) == 1 and "pod" not in power[0]


def test_mig_gpu_is_one_entity_per_gpu_instance(rendered):
    """Device values repeated per GPU instance with GPU_I_PROFILE/GPU_I_ID; memory per instance;
    GPU_UTIL absent (N/A on MIG); each instance's pod on its series."""
    _, snapshot, text = rendered
    gpu = snapshot.gpus[2]
    instances = {inst.gi: inst for inst in gpu.mig_instances}
    temp = [labels for labels, _ in _samples(text, "DCGM_FI_DEV_GPU_TEMP") if labels["UUID"] == gpu.uuid]
    assert sorted(int(labels["GPU_I_ID"]) for labels in temp) == sorted(instances)
    assert {labels["GPU_I_PROFILE"] for labels in temp} == {"3g.40gb"}
    used = {int(labels["GPU_I_ID"]): int(v) for labels, v in _samples(text, "DCGM_FI_DEV_FB_USED")
            if labels["UUID"] == gpu.uuid}
    assert used == {gi: inst.memory_used_bytes // MIB for gi, inst in instances.items()}
    assert not [1 for labels, _ in _samples(text, "DCGM_FI_DEV_GPU_UTIL") if labels["UUID"] == gpu.uuid]
    pods = {labels["GPU_I_ID"]: labels.get("pod") for labels in temp}
    assert sorted(pods.values()) == ["detect-0", "ocr-0"]


def test_unknown_values_give_no_series(rendered):
    """A field the board does not report (vGPU license without a vGPU driver) has no sample,
    not a 0; the output is the same bytes for the same snapshot."""
    backend, snapshot, text = rendered
    assert "DCGM_FI_DEV_VGPU_LICENSE_STATUS{" not in text
    output = DcgmExporterOutput("node-a")
    assert output.render(snapshot) == output.render(snapshot)


def test_compat_port_in_use_is_a_one_line_error(capsys, monkeypatch):
    """A taken --compat-listen port exits 2 naming the flag; the main listener is closed again."""
    import socket

    from exporter import commands
    from test_cli import FakeBackend, run_main

    backend = FakeBackend()
    monkeypatch.setattr(commands, "make_backend", lambda *a, **k: backend)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = run_main(capsys, "serve", "--listen", "127.0.0.1:0", "--compat-listen", f"127.0.0.1:{port}")
    assert code == 2 and err.startswith(f"exporter: error: --compat-listen 127.0.0.1:{port}: cannot listen")
    assert err.count("\n") == 1
    assert not backend.opened or backend.closed


@pytest.mark.parametrize("value", ["9400", "host:port", "[::1:9400"])
def test_bad_compat_listen_is_a_one_line_error(capsys, value):
    from test_cli import run_main

    code, _, err = run_main(capsys, "serve", "--compat-listen", value)
    assert code == 2 and "--compat-listen" in err and err.count("\n") == 1, err


def test_nvlink_bandwidth_is_the_byte_counters_rate_in_mb_per_second(rendered):
    """TX + RX data bytes of every link between two polls, per second, / 1e6; absent on the first
    poll and when a counter goes back (driver reload), never a made-up 0."""
    import dataclasses

    _, snapshot, _ = rendered
    gpu = snapshot.gpus[1]
    assert gpu.health.nvlinks, "the H100 SXM reports its NVLinks"

    def at(t: float, per_link: int):
        links = tuple(dataclasses.replace(link, tx_bytes=per_link, rx_bytes=2 * per_link) for link in gpu.health.nvlinks)
        changed = dataclasses.replace(gpu, health=dataclasses.replace(gpu.health, nvlinks=links))
        return dataclasses.replace(snapshot, timestamp=t, gpus=(changed,))

    def bandwidth(output, snap):
        lines = [v for n, labels, v in lines_of(output.render(snap).decode()) if n == "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"]
        return lines[0] if lines else None

    output = DcgmExporterOutput("node-a")
    links = len(gpu.health.nvlinks)
    assert bandwidth(output, at(1000.0, 10**9)) is None
    assert bandwidth(output, at(1010.0, 2 * 10**9)) == str(round(links * 3 * 10**9 / 10 / 1e6))
    assert bandwidth(output, at(1020.0, 10**6)) is None  # went back: a driver reload
    assert bandwidth(output, at(1030.0, 10**6)) == "0"
