"""What a Prometheus configured by the Prometheus Operator stores from the shipped monitors.

One simulated Kubernetes node (examples/scenarios/k8s-shared-node.yaml: pods on time-sliced, MPS
and MIG GPUs, plus host processes and an MPS server that belong to no pod) served by one
exporter. Three real Prometheus servers scrape it with the configuration the Operator generates
(tests/operator_scrape.py) from:

- ``shipped``: deploy/kubernetes/servicemonitor.yaml, the one kustomization.yaml applies, with
  every rule file of alerts/ loaded;
- ``variants``: the same exporter pod seen as other nodes (so ``instance`` tells them apart): the
  ServiceMonitor as most exporters ship theirs (no honorLabels), with honorLabels alone, the
  shipped one under a Prometheus with ``overrideHonorLabels``, and podmonitor.yaml;
- ``doubled``: servicemonitor.yaml and podmonitor.yaml both applied (every GPU scraped twice), with
  the rules, as a cluster's Prometheus with an external ``cluster`` label;
- ``twojobs``: two plain static jobs on the same exporter (a hand-written job beside another), with the
  rules: the copies differ in ``job``.
"""

from __future__ import annotations

import contextlib
import io
import json
import time

import pytest

from dashboards import lint
from exporter import cli
from exporter.sim.scenario import load_scenario
from tests import operator_scrape as osc
from tests.conftest import REPO, SCENARIOS, require_binary
from tests.promstack import Prometheus, start_exporter

pytestmark = pytest.mark.e2e
SCENARIO = SCENARIOS / "k8s-shared-node.yaml"
RULE_FILES = sorted((REPO / "alerts").glob("*.yml"))
NODE = "gpu-node-1"
EXPORTER_POD = "gpushare-exporter-x7k2p"
WORKLOAD_NAMESPACES = {p.pod.namespace for p in load_scenario(SCENARIO).processes if p.pod}
WORKLOAD_PODS = {(p.pod.namespace, p.pod.name) for p in load_scenario(SCENARIO).processes if p.pod}
# Series families that carry a workload's (or the unattributed row's) namespace and pod.
POD_FAMILIES = ("gpushare_process_memory_used_bytes", "gpushare_pod_memory_used_bytes", "gpushare_pod_sm_seconds_total",
                "gpushare_namespace_sm_seconds_total", "gpushare_mps_client_memory_limit_bytes",
                "gpushare_process_memory_expected_peak_bytes")
VARIANTS = {"naive": "node-naive", "honor-only": "node-honor-only", "override": "node-override", "podmonitor": "node-pm"}


def variant_jobs(exporter_address: str) -> list[dict]:
    daemonset, service = osc.load("daemonset.yaml"), osc.load("service.yaml")
    sm, pm = osc.load("servicemonitor.yaml"), osc.load("podmonitor.yaml")
    honor_only = json.loads(json.dumps(sm))
    honor_only["spec"]["endpoints"][0]["relabelings"] = osc.without_fix(sm)["spec"]["endpoints"][0]["relabelings"]

    def pods(variant):
        return [osc.ExporterPod(f"{EXPORTER_POD}-{variant}", VARIANTS[variant], exporter_address)]

    return [
        osc.scrape_config(osc.without_fix(sm), osc.endpoints_targets(service, daemonset, pods("naive")), name_suffix="-naive"),
        osc.scrape_config(honor_only, osc.endpoints_targets(service, daemonset, pods("honor-only")), name_suffix="-honor"),
        osc.scrape_config(sm, osc.endpoints_targets(service, daemonset, pods("override")), name_suffix="-override",
                          override_honor_labels=True),
        osc.scrape_config(pm, osc.pod_targets(daemonset, pods("podmonitor"))),
    ]


@pytest.fixture(scope="module")
def stack():
    require_binary("prometheus")
    with contextlib.ExitStack() as stack:
        exporter = stack.enter_context(start_exporter(SCENARIO, speed=30))
        started = time.time()
        pod = [osc.ExporterPod(EXPORTER_POD, NODE, exporter.target)]
        shipped = stack.enter_context(Prometheus({}, scrape_configs=osc.shipped_jobs(pod), rule_files=RULE_FILES))
        variants = stack.enter_context(Prometheus({}, scrape_configs=variant_jobs(exporter.target)))
        doubled = stack.enter_context(Prometheus(
            {}, scrape_configs=osc.shipped_jobs(pod, monitors=("servicemonitor.yaml", "podmonitor.yaml")),
            rule_files=RULE_FILES, external_labels={"cluster": "eu-1"}))
        twojobs = stack.enter_context(Prometheus({"gpushare": [exporter.target], "gpushare-again": [exporter.target]},
                                                 rule_files=RULE_FILES))
        for prom in (shipped, variants, doubled, twojobs):
            prom.wait_for("gpushare_pod_sm_seconds_total", timeout=60)
        # Rates over [5m] need two samples and the accounting counters a few polls; a few evaluations.
        for prom in (shipped, doubled, twojobs):
            prom.wait_for("namespace:gpushare_sm_seconds:rate5m", timeout=60)
        time.sleep(3)
        yield {"started": started, "exporter": exporter, "shipped": shipped, "variants": variants, "doubled": doubled,
               "twojobs": twojobs}


def series(prom: Prometheus, expr: str) -> list[dict]:
    return [s["metric"] for s in prom.query(expr)]


# ------------------------------------------------------------------------------ the problem, shown


def test_without_honor_labels_the_workloads_labels_arrive_as_exported_and_the_exporter_pod_takes_their_place(stack):
    """The monitor as dcgm-exporter and this project shipped it: every process row names the exporter's own pod,
    the workload's moves to exported_pod, and a per-namespace sum bills everything to the exporter's namespace."""
    rows = series(stack["variants"], f'gpushare_process_memory_used_bytes{{instance="{VARIANTS["naive"]}"}}')
    assert rows
    assert {(r["namespace"], r["pod"], r["container"]) for r in rows} == {
        ("gpushare-exporter", f"{EXPORTER_POD}-naive", "exporter")}
    exported = {(r["exported_namespace"], r["exported_pod"]) for r in rows if "exported_pod" in r}
    assert exported and exported <= WORKLOAD_PODS
    billed = stack["variants"].query(
        f'sum by (namespace) (gpushare_namespace_sm_seconds_total{{instance="{VARIANTS["naive"]}"}})')
    assert {s["metric"]["namespace"] for s in billed} == {"gpushare-exporter"}


def test_honor_labels_alone_stamps_the_exporter_pod_on_every_series_without_a_pod(stack):
    """honorLabels keeps a workload's labels (an empty exporter label counts as present: the unattributed
    rows stay unattributed), but every series that has no pod or container label of its own gains the
    exporter's: GPU series name the exporter pod (new series at each exporter rollout), pod series the
    exporter's container. Hence the shipped labeldrop."""
    prom, instance = stack["variants"], VARIANTS["honor-only"]
    pod = f"{EXPORTER_POD}-honor-only"
    gpus = series(prom, f'gpushare_gpu_info{{instance="{instance}"}}')
    assert gpus and all((r["namespace"], r["pod"], r["container"]) == ("gpushare-exporter", pod, "exporter") for r in gpus)
    rows = series(prom, f'gpushare_pod_memory_used_bytes{{instance="{instance}"}}')
    assert rows and all(r["container"] == "exporter" for r in rows)
    assert {(r.get("namespace", ""), r.get("pod", "")) for r in rows} - {("", "")} <= WORKLOAD_PODS
    assert ("", "") in {(r.get("namespace", ""), r.get("pod", "")) for r in rows}


# ------------------------------------------------------------------------------ the shipped monitors


def check_labels(prom: Prometheus, instance: str) -> None:
    """Every pod-carrying series names a workload pod of the scenario or none; nothing names the exporter."""
    names = set(prom._api("labels", {"match[]": f'{{instance="{instance}"}}'}))
    assert not {n for n in names if n.startswith("exported_")}, names
    for family in POD_FAMILIES:
        rows = series(prom, f'{family}{{instance="{instance}"}}')
        assert rows, family
        namespaces = {r.get("namespace", "") for r in rows}
        assert namespaces - {""} <= WORKLOAD_NAMESPACES, (family, namespaces)
        if family != "gpushare_namespace_sm_seconds_total":
            pods = {(r.get("namespace", ""), r.get("pod", "")) for r in rows}
            assert pods - {("", "")} <= WORKLOAD_PODS, (family, pods)
        assert all(r["job"] == "gpushare-exporter" and r["endpoint"] == "metrics" for r in rows)
    attributed = {(r["namespace"], r["pod"]) for r in series(prom, f'gpushare_process_memory_used_bytes{{instance="{instance}",pod!=""}}')}
    assert attributed and attributed <= WORKLOAD_PODS
    assert not series(prom, f'{{instance="{instance}",namespace="gpushare-exporter"}}')
    assert not series(prom, f'gpushare_gpu_info{{instance="{instance}",pod!=""}}')


def test_shipped_servicemonitor_keeps_every_workload_label_and_names_the_node(stack):
    """The default (kustomization.yaml): workloads' namespace/pod/container on process, pod, namespace,
    MPS-client and forecast series; instance = the node; job from the jobLabel; the unattributed rows stay
    unattributed."""
    prom = stack["shipped"]
    check_labels(prom, NODE)
    assert {s["metric"]["instance"] for s in prom.query("up")} == {NODE}
    (up,) = prom.query("up")
    assert up["metric"] == {"__name__": "up", "instance": NODE, "job": "gpushare-exporter", "endpoint": "metrics",
                            "service": "gpushare-exporter"}
    containers = {r["container"] for r in series(prom, 'last_over_time(gpushare_process_memory_used_bytes{pod!=""}[1h])')}
    assert {"vllm", "render", "detector"} <= containers <= {p.pod.container for p in load_scenario(SCENARIO).processes if p.pod}


@pytest.mark.parametrize("variant", ["podmonitor", "override"])
def test_podmonitor_and_override_honor_labels_store_the_same_labels(stack, variant):
    """podmonitor.yaml (the alternative), and servicemonitor.yaml under a Prometheus whose
    overrideHonorLabels forces honor_labels off: the labeldrop alone keeps the workloads' labels."""
    check_labels(stack["variants"], VARIANTS[variant])


def test_shipped_labels_are_the_exporters_labels_plus_the_target_labels(stack):
    """Stored = the exporter's own labels (as on /metrics, empty ones being absent) + job, instance,
    endpoint and service, nothing else, for the identity series of every GPU and MIG instance (``sharing``
    left out: it follows the processes, so page and scrape may see different moments)."""
    from prometheus_client.parser import text_string_to_metric_families

    families = ("gpushare_gpu_info", "gpushare_mig_info", "gpushare_gpu_memory_total_bytes")
    page = stack["exporter"].metrics()
    served = {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if v and k != "sharing")))
              for f in text_string_to_metric_families(page) for s in f.samples if s.name in families}
    target = {"job": "gpushare-exporter", "instance": NODE, "endpoint": "metrics", "service": "gpushare-exporter"}
    stored = set()
    for family in families:
        for row in series(stack["shipped"], family):
            assert {k: row[k] for k in target} == target
            stored.add((family, tuple(sorted((k, v) for k, v in row.items()
                                             if k not in target and k not in ("__name__", "sharing")))))
    assert served and stored == served


# ------------------------------------------------------------------------------ rules, dashboards, billing, recommend


def rules_of(prom: Prometheus) -> dict[str, dict]:
    return {(r.get("name")): r for g in prom.rules() for r in g["rules"]}


@pytest.mark.parametrize("which", ["shipped", "doubled", "twojobs"])
def test_every_rule_evaluates_without_error(stack, which):
    """Every recording rule and alert of alerts/ runs on what the Operator's Prometheus stores: healthy in
    /api/v1/rules, and its expression answers a query (a many-to-many join would fail here)."""
    prom = stack[which]
    groups = prom.rules()
    bad = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r["health"] == "err"]
    assert bad == []
    for path in RULE_FILES:
        for name, expr in lint.rule_expressions(path):
            prom.query(expr)  # raises QueryError


# Matchers that select each stored copy alone.
COPIES = {"doubled": ('service="gpushare-exporter"', 'service=""'), "twojobs": ('job="gpushare"', 'job="gpushare-again"')}
DOUBLED = pytest.mark.parametrize("which", sorted(COPIES))


def per_copy(prom: Prometheus, which: str, expr: str, at: float) -> list[dict[str, float]]:
    """``expr`` (with ``{copy}`` where the selector's matchers go) for each stored copy alone, by namespace."""
    return [{s["metric"].get("namespace", ""): float(s["value"][1]) for s in prom.query(expr.format(copy=copy), time=at)}
            for copy in COPIES[which]]


def counted_once(total: dict[str, float], copies: list[dict[str, float]]) -> None:
    """``total`` per namespace is what one stored copy gives (max folds them per GPU, so at least the larger
    copy's sum; the copies differ only by the moments each scrape saw), not their sum (2x)."""
    for namespace, value in total.items():
        larger = max(c.get(namespace, 0.0) for c in copies)
        assert larger * (1 - 1e-9) - 1e-9 <= value <= 1.25 * larger + 1e-6, (namespace, value, copies)


@DOUBLED
def test_doubled_scrape_stores_two_copies_and_the_accounting_rules_count_one(stack, which):
    """Both monitors applied, or two jobs: every series is stored twice (the copies differ only in ``service``
    or ``job``), yet the recorded per-namespace rates are one series per namespace with what one copy gives,
    not twice it."""
    doubled, shipped = stack[which], stack["shipped"]
    copies = doubled.query('count by (uuid) (gpushare_gpu_info)')
    assert copies and all(s["value"][1] == "2" for s in copies)
    at = time.time() - 1
    for record, family in (("namespace:gpushare_memory_byte_seconds:rate5m", "gpushare_namespace_memory_byte_seconds_total"),
                           ("namespace:gpushare_sm_seconds:rate5m", "gpushare_namespace_sm_seconds_total")):
        two = doubled.query(record, time=at)
        assert len(two) == len({s["metric"].get("namespace", "") for s in two}), record  # no copy left
        assert {s["metric"].get("namespace", "") for s in two} == {
            s["metric"].get("namespace", "") for s in shipped.query(record, time=at)}
        total = {s["metric"].get("namespace", ""): float(s["value"][1]) for s in two}
        # The copies read at the moment the rule was evaluated (its sample's timestamp): the same data it saw.
        evaluated = float(doubled.query(f"max(timestamp({record}))", time=at)[0]["value"][1])
        counted_once(total, per_copy(doubled, which, "sum by (namespace) (rate(" + family + "{{{copy}}}[5m]))",
                                     evaluated))


def test_recorded_accounting_names_the_workloads_namespaces(stack):
    """namespace:* and namespace_pod:* recording rules carry the workloads' namespaces and pods."""
    prom = stack["shipped"]
    recorded = {s["metric"].get("namespace", "") for s in prom.query("namespace:gpushare_memory_byte_seconds:rate5m")}
    assert recorded - {""} == WORKLOAD_NAMESPACES
    pods = {(s["metric"].get("namespace", ""), s["metric"].get("pod", ""))
            for s in prom.query("namespace_pod:gpushare_sm_seconds:rate5m")}
    assert pods - {("", "")} and pods - {("", "")} <= WORKLOAD_PODS


BILL = "sum by (namespace) (max by (namespace, uuid) (increase(gpushare_namespace_sm_seconds_total[30d])))"


@DOUBLED
def test_per_namespace_billing_query_bills_the_workloads_once(stack, which):
    """docs/kubernetes.md's month bill, run as written: one row per workload namespace that used SM time
    (the unattributed row is namespace ""), never the exporter's namespace, the same namespaces as /metrics;
    with both monitors applied the same bill (the plain sum by (namespace) would double it)."""
    from prometheus_client.parser import text_string_to_metric_families

    assert BILL in (REPO / "docs" / "kubernetes.md").read_text().replace("\n    ", " ")
    page = stack["exporter"].metrics()
    served = {s.labels["namespace"] for f in text_string_to_metric_families(page) for s in f.samples
              if s.name == "gpushare_namespace_sm_seconds_total"}
    at = time.time() - 1
    one = {s["metric"].get("namespace", ""): float(s["value"][1]) for s in stack["shipped"].query(BILL, time=at)}
    assert set(one) == served and "gpushare-exporter" not in served
    two = {s["metric"].get("namespace", ""): float(s["value"][1]) for s in stack[which].query(BILL, time=at)}
    assert set(two) == set(one)
    copies = per_copy(stack[which], which, "sum by (namespace) (increase(gpushare_namespace_sm_seconds_total{{{copy}}}[30d]))", at)
    counted_once(two, copies)
    naive = stack[which].query("sum by (namespace) (increase(gpushare_namespace_sm_seconds_total[30d]))", time=at)
    busy = max(one, key=one.get)
    assert {s["metric"].get("namespace", ""): float(s["value"][1]) for s in naive}[busy] > 1.6 * two[busy]


ALL = {"cluster": ".*", "job": ".*", "instance": ".*", "gpu": ".*"}
# Panels whose numbers follow the processes from one scrape to the next (a query of each Prometheus sees
# a different moment): compared for shape (same rows), not value.
MOVING = ("SM time by namespace", "Memory held by namespace", "Energy by namespace", "Failed NVML calls")


def dashboard_answers(prom: Prometheus, at: float) -> dict[tuple[str, str, str], list[tuple[tuple, float]]]:
    """Every panel query of dashboards/json with All selected, at ``at``: (rows' labels, value) sorted."""
    out = {}
    for uid, board in lint.load_dashboards(REPO / "dashboards" / "json").items():
        for target in lint.targets(board):
            expr = lint.interpolate(target.expr, ALL, "5m", "4s")
            rows = prom.query(expr, time=at)  # raises QueryError (many-to-many, bad PromQL)
            out[(uid, target.panel, target.ref_id)] = sorted(
                (tuple(sorted(r["metric"].items())), float(r["value"][1])) for r in rows)
    return out


def test_every_dashboard_query_runs_and_namespace_panels_name_workloads(stack):
    """Every panel query of dashboards/json, with All selected, answers without error on the Operator's
    Prometheus; the namespace panels show workload namespaces (and "(unattributed)"), not the exporter's."""
    answers = dashboard_answers(stack["shipped"], time.time() - 1)
    shown = {dict(labels).get("namespace") for (uid, panel, _), rows in answers.items() if "by namespace" in panel
             for labels, _ in rows}
    assert shown - {"(unattributed)", None} and shown - {"(unattributed)", None} <= WORKLOAD_NAMESPACES


@DOUBLED
def test_dashboards_give_the_same_counts_and_rows_with_every_gpu_scraped_twice(stack, which):
    """With both monitors applied every query still runs (no many-to-many join) and the fleet's stat panels
    count each GPU, MIG instance, process, MPS server and exporter once: the same numbers as one monitor."""
    at = time.time() - 1
    one, two = dashboard_answers(stack["shipped"], at), dashboard_answers(stack[which], at)
    stats = {k: v for k, v in one.items() if k[0] in ("gpushare-fleet", "gpushare-mig", "gpushare-mps")
             and k[1] in ("GPUs", "GPUs lost", "MIG instances", "Exporters", "GPUs by sharing mode", "GPU instances",
                          "GPU instances by profile", "MPS servers", "Free capacity by profile")}
    assert len(stats) == 9 and all(stats.values())
    for key, rows in stats.items():
        if key[1] == "GPUs by sharing mode":  # a GPU's mode follows its processes: each Prometheus saw another moment
            assert sum(v for _, v in two[key]) == sum(v for _, v in rows), key
        else:
            assert two[key] == rows, key
    # The namespace rows: the same namespaces; each workload namespace runs on one GPU here, so its row is
    # exactly the larger copy's value at that moment (the sum of both would be the doubling).
    for key, family in (("SM time by namespace", "gpushare_namespace_sm_seconds_total"),
                        ("Memory held by namespace", "gpushare_namespace_memory_byte_seconds_total")):
        (k,) = [k for k in one if k[0] == "gpushare-fleet" and k[1] == key]
        assert [labels for labels, _ in two[k]] == [labels for labels, _ in one[k]], key
        copies = per_copy(stack[which], which, f"sum by (namespace) (rate({family}{{{{{{copy}}}}}}[4s]))", at)
        for labels, value in two[k]:
            namespace = dict(labels)["namespace"]
            if namespace != "(unattributed)":
                assert value == pytest.approx(max(c.get(namespace, 0.0) for c in copies), rel=1e-9), (key, namespace)


def recommend_json(url: str, started: float, at: float | None = None) -> dict:
    """The plan from ``url``'s history up to ``at`` (Unix seconds; default now)."""
    at = time.time() if at is None else at
    window = f"{int(at - started) + 5}s"  # the history there is (as tests/test_recommend_prometheus_e2e.py)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(["recommend", "--prometheus", url, "--window", window, "--at", f"{at:.3f}",
                           "--format", "json"])
    assert status == 0, err.getvalue()
    return json.loads(out.getvalue())


def test_recommend_reads_the_workloads_from_the_operator_prometheus(stack):
    """`recommend --prometheus` sees the k8s workloads by their pod-derived keys on the node named by instance."""
    data = recommend_json(stack["shipped"].url, stack["started"])
    names = {w["name"] for m in data["models"] for w in m["workloads"]}
    assert {"k8s:serving/llm/vllm", "k8s:research/notebook/jupyter"} <= names
    assert {g["node"] for m in data["models"] for g in m["gpus"]} == {NODE}


def plan_summary(data: dict) -> dict:
    return {m["model"] if "model" in m else i: ({w["name"]: w["at_once"] for w in m["workloads"]}, m["gpus_needed"])
            for i, m in enumerate(data["models"])}


@DOUBLED
def test_recommend_plans_the_same_with_every_gpu_scraped_twice(stack, which):
    """Each running instance of a workload counted once, however many copies Prometheus stores."""
    # Both read the same moment, the last one both stores have scraped. The stores scrape at their
    # own phases, so a workload that started within the last scrape interval can be in one store's
    # history and not yet in the other's: a moment a second later settles that. A doubling would
    # differ at every moment.
    for _ in range(5):
        at = min(max(float(s["value"][1]) for s in prom.query("timestamp(gpushare_gpu_info)"))
                 for prom in (stack["shipped"], stack[which]))
        one = recommend_json(stack["shipped"].url, stack["started"], at)
        two = recommend_json(stack[which].url, stack["started"], at)
        if plan_summary(two) == plan_summary(one):
            break
        time.sleep(1)
    assert plan_summary(two) == plan_summary(one)
