"""Real nvidia-smi outputs, played on the simulator and read back through pynvml (issue 25).

Each tests/data/nvidia-smi/<name>.txt is output quoted as printed in a public bug report, vendor
doc or guide, or captured first-hand on a lent GPU by bench/real_gpu_run.sh (h100-80gb-hbm3-580-*); its <name>.yaml gives the source URL, the board, the driver (where printed) and
what the scenario must set up (the driver branch it claims to be, the MIG layout). The test
builds that scenario, reads every value the output shows the way a client does (pynvml), and
formats it as nvidia-smi does: profile names, ids, free/total instances, GiB with two decimals,
SMs, CE/DEC/ENC/JPEG/OFA, GPU-instance ids and placements, MIG devices' memory, BAR1, SMs and
engines, product names, memory totals and power caps. Sources: docs/hardware-facts.md.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pynvml
import pytest
import yaml

from exporter.sim import Simulation
from exporter.sim.scenario import parse_scenario

DATA = Path(__file__).parent / "data" / "nvidia-smi"
CASES = sorted(p.stem for p in DATA.glob("*.yaml"))
MIB = 1024 * 1024

LGIP = re.compile(r"^\|\s+(\d+)\s+MIG (\S+)\s+(\d+)\s+(\d+)/(\d+)\s+([\d.]+)\s+(Yes|No)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|$")
LGIP2 = re.compile(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s+\|$")  # CE, JPEG, OFA under SM, DEC, ENC
LGI = re.compile(r"^\|\s+(\d+)\s+MIG (\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s+\|$")
MIGDEV = re.compile(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\s+\d+MiB /\s+(\d+)MiB \|\s+(\d+)\s+\S+\s+\|"
                    r"\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+) \|$")
BAR1 = re.compile(r"^\|\s+\|\s+\d+MiB /\s+(\d+)MiB \|")
SMI1 = re.compile(r"^\|\s+(\d+)\s+(.+?)\s+(On|Off)\s+\|")
SMI2 = re.compile(r"^\| \S+\s+\d+C\s+(P\d+)\s+\d+W /\s+(\d+)W \|\s+(?:\d+MiB /\s+(\d+)MiB|N/A)\s+\|\s+\S+\s+(\S+(?: \S+)?) \|$")
SMI3 = re.compile(r"^\|\s+\|\s+\|\s+(Enabled|Disabled|N/A) \|$")
LGIPP = re.compile(r"^GPU\s+(\d+) Profile ID\s+(\d+) Placements?\s*: \{([\d,]+)\}:(\d+)$")
LINK = re.compile(r"^\s+Link (\d+): ([\d.]+) GB/s$")
COMPUTE_MODES = {"Default": pynvml.NVML_COMPUTEMODE_DEFAULT, "E. Process": pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
                 "Prohibited": pynvml.NVML_COMPUTEMODE_PROHIBITED}
LIST_GPU = re.compile(r"^GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]{36})\)$")
LIST_MIG = re.compile(r"^  MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[0-9a-f-]{36})\)$")


def _meta(name: str) -> dict:
    return yaml.safe_load((DATA / f"{name}.yaml").read_text())


def _lines(name: str) -> list[str]:
    return (DATA / f"{name}.txt").read_text().splitlines()


def _gpu_indices(lines: list[str], pattern: re.Pattern) -> set[int]:
    return {int(m.group(1)) for m in map(pattern.match, lines) if m}


@pytest.fixture
def play(install_simulation):
    """play(meta, gpu_count) -> the scenario of ``meta`` installed and nvmlInit-ed."""
    def start(meta: dict, gpus: int):
        gpu = {"model": meta["board"]}
        if meta.get("variant"):
            gpu["variant"] = meta["variant"]
        if meta.get("layout") is not None:
            gpu["mig"] = meta["layout"]
        if meta.get("compute_mode"):  # a host setting the output shows ("E. Process")
            gpu["compute_mode"] = meta["compute_mode"]
        sim = Simulation(parse_scenario({"driver_version": str(meta["simulate_driver"]),
                                         "gpus": [dict(gpu) for _ in range(gpus)]}, f"{meta['source']}"))
        return install_simulation(sim)

    return start


def _profiles(handle) -> dict[str, object]:
    """GPU-instance profiles by name, as nvidia-smi mig -lgip finds them (every enum index)."""
    found = {}
    for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfoV(handle, index)
        except pynvml.NVMLError_NotSupported:
            continue
        except pynvml.NVMLError_InvalidArgument:
            break  # past the driver's last profile index
        name = info.name.decode() if isinstance(info.name, bytes) else info.name
        found[name.removeprefix("MIG ")] = info
    return found


def _check_lgip(lines: list[str], complete: bool = False) -> int:
    checked = 0
    printed_names: dict[int, set[str]] = {}
    for i, line in enumerate(lines):
        m = LGIP.match(line)
        if not m:
            continue
        gpu, name, pid, free, total, gib, p2p, sms, dec, enc = m.groups()
        ce, jpeg, ofa = LGIP2.match(lines[i + 1]).groups()
        handle = pynvml.nvmlDeviceGetHandleByIndex(int(gpu))
        info = _profiles(handle).get(name)
        assert info is not None, f"{name}: no such profile on the simulated board"
        shown = (info.id, info.instanceCount, f"{info.memorySizeMB / 1024:.2f}",
                 "Yes" if info.isP2pSupported else "No", info.multiprocessorCount, info.decoderCount,
                 info.encoderCount, info.copyEngineCount, info.jpegCount, info.ofaCount)
        printed = (int(pid), int(total), gib, p2p, int(sms), int(dec), int(enc), int(ce), int(jpeg), int(ofa))
        assert shown == printed, f"GPU {gpu} {name}: simulated {shown}, real {printed}"
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, info.id) == int(free), name
        printed_names.setdefault(int(gpu), set()).add(name)
        checked += 1
    if complete:  # the whole table was quoted: the driver offers no other profile
        for gpu, names in printed_names.items():
            assert set(_profiles(pynvml.nvmlDeviceGetHandleByIndex(gpu))) == names, gpu
    return checked


def _placements(handle, profile_id: int) -> list:
    """nvmlDeviceGetGpuInstancePossiblePlacements the way nvidia-smi calls it: count, then fill."""
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
    array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
    return list(array[:count.value])


def _check_lgipp(lines: list[str], complete: bool = False) -> int:
    checked = set()
    for line in lines:
        m = LGIPP.match(line)
        if not m:
            continue
        gpu, pid, starts, size = int(m.group(1)), int(m.group(2)), m.group(3), int(m.group(4))
        found = _placements(pynvml.nvmlDeviceGetHandleByIndex(gpu), pid)
        shown = ([p.start for p in found], {p.size for p in found})
        assert shown == ([int(x) for x in starts.split(",")], {size}), f"GPU {gpu} profile {pid}: {shown}"
        checked.add((gpu, pid))
    if complete:
        for gpu in {g for g, _ in checked}:
            ids = {p.id for p in _profiles(pynvml.nvmlDeviceGetHandleByIndex(gpu)).values()}
            assert ids == {pid for g, pid in checked if g == gpu}, gpu
    return len(checked)


def _check_list(lines: list[str], complete: bool = False) -> int:
    """nvidia-smi -L: product names, and each MIG device's profile by its index."""
    checked = 0
    handle = None
    for line in lines:
        if m := LIST_GPU.match(line):
            handle = pynvml.nvmlDeviceGetHandleByIndex(int(m.group(1)))
            assert pynvml.nvmlDeviceGetName(handle) == m.group(2)
            assert re.fullmatch(r"GPU-[0-9a-f-]{36}", pynvml.nvmlDeviceGetUUID(handle))
        elif m := LIST_MIG.match(line):
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, int(m.group(2)))
            gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, pynvml.nvmlDeviceGetGpuInstanceId(mig))
            profile_id = pynvml.nvmlGpuInstanceGetInfo(gi).profileId
            assert [n for n, info in _profiles(handle).items() if info.id == profile_id] == [m.group(1)]
            assert re.fullmatch(r"MIG-[0-9a-f-]{36}", pynvml.nvmlDeviceGetUUID(mig))
        else:
            continue
        checked += 1
    return checked


def _check_lgi(lines: list[str], complete: bool = False) -> int:
    checked = 0
    for line in lines:
        m = LGI.match(line)
        if not m:
            continue
        gpu, name, pid, gi, start, size = map(lambda g: int(g) if g.isdigit() else g, m.groups())
        handle = pynvml.nvmlDeviceGetHandleByIndex(gpu)
        info = pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceGetGpuInstanceById(handle, gi))
        shown = (info.profileId, info.placement.start, info.placement.size)
        assert shown == (pid, start, size), f"GPU {gpu} GI {gi} ({name}): simulated {shown}"
        checked += 1
    return checked


def _check_migdevices(lines: list[str], complete: bool = False) -> int:
    checked = 0
    for i, line in enumerate(lines):
        m = MIGDEV.match(line)
        if not m:
            continue
        gpu, gi, ci, dev, total, sms, ce, enc, dec, ofa, jpg = map(int, m.groups())
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(pynvml.nvmlDeviceGetHandleByIndex(gpu), dev)
        attrs = pynvml.nvmlDeviceGetAttributes(mig)
        shown = (pynvml.nvmlDeviceGetGpuInstanceId(mig), pynvml.nvmlDeviceGetComputeInstanceId(mig),
                 pynvml.nvmlDeviceGetMemoryInfo(mig).total // MIB, attrs.multiprocessorCount,
                 attrs.sharedCopyEngineCount, attrs.sharedEncoderCount, attrs.sharedDecoderCount,
                 attrs.sharedOfaCount, attrs.sharedJpegCount)
        assert shown == (gi, ci, total, sms, ce, enc, dec, ofa, jpg), f"GPU {gpu} MIG dev {dev}: simulated {shown}"
        bar1 = BAR1.match(lines[i + 1]) if i + 1 < len(lines) else None
        if bar1:
            assert pynvml.nvmlDeviceGetBAR1MemoryInfo(mig).bar1Total // MIB == int(bar1.group(1))
        checked += 1
    return checked


def _check_summary(lines: list[str], complete: bool = False) -> int:
    checked = 0
    for i, line in enumerate(lines):
        m = SMI1.match(line)
        if not m or not SMI2.match(lines[i + 1]):
            continue
        gpu, name = int(m.group(1)), m.group(2)
        pstate, cap, total, compute = SMI2.match(lines[i + 1]).groups()
        handle = pynvml.nvmlDeviceGetHandleByIndex(gpu)
        real_name = pynvml.nvmlDeviceGetName(handle)
        if name.endswith("..."):  # nvidia-smi cuts long names to its column
            assert real_name.startswith(name[:-3]), (real_name, name)
        else:
            assert real_name == name
        assert f"P{pynvml.nvmlDeviceGetPerformanceState(handle)}" == pstate
        assert pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) // 1000 == int(cap)
        if total is not None:
            assert pynvml.nvmlDeviceGetMemoryInfo(handle).total // MIB == int(total)
        assert COMPUTE_MODES[compute] == pynvml.nvmlDeviceGetComputeMode(handle)
        mig = SMI3.match(lines[i + 2]) if i + 2 < len(lines) else None
        if mig and mig.group(1) == "N/A":  # not MIG-capable: NVML says NotSupported
            with pytest.raises(pynvml.NVMLError_NotSupported):
                pynvml.nvmlDeviceGetMigMode(handle)
        elif mig:
            current = pynvml.nvmlDeviceGetMigMode(handle)[0]
            assert (current == pynvml.NVML_DEVICE_MIG_ENABLE) == (mig.group(1) == "Enabled")
        checked += 1
    return checked


def _check_nvlink(lines: list[str], complete: bool = False) -> int:
    """nvidia-smi nvlink --status: every link of each GPU, up, at the printed speed (GB/s,
    three decimals, from the link speed field in MB/s), and no link beyond the last printed."""
    checked = 0
    links: dict[int, list[int]] = {}
    handle = gpu = None
    for line in lines:
        if m := LIST_GPU.match(line):
            gpu = int(m.group(1))
            handle = pynvml.nvmlDeviceGetHandleByIndex(gpu)
            assert pynvml.nvmlDeviceGetName(handle) == m.group(2)
        elif m := LINK.match(line):
            link = int(m.group(1))
            assert pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED
            speed = pynvml.nvmlDeviceGetFieldValues(handle, [(pynvml.NVML_FI_DEV_NVLINK_GET_SPEED, link)])[0]
            assert speed.nvmlReturn == pynvml.NVML_SUCCESS and f"{speed.value.uiVal / 1000:.3f}" == m.group(2)
            links.setdefault(gpu, []).append(link)
            checked += 1
    for gpu, seen in links.items():
        assert seen == list(range(len(seen)))
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlDeviceGetNvLinkState(pynvml.nvmlDeviceGetHandleByIndex(gpu), len(seen))
    return checked


MINOR = re.compile(r"^    Minor Number\s+: (\d+)$")  # nvidia-smi -q: one GPU's block
ARCH_NAMES = {getattr(pynvml, n): n.removeprefix("NVML_DEVICE_ARCH_").title()
              for n in dir(pynvml) if n.startswith("NVML_DEVICE_ARCH_") and n != "NVML_DEVICE_ARCH_UNKNOWN"}


def _query_fields(lines: list[str]) -> dict[str, str]:
    """A one-GPU nvidia-smi -q as {"Section/Sub/Key": value}: four spaces per level under the GPU's
    bus id line; a line without " : " opens a section."""
    fields: dict[str, str] = {}
    path: list[str] = []
    for line in lines:
        if not line.startswith("    ") or not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 4 - 1
        key, sep, value = line.strip().partition(" : ")
        del path[depth:]
        if sep:
            fields["/".join([*path, key.strip()])] = value.strip()
        else:
            path.append(key.strip())
    return fields


def _check_query(lines: list[str], complete: bool = False) -> int:
    """nvidia-smi -q: the board's facts (name, architecture, memory total and reserved, BAR1, PCI
    id and link, power limits, max and default clocks, temperature thresholds as T.Limit
    offsets), modes and what it prints N/A for, read back through pynvml."""
    q = _query_fields(lines)
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    mib = lambda text: int(text.removesuffix(" MiB"))  # noqa: E731
    watts = lambda text: float(text.removesuffix(" W"))  # noqa: E731
    mhz = lambda text: int(text.removesuffix(" MHz"))  # noqa: E731
    memory = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    low, high = pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h)
    threshold = lambda which: pynvml.nvmlDeviceGetTemperatureThreshold(h, which)  # noqa: E731
    gpu_max = threshold(pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX)
    pairs = {
        "Product Name": (q["Product Name"], pynvml.nvmlDeviceGetName(h)),
        "Product Architecture": (q["Product Architecture"], ARCH_NAMES[pynvml.nvmlDeviceGetArchitecture(h)]),
        "FB total": (mib(q["FB Memory Usage/Total"]), memory.total // MIB),
        "FB reserved": (mib(q["FB Memory Usage/Reserved"]), memory.reserved // MIB),
        "BAR1 total": (mib(q["BAR1 Memory Usage/Total"]), pynvml.nvmlDeviceGetBAR1MemoryInfo(h).bar1Total // MIB),
        "PCI device id": (int(q["PCI/Device Id"], 16), pynvml.nvmlDeviceGetPciInfo(h).pciDeviceId),
        "PCIe generation": (int(q["PCI/GPU Link Info/PCIe Generation/Max"]), pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h)),
        "PCIe width": (q["PCI/GPU Link Info/Link Width/Max"], f"{pynvml.nvmlDeviceGetMaxPcieLinkWidth(h)}x"),
        "default power limit": (watts(q["GPU Power Readings/Default Power Limit"]),
                                pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000),
        "power limit range": ((watts(q["GPU Power Readings/Min Power Limit"]),
                               watts(q["GPU Power Readings/Max Power Limit"])), (low / 1000, high / 1000)),
        "MIG mode": (q["MIG Mode/Current"] == "Enabled", pynvml.nvmlDeviceGetMigMode(h)[0] == pynvml.NVML_DEVICE_MIG_ENABLE),
        "compute mode": (COMPUTE_MODES[q["Compute Mode"]], pynvml.nvmlDeviceGetComputeMode(h)),
        "shutdown T.Limit": (int(q["Temperature/GPU Shutdown T.Limit Temp"].removesuffix(" C")),
                             gpu_max - threshold(pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)),
        "slowdown T.Limit": (int(q["Temperature/GPU Slowdown T.Limit Temp"].removesuffix(" C")),
                             gpu_max - threshold(pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)),
    }
    for domain, clock in (("Graphics", pynvml.NVML_CLOCK_GRAPHICS), ("SM", pynvml.NVML_CLOCK_SM),
                          ("Memory", pynvml.NVML_CLOCK_MEM), ("Video", pynvml.NVML_CLOCK_VIDEO)):
        pairs[f"max clock {domain}"] = (mhz(q[f"Max Clocks/{domain}"]), pynvml.nvmlDeviceGetMaxClockInfo(h, clock))
    for domain, clock in (("Graphics", pynvml.NVML_CLOCK_GRAPHICS), ("Memory", pynvml.NVML_CLOCK_MEM)):
        pairs[f"default applications clock {domain}"] = (mhz(q[f"Default Applications Clocks/{domain}"]),
                                                         pynvml.nvmlDeviceGetDefaultApplicationsClock(h, clock))
    wrong = {what: pair for what, pair in pairs.items() if pair[0] != pair[1]}
    assert not wrong, f"printed vs simulated: {wrong}"
    for printed, call in ((q["Fan Speed"], lambda: pynvml.nvmlDeviceGetFanSpeed(h)),
                          (q["Driver Model/Current"], lambda: pynvml.nvmlDeviceGetDriverModel(h))):
        assert printed == "N/A"
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call()
    return len(pairs) + 2


CHECKS = {"nvidia-smi mig -lgip": (_check_lgip, LGIP), "nvidia-smi -q": (_check_query, MINOR), "nvidia-smi mig -lgi": (_check_lgi, LGI),
          "nvidia-smi mig -lgipp": (_check_lgipp, LGIPP), "nvidia-smi -L": (_check_list, LIST_GPU),
          "nvidia-smi nvlink --status": (_check_nvlink, LIST_GPU),
          "nvidia-smi (MIG devices table)": (_check_migdevices, MIGDEV), "nvidia-smi": (_check_summary, SMI1)}


def test_corpus_is_complete():
    """Every output has its source, board and the driver the scenario plays; no stray files."""
    assert len(CASES) >= 10
    assert sorted(p.stem for p in DATA.glob("*.txt")) == CASES
    for name in CASES:
        meta = _meta(name)
        # a public page, or an output this project captured itself (the script named, the date)
        assert meta["source"].startswith(("https://", "captured by bench/real_gpu_run.sh ")), name
        assert meta["command"] in CHECKS, name
        assert re.fullmatch(r"\d+\.\d+\.\d+", str(meta["simulate_driver"])), name
        assert meta["driver"] is None or str(meta["driver"]) == str(meta["simulate_driver"]), name
        assert meta["driver"] is not None or meta.get("driver_note"), name


@pytest.mark.parametrize("name", CASES)
def test_real_output_read_back_through_pynvml(name, play):
    meta = _meta(name)
    lines = _lines(name)
    check, pattern = CHECKS[meta["command"]]
    if meta["command"].startswith("nvidia-smi mig") and meta.get("layout") is None:
        meta = {**meta, "layout": []}  # mig commands print with MIG on
    play(meta, max(_gpu_indices(lines, pattern)) + 1)
    assert check(lines, complete=bool(meta.get("complete"))) > 0, f"{name}: no row recognised"
