"""Variables, label selectors and PromQL fragments shared by the gpushare dashboards.

Every query filters on the dashboard variables through regex matchers (``=~"$job"``), so the
same text works for one value, several, or All (``allValue`` ``.*``, which also matches series
without the label: ``cluster`` exists only where Thanos, Mimir or federation adds a Prometheus's
external labels). Series are joined ``on(job, instance, uuid, ...)``: a GPU UUID is unique, but the
same exporter scraped by two jobs would otherwise collide. A GPU can also be stored twice within one
job (a ServiceMonitor and a PodMonitor both applied: the copies differ in ``service``), so the "one"
side of every join is folded with ``max by`` (:func:`once`) and counts and sums over the fleet count
each GPU, MIG instance, process or exporter once (:func:`count_once`), never each stored copy.
"""

from __future__ import annotations

from dashboards.grafana import Variable

CLUSTER = Variable("cluster", "Cluster", "gpushare_exporter_build_info")
JOB = Variable("job", "Job", "gpushare_exporter_build_info", 'cluster=~"$cluster"')
INSTANCE = Variable("instance", "Exporter", "gpushare_exporter_build_info", 'cluster=~"$cluster", job=~"$job"')
GPU = Variable("gpu", "GPU", "gpushare_gpu_info", 'cluster=~"$cluster", job=~"$job", instance=~"$instance"')
FLEET_VARIABLES = (CLUSTER, JOB, INSTANCE, GPU)
# The GPU detail dashboard shows one GPU of one exporter (of any cluster: node names repeat across clusters
# only where the clusters do, and the cluster variable narrows them).
ONE_GPU_VARIABLES = (
    CLUSTER,
    Variable("job", "Job", "gpushare_exporter_build_info", 'cluster=~"$cluster"', multi=False),
    Variable("instance", "Exporter", "gpushare_exporter_build_info", 'cluster=~"$cluster", job=~"$job"', multi=False),
    Variable("gpu", "GPU", "gpushare_gpu_info", 'cluster=~"$cluster", job=~"$job", instance=~"$instance"', multi=False),
)

EXPORTER = 'cluster=~"$cluster", job=~"$job", instance=~"$instance"'
SELECTED = 'cluster=~"$cluster", job=~"$job", instance=~"$instance", gpu=~"$gpu"'
# What identifies a series' source across stored copies: the exporter (cluster, job, instance).
SOURCE = "cluster, job, instance"
# Regex classes instead of backslash escapes: the text goes through JSON, Grafana and PromQL unchanged.
MPS_SHARING = 'sharing=~"mps|mig[+]mps"'
SHARED_GPU = 'sharing=~"mps|time_slicing"'

GPU_LEGEND = "{{instance}} GPU {{gpu}}"
MIG_LEGEND = "{{instance}} GPU {{gpu}} GI {{gi}} ({{profile}})"
# A per-process series is one instance (--process-series): a pid, a pod's container (pid ""), or a
# workload replica. Joins between per-process families match on all of it.
INSTANCE_LABELS = "pid, namespace, pod, container, replica"
PROCESS_LEGEND = "{{instance}} GPU {{gpu}} {{process}} {{pid}}{{namespace}}/{{pod}}/{{container}}{{replica}}"

GiB = 2**30

# Where pipe activity comes from, and why it can be missing (shown in panel descriptions).
ACTIVITY_SOURCE = ("Activity comes from DCGM (--backend dcgm, or auto where DCGM runs: every datacenter GPU since "
                   "Volta, MIG instances included) or from NVML's GPM (Hopper and newer only). A100, A30 and other "
                   "pre-Hopper GPUs read through NVML alone have none, and neither do their MIG instances; "
                   "gpushare_exporter_source_available says whether DCGM delivers.")
NO_ACTIVITY = "no activity source (pre-Hopper GPU without DCGM?)"
# What an empty panel means (Panel.no_value), so that "No data" never has to be guessed at.
NO_GPU = "no GPU in the selection"
NO_EXPORTER = "no exporter in the selection"
NO_MIG = "no MIG instance"
NO_MPS = "no MPS server"
NO_PROCESS = "no process on the GPU"
NO_FORECAST = "no forecast yet: workloads still being learned"
NO_POD = "no Kubernetes pods (namespaces come from pod attribution)"
NO_SIMULATION = "not a simulation"
# The exporter's exhaustion ETA is a straight line through the last 5 minutes of used memory. A job
# loading its model grows fast for a minute and stops, so the line "reaches full" in seconds on GPUs
# where the learned curves say nothing collides: it is shown neutral, never red, next to the forecast.
TREND_TITLE = "Linear trend reaches full in"
TREND_DESCRIPTION = ("Where a straight line through the last 5 minutes of used memory reaches the device's size; "
                     "absent while memory is not growing. It ignores the learned workload curves: a job loading "
                     "its model grows fast for a minute and then stops, so short values here are normal and are "
                     "not a prediction of an out-of-memory. The out-of-memory forecast is \"Peaks collide in\" and "
                     "the headroom at the expected peak; this is for leaks and for workloads with no forecast.")


def new_in(counter: str, window: str) -> str:
    """How much ``counter`` (a selector) grew over ``window``, counting a series born inside it.

    increase() needs two samples and measures from the first, so a counter series that appears
    already at its first increment (an NVML error, a namespace's first poll) is missed, often
    entirely (an error that happens once stays at 1). A series that did not exist ``window``
    ago is taken at its value instead: all of it is new (the XID recording rule does the same).
    """
    return f"((increase({counter}[{window}]) and {counter} offset {window}) or ({counter} unless {counter} offset {window}))"


def busy_ratio(scope: str = SELECTED) -> str:
    """SM activity where an activity source exists, else the driver's kernel-time utilization.

    The fallback exists outside MIG only: NVML has no utilization for a MIG-enabled GPU.
    """
    sm = sel("gpushare_gpu_sm_active_ratio", scope=scope)
    return f"({sm} or on(job, instance, uuid) {sel('gpushare_gpu_utilization_ratio', scope=scope)})"


def once(expr: str, by: str) -> str:
    """``expr`` with the stored copies of each series (same ``by`` labels) folded to one."""
    return f"max by ({by}) ({expr})"


def one_of_each(expr: str, by: str) -> str:
    """One series of ``expr`` per ``by`` label set, labels kept: for an info series whose other labels
    (``sharing``) the stored copies may disagree on for a scrape after a change."""
    return f"topk by ({by}) (1, {expr})"


def count_once(expr: str, by: str) -> str:
    """How many distinct ``by`` label sets ``expr`` has: each GPU (``uuid``), instance or process once,
    however many times it is stored."""
    return f"count(count by ({by}) ({expr}))"


def sel(metric: str, *matchers: str, scope: str = SELECTED) -> str:
    """``metric{<dashboard selection>, <matchers>}``."""
    return f"{metric}{{{', '.join((scope,) + matchers)}}}"


def usable_gpu_memory() -> str:
    """Memory processes can get on a whole GPU: total minus driver-reserved (total where reserved is unknown)."""
    total = sel("gpushare_gpu_memory_total_bytes")
    return f"(({total} - {sel('gpushare_gpu_memory_reserved_bytes')}) or {total})"


def on_shared_gpus(expr: str) -> str:
    """``expr`` limited to GPUs shared by MPS or time-slicing (where processes can take each other's memory)."""
    return f"({expr}) and on(job, instance, uuid) {sel('gpushare_gpu_info', SHARED_GPU)}"


def with_gpu_identity(expr: str) -> str:
    """``expr`` with the GPU's name and sharing mode added from gpushare_gpu_info."""
    gpu = f"{SOURCE}, gpu, uuid"
    return (f"{once(expr, gpu)} * on(job, instance, uuid) group_left(name, sharing) "
            f"{one_of_each(sel('gpushare_gpu_info'), 'job, instance, uuid')}")


LINKS = ({"asDropdown": False, "icon": "external link", "includeVars": True, "keepTime": True,
          "tags": ["gpushare"], "targetBlank": False, "title": "gpushare", "type": "dashboards"},)
