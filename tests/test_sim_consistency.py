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
    """A scenario that sets CUDA_VISIBLE_DEVICES itself keeps it: ordinal 0 is then GPU 0, not GPU 1."""
    raw = scenario()
    raw["processes"][0]["env"]["CUDA_VISIBLE_DEVICES"] = "0,1"
    snapshot, _ = poll_at(raw, 60)
    client = next(p for p in snapshot.gpus[1].processes if p.pid == 300)
    assert client.mps_memory_limit_bytes is None


def test_product_variant_name_is_what_nvml_reports():
    """A GPU given by an NVML product-name alias reports that name, not the model's default one."""
    snapshot, _ = poll_at(scenario("NVIDIA A100 80GB PCIe"), 10)
    assert [g.name for g in snapshot.gpus] == ["NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"]
