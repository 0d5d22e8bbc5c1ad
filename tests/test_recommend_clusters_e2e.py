"""`recommend --prometheus` over a Thanos Query / Mimir holding several clusters, against a real Prometheus.

The history holds two clusters whose series carry the external label ``cluster`` (as a Thanos Query or
Mimir returns them), and whose nodes share a name: cluster eu runs the churn fleet on
``gpu-node-a.example.com:18474`` and ``gpu-node-b...``; cluster us runs node B's scenario on a node also
named ``gpu-node-a.example.com:18474``. Beside it, one Prometheus per cluster holds that cluster alone,
without the label. Each cluster's plan must be the one its own Prometheus gives (a node is (cluster,
node): no GPU of one cluster lends capacity to the other), every output must name the cluster, and the
GPU Operator output must give one set of objects per cluster. All series are what the exporter serves,
played through its pipeline (tests/sim_history.py).
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import require_binary
from tests.sim_history import SCENARIOS, BackfilledPrometheus, openmetrics, shared_pages
from tests.test_recommend_prometheus_e2e import EPOCH, TIMES, recommend

pytestmark = pytest.mark.e2e
NODE_A, NODE_B = "gpu-node-a.example.com:18474", "gpu-node-b.example.com:18474"
AT = f"{EPOCH + 1793:.0f}"


@pytest.fixture(scope="module")
def stores(tmp_path_factory, run_shared_dir):
    prometheus, promtool = require_binary("prometheus"), require_binary("promtool")
    a = shared_pages(run_shared_dir, SCENARIOS / "churn-node-a.yaml", TIMES)  # as test_recommend_prometheus_e2e's
    b = shared_pages(run_shared_dir, SCENARIOS / "churn-node-b.yaml", TIMES)
    eu, us = {NODE_A: a, NODE_B: b}, {NODE_A: b}
    both = {**{("eu", n): p for n, p in eu.items()}, **{("us", n): p for n, p in us.items()}}
    made = {}
    try:
        for name, targets in (("both", both), ("eu", eu), ("us", us)):
            made[name] = BackfilledPrometheus(tmp_path_factory.mktemp(name), openmetrics(targets, EPOCH),
                                              prometheus, promtool)
        yield {name: prom.url for name, prom in made.items()}
    finally:
        for prom in made.values():
            prom.stop()


def run(url: str, fmt: str, *extra: str) -> str:
    status, out, err = recommend("--prometheus", url, "--window", "30m", "--at", AT, "--format", fmt, *extra)
    assert status == 0, err
    return out


def without_source(plan: dict) -> dict:
    """A plan less its source line (the URL, the cluster named and the number of queries differ)."""
    return {k: v for k, v in plan.items() if k != "sources"}


def test_each_cluster_is_planned_as_its_own_prometheus_plans_it(stores):
    both = json.loads(run(stores["both"], "json"))
    assert sorted(both) == ["clusters"] and list(both["clusters"]) == ["eu", "us"]
    for name in ("eu", "us"):
        alone = json.loads(run(stores[name], "json"))
        assert "clusters" not in alone
        plan = both["clusters"][name]
        assert without_source(plan) == without_source(alone)
        assert plan["sources"][0].startswith(f"prometheus {stores['both']} (cluster {name}, window 30m")
        assert alone["sources"][0].startswith(f"prometheus {stores[name]} (window 30m")
    # the two clusters differ (eu has two nodes, us one), so a merged fleet could not pass the above
    assert both["clusters"]["eu"]["basis"]["nodes"] == 2 and both["clusters"]["us"]["basis"]["nodes"] == 1


def test_cluster_flag_plans_one_cluster_as_a_single_fleet_run_writes_it(stores):
    one, alone = json.loads(run(stores["both"], "json", "--cluster", "us")), json.loads(run(stores["us"], "json"))
    assert "clusters" not in one and without_source(one) == without_source(alone)
    assert one["sources"][0].startswith(f"prometheus {stores['both']} (cluster us, window 30m")
    # one cluster's GPU Operator file, for `kubectl apply -f` in that cluster: the one its own Prometheus gives
    assert run(stores["both"], "gpu-operator", "--cluster", "us") == run(stores["us"], "gpu-operator")
    status, out, err = recommend("--prometheus", stores["both"], "--window", "30m", "--at", AT, "--cluster", "ap")
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "--cluster ap: not a cluster" in err and "(clusters: eu, us)" in err
    status, _, err = recommend("--prometheus", stores["eu"], "--window", "30m", "--at", AT, "--cluster", "eu")
    assert status == 2 and "no series has a cluster label" in err and err.count("\n") == 1


def test_every_output_names_the_cluster_and_operator_objects_come_per_cluster(stores):
    text = run(stores["both"], "text")
    assert text.index("=== cluster eu ===") < text.index("=== cluster us ===")
    assert "## Cluster" not in run(stores["eu"], "markdown") and "# Cluster us" in run(stores["both"], "markdown")
    html = run(stores["both"], "html")
    assert html.count("<body>") == 1 and "<h1>Cluster eu</h1>" in html and "<h1>Cluster us</h1>" in html
    operator = run(stores["both"], "gpu-operator")
    parts = operator.split("# ===== cluster ")[1:]
    assert [p.split(":", 1)[0] for p in parts] == ["eu", "us"]
    for name, part in zip(("eu", "us"), parts):
        alone = run(stores[name], "gpu-operator")
        docs = [d for d in yaml.safe_load_all(part.split("\n", 1)[1]) if d]
        assert docs == [d for d in yaml.safe_load_all(alone) if d] and any(d["kind"] == "ConfigMap" for d in docs)
        # the label commands of each part are its own cluster's (node names repeat across clusters)
        labels = [line for line in part.splitlines() if "kubectl label node" in line]
        assert labels == [line for line in alone.splitlines() if "kubectl label node" in line]
    migparted = [d for d in yaml.safe_load_all(run(stores["both"], "mig-parted")) if d]
    assert len(migparted) == 2 and all("mig-configs" in d for d in migparted)


def test_a_plan_file_with_a_fleet_of_clusters_needs_the_cluster_named(stores):
    """A plan's workloads belong to one cluster: beside several clusters it is refused in one line, and
    with --cluster planned with that cluster's history."""
    plan = str(min((SCENARIOS.parent / "workloads").glob("*.yaml")))
    argv = ("--prometheus", stores["both"], "--window", "30m", "--at", AT, "--workloads", plan)
    status, out, err = recommend(*argv)
    assert status == 2 and out == "" and "give --cluster NAME" in err and err.count("\n") == 1
    status, out, err = recommend(*argv, "--cluster", "eu", "--format", "json")
    assert status == 0, err
    assert "clusters" not in json.loads(out)
