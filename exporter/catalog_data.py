"""Raw GPU model and MIG profile tables behind exporter.catalog (plain tuples, no logic).

Source: ../shared/reference/nvml_facts.md §2.1-2.3 for MIG profiles. Whole-GPU figures
(memory total, SM count, power limit, max clocks) come from public spec sheets or from
commonly posted nvidia-smi output; each row says which, and "inferred" marks guesses.

Memory: the facts tables print GiB with two decimals (nvidia-smi mig -lgip). MIG memory is
allocated in 32 MiB steps, so ``gib()`` maps a printed value to the nearest multiple of
32 MiB (e.g. 5.81 -> 5952 MiB, 19.62 -> 20096 MiB, 46.38 -> 47488 MiB, matching the MiB
values the facts file quotes). Where driver branches print different sizes, a row holds the
smallest (what is sure to fit on any driver) and ``BRANCH_MEMORY_GIB`` holds each branch's
value; the simulator follows the branch its scenario claims to be (exporter.catalog.board).
"""

from __future__ import annotations


def gib(printed: float) -> int:
    """MiB for a GiB figure printed with two decimals (nearest multiple of 32 MiB)."""
    return round(printed * 1024 / 32) * 32


# Placement starts (in memory slices) on 8-memory-slice GPUs, §2.1 table [obs].
_S1 = (0, 1, 2, 3, 4, 5, 6)  # 1g and 1g+me: never start 7
_S1X2 = (0, 2, 4, 6)  # 1g with 2x memory (id 15)
_S2 = (0, 2, 4)
_S3 = (0, 4)
_S4 = (0,)
_S7 = (0,)

# Enum index (NVML_GPU_INSTANCE_PROFILE_*), pynvml constants.
E1, E2, E3, E4, E7, E1ME, E2ME, E1X2 = 0, 1, 2, 3, 4, 7, 8, 9

# Profile row: (name, id, enum, compute slices, memory slices, memory MiB, SMs,
#               max instances, starts, CE, DEC, ENC, JPG, OFA, +me, inferred)
ProfileRow = tuple

A30_PROFILES: tuple[ProfileRow, ...] = (
    # 4 memory slices / 4 compute slices. 1g.6gb DEC: nvidia-smi shows 1, the guide 0; we use
    # the observed 1.
    ("1g.6gb", 14, E1, 1, 1, gib(5.81), 14, 4, (0, 1, 2, 3), 1, 1, 0, 0, 0, False, False),
    ("1g.6gb+me", 21, E1ME, 1, 1, gib(5.81), 14, 1, (0, 1, 2, 3), 1, 1, 0, 1, 1, True, False),
    ("2g.12gb", 5, E2, 2, 2, gib(11.69), 28, 2, (0, 2), 2, 2, 0, 0, 0, False, False),
    ("2g.12gb+me", 6, E2ME, 2, 2, gib(11.69), 28, 1, (0, 2), 2, 2, 0, 1, 1, True, False),
    ("4g.24gb", 0, E4, 4, 4, gib(23.50), 56, 1, (0,), 4, 4, 0, 1, 1, False, False),
)

A100_40GB_PROFILES: tuple[ProfileRow, ...] = (
    ("1g.5gb", 19, E1, 1, 1, gib(4.75), 14, 7, _S1, 1, 0, 0, 0, 0, False, False),
    ("1g.5gb+me", 20, E1ME, 1, 1, gib(4.75), 14, 1, _S1, 1, 1, 0, 1, 1, True, False),
    ("1g.10gb", 15, E1X2, 1, 2, gib(9.62), 14, 4, _S1X2, 1, 1, 0, 0, 0, False, False),
    ("2g.10gb", 14, E2, 2, 2, gib(9.62), 28, 3, _S2, 2, 1, 0, 0, 0, False, False),
    ("3g.20gb", 9, E3, 3, 4, gib(19.50), 42, 2, _S3, 3, 2, 0, 0, 0, False, False),
    ("4g.20gb", 5, E4, 4, 4, gib(19.50), 56, 1, _S4, 4, 2, 0, 0, 0, False, False),
    ("7g.40gb", 0, E7, 7, 8, gib(39.25), 98, 1, _S7, 7, 5, 0, 1, 1, False, False),
)

# Same ids, SMs, engines (CE taken from the 40GB table) and placements as the 40GB part.
# Memory [obs]: nvidia-smi mig -lgip prints 9.50 / 19.50 / 39.25 / 79.00 GiB and the MIG devices
# hold 9728 / 19968 / 40192 MiB on drivers 510, 515, 550 and 570 alike (docs/hardware-facts.md);
# the 9.75 / 19.62 / 39.50 / 79.25 once listed here are the H100 80GB HBM3 sizes, not this board's.
A100_80GB_PROFILES: tuple[ProfileRow, ...] = (
    ("1g.10gb", 19, E1, 1, 1, gib(9.50), 14, 7, _S1, 1, 0, 0, 0, 0, False, False),
    ("1g.10gb+me", 20, E1ME, 1, 1, gib(9.50), 14, 1, _S1, 1, 1, 0, 1, 1, True, False),
    ("1g.20gb", 15, E1X2, 1, 2, gib(19.50), 14, 4, _S1X2, 1, 1, 0, 0, 0, False, False),
    ("2g.20gb", 14, E2, 2, 2, gib(19.50), 28, 3, _S2, 2, 1, 0, 0, 0, False, False),
    ("3g.40gb", 9, E3, 3, 4, gib(39.25), 42, 2, _S3, 3, 2, 0, 0, 0, False, False),
    ("4g.40gb", 5, E4, 4, 4, gib(39.25), 56, 1, _S4, 4, 2, 0, 0, 0, False, False),
    ("7g.80gb", 0, E7, 7, 8, gib(79.00), 98, 1, _S7, 7, 5, 0, 1, 1, False, False),
)

H100_80GB_PROFILES: tuple[ProfileRow, ...] = (
    ("1g.10gb", 19, E1, 1, 1, gib(9.75), 16, 7, _S1, 1, 1, 0, 1, 0, False, False),
    ("1g.10gb+me", 20, E1ME, 1, 1, gib(9.75), 16, 1, _S1, 1, 1, 0, 1, 1, True, False),
    ("1g.20gb", 15, E1X2, 1, 2, gib(19.62), 26, 4, _S1X2, 1, 1, 0, 1, 0, False, False),
    ("2g.20gb", 14, E2, 2, 2, gib(19.62), 32, 3, _S2, 2, 2, 0, 2, 0, False, False),
    ("3g.40gb", 9, E3, 3, 4, gib(39.50), 60, 2, _S3, 3, 3, 0, 3, 0, False, False),
    ("4g.40gb", 5, E4, 4, 4, gib(39.50), 64, 1, _S4, 4, 4, 0, 4, 0, False, False),
    ("7g.80gb", 0, E7, 7, 8, gib(79.25), 132, 1, _S7, 8, 7, 0, 7, 1, False, False),
)

# H100 NVL (94 GB), driver 560.35.03 lgip; placements as H100 [obs].
H100_NVL_PROFILES: tuple[ProfileRow, ...] = (
    ("1g.12gb", 19, E1, 1, 1, gib(10.75), 16, 7, _S1, 1, 1, 0, 1, 0, False, False),
    ("1g.12gb+me", 20, E1ME, 1, 1, gib(10.75), 16, 1, _S1, 1, 1, 0, 1, 1, True, False),
    ("1g.24gb", 15, E1X2, 1, 2, gib(21.62), 26, 4, _S1X2, 1, 1, 0, 1, 0, False, False),
    ("2g.24gb", 14, E2, 2, 2, gib(21.62), 32, 3, _S2, 2, 2, 0, 2, 0, False, False),
    ("3g.47gb", 9, E3, 3, 4, gib(46.38), 60, 2, _S3, 3, 3, 0, 3, 0, False, False),
    ("4g.47gb", 5, E4, 4, 4, gib(46.38), 64, 1, _S4, 4, 4, 0, 4, 0, False, False),
    ("7g.94gb", 0, E7, 7, 8, gib(93.12), 132, 1, _S7, 8, 7, 0, 7, 1, False, False),
)

# H200: values [obs] (mig-parted#120: 2g.35gb 32.25 and 7g.141gb 139.75 GiB, like 1g.35gb's 32.25),
# placements [inf] (assumed as H100) -> inferred=True.
H200_PROFILES: tuple[ProfileRow, ...] = (
    ("1g.18gb", 19, E1, 1, 1, gib(16.00), 16, 7, _S1, 1, 1, 0, 1, 0, False, True),
    ("1g.18gb+me", 20, E1ME, 1, 1, gib(16.00), 16, 1, _S1, 1, 1, 0, 1, 1, True, True),
    ("1g.35gb", 15, E1X2, 1, 2, gib(32.25), 26, 4, _S1X2, 1, 1, 0, 1, 0, False, True),
    ("2g.35gb", 14, E2, 2, 2, gib(32.25), 32, 3, _S2, 2, 2, 0, 2, 0, False, True),
    ("3g.71gb", 9, E3, 3, 4, gib(69.50), 60, 2, _S3, 3, 3, 0, 3, 0, False, True),
    ("4g.71gb", 5, E4, 4, 4, gib(69.50), 64, 1, _S4, 4, 4, 0, 4, 0, False, True),
    ("7g.141gb", 0, E7, 7, 8, gib(139.75), 132, 1, _S7, 8, 7, 0, 7, 1, False, True),
)

# B200: placements [inf] (as H100) for every profile -> inferred=True throughout.
# 1g.23gb memory: 22.00 GiB (mig-parted PR #166) vs 20.50 GiB (PR #187, the newer) -> 20.50.
# 2g.45gb engines: nvidia-smi (CE 4, DEC 2, JPG 2) preferred over the guide (3, 1, 1).
# 3g.90gb / 4g.90gb / 7g.180gb are not in any observed lgip output:
#   - ids 9 / 5 / 0 assumed from the usual 8-slice mapping (§2.2);
#   - memory inferred from 2g.45gb (44.25 GiB) doubled, and for 7g from the H100 ratio
#     7g/4-slice (79.25/39.50): 89.00 and 178.25 GiB;
#   - SMs inferred: 3g 60 and 4g 72 (2 x 2g's 36), 7g 148 (B200's full SM count);
#   - engines from guide Table 9 (CE 6 / 8 / 16, DEC 1, JPG 1, OFA 1 on 7g only).
B200_PROFILES: tuple[ProfileRow, ...] = (
    ("1g.23gb", 19, E1, 1, 1, gib(20.50), 18, 7, _S1, 2, 1, 0, 1, 0, False, True),
    ("1g.23gb+me", 20, E1ME, 1, 1, gib(20.50), 18, 1, _S1, 2, 1, 0, 1, 1, True, True),
    ("1g.45gb", 15, E1X2, 1, 2, gib(44.25), 30, 4, _S1X2, 2, 1, 0, 1, 0, False, True),
    ("2g.45gb", 14, E2, 2, 2, gib(44.25), 36, 3, _S2, 4, 2, 0, 2, 0, False, True),
    ("3g.90gb", 9, E3, 3, 4, gib(89.00), 60, 2, _S3, 6, 1, 0, 1, 0, False, True),
    ("4g.90gb", 5, E4, 4, 4, gib(89.00), 72, 1, _S4, 8, 1, 0, 1, 0, False, True),
    ("7g.180gb", 0, E7, 7, 8, gib(178.25), 148, 1, _S7, 16, 1, 0, 1, 1, False, True),
)

# Sizes that differ by driver branch: model -> profile -> ((first branch, GiB printed by
# nvidia-smi mig -lgip), ...), oldest first. A branch uses the last entry whose first branch is
# at or below it. A100-40GB (docs/hardware-facts.md, tests/data/nvidia-smi):
# - up to R510 [obs]: 9.75 / 19.62 / 39.50 GiB for 2g.10gb / 3g.20gb (4g.20gb) / 7g.40gb
#   (510.47.03 on an A100-PCIE-40GB; the MIG guide's R450-era example);
# - R525 [obs, boundary inf]: 9.62 / 19.50 / 39.25, the first outputs listing 1g.10gb (the MIG
#   guide's current example; a December 2023 setup);
# - R550 on [obs, boundary inf]: 9.75 / 19.62 again and 39.38 for 7g.40gb (a 2025 GPU Operator
#   deployment); R580 MIG devices hold the 9.75 / 19.62 sizes (issue 25's 580.126.09 audit found
#   only their BAR1 to differ).
BRANCH_MEMORY_GIB: dict[str, dict[str, tuple[tuple[int, float], ...]]] = {
    "A100-40GB": {
        "1g.10gb": ((0, 9.75), (525, 9.62), (550, 9.75)),
        "2g.10gb": ((0, 9.75), (525, 9.62), (550, 9.75)),
        "3g.20gb": ((0, 19.62), (525, 19.50), (550, 19.62)),
        "4g.20gb": ((0, 19.62), (525, 19.50), (550, 19.62)),
        "7g.40gb": ((0, 39.50), (525, 39.25), (550, 39.38)),
    },
}

# First driver branch that offers a profile (MIG user guide, nvml_facts.md §2.3) [src]; older
# branches list the others only (an R470-R515 A30 prints no 2g.12gb+me [obs], docs/hardware-facts.md).
# A100-80GB follows the 40GB part's rows [inf]. Profiles not named here exist on every branch.
PROFILE_SINCE: dict[str, dict[str, int]] = {
    "A30": {"1g.6gb+me": 470, "2g.12gb+me": 525},
    "A100-40GB": {"1g.5gb+me": 470, "1g.10gb": 525},
    "A100-80GB": {"1g.10gb+me": 470, "1g.20gb": 525},
}

# Model row: key -> dict of GpuModel fields except mig_profiles.
# memory_total_mib: "Total" as nvidia-smi prints it. memory_reserved_mib: the v2 "reserved"
# figure: 480 MiB for H100 80GB HBM3 [obs] (nvidia-smi -q, driver 580.159.04; the 328 MiB
# once inferred here was wrong), 700 MiB for H200 [obs]; the others are scaled guesses (inferred).
# power_limit_watts / max_clocks_mhz (graphics, sm, memory, video): spec sheet unless noted.
# idle_power_watts: inferred everywhere (typical idle draw, only used to shape simulated power).
MODEL_ROWS: dict[str, dict] = {
    "A30": dict(
        nvml_name="NVIDIA A30", aliases=("A30-24GB",), architecture="ampere",
        compute_capability=(8, 0), pci_device_id=0x20B710DE,
        memory_total_mib=24576, memory_reserved_mib=264,  # total: 24 GiB HBM2 (inferred exact)
        sm_count=56, power_limit_watts=165.0, idle_power_watts=30.0,  # spec sheet
        max_clocks_mhz=(1440, 1440, 1215, 1305),  # spec sheet boost 1440; video inferred
        memory_slices=4, compute_slices=4, max_mig_devices=4, profiles=A30_PROFILES,
    ),
    "A100-40GB": dict(
        nvml_name="NVIDIA A100-SXM4-40GB", aliases=(),
        architecture="ampere", compute_capability=(8, 0), pci_device_id=0x20B010DE,
        # total 40960 MiB (inferred, newer drivers); seed 001's older driver shows 40536 MiB on
        # the PCIe card. reserved inferred.
        memory_total_mib=40960, memory_reserved_mib=431,
        sm_count=108, power_limit_watts=400.0, idle_power_watts=55.0,  # spec sheet (SXM4)
        max_clocks_mhz=(1410, 1410, 1215, 1290),  # spec sheet boost 1410; video inferred
        memory_slices=8, compute_slices=7, max_mig_devices=7, profiles=A100_40GB_PROFILES,
    ),
    "A100-80GB": dict(
        nvml_name="NVIDIA A100-SXM4-80GB", aliases=(),
        architecture="ampere", compute_capability=(8, 0), pci_device_id=0x20B210DE,
        memory_total_mib=81920, memory_reserved_mib=573,  # reserved inferred
        sm_count=108, power_limit_watts=400.0, idle_power_watts=60.0,  # spec sheet (SXM4)
        max_clocks_mhz=(1410, 1410, 1593, 1290),  # nvidia-smi -q (NVIDIA/DCGM#152) [obs]
        memory_slices=8, compute_slices=7, max_mig_devices=7, profiles=A100_80GB_PROFILES,
    ),
    "H100-80GB": dict(
        nvml_name="NVIDIA H100 80GB HBM3", aliases=("H100", "H100-SXM5"),
        architecture="hopper", compute_capability=(9, 0), pci_device_id=0x233010DE,
        # total and reserved [obs]: nvidia-smi -q on driver 580.159.04 (tests/data/nvidia-smi/
        # h100-80gb-hbm3-580-q.txt); other branches' reserved memory not observed
        memory_total_mib=81559, memory_reserved_mib=480,
        sm_count=132, power_limit_watts=700.0, idle_power_watts=70.0,  # spec sheet (SXM5)
        max_clocks_mhz=(1980, 1980, 2619, 1545),  # nvidia-smi -q (NVIDIA/DCGM#120) [obs]
        memory_slices=8, compute_slices=7, max_mig_devices=7, profiles=H100_80GB_PROFILES,
    ),
    "H100-NVL": dict(
        nvml_name="NVIDIA H100 NVL", aliases=("H100-94GB",), architecture="hopper",
        compute_capability=(9, 0), pci_device_id=0x232110DE,
        memory_total_mib=95830, memory_reserved_mib=384,  # total commonly posted; reserved inferred
        sm_count=132, power_limit_watts=400.0, idle_power_watts=60.0,  # spec sheet (350-400 W)
        max_clocks_mhz=(1785, 1785, 2619, 1650),  # spec sheet boost 1785; mem/video inferred
        memory_slices=8, compute_slices=7, max_mig_devices=7, profiles=H100_NVL_PROFILES,
    ),
    "H200": dict(
        nvml_name="NVIDIA H200", aliases=("H200-141GB",), architecture="hopper",
        compute_capability=(9, 0), pci_device_id=0x233510DE,
        # total commonly posted; reserved [obs] 700 MiB (nvidia-smi -q, driver 550.90.12)
        memory_total_mib=143771, memory_reserved_mib=700,
        sm_count=132, power_limit_watts=700.0, idle_power_watts=75.0,  # spec sheet (SXM)
        max_clocks_mhz=(1980, 1980, 3201, 1755),  # spec sheet boost 1980; mem/video inferred
        memory_slices=8, compute_slices=7, max_mig_devices=7, profiles=H200_PROFILES,
    ),
    "B200": dict(
        nvml_name="NVIDIA B200", aliases=("B200-180GB",), architecture="blackwell",
        compute_capability=(10, 0), pci_device_id=0x290110DE,
        memory_total_mib=183359, memory_reserved_mib=704,  # total commonly posted; reserved inferred
        sm_count=148, power_limit_watts=1000.0, idle_power_watts=140.0,  # spec sheet (HGX B200)
        max_clocks_mhz=(1965, 1965, 3996, 1965),  # inferred
        memory_slices=8, compute_slices=7, max_mig_devices=7, profiles=B200_PROFILES,
    ),
    "L4": dict(
        nvml_name="NVIDIA L4", aliases=(), architecture="ada", compute_capability=(8, 9),
        pci_device_id=0x27B810DE, memory_total_mib=23034,
        memory_reserved_mib=556,  # reserved [obs] nvidia-smi -q, driver 550.90.07
        sm_count=58, power_limit_watts=72.0, idle_power_watts=16.0,  # spec sheet
        max_clocks_mhz=(2040, 2040, 6251, 1770),  # spec sheet boost 2040; mem/video inferred
        memory_slices=0, compute_slices=0, max_mig_devices=0, profiles=(),
    ),
    "L40S": dict(
        nvml_name="NVIDIA L40S", aliases=(), architecture="ada", compute_capability=(8, 9),
        pci_device_id=0x26B910DE, memory_total_mib=46068, memory_reserved_mib=420,  # reserved inferred
        sm_count=142, power_limit_watts=350.0, idle_power_watts=35.0,  # spec sheet
        max_clocks_mhz=(2520, 2520, 9001, 1965),  # spec sheet boost 2520; mem/video inferred
        memory_slices=0, compute_slices=0, max_mig_devices=0, profiles=(),
    ),
    "T4": dict(
        nvml_name="Tesla T4", aliases=("NVIDIA T4",), architecture="turing",
        compute_capability=(7, 5), pci_device_id=0x1EB810DE,
        memory_total_mib=15360, memory_reserved_mib=264,  # reserved inferred
        sm_count=40, power_limit_watts=70.0, idle_power_watts=10.0,  # spec sheet
        max_clocks_mhz=(1590, 1590, 5001, 1470),  # spec sheet boost 1590; mem/video inferred
        memory_slices=0, compute_slices=0, max_mig_devices=0, profiles=(),
    ),
    "V100": dict(
        nvml_name="Tesla V100-SXM2-16GB", aliases=("V100-16GB",),
        architecture="volta", compute_capability=(7, 0), pci_device_id=0x1DB110DE,
        memory_total_mib=16384, memory_reserved_mib=224,  # reserved inferred
        sm_count=80, power_limit_watts=300.0, idle_power_watts=40.0,  # spec sheet (SXM2)
        max_clocks_mhz=(1530, 1530, 877, 1372),  # spec sheet boost 1530; video inferred
        memory_slices=0, compute_slices=0, max_mig_devices=0, profiles=(),
    ),
}
