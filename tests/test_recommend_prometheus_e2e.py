"""`recommend --prometheus` against a real Prometheus.

Two kinds of history, both holding only what the exporter really serves:
- backfilled: the churn fleet (examples/scenarios/churn-node-*.yaml) played through the whole
  exporter pipeline every 15 s, each page written as one scrape of a target named like a real
  node (``gpu-node-a.example.com:18474``: dots, dashes and a colon in the ``instance`` label),
  with a five-minute scrape gap on node B, then ``promtool tsdb create-blocks-from openmetrics``;
- live: simulated exporters on 127.0.0.1 scraped every second by Prometheus with its default
  labels (``instance="127.0.0.1:PORT"``).
"""

from __future__ import annotations

import contextlib
import io
import json
import time

import pytest

from exporter import cli
from tests.conftest import require_binary
from exporter.recommend import plan_check
from tests.sim_history import SCENARIOS, BackfilledPrometheus, openmetrics, shared_pages
from tests.sim_snapshots import shared_lines

pytestmark = pytest.mark.e2e
EPOCH = 1_760_000_007.0  # scrapes off the 15 s grid Prometheus evaluates on, as real ones are
NODE_A, NODE_B = "gpu-node-a.example.com:18474", "gpu-node-b.example.com:18474"
TIMES = [float(t) for t in range(0, 1800, 15)]
GAP = (600, 900)  # node B not scraped from 10 to 15 minutes
GIB = 2**30


def recommend(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(["recommend", *argv])
    return status, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def history(tmp_path_factory, run_shared_dir):
    prometheus, promtool = require_binary("prometheus"), require_binary("promtool")
    a = shared_pages(run_shared_dir, SCENARIOS / "churn-node-a.yaml", TIMES)  # as test_recommend_clusters_e2e's
    b = [p for p in shared_pages(run_shared_dir, SCENARIOS / "churn-node-b.yaml", TIMES) if not GAP[0] <= p[0] < GAP[1]]
    om = openmetrics({NODE_A: a, NODE_B: b}, EPOCH)
    with BackfilledPrometheus(tmp_path_factory.mktemp("history"), om, prometheus, promtool) as prom:
        yield prom.url


def plan_json(url: str, *extra: str) -> dict:
    status, out, err = recommend("--prometheus", url, "--window", "30m", "--at", f"{EPOCH + 1793:.0f}",
                                 "--format", "json", *extra)
    assert status == 0, err
    return json.loads(out)


def test_history_gives_the_true_peak_concurrency_and_the_optimal_gpu_count(history):
    """Workloads and how many of each ran at once; five H100s where the fleet runs six (hand count in
    docs/recommend.md: the balanced MIG GPU and the two MPS GPUs are kept, the ETL GPU's jobs and node
    B's replicas share one 3g+4g GPU, the batch GPU stays whole)."""
    data = plan_json(history)
    (model,) = data["models"]
    at_once = {w["name"]: w["at_once"] for w in model["workloads"]}
    assert at_once["k8s:prod/web/server"] == 6  # four on node A (after the scale-up) + two on node B
    assert at_once["python3 etl.py"] == 1 and at_once["python3 embed.py --batch 64"] == 4
    assert at_once["python3 train.py --config resnet.yaml"] == 1  # three runs, one after another
    assert model["gpus_needed"] == 5 and model["available_gpus"] == 7
    assert model["summary"] == {"kept": 4, "reconfigured": 1, "released": 2, "added": 0}
    (gap,) = data["basis"]["gaps"]  # 300 s without scrapes; the last one before stays fresh 16.5 s
    assert gap.startswith(f"{NODE_B}: no data for 285 s after ")
    assert {g["node"] for g in model["gpus"]} == {NODE_A, NODE_B}
    # What runs now, from mig_mode="enabled" + gpushare_mig_info and the sharing label:
    now = {(g["node"], g["index"]): (g["current"], g["change"]) for g in model["gpus"]}
    assert now[(NODE_A, 0)] == ("MIG 2x1g.10gb + 2g.20gb + 3g.40gb", "keep")
    assert now[(NODE_B, 1)] == ("MIG 7x1g.10gb", "keep")
    assert now[(NODE_A, 1)] == ("MIG off, MPS", "keep")


def test_history_and_snapshots_of_the_same_fleet_give_the_same_plan(history, tmp_path, run_shared_dir):
    """--snapshot files of the same scenarios (the same gap) plan the same GPUs, layouts and changes."""
    files = []
    for node, scenario in (("a", "churn-node-a"), ("b", "churn-node-b")):
        # node A's also read by test_recommend_inputs.py, played once per run
        lines = shared_lines(run_shared_dir, SCENARIOS / f"{scenario}.yaml", TIMES)
        if node == "b":
            lines = [line for line, t in zip(lines, TIMES) if not GAP[0] <= t < GAP[1]]
        path = tmp_path / f"{node}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        files += ["--snapshot", f"{(NODE_A, NODE_B)[node == 'b']}={path}"]
    status, out, err = recommend(*files, "--format", "json")
    assert status == 0, err
    from_snapshots = json.loads(out)["models"][0]
    from_history = plan_json(history)["models"][0]

    def shape(model):
        return sorted((g["node"], g["index"], g["change"], g["config"]) for g in model["gpus"])

    assert shape(from_snapshots) == shape(from_history)


def test_a_window_of_a_week_reads_the_same_history(history):
    """A 7-day window over the same half hour: coarser steps (302 s), the same plan."""
    status, out, err = recommend("--prometheus", history, "--window", "7d", "--at", f"{EPOCH + 1793:.0f}",
                                 "--format", "json")
    assert status == 0, err
    model = json.loads(out)["models"][0]
    assert model["gpus_needed"] == 5
    assert {w["name"]: w["at_once"] for w in model["workloads"]}["python3 etl.py"] == 1


def test_runs_and_formats_agree(history):
    """Two runs with the same --at give the same bytes; the mig-parted file defines the configs the
    JSON plan names, with every GPU of each node listed."""
    args = ("--prometheus", history, "--window", "30m", "--at", f"{EPOCH + 1793:.0f}")
    first, second = recommend(*args, "--format", "text"), recommend(*args, "--format", "text")
    assert first == second and first[0] == 0
    import yaml

    mig = yaml.safe_load(recommend(*args, "--format", "mig-parted")[1])
    doc = plan_json(history)
    assert plan_check.check_plan(doc) == []  # no verdict contradicted by its own numbers
    model = doc["models"][0]
    for node in (NODE_A, NODE_B):
        entries = mig["mig-configs"][f"node-{node.replace(':', '-')}"]
        listed = sorted(i for e in entries for i in e["devices"])
        assert listed == sorted(g["index"] for g in model["gpus"] if g["node"] == node)


def test_margin_and_quantile_flags_size_the_workloads(history):
    """--margin 0 plans the replicas at their observed 16 GiB."""
    model = plan_json(history, "--margin", "0", "--quantile", "1")["models"][0]
    web = next(w for w in model["workloads"] if w["name"] == "k8s:prod/web/server")
    assert web["need_bytes"] == 16 * GIB


def test_live_fleet_with_churn_needs_no_more_gpus_than_it_runs():
    """Three simulated nodes (the churn fleet and h100-mixed-node, 323 jobs) scraped live with
    Prometheus's default labels: the plan never needs more GPUs than the nodes really use."""
    from tests.promstack import Prometheus, start_exporters, stop_all

    require_binary("prometheus")
    scenarios = ("churn-node-a", "churn-node-b", "h100-mixed-node")
    with contextlib.ExitStack() as stack:
        # 120x with a poll every 0.25 s and a scrape every 0.5 s: a poll every 30 virtual seconds and a
        # scrape every minute, as at 60x with 0.5 s and 1 s, in half the wall time.
        exporters = start_exporters([(SCENARIOS / f"{s}.yaml", {"speed": 120, "interval": 0.25}) for s in scenarios])
        stack.callback(stop_all, exporters)
        prom = stack.enter_context(Prometheus({"gpushare": [e.target for e in exporters]}, scrape_interval="500ms"))
        started = time.time()
        prom.wait_for("gpushare_gpu_info")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:  # until every scenario has played its 30 minutes
            done = prom.query("min(gpushare_simulation_time_seconds) >= 1800")
            if done:
                break
            time.sleep(0.2)
        time.sleep(5)
        # Both plans read the same stored samples: `at` lies 3 s back (6 scrape intervals), so no
        # scrape still in flight can add a sample inside the window between the two runs.
        at_time = round(time.time() - 3)
        window = f"{int(at_time - started) + 5}s"
        in_use = prom.query(f'count(count by (instance, uuid) (last_over_time(gpushare_process_memory_used_bytes'
                            f'{{process!="nvidia-cuda-mps-server"}}[{window}])))', time=at_time)
        at = str(at_time)
        status, out, err = recommend("--prometheus", prom.url, "--window", window, "--at", at, "--format", "json")
        assert status == 0, err
        again = recommend("--prometheus", prom.url, "--window", window, "--at", at, "--format", "json")[1]
    data = json.loads(out)
    (model,) = data["models"]
    assert {g["node"] for g in model["gpus"]} == {e.target for e in exporters}
    assert model["gpus_needed"] <= int(float(in_use[0]["value"][1]))
    assert model["available_gpus"] == 15
    assert out == again
