"""Fleet overview: every GPU of the selected exporters, how it is shared, how busy and how full."""

from __future__ import annotations

from dashboards.common import (
    ACTIVITY_SOURCE, EXPORTER, FLEET_VARIABLES, GPU_LEGEND, LINKS, MIG_LEGEND, NO_ACTIVITY, NO_EXPORTER, NO_FORECAST,
    INSTANCE_LABELS, NO_GPU, NO_MIG, NO_MPS, NO_POD, TREND_DESCRIPTION, TREND_TITLE, GiB, busy_ratio, count_once,
    new_in, on_shared_gpus, once, one_of_each, sel, usable_gpu_memory, with_gpu_identity,
)
from dashboards.grafana import Column, Dashboard, Panel, Query, Row

FIRING = sel("ALERTS", 'alertstate="firing"', scope=EXPORTER)
FORECAST = " (forecast: needs the exporter's learned workload profiles)"

inventory = Row("Fleet: what GPUs are there and how is each one shared?", (
    Panel("GPUs", "stat", "short", (Query(count_once(sel('gpushare_gpu_info'), "uuid")),), width=3, height=4,
          no_value=NO_GPU, description="Physical GPUs the selected exporters report."),
    Panel("GPUs lost", "stat", "short", (Query(f"sum(1 - {once(sel('gpushare_gpu_up'), 'uuid')})"),), width=3, height=4,
          thresholds=((1, "red"),), no_value=NO_GPU,
          description="GPUs that could not be read this poll (lost, or slower than --gpu-timeout)."),
    Panel("MIG instances", "stat", "short",
          (Query(count_once(sel('gpushare_mig_info'), "uuid, gi")),), width=3, height=4,
          no_value=NO_MIG, description="MIG GPU instances (compute instances of one GPU instance count once)."),
    Panel("Processes", "stat", "short", (Query(count_once(sel('gpushare_process_memory_used_bytes'), f"uuid, gi, {INSTANCE_LABELS}")),),
          width=3, height=4, no_value="no process holds a GPU",
          description="Processes holding a GPU context (MPS servers and clients included)."),
    Panel("MPS clients", "stat", "short", (Query(f"sum({once(sel('gpushare_mps_clients'), 'uuid, gi')})"),), width=3, height=4,
          no_value=NO_MPS, description="Client processes of all MPS servers."),
    Panel("Exporters", "stat", "short", (Query(count_once(sel('gpushare_exporter_build_info', scope=EXPORTER), "cluster, instance")),),
          width=3, height=4, no_value=NO_EXPORTER, description="Exporters reporting in the selection."),
    Panel("Alerts firing", "stat", "short",
          (Query(f"count by (severity) ({FIRING})", "{{severity}}"),),
          width=6, height=4, thresholds=((1, "orange"),), no_value="0",
          description="Firing gpushare alerts by severity (load alerts/*.yml into Prometheus)."),
    Panel("GPUs by sharing mode", "piechart", "short",
          (Query(f"count by (sharing) ({one_of_each(sel('gpushare_gpu_info'), 'uuid')})", "{{sharing}}"),), width=8, no_value=NO_GPU,
          description="exclusive: one process; time_slicing: several without MPS; mps; mig; mig+mps; idle."),
    Panel("GPUs now", "table", "bytes", (
        Query(with_gpu_identity(sel("gpushare_gpu_memory_used_bytes"))),
        Query(with_gpu_identity(sel("gpushare_gpu_memory_total_bytes"))),
        Query(with_gpu_identity(busy_ratio())),
        Query(with_gpu_identity(sel("gpushare_gpu_power_watts"))),
    ), columns=(Column("Memory used", "bytes"), Column("Memory total", "bytes"),
                Column("SM active (or kernel time)", "percentunit"), Column("Power", "watt")),
        hide=("job", "uuid"), width=16, no_value=NO_GPU,
        description="One row per GPU: identity, sharing mode, memory, SM activity and power now. Without an "
                    "activity source the busy column is the driver's kernel time (empty for MIG GPUs). "
                    + ACTIVITY_SOURCE),
))

activity = Row("Utilisation: how busy are the GPUs?", (
    Panel("SM active by GPU", "timeseries", "percentunit", (
        Query(sel("gpushare_gpu_sm_active_ratio"), GPU_LEGEND),
        Query(f"{sel('gpushare_gpu_utilization_ratio')} unless on(job, instance, uuid) "
              f"{sel('gpushare_gpu_sm_active_ratio')}", GPU_LEGEND + ": kernel time, no activity source"),
    ), minimum=0, maximum=1, no_value=NO_ACTIVITY,
        description="Fraction of time at least one warp was resident on an SM; works under MIG too. A GPU without "
                    "an activity source shows the driver's kernel time instead (labelled so; it overstates how busy "
                    "the SMs are), and a MIG GPU without one shows nothing: NVML has no utilization under MIG. "
                    + ACTIVITY_SOURCE),
    Panel("Kernel time by GPU (driver utilization)", "timeseries", "percentunit",
          (Query(sel("gpushare_gpu_utilization_ratio"), GPU_LEGEND),), minimum=0, maximum=1,
          no_value="no GPU outside MIG mode (NVML has no utilization under MIG)",
          description="Fraction of the sample period in which a kernel ran. NVML has no value for MIG-enabled GPUs."),
    Panel("Average SM active by sharing mode", "bargauge", "percentunit",
          (Query(f"avg by (sharing) ({with_gpu_identity(busy_ratio())})", "{{sharing}}"),),
          minimum=0, maximum=1, thresholds=((0.2, "yellow"), (0.5, "green")), base_color="red", no_value=NO_ACTIVITY,
          description="Does a sharing mode pay off? Low values on exclusive GPUs are the under-used advice. GPUs "
                      "without an activity source count with their kernel time; MIG GPUs without one are left out. "
                      + ACTIVITY_SOURCE),
    Panel("Power by GPU", "timeseries", "watt", (Query(sel("gpushare_gpu_power_watts"), GPU_LEGEND),),
          minimum=0, no_value=NO_GPU, description="Board power draw."),
))

memory = Row("Memory headroom: how much is left now, and at the expected peak?", (
    Panel("Memory used of usable, by GPU", "bargauge", "percentunit",
          (Query(f"{sel('gpushare_gpu_memory_used_bytes')} / {usable_gpu_memory()}", GPU_LEGEND),),
          minimum=0, maximum=1, thresholds=((0.8, "orange"), (0.95, "red")), no_value=NO_GPU,
          description="Used / (total - reserved). On a MIG GPU this is the sum over its instances."),
    Panel("Memory used of instance, by MIG instance", "bargauge", "percentunit",
          (Query(f"{sel('gpushare_mig_memory_used_bytes')} / {sel('gpushare_mig_memory_total_bytes')}",
                 MIG_LEGEND),),
          minimum=0, maximum=1, thresholds=((0.8, "orange"), (0.95, "red")), no_value=NO_MIG,
          description="Each MIG instance has its own memory: one instance can run out while the GPU has room."),
    Panel("Free memory by GPU", "timeseries", "bytes", (Query(sel("gpushare_gpu_memory_free_bytes"), GPU_LEGEND),),
          minimum=0, no_value=NO_GPU, description="Framebuffer memory free."),
    Panel("Headroom at the expected peak, shared GPUs", "bargauge", "bytes",
          (Query(on_shared_gpus(sel("gpushare_gpu_memory_headroom_bytes")), GPU_LEGEND),),
          thresholds=((0, "orange"), (4 * GiB, "green")), base_color="red",
          no_value="no GPU shared by MPS or time-slicing, or " + NO_FORECAST,
          description="Usable memory minus the time-aware peak demand of the processes on the GPU; negative means "
                      "an out-of-memory is predicted" + FORECAST + "."),
    Panel("Headroom at the expected peak, MIG instances", "bargauge", "bytes",
          (Query(sel("gpushare_mig_memory_headroom_bytes"), MIG_LEGEND),),
          thresholds=((0, "orange"), (GiB, "green")), base_color="red", no_value=NO_MIG + ", or " + NO_FORECAST,
          description="As on the left, per MIG instance" + FORECAST + "."),
    Panel(TREND_TITLE, "stat", "s", (
        Query(sel("gpushare_gpu_memory_exhaustion_eta_seconds"), GPU_LEGEND),
        Query(sel("gpushare_mig_memory_exhaustion_eta_seconds"), MIG_LEGEND),
    ), width=24, height=4, base_color="blue", no_value="not filling up", description=TREND_DESCRIPTION),
))



def by_namespace(expr: str) -> str:
    """``sum by (namespace)`` of ``expr`` (each GPU's row once, however often it is stored), the unattributed
    rest (namespace "") named as such."""
    return f'label_replace(sum by (namespace) ({once(expr, "namespace, uuid")}), "namespace", "(unattributed)", "namespace", "")'


NAMESPACE_RATE = "rate({}[$__rate_interval])"
namespaces = Row("GPU use by namespace: who uses the shared GPUs, and how much?", (
    Panel("SM time by namespace", "timeseries", "short",
          (Query(by_namespace(NAMESPACE_RATE.format(sel("gpushare_namespace_sm_seconds_total"))), "{{namespace}}"),),
          minimum=0, width=8, no_value=NO_POD,
          description="GPUs' worth of SM time each namespace's pods use (1 = every SM of one GPU busy). Split from "
                      "per-process samples, never the device's value copied; (unattributed): host processes and "
                      "shares that cannot be split. Kubernetes only."),
    Panel("Memory held by namespace", "timeseries", "bytes",
          (Query(by_namespace(NAMESPACE_RATE.format(sel("gpushare_namespace_memory_byte_seconds_total"))),
                 "{{namespace}}"),),
          minimum=0, width=8, no_value=NO_POD,
          description="Average device memory held by each namespace's pods (byte-seconds per second)."),
    Panel("Energy by namespace", "timeseries", "watt",
          (Query(by_namespace(NAMESPACE_RATE.format(sel("gpushare_namespace_energy_joules_total"))),
                 "{{namespace}}"),),
          minimum=0, width=8, no_value=NO_POD,
          description="GPU power booked to each namespace by its SM share; (unattributed) includes idle power."),
    Panel("Use by namespace over the time range", "table", "s", (
        Query(by_namespace(new_in(sel("gpushare_namespace_sm_seconds_total"), "$__range")), instant=True),
        Query(by_namespace(new_in(sel("gpushare_namespace_energy_joules_total"), "$__range")), instant=True),
    ), columns=(Column("SM time", "s"), Column("Energy", "joule")), width=24, no_value=NO_POD,
        description="What to bill a shared GPU by: SM-seconds and estimated joules per namespace over the selected "
                    "time range (recording rules namespace:gpushare_*:rate5m in alerts/gpushare-recording.yml)."),
))

alerts = Row("Alerts: what is firing or about to fire?", (
    Panel("gpushare alerts", "table", "none", (Query(sel("ALERTS", scope=EXPORTER)),), width=24,
          hide=("job", "Value"), no_value="no alert",
          description="Alerts from alerts/*.yml, firing or pending (waiting out their 'for'), with their labels."),
))

exporters = Row("Exporters: are they up and current?", (
    Panel("Scrape up", "bargauge", "none", (Query(sel("up", scope=EXPORTER), "{{instance}}"),),
          minimum=0, maximum=1, thresholds=((1, "green"),), base_color="red", width=6, no_value=NO_EXPORTER,
          description="1 when Prometheus scraped the exporter last time."),
    Panel("Age of the last successful poll", "bargauge", "s",
          # clamp_min: a poll that finishes while Prometheus scrapes is stamped after the scrape's own
          # timestamp, which an evaluation just after that scrape would show as a negative age.
          (Query(f"clamp_min(time() - {sel('gpushare_exporter_last_poll_timestamp_seconds', scope=EXPORTER)}, 0)",
                 "{{instance}}"),),
          minimum=0, thresholds=((60, "orange"), (120, "red")), width=6, no_value=NO_EXPORTER,
          description="The exporter keeps serving its last poll; old means a stuck poller (GpushareExporterStale)."),
    Panel("Collector success", "timeseries", "none",
          (Query(sel("gpushare_exporter_collector_success", scope=EXPORTER), "{{instance}} {{collector}}"),),
          minimum=0, maximum=1, width=6, no_value=NO_EXPORTER,
          description="1 when the collector ran and its data was read this poll."),
    Panel("Failed NVML calls", "timeseries", "short",
          (Query(f"sum by (instance, call, error) "
                 f"({once(new_in(sel('gpushare_exporter_poll_errors_total', scope=EXPORTER), '$__rate_interval'), 'cluster, instance, call, error, uuid')})",
                 "{{instance}} {{call}} {{error}}"),),
          minimum=0, width=6, no_value="no failed NVML call",
          description="Driver calls that failed in each interval ($__rate_interval), by call and error class "
                      "(NotSupported excluded). A call and error series appears at its first failure, so it is "
                      "counted from its birth: a single failure shows as 1, where rate() would show nothing."),
    Panel("Data sources", "bargauge", "none",
          (Query(sel("gpushare_exporter_source_available", scope=EXPORTER), "{{instance}} {{source}}"),),
          minimum=0, maximum=1, thresholds=((1, "green"),), base_color="red", width=12, height=6,
          no_value=NO_EXPORTER, description="1 while a source delivers: nvml (the driver), dcgm (DCGM's host engine: device fields), "
                      "dcgm_profiling (pipe activity). 0 says why on the exporter's landing page and in its log: host "
                      "engine away, profiling counters held by Nsight/CUPTI (-37), profiling package missing (-33), "
                      "root needed under MIG (-29), DCGM version mismatch. The rest is served from NVML meanwhile."),
    Panel("Poll duration", "timeseries", "s",
          (Query(sel("gpushare_exporter_poll_duration_seconds", scope=EXPORTER), "{{instance}}"),),
          minimum=0, width=12, height=6, no_value=NO_EXPORTER, description="Wall time of the latest poll of all GPUs."),
))

DASHBOARD = Dashboard(
    uid="gpushare-fleet",
    title="gpushare / Fleet overview",
    description="Shared NVIDIA GPUs of the selected exporters: sharing modes, utilisation, memory headroom, "
                "alerts and exporter health.",
    variables=FLEET_VARIABLES,
    rows=(inventory, activity, memory, namespaces, alerts, exporters),
    links=LINKS,
)
