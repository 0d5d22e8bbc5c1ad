"""MIG: per-instance memory and headroom, activity, free capacity per profile, oversized instances."""

from __future__ import annotations

from dashboards.common import (
    ACTIVITY_SOURCE, FLEET_VARIABLES, LINKS, MIG_LEGEND, NO_ACTIVITY, NO_FORECAST, NO_MIG, SOURCE, TREND_TITLE, GiB,
    once, sel,
)
from dashboards.grafana import Column, Dashboard, Panel, Query, Row

PIPES = (("sm_occupancy", "SM occupancy"), ("tensor_active", "Tensor pipes active"),
         ("dram_active", "DRAM active"), ("fp64_active", "FP64 pipes active"),
         ("fp32_active", "FP32 pipes active"), ("fp16_active", "FP16 pipes active"),
         ("graphics_active", "Graphics engine active"))
INSTANCES = f"count by (uuid, gi, profile) ({sel('gpushare_mig_info')})"  # each instance once, however often stored


def _ratio_of_size(expr: str) -> str:
    """``expr`` (bytes per GPU instance) as a fraction of the instance's memory."""
    return (f"{once(expr, f'{SOURCE}, gpu, uuid, gi, profile')} / on(job, instance, uuid, gi) group_left() "
            f"{once(sel('gpushare_mig_memory_total_bytes'), 'job, instance, uuid, gi')}")


layout = Row("Layout: which MIG instances exist, with which profiles?", (
    Panel("GPU instances", "stat", "short", (Query(f"count({INSTANCES})"),), width=4, height=6,
          no_value=NO_MIG, description="MIG GPU instances in the selection."),
    Panel("GPU instances by profile", "piechart", "short",
          (Query(f"count by (profile) ({INSTANCES})", "{{profile}}"),), width=6, height=6,
          no_value=NO_MIG, description="How the selection is partitioned."),
    Panel("MIG devices", "table", "none", (Query(sel("gpushare_mig_info")),), width=14, height=6,
          hide=("job", "uuid", "Value"),
          no_value=NO_MIG, description="One row per compute instance: profile, placement (first slice, slices), SMs, MIG UUID."),
))

memory = Row("Memory: how full is each instance, now and at its expected peak?", (
    Panel("Memory used of instance", "bargauge", "percentunit",
          (Query(_ratio_of_size(sel("gpushare_mig_memory_used_bytes")), MIG_LEGEND),),
          minimum=0, maximum=1, thresholds=((0.8, "orange"), (0.95, "red")),
          no_value=NO_MIG, description="Used / instance memory. Processes in an instance cannot use another instance's memory."),
    Panel("Memory used by instance", "timeseries", "bytes",
          (Query(sel("gpushare_mig_memory_used_bytes"), MIG_LEGEND),), minimum=0,
          no_value=NO_MIG, description="Memory allocated in each GPU instance."),
    Panel("Headroom at the expected peak", "bargauge", "bytes",
          (Query(sel("gpushare_mig_memory_headroom_bytes"), MIG_LEGEND),),
          thresholds=((0, "orange"), (GiB, "green")), base_color="red",
          no_value=NO_MIG + ", or " + NO_FORECAST, description="Instance memory minus the time-aware peak demand of its processes (forecast from learned "
                      "workload profiles); negative means an out-of-memory is predicted."),
    Panel("Expected peak demand vs instance size", "timeseries", "bytes", (
        Query(sel("gpushare_mig_memory_peak_demand_bytes"), "{{gpu}}/{{gi}} expected peak demand"),
        Query(sel("gpushare_mig_memory_total_bytes"), "{{gpu}}/{{gi}} size"),
    ), minimum=0, no_value=NO_MIG + ", or " + NO_FORECAST, description="Forecast demand against the instance's memory; legend: GPU/GI."),
    Panel("Out-of-memory predicted in", "table", "s", (
        Query(sel("gpushare_mig_memory_contention_eta_seconds")),
        Query(sel("gpushare_mig_memory_exhaustion_eta_seconds")),
    ), columns=(Column("Peaks collide in", "s"), Column(TREND_TITLE, "s")),
        hide=("job", "uuid"), width=24, height=5, no_value="nothing predicted and no instance filling up",
        description="Peaks collide in: when the expected demand (learned workload curves) exceeds the instance, the "
                    "out-of-memory forecast. " + TREND_TITLE + ": where a straight line through the last 5 minutes "
                    "of used memory reaches the instance's size; it ignores the learned curves (a job loading its "
                    "model looks like it fills the instance in seconds), so it is no forecast of an out-of-memory "
                    "and is left uncoloured. Rows appear only for instances with something predicted."),
))

activity = Row("Activity: how busy is each instance?", (
    Panel("SM active", "timeseries", "percentunit", (Query(sel("gpushare_mig_sm_active_ratio"), MIG_LEGEND),),
          minimum=0, maximum=1, thresholds=((0.9, "red"),), no_value=NO_ACTIVITY,
          description="Above 90 % for 30 minutes is the compute-bound advice (a profile with more SMs helps). "
                      "The driver has no per-instance utilization: without an activity source this stays empty. "
                      + ACTIVITY_SOURCE),
) + tuple(
    Panel(title, "timeseries", "percentunit", (Query(sel(f"gpushare_mig_{name}_ratio"), MIG_LEGEND),),
          minimum=0, maximum=1, width=8 if i < 6 else 24, height=7, no_value=NO_ACTIVITY,
          description=f"{title}, per GPU instance (DCGM profiling fields or GPM). " + ACTIVITY_SOURCE)
    for i, (name, title) in enumerate(PIPES)
))

capacity = Row("Capacity: what more can still be created?", (
    Panel("Free capacity by profile", "bargauge", "short",
          (Query(f"sum by (profile) ({once(sel('gpushare_mig_free_capacity'), 'uuid, profile')})", "{{profile}}"),), minimum=0,
          no_value="no MIG-enabled GPU", description="More instances of each profile that fit the current layouts, summed over the selection "
                      "(alternatives: one 7g or seven 1g, not both)."),
    Panel("Free capacity per GPU", "table", "short", (Query(sel("gpushare_mig_free_capacity")),),
          columns=(Column("Can still create", "short"),), hide=("job", "uuid"),
          no_value="no MIG-enabled GPU", description="Per GPU and profile, from nvmlDeviceGetGpuInstanceRemainingCapacity."),
))

oversized = Row("Sizing: which instances are larger than their work needs?", (
    Panel("Peak use over the time range, as a fraction of the instance", "table", "percentunit", (
        Query(_ratio_of_size(f"max_over_time({sel('gpushare_mig_memory_used_bytes')}[$__range])")),
        Query(_ratio_of_size(f"max_over_time({sel('gpushare_mig_memory_peak_demand_bytes')}[$__range])")),
        Query(f"max_over_time({sel('gpushare_mig_sm_active_ratio')}[$__range])"),
    ), columns=(Column("Peak memory used", "percentunit", colored=True),
                Column("Peak expected demand", "percentunit", colored=True),
                Column("Peak SM active", "percentunit", colored=True)),
        thresholds=((0.4, "green"), (1, "red")), base_color="orange", hide=("job", "uuid"), width=24,
        no_value=NO_MIG, description="Orange below 40 %: with memory and SMs both below 40 % for 6 hours the MigInstanceOversized "
                    "advice fires, and a profile of half the size would still fit. Red from 100 %: the instance "
                    "was full, or its expected demand (the forecast) exceeded it: contention, a larger profile is "
                    "needed. "
                    "Peak SM active needs an activity source (empty for A100/A30 without DCGM, and the advice "
                    "cannot fire there). " + ACTIVITY_SOURCE),
))

DASHBOARD = Dashboard(
    uid="gpushare-mig",
    title="gpushare / MIG",
    description="MIG instances: memory and headroom per instance, activity per instance, free capacity per profile "
                "and oversized instances.",
    variables=FLEET_VARIABLES,
    rows=(layout, memory, activity, capacity, oversized),
    links=LINKS,
)
