"""The exporter reports what the simulation enforces: the two must not disagree."""

from __future__ import annotations

from exporter.backend.sim import SimBackend
from exporter.sim.scenario import parse_scenario

GIB = 2**30


def scenario(model: str = "A100-80GB") -> dict:
    return {
        "name": "limits",
        "gpus": [{"model": "A100-80GB"}, {"model": model, "mps": True}],
        "processes": [
            {"pid": 300, "name": "python3", "cmdline": "python c.py", "gpu": 1, "memory": "30GiB",
             "env": {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=35G"}},
            {"pid": 301, "name": "python3", "cmdline": "python d.py", "gpu": 1,
             "memory": [["0s", "20GiB"], ["3m", "40GiB"]],
             "env": {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=36G"}},
        ],
    }


def poll_at(raw: dict, t: float):
    backend = SimBackend(parse_scenario(raw, "limits.yaml"))
    backend.open()
    try:
        backend.step_to(t)
        return backend.poll(), backend.sim.oom_events
    finally:
        backend.close()


def test_pinned_limit_on_second_gpu_is_reported_and_enforced_alike():
    """A client on GPU 1 with "0=35G" shows a 35 GiB limit, and the one crossing 36G is killed there."""
    snapshot, kills = poll_at(scenario(), 120)
    limits = {p.pid: p.mps_memory_limit_bytes for p in snapshot.gpus[1].processes if p.is_mps_client}
    assert limits == {300: 35 * GIB, 301: 36 * GIB}
    snapshot, kills = poll_at(scenario(), 170)
    assert [(k.pid, k.reason, k.capacity_bytes) for k in kills] == [(301, "mps_pinned_limit", 36 * GIB)]
    # 20 GiB + 20 GiB * t / 180 s reaches 36 GiB at t = 144 s.
    assert abs(kills[0].time - 144.0) < 1e-6
    assert 301 not in {p.pid for p in snapshot.gpus[1].processes}


def test_explicit_visible_devices_are_left_alone():
    """With CUDA_VISIBLE_DEVICES=0,1 ordinal 0 is GPU 0: no limit on GPU 1 is reported, and none is enforced."""
    raw = scenario()
    for proc in raw["processes"]:
        proc["env"]["CUDA_VISIBLE_DEVICES"] = "0,1"
    snapshot, kills = poll_at(raw, 170)
    limits = {p.pid: p.mps_memory_limit_bytes for p in snapshot.gpus[1].processes if p.is_mps_client}
    assert limits == {300: None, 301: None}
    assert kills == []  # 301 passes 36 GiB at 144 s, but "0=36G" limits GPU 0, not this GPU


def test_limit_keyed_by_device_uuid_is_enforced_and_reported():
    """A limit keyed by the GPU's UUID applies whatever the visible devices are."""
    raw = scenario()
    uuid = poll_at(raw, 1)[0].gpus[1].uuid
    raw["processes"][1]["env"] = {"CUDA_VISIBLE_DEVICES": "0,1", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"{uuid}=36G"}
    snapshot, kills = poll_at(raw, 170)
    assert [(k.pid, k.reason) for k in kills] == [(301, "mps_pinned_limit")]
    snapshot, _ = poll_at(raw, 100)
    assert next(p for p in snapshot.gpus[1].processes if p.pid == 301).mps_memory_limit_bytes == 36 * GIB


def test_product_variant_name_is_what_nvml_reports():
    """A GPU given by an NVML product-name alias reports that name, not the model's default one."""
    snapshot, _ = poll_at(scenario("NVIDIA A100 80GB PCIe"), 10)
    assert [g.name for g in snapshot.gpus] == ["NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"]
