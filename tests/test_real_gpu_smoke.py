"""bench/real_gpu_smoke.py's comparison machinery, exercised without a GPU.

The "real" side is played by the simulator installed as a given board: the smoke check's
own mirror of that board (built from the NVML name it reads) must then agree on every
static probe. This proves the check runs end to end, covers the functions issue 12 lists,
and that the mirror picks the right variant from a real GPU's name. The probes only read.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pynvml
import pytest

from exporter.sim import Simulation
from exporter.sim.scenario import parse_scenario

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import real_gpu_probe as probe  # noqa: E402
import real_gpu_smoke as smoke  # noqa: E402

ISSUE_12_LIST = ("nvmlDeviceGetBAR1MemoryInfo", "nvmlDeviceGetEncoderUtilization", "nvmlDeviceGetDecoderUtilization",
                 "nvmlDeviceGetFanSpeed", "nvmlDeviceGetPerformanceState", "nvmlDeviceGetPersistenceMode",
                 "nvmlDeviceGetDisplayActive", "nvmlDeviceGetDisplayMode", "nvmlDeviceGetDriverModel",
                 "nvmlDeviceGetPcieThroughput", "nvmlDeviceGetFieldValues", "nvmlDeviceGetConfComputeMemSizeInfo")


def played(gpu: dict) -> tuple[str, dict]:
    """The "real" side played by the simulator as one GPU ``gpu``: (its NVML name, its answers)."""
    sim = Simulation(parse_scenario({"name": "played", "gpus": [gpu]}, "played.yaml"))
    sim.install()
    try:
        pynvml.nvmlInit()
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        real = smoke.real_answers(pynvml, 0)
        pynvml.nvmlShutdown()
    finally:
        sim.close()
    return name, real


def test_probes_cover_the_issue_list_and_only_read():
    """Every function issue 12 names is probed, and every probe is a Get/Query call."""
    called = {fn for _, fn, _, _ in probe.GPU_PROBES + probe.MIG_PROBES}
    assert set(ISSUE_12_LIST) <= called
    assert all(fn.startswith(("nvmlDeviceGet", "nvmlGpmQuery")) for fn in called)


@pytest.mark.parametrize("gpu", [
    {"model": "NVIDIA H100 PCIe"},
    {"model": "A100-40GB", "variant": "PCIe", "mig": [{"profile": "3g.20gb"}, {"profile": "2g.10gb"}]},
    {"model": "H200", "mig": [{"profile": "3g.71gb"}]},
    {"model": "T4"},
])
def test_a_board_compared_with_its_own_mirror_has_no_difference(gpu, capsys):
    """Playing the real GPU with the simulator: the mirror reads back the same board."""
    name, real = played(gpu)
    fake = smoke.fake_answers(name, real["layout"])
    assert isinstance(fake, dict), fake
    assert smoke.compare(real, fake) == 0, capsys.readouterr().out
    assert real["gpu"]["PCI device id"][0] == "ok" and len(real["gpu"]) == len(probe.GPU_PROBES)
    if "mig" in gpu:
        assert real["layout"] and real["mig"]["MIG: BAR1 total"][0] == "ok"


def test_a_wrong_board_is_reported(capsys):
    """A mirror of another board differs (name, PCI id, limits, clocks): the check says so."""
    _, real = played({"model": "A100-80GB", "variant": "PCIe"})
    diffs = smoke.compare(real, smoke.fake_answers("NVIDIA A100-SXM4-80GB", None))
    out = capsys.readouterr().out
    assert diffs >= 4 and "DIFF PCI device id" in out and "DIFF power limit constraints" in out


def test_host_dependent_probes_are_printed_apart_and_not_counted(capsys):
    """A GPU passed through to a VM says virtualization mode 1 and has no NVLink: how the host
    attaches it, not the board. Those show as HOST lines; a board difference still counts."""
    assert smoke.HOST_DEPENDENT <= {label for label, _, _, _ in probe.GPU_PROBES + probe.MIG_PROBES}
    _, real = played({"model": "H100-80GB"})
    real["gpu"]["virtualization mode"] = ("ok", 1)
    real["gpu"]["NVLink 0 state"] = ("error", "NotSupported")
    fake = smoke.fake_answers("NVIDIA H100 80GB HBM3", None)
    assert smoke.compare(real, fake) == 0
    out = capsys.readouterr().out
    assert "HOST virtualization mode" in out and "HOST NVLink 0 state" in out
    real["gpu"]["shutdown temperature"] = ("ok", 92)
    assert smoke.compare(real, fake) == 1 and "DIFF shutdown temperature" in capsys.readouterr().out


def test_the_cost_bench_splits_a_poll_into_driver_and_exporter(capsys):
    """bench/real_gpu_cost.py on a simulated H100: the poll, its driver share by C function, the
    floor; and pynvml's function lookup is given back afterwards."""
    import real_gpu_cost as cost

    lookup = pynvml._nvmlGetFunctionPointer
    assert cost.main(["--simulate", "wan22-h100-mps-together", "--polls", "3", "--serve-seconds", "0"]) == 0
    assert pynvml._nvmlGetFunctionPointer is lookup
    out = capsys.readouterr().out
    poll = re.search(r"backend poll: ([\d.]+) ms CPU.*in the driver's C functions ([\d.]+) ms", out)
    assert poll and 0 < float(poll.group(2)) < float(poll.group(1)), out
    assert re.search(r"^  nvmlDeviceGetMemoryInfo_v2 +[\d.]+ ms +1\.0 calls", out, re.M), out
    assert "floor: " in out and "poll / floor = " in out
