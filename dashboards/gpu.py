"""GPU detail: one GPU of one exporter, everything the exporter knows about it."""

from __future__ import annotations

from dashboards.common import (
    ACTIVITY_SOURCE, LINKS, MIG_LEGEND, NO_ACTIVITY, NO_FORECAST, NO_GPU, NO_MPS, NO_PROCESS,
    ONE_GPU_VARIABLES, TREND_DESCRIPTION, TREND_TITLE, GiB, sel, usable_gpu_memory,
)
from dashboards.grafana import Column, Dashboard, Panel, Query, Row

NO_MIG_HERE = "not in MIG mode"
NO_UTILIZATION = "none under MIG (NVML has no utilization for a MIG-enabled GPU)"
PIPES = ("sm", "tensor", "fp64", "fp32", "fp16", "dram", "graphics")
PROC = "GI {{gi}} {{process}} ({{pid}}{{namespace}}/{{pod}}/{{container}}{{replica}})"

identity = Row("Identity: which GPU is this, how is it shared, is it readable?", (
    Panel("GPU", "table", "none", (Query(sel("gpushare_gpu_info")),), width=15, height=4,
          hide=("job", "instance", "Value"),
          no_value=NO_GPU, description="Name, UUID, PCI bus, driver, MIG mode, compute mode and sharing mode."),
    Panel("Readable", "stat", "none", (Query(sel("gpushare_gpu_up")),), width=3, height=4,
          thresholds=((1, "green"),), base_color="red", no_value=NO_GPU, description="1: read this poll; 0: lost or timed out."),
    Panel("Temperature", "stat", "celsius", (Query(sel("gpushare_gpu_temperature_celsius")),), width=3, height=4,
          thresholds=((80, "orange"), (87, "red")), no_value=NO_GPU, description="GPU core temperature."),
    Panel("Power", "stat", "watt", (Query(sel("gpushare_gpu_power_watts")),), width=3, height=4,
          no_value=NO_GPU, description="Board power draw."),
))

memory = Row("Memory: how is it used, and will the expected peak fit?", (
    Panel("Memory", "timeseries", "bytes", (
        Query(sel("gpushare_gpu_memory_used_bytes"), "used"),
        Query(sel("gpushare_gpu_memory_free_bytes"), "free"),
        Query(sel("gpushare_gpu_memory_reserved_bytes"), "reserved by the driver"),
        Query(sel("gpushare_gpu_memory_total_bytes"), "total"),
    ), minimum=0, no_value=NO_GPU, description="Framebuffer memory of the physical GPU (MIG instances included)."),
    Panel("Expected peak demand vs usable memory", "timeseries", "bytes", (
        Query(sel("gpushare_gpu_memory_peak_demand_bytes"), "expected peak demand"),
        Query(sel("gpushare_gpu_memory_expected_peak_sum_bytes"), "sum of expected peaks"),
        Query(usable_gpu_memory(), "usable"),
    ), minimum=0,
        no_value=NO_MIG_HERE + " (the forecast is per MIG instance), or " + NO_FORECAST, description="Forecast from learned workload profiles (GPUs outside MIG mode): demand above usable means an "
                    "out-of-memory is coming."),
    Panel("Headroom at the expected peak", "stat", "bytes", (Query(sel("gpushare_gpu_memory_headroom_bytes")),),
          width=8, height=4, thresholds=((0, "orange"), (4 * GiB, "green")), base_color="red",
          no_value=NO_MIG_HERE + " (the forecast is per MIG instance), or " + NO_FORECAST, description="Usable memory minus expected peak demand (forecast)."),
    Panel("Predicted out-of-memory in", "stat", "s", (Query(sel("gpushare_gpu_memory_contention_eta_seconds")),),
          width=8, height=4, base_color="red", no_value="none predicted",
          description="When the expected demand first exceeds usable memory (forecast; absent when it fits)."),
    Panel(TREND_TITLE, "stat", "s", (Query(sel("gpushare_gpu_memory_exhaustion_eta_seconds")),), width=8, height=4,
          base_color="blue", no_value="not filling up", description=TREND_DESCRIPTION),
))

mig = Row("MIG: which instances does it have, and how full and busy is each?", (
    Panel("MIG instances", "table", "bytes", (
        Query(sel("gpushare_mig_memory_used_bytes")),
        Query(sel("gpushare_mig_memory_total_bytes")),
        Query(sel("gpushare_mig_sm_active_ratio")),
        Query(sel("gpushare_mig_memory_headroom_bytes")),
    ), columns=(Column("Used", "bytes"), Column("Size", "bytes"), Column("SM active", "percentunit"),
                Column("Headroom at expected peak", "bytes")),
        hide=("job", "instance", "uuid"),
        no_value=NO_MIG_HERE, description="One row per GPU instance (forecast column: learned profiles; SM active column: needs an "
                    "activity source, DCGM on pre-Hopper GPUs)."),
    Panel("MIG devices and placement", "table", "none", (Query(sel("gpushare_mig_info")),),
          hide=("job", "instance", "uuid", "Value"),
          no_value=NO_MIG_HERE, description="One row per compute instance: placement (memory slices), SMs, MIG device UUID."),
    Panel("Memory used by MIG instance", "timeseries", "bytes",
          (Query(sel("gpushare_mig_memory_used_bytes"), "GI {{gi}} ({{profile}})"),), minimum=0, width=24,
          no_value=NO_MIG_HERE, description="Each instance has its own memory."),
))

processes = Row("Processes: who holds memory and compute on it?", (
    Panel("Processes", "table", "bytes", (
        Query(sel("gpushare_process_memory_used_bytes")),
        Query(sel("gpushare_process_sm_utilization_ratio")),
    ), columns=(Column("Memory", "bytes"), Column("SM time", "percentunit")), hide=("job", "instance", "uuid"),
        no_value=NO_PROCESS, description="SM time is absent under MIG, where NVML has no per-process utilization."),
    Panel("Memory by process", "timeseries", "bytes",
          (Query(sel("gpushare_process_memory_used_bytes"), PROC),), minimum=0, stack=True,
          no_value=NO_PROCESS, description="Stacked: the top is what processes hold together."),
    Panel("Expected peak by process", "table", "bytes",
          (Query(sel("gpushare_process_memory_expected_peak_bytes")),),
          columns=(Column("Expected peak", "bytes"),), hide=("job", "instance", "uuid"), width=24, height=6,
          no_value=NO_PROCESS + ", or " + NO_FORECAST, description="Learned peak of each process's workload, at least its current use (forecast)."),
))

mps = Row("MPS: is there a server, and how are its clients limited?", (
    Panel("MPS servers", "table", "none", (Query(sel("gpushare_mps_server_info")),), width=8,
          hide=("job", "instance", "uuid", "Value"), no_value=NO_MPS, description="nvidia-cuda-mps-server processes (gi: instance)."),
    Panel("MPS clients", "timeseries", "short", (Query(sel("gpushare_mps_clients"), "GI {{gi}}"),),
          minimum=0, width=8, no_value=NO_MPS, description="Client processes per MPS server."),
    Panel("MPS client limits", "table", "bytes", (
        Query(sel("gpushare_mps_client_memory_limit_bytes")),
        Query(sel("gpushare_mps_client_active_thread_ratio")),
    ), columns=(Column("Pinned memory limit", "bytes"), Column("SM share", "percentunit")),
        hide=("job", "instance", "uuid"), width=8,
        no_value="no MPS client with CUDA_MPS_PINNED_DEVICE_MEM_LIMIT or CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", description="CUDA_MPS_PINNED_DEVICE_MEM_LIMIT and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE from each client."),
))

pipes = Row("Activity: which engines are busy?", (
    Panel("Activity pipes", "timeseries", "percentunit", tuple(
        Query(sel(f"gpushare_gpu_{pipe}_active_ratio"), pipe) for pipe in PIPES
    ) + (Query(sel("gpushare_gpu_sm_occupancy_ratio"), "sm occupancy"),), minimum=0, maximum=1,
        no_value=NO_ACTIVITY,
        description="Activity of the whole GPU: SMs, tensor, FP64/32/16 pipes, DRAM, graphics engine. Without an "
                    "activity source see Driver utilization (outside MIG). " + ACTIVITY_SOURCE),
    Panel("Driver utilization", "timeseries", "percentunit", (
        Query(sel("gpushare_gpu_utilization_ratio"), "kernel time"),
        Query(sel("gpushare_gpu_memory_utilization_ratio"), "memory read/write time"),
    ), minimum=0, maximum=1, no_value=NO_UTILIZATION, description="nvmlDeviceGetUtilizationRates; absent on MIG-enabled GPUs."),
    Panel("Activity by MIG instance: SM active", "timeseries", "percentunit",
          (Query(sel("gpushare_mig_sm_active_ratio"), MIG_LEGEND),), minimum=0, maximum=1, width=24,
          no_value=NO_ACTIVITY,
          description="Per GPU instance (DCGM profiling fields or GPM). The driver has no per-instance "
                      "utilization. " + ACTIVITY_SOURCE),
))

power = Row("Power, thermal and clocks: is it throttled?", (
    Panel("Power", "timeseries", "watt", (
        Query(sel("gpushare_gpu_power_watts"), "draw"),
        Query(sel("gpushare_gpu_power_limit_watts"), "enforced limit"),
        Query(f"rate({sel('gpushare_gpu_energy_joules_total')}[$__rate_interval])", "from the energy counter"),
    ), minimum=0, no_value=NO_GPU, description="Draw, limit, and the average power the energy counter gives."),
    Panel("Temperature", "timeseries", "celsius", (Query(sel("gpushare_gpu_temperature_celsius"), "core"),),
          thresholds=((80, "orange"), (87, "red")), no_value=NO_GPU, description="GPU core temperature."),
    Panel("Clocks", "timeseries", "hertz", (Query(sel("gpushare_gpu_clock_hertz"), "{{clock}}"),), minimum=0,
          no_value=NO_GPU, description="Current clock by domain."),
    Panel("Clock event reasons", "timeseries", "bool_on_off",
          (Query(sel("gpushare_gpu_clock_event_active"), "{{reason}}"),), minimum=0, maximum=1,
          no_value="clock event reasons not readable", description="Throttle reasons active (1) or not; thermal and hardware slowdowns have alerts."),
))

errors = Row("Errors: has it reported ECC or XID errors?", (
    Panel("ECC errors (volatile)", "timeseries", "short",
          (Query(sel("gpushare_gpu_ecc_errors_total"), "{{type}}"),), minimum=0,
          no_value="no ECC counters (ECC off or not supported)", description="Counts since the driver was loaded; any uncorrected error is critical."),
    Panel("XID errors", "timeseries", "short", (Query(sel("gpushare_gpu_xid_errors_total"), "XID {{xid}}"),),
          minimum=0, no_value="no XID since the exporter started", description="Counts since the exporter started; a series appears with its first XID."),
))

DASHBOARD = Dashboard(
    uid="gpushare-gpu",
    title="gpushare / GPU detail",
    description="One GPU: identity, memory and forecast, MIG instances, processes, MPS clients, activity pipes, "
                "power, thermal, clocks and errors.",
    variables=ONE_GPU_VARIABLES,
    rows=(identity, memory, mig, processes, mps, pipes, power, errors),
    links=LINKS,
)
