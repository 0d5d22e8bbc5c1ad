"""Advice: what the advice alerts say, the live evidence behind each, and the `exporter recommend` command.

The text of the advice panel is read from alerts/gpushare-advice.yml (alert, severity, `for`,
action) and docs/runbooks.md (meaning), so the dashboard says what the rules say; regenerating
after a rule change updates it, and the byte-for-byte test catches a forgotten regeneration.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from dashboards.common import EXPORTER, FLEET_VARIABLES, INSTANCE_LABELS, LINKS, MPS_SHARING, SOURCE, once, sel
from dashboards.grafana import Column, Dashboard, Panel, Query, Row

REPO = Path(__file__).resolve().parent.parent
ADVICE_RULES = REPO / "alerts" / "gpushare-advice.yml"
MIG_PEAK_USED = f"max_over_time({sel('gpushare_mig_memory_used_bytes')}[$__range])"
RUNBOOKS = REPO / "docs" / "runbooks.md"
LABEL_TEMPLATE = re.compile(r"\{\{\s*\$labels\.(\w+)\s*\}\}")
VALUE_TEMPLATE = re.compile(r"\{\{\s*\$value[^}]*\}\}")
ANY_TEMPLATE = re.compile(r"\{\{.*?\}\}")


def plain(template: str) -> str:
    """An alert annotation template as readable text: ``{{ $labels.gpu }}`` -> `` `<gpu>` ``, other actions dropped.

    The placeholder is a code span so that Grafana's markdown does not take ``<gpu>`` for an HTML tag."""
    text = LABEL_TEMPLATE.sub(lambda m: f"`<{m.group(1)}>`", template)
    text = VALUE_TEMPLATE.sub("the value", text)
    return " ".join(ANY_TEMPLATE.sub("", text).split())


def runbook_meaning(alert: str, runbooks: str) -> str:
    """The **Meaning.** paragraph of the alert's section in docs/runbooks.md ("" when there is none)."""
    section = re.search(rf"^## {re.escape(alert)}\n(.*?)(?=^## |\Z)", runbooks, re.S | re.M)
    if not section:
        return ""
    meaning = re.search(r"\*\*Meaning\.\*\*(.*?)(?:\n\n|\Z)", section.group(1), re.S)
    return " ".join(meaning.group(1).split()) if meaning else ""


def advice_markdown() -> str:
    """One section per advice alert: what it means, when it fires, what to do."""
    rules = [rule for group in yaml.safe_load(ADVICE_RULES.read_text())["groups"] for rule in group["rules"]
             if "alert" in rule]
    runbooks = RUNBOOKS.read_text()
    parts = ["Advice alerts (severity `info`) say the GPUs work but their sharing wastes or risks them. "
             "Each has a runbook in `docs/runbooks.md`."]
    for rule in rules:
        name = rule["alert"]
        wait = f", after {rule['for']}" if "for" in rule else ""
        parts.append(f"### {name}\n*{rule['labels'].get('severity', '')}{wait}* - "
                     f"{runbook_meaning(name, runbooks)}\n\n**Do:** {plain(rule['annotations'].get('action', ''))}")
    return "\n\n".join(parts) + "\n"


UNLIMITED_CLIENTS = (f"{sel('gpushare_process_memory_used_bytes', MPS_SHARING)} "
                     f"unless on(job, instance, uuid, gi, {INSTANCE_LABELS}) {sel('gpushare_mps_client_memory_limit_bytes')} "
                     f"unless on(job, instance, uuid, pid) {sel('gpushare_mps_server_info')}")
EXCLUSIVE = "on(job, instance, uuid) " + sel("gpushare_gpu_info", 'sharing="exclusive"')
RECOMMEND = ('label_replace(max by (job, instance) ('
             + sel("gpushare_exporter_build_info", scope=EXPORTER)
             + '), "command", "exporter recommend --from http://$1", "instance", "(.*)")')

alerts = Row("Advice: what do the advice alerts say right now?", (
    Panel("Advice alerts", "table", "none", (Query(sel("ALERTS", 'severity="info"', scope=EXPORTER)),),
          width=24, height=6, hide=("job", "Value"), no_value="no advice pending or firing",
          description="Advice alerts firing or pending (waiting out their 'for'), with their labels."),
    Panel("What each advice means and what to do", "text", "none", width=24, height=14, content=advice_markdown(),
          description="From alerts/gpushare-advice.yml and docs/runbooks.md."),
))

evidence = Row("Evidence: where is capacity wasted or at risk, over the selected time range?", (
    Panel("MPS clients without a pinned memory limit", "table", "bytes", (Query(UNLIMITED_CLIENTS),),
          columns=(Column("Memory used", "bytes"),), hide=("job", "uuid"),
          no_value="every MPS client has a pinned memory limit, or none runs", description="MpsClientWithoutMemoryLimit: one such client can take the memory the others need."),
    Panel("GPUs held by one process", "table", "percentunit", (
        Query(f"avg_over_time({sel('gpushare_gpu_utilization_ratio')}[$__range]) and {EXCLUSIVE}"),
        Query(f"max_over_time({sel('gpushare_gpu_memory_used_bytes')}[$__range]) / "
              f"{sel('gpushare_gpu_memory_total_bytes')} and {EXCLUSIVE}"),
    ), columns=(Column("Average kernel time", "percentunit", colored=True),
                Column("Peak memory used", "percentunit", colored=True)),
        thresholds=((0.2, "green"), (1, "red")), base_color="orange", hide=("job", "uuid"),
        no_value="no GPU held by one process", description="GpuUnderusedExclusive: under 20 % busy and under half the memory for 6 hours; share it. Red at "
                    "100 %: the GPU was busy all the time or its memory full."),
    Panel("MIG instances: peak memory and compute", "table", "percentunit", (
        Query(f"{once(MIG_PEAK_USED, f'{SOURCE}, gpu, uuid, gi, profile')}"
              f" / on(job, instance, uuid, gi) group_left() "
              f"{once(sel('gpushare_mig_memory_total_bytes'), 'job, instance, uuid, gi')}"),
        Query(f"max_over_time({sel('gpushare_mig_sm_active_ratio')}[$__range])"),
        Query(f"avg_over_time({sel('gpushare_mig_sm_active_ratio')}[$__range])"),
    ), columns=(Column("Peak memory used", "percentunit", colored=True),
                Column("Peak SM active", "percentunit", colored=True),
                Column("Average SM active", "percentunit", colored=True)),
        thresholds=((0.4, "green"), (0.9, "red")), base_color="orange", hide=("job", "uuid"), width=24,
        no_value="no MIG instance", description="Orange (< 40 % memory and SMs): MigInstanceOversized, a smaller profile fits. Red (SMs > 90 %): "
                    "MigInstanceComputeBound, a profile with more SMs helps. The SM columns need an activity source "
                    "(DCGM, or GPM on Hopper+): empty for A100/A30 read through NVML alone, where neither alert can "
                    "fire (docs/alerts.md)."),
))

recommend = Row("Recommend: which layout would fit the observed work better?", (
    Panel("Command for each selected exporter", "table", "none", (Query(RECOMMEND),), width=12, height=6,
          hide=("job", "Value"),
          no_value="no exporter in the selection", description="exporter recommend reads the exporter's live snapshot and proposes MIG layouts, placement "
                      "and MPS limits for the workloads it sees."),
    Panel("From Prometheus history", "text", "none", width=12, height=6, content=(
        "For a layout that fits the peaks of a whole week rather than this moment, point `exporter recommend` "
        "at this Prometheus:\n\n"
        "```\nexporter recommend --prometheus <Prometheus URL> --window 7d --node-label instance\n```\n\n"
        "Selected exporters: `${instance:csv}`. Add `--format html -o report.html` for a report, or "
        "`--format mig-parted` for a layout file nvidia-mig-parted applies.\n"),
        description="The same command over the exporter's history in Prometheus."),
))

DASHBOARD = Dashboard(
    uid="gpushare-advice",
    title="gpushare / Advice",
    description="What the advice alerts say, the evidence behind each, and the exporter recommend command "
                "for the selection.",
    variables=FLEET_VARIABLES,
    rows=(alerts, evidence, recommend),
    links=LINKS,
)
