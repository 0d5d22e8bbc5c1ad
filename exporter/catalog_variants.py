"""Raw board data behind exporter.catalog: product variants and per-board facts (no logic).

A *model* (catalog_data.MODEL_ROWS) is a GPU chip with its memory and MIG profiles; a
*variant* is one board built on it (SXM module, PCIe card, NVL card). Variants differ in
what NVML reports as the product name and PCI device id, in their power limits and idle
draw, in NVLink wiring, and sometimes in SMs and clocks (H100 PCIe). The first variant of
each model is its default: the one a scenario gets when it names only the model key.

Sources (tags as in nvml_facts.md: [obs] observed output, [src] vendor/spec, [inf] inferred):
- PCI device ids and board names: pci.ids (github.com/pciutils/pciids @ c1c12547) [src].
- NVML product names: nvidia-smi/NVML output commonly posted (e.g. "NVIDIA A100-PCIE-40GB",
  "NVIDIA A100 80GB PCIe", "NVIDIA H100 PCIe", "NVIDIA H100 NVL") [obs].
- Power limits: default limits from spec sheets [src]; min/max limits [obs] where quoted
  (A100-SXM4-80GB 100/400 W: NVIDIA/DCGM#152 nvidia-smi -q), else [inf].
- NVLink links: spec-sheet NVLink bandwidth / per-link bandwidth (NVLink3/4: 50 GB/s,
  NVLink2: 50 GB/s, NVLink5: 100 GB/s per link) [inf from src]; PCIe cards report their
  bridge links as present but inactive (no bridge assumed).
- BAR1: H100 80GB HBM3 131072 MiB (NVIDIA/nccl#1453 nvidia-smi -q) [obs]; others [inf]
  (per MIG device on A100-80GB pre-580: 32767 MiB for 2g.20gb, XuehaiPan/nvitop#8 [obs];
  A100-40GB on R580: see mig_bar1_mib below)
  (BAR1 is a power of two at least the framebuffer on data-center boards; T4 256 MiB [obs]).
- Max clocks H100 SXM5 (1980, 1980, 2619, 1545) and default application clock 1980 MHz:
  NVIDIA/DCGM#120 nvidia-smi -q [obs]; A100-SXM4-80GB (1410, 1410, 1593, 1290) and default
  application clock 1155 MHz: NVIDIA/DCGM#152 [obs].
- Idle P-state: P0 on A100/H100 class boards (NVIDIA/nccl#1453, idle H100 in P0) [obs];
  P8 on Ada/Turing inference cards [obs in public nvidia-smi output, inf per model].
- Temperature thresholds (shutdown, slowdown, GPU max operating, memory max operating):
  [inf] from commonly posted nvidia-smi -q output of the same families.
"""

from __future__ import annotations

# NVML enum values (pynvml constants), spelled out so this module stays data only.
NVLINK_V2, NVLINK_V3, NVLINK_V4, NVLINK_V5 = 3, 4, 6, 7  # NVML_NVLINK_VERSION_2_2/3_0/4_0/5_0
BRAND_TESLA, BRAND_NVIDIA = 2, 14  # NVML_BRAND_TESLA, NVML_BRAND_NVIDIA

# Per-model board facts: key -> dict of GpuModel fields (see exporter.catalog.GpuModel).
# temperature_limits_c: (shutdown, slowdown, GPU max operating, memory max operating or 0).
BOARD_ROWS: dict[str, dict] = {
    "A30": dict(bar1_mib=32768, pcie_generation=4, pcie_width=16, nvlink_version=NVLINK_V3,
                idle_pstate=0, temperature_limits_c=(92, 89, 85, 95), memory_bus_width=3072,
                brand=BRAND_NVIDIA, default_app_clock_mhz=1440),
    # mig_bar1_mib: ((first driver branch, aperture MiB), ...): a MIG device's BAR1 is the
    # aperture's share of its memory slices, less 1 MiB. Pre-580 the aperture is the whole
    # GPU's BAR1 (32767 / 16383 / 8191 MiB for 4g / 2g / 1g on A100-40GB [obs]); R580 gives a
    # smaller one: 12211 / 6105 / 3052 MiB on 580.126.09 [obs] = 24424 MiB x slices/8 - 1.
    # Boards without an entry use their whole BAR1 on every branch (R580 value not observed).
    "A100-40GB": dict(mig_bar1_mib=((0, 65536), (580, 24424)),
                      bar1_mib=65536, pcie_generation=4, pcie_width=16, nvlink_version=NVLINK_V3,
                      idle_pstate=0, temperature_limits_c=(92, 89, 85, 95), memory_bus_width=5120,
                      brand=BRAND_NVIDIA, default_app_clock_mhz=1095),
    "A100-80GB": dict(bar1_mib=131072, pcie_generation=4, pcie_width=16, nvlink_version=NVLINK_V3,
                      idle_pstate=0, temperature_limits_c=(92, 89, 85, 95), memory_bus_width=5120,
                      brand=BRAND_NVIDIA, default_app_clock_mhz=1155),
    # H100-80GB shutdown 95 / slowdown 89 / GPU max 87 [obs]: NVML thresholds on 580.159.04, and
    # nvidia-smi -q's T.Limit figures (max operating 87 = 31 C + 56; shutdown -8, slowdown -2).
    "H100-80GB": dict(bar1_mib=131072, pcie_generation=5, pcie_width=16, nvlink_version=NVLINK_V4,
                      idle_pstate=0, temperature_limits_c=(95, 89, 87, 95), memory_bus_width=5120,
                      brand=BRAND_NVIDIA, default_app_clock_mhz=1980),
    "H100-NVL": dict(bar1_mib=131072, pcie_generation=5, pcie_width=16, nvlink_version=NVLINK_V4,
                     idle_pstate=0, temperature_limits_c=(92, 89, 87, 95), memory_bus_width=6144,
                     brand=BRAND_NVIDIA, default_app_clock_mhz=1785),
    "H200": dict(bar1_mib=262144, pcie_generation=5, pcie_width=16, nvlink_version=NVLINK_V4,
                 idle_pstate=0, temperature_limits_c=(92, 89, 87, 95), memory_bus_width=6144,
                 brand=BRAND_NVIDIA, default_app_clock_mhz=1980),
    "B200": dict(bar1_mib=262144, pcie_generation=5, pcie_width=16, nvlink_version=NVLINK_V5,
                 idle_pstate=0, temperature_limits_c=(92, 89, 87, 95), memory_bus_width=8192,
                 brand=BRAND_NVIDIA, default_app_clock_mhz=1965),
    "L4": dict(bar1_mib=32768, pcie_generation=4, pcie_width=16, nvlink_version=0,
               idle_pstate=8, temperature_limits_c=(96, 93, 90, 0), memory_bus_width=192,
               brand=BRAND_NVIDIA, default_app_clock_mhz=2040),
    "L40S": dict(bar1_mib=65536, pcie_generation=4, pcie_width=16, nvlink_version=0,
                 idle_pstate=8, temperature_limits_c=(94, 91, 88, 0), memory_bus_width=384,
                 brand=BRAND_NVIDIA, default_app_clock_mhz=2520),
    "T4": dict(bar1_mib=256, pcie_generation=3, pcie_width=16, nvlink_version=0,
               idle_pstate=8, temperature_limits_c=(96, 93, 85, 0), memory_bus_width=256,
               brand=BRAND_TESLA, default_app_clock_mhz=585),
    "V100": dict(bar1_mib=16384, pcie_generation=3, pcie_width=16, nvlink_version=NVLINK_V2,
                 idle_pstate=0, temperature_limits_c=(90, 87, 83, 85), memory_bus_width=4096,
                 brand=BRAND_TESLA, default_app_clock_mhz=1312),
}

# Variant rows: model key -> variants, default first. Fields of exporter.catalog.Variant;
# ``aliases`` are extra names selecting the variant (besides its NVML name; the model's own
# aliases select the default). ``overrides`` replaces GpuModel fields for that board.
VARIANT_ROWS: dict[str, tuple[dict, ...]] = {
    "A30": (
        dict(key="PCIe", nvml_name="NVIDIA A30", aliases=(), pci_device_id=0x20B710DE,
             pci_subsystem_id=0x153210DE, power_limit_watts=165.0, min_power_limit_watts=100.0,
             max_power_limit_watts=165.0, idle_power_watts=30.0, form_factor="PCIe",
             nvlink_links=4, nvlink_active=False),
    ),
    "A100-40GB": (
        dict(key="SXM4", nvml_name="NVIDIA A100-SXM4-40GB", aliases=(), pci_device_id=0x20B010DE,
             pci_subsystem_id=0x134F10DE, power_limit_watts=400.0, min_power_limit_watts=100.0,
             max_power_limit_watts=400.0, idle_power_watts=55.0, form_factor="SXM",
             nvlink_links=12, nvlink_active=True),
        # Seed 001 (MIG guide, A100-PCIE-40GB): idle draw 35-45 W in its nvidia-smi output.
        dict(key="PCIe", nvml_name="NVIDIA A100-PCIE-40GB", aliases=("A100-40GB-PCIe",), pci_device_id=0x20F110DE,
             pci_subsystem_id=0x145F10DE, power_limit_watts=250.0, min_power_limit_watts=150.0,
             max_power_limit_watts=250.0, idle_power_watts=38.0, form_factor="PCIe",
             nvlink_links=12, nvlink_active=False),
    ),
    "A100-80GB": (
        dict(key="SXM4", nvml_name="NVIDIA A100-SXM4-80GB", aliases=(), pci_device_id=0x20B210DE,
             pci_subsystem_id=0x147F10DE, power_limit_watts=400.0, min_power_limit_watts=100.0,
             max_power_limit_watts=400.0, idle_power_watts=60.0, form_factor="SXM",
             nvlink_links=12, nvlink_active=True),
        # HGX A100 80GB boards built for 500 W report the same product name with a 500 W cap
        # (nvidia-smi "51W / 500W", driver 545.23.08, NVIDIA/mig-parted#31) [obs]; subsystem id
        # and minimum limit as the 400 W module [inf]. Selected by variant or alias only.
        dict(key="SXM4-500W", nvml_name="NVIDIA A100-SXM4-80GB", aliases=("A100-80GB-500W",),
             pci_device_id=0x20B210DE, pci_subsystem_id=0x147F10DE, power_limit_watts=500.0,
             min_power_limit_watts=100.0, max_power_limit_watts=500.0, idle_power_watts=50.0,
             form_factor="SXM", nvlink_links=12, nvlink_active=True),
        dict(key="PCIe", nvml_name="NVIDIA A100 80GB PCIe", aliases=("A100-80GB-PCIe",), pci_device_id=0x20B510DE,
             pci_subsystem_id=0x153310DE, power_limit_watts=300.0, min_power_limit_watts=150.0,
             max_power_limit_watts=300.0, idle_power_watts=45.0, form_factor="PCIe",
             nvlink_links=12, nvlink_active=False,
             overrides=dict(max_clocks_mhz=(1410, 1410, 1512, 1290))),
    ),
    "H100-80GB": (
        dict(key="SXM5", nvml_name="NVIDIA H100 80GB HBM3", aliases=(),
             pci_device_id=0x233010DE, pci_subsystem_id=0x16C110DE, power_limit_watts=700.0,
             min_power_limit_watts=200.0, max_power_limit_watts=700.0, idle_power_watts=70.0,
             form_factor="SXM", nvlink_links=18, nvlink_active=True),
        # H100 PCIe: 114 SMs, 350 W, boost 1755 MHz, HBM2e (spec sheet / NVIDIA H100 MIG
        # launchpad page: "114 SMs per GPU"). MIG SMs [obs] (nvidia-smi mig -lgip, drivers 525
        # and 570): 14 / 14 / 14 / 30 / 46 / 62 / 114 for 1g.10gb / 1g.10gb+me / 1g.20gb /
        # 2g.20gb / 3g.40gb / 4g.40gb / 7g.80gb. A 570.169 output (docs/hardware-facts.md) prints
        # the SXM5 table's memory, ids and engines for the rest [obs]; placements as SXM5 [inf].
        dict(key="PCIe", nvml_name="NVIDIA H100 PCIe", aliases=("H100-PCIe",), pci_device_id=0x233110DE,
             pci_subsystem_id=0x162610DE, power_limit_watts=350.0, min_power_limit_watts=200.0,
             max_power_limit_watts=350.0, idle_power_watts=48.0, form_factor="PCIe",
             nvlink_links=12, nvlink_active=False,
             overrides=dict(sm_count=114, max_clocks_mhz=(1755, 1755, 1593, 1545)),
             profile_sms=(("1g.10gb", 14), ("1g.10gb+me", 14), ("1g.20gb", 14), ("2g.20gb", 30),
                          ("3g.40gb", 46), ("4g.40gb", 62), ("7g.80gb", 114))),
    ),
    "H100-NVL": (
        dict(key="NVL", nvml_name="NVIDIA H100 NVL", aliases=(), pci_device_id=0x232110DE,
             pci_subsystem_id=0x183910DE, power_limit_watts=400.0, min_power_limit_watts=200.0,
             max_power_limit_watts=400.0, idle_power_watts=60.0, form_factor="PCIe",
             nvlink_links=12, nvlink_active=True),
    ),
    "H200": (
        dict(key="SXM", nvml_name="NVIDIA H200", aliases=("H200-SXM",),
             pci_device_id=0x233510DE, pci_subsystem_id=0x18BE10DE, power_limit_watts=700.0,
             min_power_limit_watts=200.0, max_power_limit_watts=700.0, idle_power_watts=75.0,
             form_factor="SXM", nvlink_links=18, nvlink_active=True),
        dict(key="NVL", nvml_name="NVIDIA H200 NVL", aliases=("H200-NVL",), pci_device_id=0x233B10DE,
             pci_subsystem_id=0x199610DE, power_limit_watts=600.0, min_power_limit_watts=200.0,
             max_power_limit_watts=600.0, idle_power_watts=70.0, form_factor="PCIe",
             nvlink_links=18, nvlink_active=True),
    ),
    "B200": (
        dict(key="SXM", nvml_name="NVIDIA B200", aliases=(), pci_device_id=0x290110DE,
             pci_subsystem_id=0x199910DE, power_limit_watts=1000.0, min_power_limit_watts=200.0,
             max_power_limit_watts=1000.0, idle_power_watts=140.0, form_factor="SXM",
             nvlink_links=18, nvlink_active=True),
    ),
    "L4": (
        dict(key="PCIe", nvml_name="NVIDIA L4", aliases=(), pci_device_id=0x27B810DE,
             pci_subsystem_id=0x16CA10DE, power_limit_watts=72.0, min_power_limit_watts=40.0,
             max_power_limit_watts=72.0, idle_power_watts=16.0, form_factor="PCIe",
             nvlink_links=0, nvlink_active=False),
    ),
    "L40S": (
        dict(key="PCIe", nvml_name="NVIDIA L40S", aliases=(), pci_device_id=0x26B910DE,
             pci_subsystem_id=0x185110DE, power_limit_watts=350.0, min_power_limit_watts=100.0,
             max_power_limit_watts=350.0, idle_power_watts=35.0, form_factor="PCIe",
             nvlink_links=0, nvlink_active=False),
    ),
    "T4": (
        dict(key="PCIe", nvml_name="Tesla T4", aliases=(), pci_device_id=0x1EB810DE,
             pci_subsystem_id=0x12A210DE, power_limit_watts=70.0, min_power_limit_watts=60.0,
             max_power_limit_watts=70.0, idle_power_watts=10.0, form_factor="PCIe",
             nvlink_links=0, nvlink_active=False),
    ),
    "V100": (
        dict(key="SXM2", nvml_name="Tesla V100-SXM2-16GB", aliases=(),
             pci_device_id=0x1DB110DE, pci_subsystem_id=0x121210DE, power_limit_watts=300.0,
             min_power_limit_watts=150.0, max_power_limit_watts=300.0, idle_power_watts=40.0,
             form_factor="SXM", nvlink_links=6, nvlink_active=True),
        dict(key="PCIe", nvml_name="Tesla V100-PCIE-16GB", aliases=("V100-PCIe",), pci_device_id=0x1DB410DE,
             pci_subsystem_id=0x121410DE, power_limit_watts=250.0, min_power_limit_watts=100.0,
             max_power_limit_watts=250.0, idle_power_watts=30.0, form_factor="PCIe",
             nvlink_links=0, nvlink_active=False,
             overrides=dict(max_clocks_mhz=(1380, 1380, 877, 1237))),
    ),
}
