"""MPS & contention: client memory vs pinned limits, expected peak demand vs capacity, OOM ETA and kills."""

from __future__ import annotations

from dashboards.common import (
    INSTANCE_LABELS,
    PROCESS_LEGEND,
    EXPORTER, FLEET_VARIABLES, GPU_LEGEND, LINKS, MIG_LEGEND, MPS_SHARING, NO_FORECAST, NO_MPS, NO_SIMULATION,
    SOURCE, TREND_DESCRIPTION, TREND_TITLE, GiB, count_once, on_shared_gpus, once, sel, usable_gpu_memory,
)
from dashboards.grafana import Column, Dashboard, Panel, Query, Row

# MPS clients: processes in MPS sharing that are not the MPS server itself.
CLIENT_MEMORY = (f"{sel('gpushare_process_memory_used_bytes', MPS_SHARING)} "
                 f"unless on(job, instance, uuid, pid) {sel('gpushare_mps_server_info')}")
LIMIT = sel("gpushare_mps_client_memory_limit_bytes")
WHOLE_GPU_LIMITS = sel("gpushare_mps_client_memory_limit_bytes", 'gi=""')
MIG_LIMITS = sel("gpushare_mps_client_memory_limit_bytes", 'gi!=""')
# Processes that can take memory another process on the same device needs.
CONTENDED = 'sharing=~"mps|mig[+]mps|time_slicing"'
EXPECTED_PEAK = sel("gpushare_process_memory_expected_peak_bytes", CONTENDED)
CLIENT = PROCESS_LEGEND
FORECAST = " Forecast from the exporter's learned workload profiles."
NO_CLIENT = "no MPS clients"
NO_SHARED = "no GPU shared by MPS or time-slicing"
NO_LIMIT = "no MPS client with CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
OOM_KILLS_IN_RANGE = f"increase({sel('gpushare_simulation_oom_kills_total')}[$__range])"

clients = Row("Clients: who shares each GPU under MPS, and within which limits?", (
    Panel("MPS servers", "stat", "short", (Query(count_once(sel('gpushare_mps_server_info'), "uuid, gi, pid")),), width=4,
          no_value=NO_MPS, description="nvidia-cuda-mps-server processes (one per GPU, or per MIG instance under MIG+MPS)."),
    Panel("MPS clients per server", "timeseries", "short",
          (Query(sel("gpushare_mps_clients"), "{{instance}} GPU {{gpu}} GI {{gi}}"),), minimum=0, width=10,
          no_value=NO_MPS, description="Client processes of each MPS server (GI empty: whole-GPU MPS)."),
    Panel("Clients without a pinned memory limit", "stat", "short",
          (Query(count_once(f"{CLIENT_MEMORY} unless on(job, instance, uuid, gi, {INSTANCE_LABELS}) {LIMIT}",
                            f"uuid, gi, {INSTANCE_LABELS}")),), width=4,
          thresholds=((1, "orange"),), no_value="0",
          description="Such a client can take memory the others need (MpsClientWithoutMemoryLimit advice)."),
    Panel("Pinned limits as a share of usable memory", "bargauge", "percentunit", (
        Query(f"sum by ({SOURCE}, gpu, uuid) ({once(WHOLE_GPU_LIMITS, f'{SOURCE}, gpu, uuid, gi, {INSTANCE_LABELS}')})"
              f" / on(job, instance, uuid) group_left() {once(usable_gpu_memory(), 'job, instance, uuid')}", GPU_LEGEND),
        Query(f"sum by ({SOURCE}, gpu, uuid, gi) ({once(MIG_LIMITS, f'{SOURCE}, gpu, uuid, gi, {INSTANCE_LABELS}')})"
              f" / on(job, instance, uuid, gi) group_left() "
              f"{once(sel('gpushare_mig_memory_total_bytes'), 'job, instance, uuid, gi')}",
              "{{instance}} GPU {{gpu}} GI {{gi}}"),
    ), minimum=0, thresholds=((0.9, "orange"), (1, "red")), width=6,
        no_value=NO_LIMIT, description="Over 100 %: the limits overcommit the device, so clients can hit OOM below their limits."),
    Panel("Client memory vs its pinned limit", "table", "bytes", (
        Query(CLIENT_MEMORY),
        Query(LIMIT),
        Query(f"({CLIENT_MEMORY}) / on(job, instance, uuid, gi, {INSTANCE_LABELS}) group_left() "
              f"{once(LIMIT, f'job, instance, uuid, gi, {INSTANCE_LABELS}')}"),
        Query(sel("gpushare_mps_client_active_thread_ratio")),
    ), columns=(Column("Memory used", "bytes"), Column("Pinned limit", "bytes"),
                Column("Used of limit", "percentunit", colored=True), Column("SM share", "percentunit")),
        thresholds=((0.8, "orange"), (0.95, "red")), hide=("job", "uuid", "sharing"), width=24,
        no_value=NO_CLIENT, description="A client past its pinned limit gets out-of-memory errors even when the GPU has room; "
                    "a client without one has an empty limit column."),
    Panel("Client memory", "timeseries", "bytes", (Query(CLIENT_MEMORY, CLIENT),), minimum=0, stack=True,
          width=24, no_value=NO_CLIENT, description="Stacked per GPU: the top is what the clients hold together."),
))

demand = Row("Contention: will the clients' peaks fit together, and when do they collide?", (
    Panel("In use, expected peak demand and usable memory", "timeseries", "bytes", (
        Query(on_shared_gpus(sel("gpushare_gpu_memory_peak_demand_bytes")), GPU_LEGEND + " expected peak demand"),
        Query(on_shared_gpus(sel("gpushare_gpu_memory_expected_peak_sum_bytes")),
              GPU_LEGEND + " sum of expected peaks"),
        Query(on_shared_gpus(sel("gpushare_gpu_memory_used_bytes")), GPU_LEGEND + " in use"),
        Query(on_shared_gpus(usable_gpu_memory()), GPU_LEGEND + " usable"),
    ), minimum=0, width=16, height=9,
        no_value=NO_SHARED + ", or " + NO_FORECAST, description="GPUs shared by MPS or time-slicing. Expected peak demand above usable memory: an "
                    "out-of-memory is coming, usually minutes before it happens." + FORECAST),
    Panel("Headroom at the expected peak", "timeseries", "bytes", (
        Query(on_shared_gpus(sel("gpushare_gpu_memory_headroom_bytes")), GPU_LEGEND),
        Query(f"{sel('gpushare_mig_memory_headroom_bytes')} and on(job, instance, uuid, gi) "
              f"{sel('gpushare_mps_clients')}", MIG_LEGEND),
    ), thresholds=((0, "transparent"),), base_color="red", width=8, height=9,
        no_value=NO_SHARED + ", or " + NO_FORECAST, description="Usable memory minus expected peak demand, on shared GPUs and MIG+MPS instances; below the "
                    "zero line: predicted OOM (GpuMemoryContentionPredicted)." + FORECAST),
    Panel("Peaks collide in", "stat", "s", (
        Query(on_shared_gpus(sel("gpushare_gpu_memory_contention_eta_seconds")), GPU_LEGEND),
        Query(sel("gpushare_mig_memory_contention_eta_seconds"), MIG_LEGEND),
    ), width=8, height=5, base_color="red", no_value="no collision predicted",
        description="Seconds until the expected demand first exceeds usable memory." + FORECAST),
    Panel("Start spacing that avoids it", "stat", "s", (
        Query(on_shared_gpus(sel("gpushare_gpu_memory_stagger_needed_seconds")), GPU_LEGEND),
        Query(sel("gpushare_mig_memory_stagger_needed_seconds"), MIG_LEGEND),
    ), width=8, height=5, base_color="blue", no_value="none needed or none fits",
        description="Smallest spacing between job starts at which the learned timelines fit." + FORECAST),
    Panel(TREND_TITLE, "stat", "s", (
        Query(on_shared_gpus(sel("gpushare_gpu_memory_exhaustion_eta_seconds")), GPU_LEGEND),
        Query(sel("gpushare_mig_memory_exhaustion_eta_seconds"), MIG_LEGEND),
    ), width=8, height=5, base_color="blue", no_value="not filling up", description=TREND_DESCRIPTION),
    Panel("Expected peak of each client", "table", "bytes", (
        Query(EXPECTED_PEAK),
        # "+ 0 * peak" only copies the workload label, so the rows line up with the first query's.
        Query(f"{sel('gpushare_process_memory_used_bytes', CONTENDED)} + on(job, instance, uuid, gi, {INSTANCE_LABELS}) "
              f"group_left(workload) (0 * {once(EXPECTED_PEAK, f'job, instance, uuid, gi, {INSTANCE_LABELS}, workload')})"),
    ), columns=(Column("Expected peak", "bytes"), Column("In use now", "bytes")), hide=("job", "uuid"),
        no_value=NO_SHARED + ", or " + NO_FORECAST, description="Learned peak of each process's workload next to its use now." + FORECAST),
    Panel("Who holds what when the peaks collide", "bargauge", "bytes",
          (Query(sel("gpushare_process_memory_expected_at_contention_bytes"),
                 "{{instance}} GPU {{gpu}} {{workload}} ({{pid}}{{pod}}{{replica}})"),),
          thresholds=((8 * GiB, "orange"),), base_color="yellow",
          no_value="no collision predicted", description="Each process's expected memory at the predicted overflow (only while one is predicted)."
                      + FORECAST),
    Panel("Learned workload profiles", "table", "bytes", (
        Query(sel("gpushare_workload_profile_peak_bytes", scope=EXPORTER)),
        Query(sel("gpushare_workload_profile_peak_offset_seconds", scope=EXPORTER)),
        Query(sel("gpushare_workload_profile_duration_seconds", scope=EXPORTER)),
        Query(sel("gpushare_workload_profile_runs", scope=EXPORTER)),
    ), columns=(Column("Peak", "bytes"), Column("Peaks at age", "s"), Column("Run length", "s"),
                Column("Runs learned", "short")), hide=("job",), width=24,
        no_value="nothing learned yet: profiles appear when a run ends", description="What the exporter learned per workload (command line, GPUSHARE_WORKLOAD or Kubernetes owner): "
                    "the forecast replays these timelines. Runs 0: provisional, not used yet."),
))

kills = Row("Outcome: did anyone get killed? (simulation only)", (
    Panel("Out-of-memory kills in the time range", "stat", "short",
          (Query(f"sum by (instance) ({once(OOM_KILLS_IN_RANGE, 'cluster, instance, uuid')})",
                 "{{instance}}"),), width=8, thresholds=((1, "red"),),
          no_value=NO_SIMULATION, description="Processes the simulator killed because their device ran out of memory. A real GPU has no "
                      "such counter: the process gets a CUDA out-of-memory error."),
    Panel("Out-of-memory kills", "timeseries", "short",
          (Query(sel("gpushare_simulation_oom_kills_total"), "{{instance}} GPU {{gpu}} GI {{gi}}"),), minimum=0,
          width=16, no_value=NO_SIMULATION, description="Cumulative simulated kills per GPU or MIG instance: when they happened."),
    Panel("Simulated time", "stat", "s",
          (Query(sel("gpushare_simulation_time_seconds", scope=EXPORTER), "{{instance}}"),), width=24, height=4,
          no_value=NO_SIMULATION, description="Virtual time of each simulated scenario (compare with the ETA panels)."),
))

DASHBOARD = Dashboard(
    uid="gpushare-mps",
    title="gpushare / MPS & contention",
    description="MPS clients and their limits, expected peak demand against capacity, the predicted time of an "
                "out-of-memory and, in simulation, the kills.",
    variables=FLEET_VARIABLES,
    rows=(clients, demand, kills),
    links=LINKS,
)
