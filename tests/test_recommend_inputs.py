"""Inputs of `recommend`: plan files, snapshot files and --from (all read from what the exporter or the
simulator really produces), learned profiles, and Prometheus's error paths."""

from __future__ import annotations

import io
import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

from exporter import cli
from exporter.errors import UserError
from exporter.recommend import promql
from exporter.recommend.observed import ObservedFleet
from exporter.recommend.plan_file import load_plan, parse_plan
from exporter.recommend.prometheus_input import Progress, load_prometheus, parse_window
from exporter.recommend.snapshot_input import add_snapshot, fetch_snapshots, load_snapshot_files, parse_snapshot_text
from tests.sim_snapshots import SCENARIOS, shared_lines, snapshot_lines

GIB = 2**30
EVERY_15S = [float(t) for t in range(0, 1800, 15)]


@pytest.fixture(scope="module")
def node_a_lines(run_shared_dir):
    """churn-node-a watched every 15 s for its 30 minutes, as `exporter snapshot --at T` prints it (played
    once per run with test_recommend_prometheus_e2e's)."""
    return shared_lines(run_shared_dir, SCENARIOS / "churn-node-a.yaml", EVERY_15S)


def demand_of(tmp_path, lines, node="node-a", **kwargs):
    path = tmp_path / f"{node}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    fleet = ObservedFleet()
    load_snapshot_files([f"{node}={path}"], fleet)
    return fleet.to_demand(**kwargs)


# --- plan files -----------------------------------------------------------------------------

def test_sizing_rule_from_params_and_precision():
    """Seed 004's rule: 8B parameters in fp16 need 8e9 x 2 x 1.2 = 19.2e9 bytes; count is concurrency."""
    demand = parse_plan({"gpu_model": "H100", "workloads": [
        {"name": "llama", "count": 2, "params": "8B", "precision": "fp16"}]})
    (w,) = demand.workloads
    assert (w.name, w.count, w.peak_memory_bytes) == ("llama", 2, 19_200_000_000)
    assert demand.targets == ("H100-80GB",)  # alias resolved to the catalog key


def test_timeline_sets_the_peak_and_starts_at_zero():
    """A timeline's highest point is the peak when no memory is given."""
    demand = parse_plan({"gpu_model": "H100-80GB", "workloads": [
        {"name": "job", "timeline": [["0s", 0], ["10s", "2GiB"], ["1m", "3GiB"]]}]})
    (w,) = demand.workloads
    assert w.peak_memory_bytes == 3 * GIB and w.duration_seconds == 60


@pytest.mark.parametrize("doc,where,problem", [
    ({"workloads": []}, "workloads", "non-empty list"),
    ({"workloads": [{"name": "a"}]}, "workloads[0]", "needs memory"),
    ({"workloads": [{"name": "a", "memory": 16}]}, "workloads[0].memory", "bare numbers are bytes"),
    ({"workloads": [{"name": "a", "memory": "16 GXB"}]}, "workloads[0].memory", "unknown unit"),
    ({"workloads": [{"name": "a", "memory": "1e400GiB"}]}, "workloads[0].memory", "too large"),
    ({"workloads": [{"name": "a", "memory": "-5GiB"}]}, "workloads[0].memory", "negative"),
    ({"workloads": [{"name": "a", "memory": -5}]}, "workloads[0].memory", "negative"),
    ({"workloads": [{"name": "a", "memory": 0}]}, "workloads[0].memory", "zero"),
    ({"workloads": [{"name": "a", "memory": "0GiB"}]}, "workloads[0].memory", "zero"),
    ({"workloads": [{"name": "a", "memory": "2PiB"}]}, "workloads[0].memory", "unknown unit"),
    ({"workloads": [{"name": "a", "memory": "5000TB"}]}, "workloads[0].memory", "too large"),
    ({"workloads": [{"name": "a", "params": "8B", "precision": "fp13"}]}, "workloads[0].precision", "expected one of"),
    ({"workloads": [{"name": "a", "params": "lots", "precision": "fp16"}]}, "workloads[0].params", "parameter count"),
    ({"workloads": [{"name": "a", "params": 1e400, "precision": "fp16"}]}, "workloads[0].params", "parameter count"),
    ({"workloads": [{"name": "a", "memory": "1GiB", "count": 0}]}, "workloads[0].count", "whole number"),
    ({"workloads": [{"name": "a", "memory": "1GiB", "count": 10**9}]}, "workloads[0].count", "whole number"),
    ({"workloads": [{"name": "a", "memory": "1GiB", "compute_sms": 1e400}]}, "workloads[0].compute_sms", "SMs"),
    ({"workloads": [{"name": "a", "memory": "1GiB", "colour": "red"}]}, "workloads[0]", "unknown key"),
    ({"workloads": [{"name": "a", "memory": "1GiB", "gpu_model": "H900"}]}, "workloads[0].gpu_model", "unknown"),
    ({"workloads": [{"name": "a", "timeline": [["5s", "1GiB"], ["9s", "1GiB"]]}]}, "workloads[0].timeline[0][0]",
     "starts at 0s"),
    ({"workloads": [{"name": "a", "timeline": [["0s", "1GiB"], ["9s", "1GiB"], ["3s", 0]]}]},
     "workloads[0].timeline[2][0]", "must not decrease"),
    ({"workloads": [{"name": "a", "timeline": [["0s", "1GiB"], ["9s", "-1GiB"]]}]}, "workloads[0].timeline[1][1]",
     "negative"),
    ({"workloads": [{"name": "a", "memory": "1GiB"}, {"name": "a", "memory": "1GiB"}]}, "workloads[1].name",
     "duplicate"),
    ({"workloads": [{"name": "a", "memory": "1GiB"}], "fleet": [{"node": "n"}]}, "fleet[0]", "gpu_model"),
    ({"workloads": [{"name": "a", "memory": "1GiB"}],
      "fleet": [{"gpu_model": "H100-80GB", "layout": {"3g.40gb": 3}}]}, "fleet[0].layout", "do not fit"),
    ({"workloads": [{"name": "a", "memory": "1GiB"}], "margin": -1}, "margin", "between 0"),
])
def test_plan_errors_name_the_file_and_the_place(doc, where, problem):
    """Every bad plan gives one line: the file, the path inside it, the problem."""
    with pytest.raises(UserError) as info:
        parse_plan(doc, "plan.yaml")
    message = str(info.value)
    assert message.startswith(f"plan.yaml: {where}:") and problem in message
    assert "\n" not in message


def test_plan_file_that_is_not_yaml(tmp_path):
    """A YAML syntax error names the file and the line."""
    path = tmp_path / "bad.yaml"
    path.write_text("workloads:\n  - name: [unclosed\n")
    with pytest.raises(UserError, match=r"bad.yaml: line \d+"):
        load_plan(str(path))


def test_plan_file_that_is_not_utf8_names_the_field(tmp_path):
    """Latin-1 bytes in a workload name: one line naming the file, the field and the byte."""
    path = tmp_path / "latin1.yaml"
    path.write_bytes("gpu_model: H100\nworkloads:\n  - {name: caf\xe9, memory: 8GiB}\n".encode("latin-1"))
    with pytest.raises(UserError) as info:
        load_plan(str(path))
    assert str(info.value) == (f"{path}: workloads[0].name: not UTF-8 text (byte 0xe9 on line 3); "
                               "save the file as UTF-8")


def test_missing_plan_file():
    """A missing file is named with the flag."""
    with pytest.raises(UserError, match="--workloads /nonexistent.yaml"):
        load_plan("/nonexistent.yaml")


# --- snapshots from the simulator ------------------------------------------------------------

def test_snapshots_give_workloads_not_processes(tmp_path, node_a_lines):
    """Workloads are the exporter's identities: four replicas of one deployment are one workload (pods
    named by Kubernetes, not by pid), three training runs one after another are one workload with
    one instance at a time."""
    demand = demand_of(tmp_path, node_a_lines, margin=0.0)
    by_name = {w.name: w for w in demand.workloads}
    assert set(by_name) == {
        "k8s:prod/web/server", "python3 train.py --config resnet.yaml", "python3 serve.py --model intfloat/e5-small",
        "python3 serve.py --model BAAI/bge-small", "python3 -m ipykernel_launcher -f /home/ana/kernel-*.json",
        "python3 render.py --scene city", "python3 bake.py --lod 3"}
    web, train = by_name["k8s:prod/web/server"], by_name["python3 train.py --config resnet.yaml"]
    assert (web.count, web.instances) == (4, 5)  # scale-up to four; a crashed replica replaced: five pods
    assert (train.count, train.instances) == (1, 3)
    assert web.peak_memory_bytes == 16 * GIB and train.peak_memory_bytes == 30 * GIB
    assert max(web.counts) == 4 and web.counts[0] == 3  # three at the start, never five at once


def test_snapshots_recognise_layouts_and_sharing(tmp_path, node_a_lines):
    """Current MIG layouts and MPS come from what the exporter reports."""
    demand = demand_of(tmp_path, node_a_lines)
    gpus = {g.index: g for g in demand.gpus}
    assert gpus[0].layout == (("1g.10gb", 2), ("1g.10gb", 3), ("2g.20gb", 0), ("3g.40gb", 4))
    assert gpus[1].layout is None and gpus[1].sharing == "mps"
    (shared,) = demand.shared
    assert (shared.key, shared.mps, shared.concurrency) == ("node-a gpu1", True, 4)
    assert shared.together_peak_bytes == 64 * GIB
    assert demand.basis.clock == "scenario" and demand.basis.window_seconds == 1785


def test_a_whole_run_gives_a_timeline_scaled_to_the_planned_peak(tmp_path, node_a_lines):
    """The training run from 10m to 19m55s was seen from start to end: its memory timeline is kept."""
    demand = demand_of(tmp_path, node_a_lines, margin=0.0)
    train = next(w for w in demand.workloads if w.name.startswith("python3 train.py"))
    assert 585 <= train.duration_seconds <= 615
    assert max(v for _, v in train.timeline) == train.peak_memory_bytes


def test_a_gap_between_looks_is_held_and_reported(tmp_path, node_a_lines):
    """Five missing minutes: the replicas seen on both sides ran through it, and the basis says so."""
    kept = [line for line, t in zip(node_a_lines, EVERY_15S) if not 300 <= t < 600]
    demand = demand_of(tmp_path, kept)
    web = next(w for w in demand.workloads if w.name == "k8s:prod/web/server")
    assert web.counts.min() >= 2  # never fewer than the replicas that lived through the gap
    assert demand.basis.gaps and "nothing seen for 315 s" in demand.basis.gaps[0]


def test_snapshot_command_output_appends_as_json_lines(tmp_path, capsys):
    """`exporter snapshot` prints one line, so `>> file.jsonl` makes a file --snapshot reads; pretty
    snapshots appended one after another (older versions) are read too."""
    path = tmp_path / "node.jsonl"
    pretty = tmp_path / "old.json"
    for t in ("30", "90"):
        assert cli.main(["snapshot", "--simulate", str(SCENARIOS / "churn-node-b.yaml"), "--at", t]) == 0
        out = capsys.readouterr().out
        assert out.count("\n") == 1
        with path.open("a") as f:
            f.write(out)
        assert cli.main(["snapshot", "--simulate", str(SCENARIOS / "churn-node-b.yaml"), "--at", t, "--pretty"]) == 0
        with pretty.open("a") as f:
            f.write(capsys.readouterr().out)
    for source in (path, pretty):
        docs = parse_snapshot_text(source.read_text(), str(source))
        assert [d["simulation"]["time_seconds"] for d in docs] == [30.0, 90.0]


def test_oom_kills_lift_the_margin_cap(tmp_path):
    """The seed talk's jobs killed by an OOM: their device is no proof that they fit there, so the
    margin is not capped by it (and the shared device is marked)."""
    lines = snapshot_lines(SCENARIOS / "wan22-h100-mps-together.yaml", [float(t) for t in range(0, 600, 10)])
    demand = demand_of(tmp_path, lines)
    (shared,) = demand.shared
    assert shared.oom
    assert all(w.memory_cap_bytes is None for w in demand.workloads)


@pytest.mark.parametrize("text,problem", [
    ("", "empty"), ("{not json", "not valid JSON"), ('{"gpus": 3}', "not a snapshot"), ("[1]", "not a snapshot"),
    ('{"gpus": []}\n{"gpus": [}', "line 2 column"),
])
def test_bad_snapshot_text_is_one_line(text, problem):
    """Bad snapshot files fail with one line naming the source."""
    with pytest.raises(UserError, match=problem) as info:
        parse_snapshot_text(text, "snap.json")
    assert str(info.value).startswith("snap.json:") and "\n" not in str(info.value)


def test_snapshot_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "n.jsonl"
    path.write_bytes(b'{"gpus": []}\n{"gpus": [], "x": "\xff"}\n')
    with pytest.raises(UserError, match=r"--snapshot .*n.jsonl: line 2: not UTF-8 text \(byte 0xff\)"):
        load_snapshot_files([str(path)], ObservedFleet())


def test_unknown_gpu_model_is_noted_not_fatal(node_a_lines):
    """A product name the catalog lacks is reported and its processes skipped."""
    doc = json.loads(node_a_lines[10])
    for gpu in doc["gpus"]:
        gpu["name"] = "NVIDIA Imaginary 9000"
    fleet = ObservedFleet()
    add_snapshot(fleet, "n", doc, "x")
    demand = fleet.to_demand()
    assert not demand.workloads and any("Imaginary" in n for n in demand.notes)


# --- --from a running exporter ---------------------------------------------------------------

def test_from_watches_a_running_exporter(tmp_path):
    """--from with a window reads the exporter's snapshot several times (its history, not one instant)
    and marks a plan from less than the minimum window as a draft."""
    from tests.promstack import start_exporter

    with start_exporter(SCENARIOS / "churn-node-b.yaml", speed=60, interval=0.5) as exporter:
        fleet = ObservedFleet()
        looks = []
        fetch_snapshots([exporter.url], fleet, watch_seconds=2.5, interval=1.0, progress=looks.append)
    demand = fleet.to_demand(min_window=3600)
    assert looks[-1] >= 3
    assert demand.basis.window_seconds > 60 and demand.basis.draft  # scenario seconds at 60x
    assert any(w.name == "k8s:prod/web/server" and w.count == 2 for w in demand.workloads)
    assert demand.sources == (f"exporter {exporter.url} ({looks[-1]} looks)",)


class _Server:
    """A tiny HTTP server on 127.0.0.1 (port 0) answering with ``handler(path, query)``."""

    def __init__(self, handler):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                parts = urlsplit(self.path)
                outer.requests.append(self.path)
                status, body = handler(parts.path, {k: v[0] for k, v in parse_qs(parts.query).items()})
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.requests = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_from_url_errors_are_one_line():
    """An HTTP error or an unreachable exporter names --from and the URL; the example port is 18474."""
    with _Server(lambda path, q: (500, {})) as server:
        with pytest.raises(UserError, match=r"--from .*HTTP 500"):
            fetch_snapshots([server.url], ObservedFleet())
    with pytest.raises(UserError, match="--from http://127.0.0.1:9: cannot connect"):
        fetch_snapshots(["http://127.0.0.1:9"], ObservedFleet(), timeout=2)
    with pytest.raises(UserError, match="expected an http.*http://node-a:18474"):
        fetch_snapshots(["node-a:18474"], ObservedFleet())


# --- Prometheus: queries and error paths (the data paths run against a real Prometheus in
# test_recommend_prometheus_e2e.py) ----------------------------------------------------------

@pytest.mark.parametrize("value", ["gpu-node-1.example.com:18474", 'we"ird\\name', "plain", "a|b(c)[d]*+?.^$"])
def test_promql_strings_and_regexes_hold_any_label_value(value):
    """A PromQL string literal unquotes to the value; the RE2 pattern matches exactly it."""
    import re

    literal = promql.string(value)
    assert literal[0] == literal[-1] == '"'
    assert json.loads(literal) == value  # PromQL strings take the escapes JSON does for these characters
    pattern = promql.re2_escape(value)
    assert re.fullmatch(pattern, value) and not re.fullmatch(pattern, value + "x")
    assert "\\-" not in pattern and "\\:" not in pattern  # PromQL rejects these escapes


def test_prometheus_errors_are_one_line():
    """A query error, an empty fleet, a bad node label and an unreachable server each name --prometheus."""
    with _Server(lambda p, q: (400, {"status": "error", "error": "parse error"})) as server:
        with pytest.raises(UserError, match="--prometheus .*HTTP 400 Bad Request: parse error"):
            load_prometheus(server.url, "7d")
    empty = {"status": "success", "data": {"result": []}}
    with _Server(lambda p, q: (200, empty)) as server:
        with pytest.raises(UserError, match="no gpushare_gpu_info series in the last 7d"):
            load_prometheus(server.url, "7d")
        with pytest.raises(UserError, match="--node-label no-dashes: not a Prometheus label name"):
            load_prometheus(server.url, "7d", node_label="no-dashes")
    with pytest.raises(UserError, match="cannot connect"):
        load_prometheus("http://127.0.0.1:9", "7d")


@pytest.mark.parametrize("text,seconds", [("7d", 604800), ("1d12h", 129600), ("90m", 5400), ("2w", 1209600)])
def test_window_parsing(text, seconds):
    """Prometheus durations, compound ones included."""
    assert parse_window(text) == seconds


@pytest.mark.parametrize("text", ["", "7", "7x", "0d", "d7"])
def test_bad_window_is_one_line(text):
    """A malformed --window names the flag."""
    with pytest.raises(UserError, match="--window"):
        parse_window(text)


def test_progress_bar_is_silent_off_a_terminal_and_complete_when_asked():
    """No bar when stderr is not a terminal and nobody asked for one; a full one when asked."""
    stream = io.StringIO()
    Progress(3, "x", stream).step(3)
    assert stream.getvalue() == ""
    Progress(2, "prometheus", stream, enabled=True).step(2)
    assert stream.getvalue().endswith("[##############################] 2/2\n")


def test_counts_are_plain_integers(tmp_path, node_a_lines):
    """Counts over time are integers on one grid for every workload (the planner's input)."""
    demand = demand_of(tmp_path, node_a_lines)
    assert {len(w.counts) for w in demand.workloads} == {len(demand.grid.times)}
    assert all(w.counts.dtype == np.int64 for w in demand.workloads)


LEARN = """\
name: learn
duration: 10m
gpus:
  - model: H100-80GB
processes:
  - {pid: 11, cmdline: python3 job.py --seed 1, gpu: 0, start: 5s, end: 25s, memory: [["+0s", 1GiB], ["+15s", 20GiB]]}
  - {pid: 12, cmdline: python3 job.py --seed 2, gpu: 0, start: 30s, end: 5m, memory: [["+0s", 1GiB], ["+200s", 20GiB]]}
"""


def test_from_uses_what_the_exporter_learned(tmp_path):
    """The second run of a job is seen early (a few GiB): --from sizes it by the exporter's learned
    profile of the first run (20 GiB), not by the instant it happened to look."""
    from tests.promstack import start_exporter

    scenario = tmp_path / "learn.yaml"
    scenario.write_text(LEARN)
    with start_exporter(scenario, speed=10, interval=0.5) as exporter:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                doc = json.loads(urllib.request.urlopen(exporter.url + "/api/v1/snapshot", timeout=5).read())
            except urllib.error.HTTPError as exc:  # 503 until the first poll is in (slow on a loaded machine)
                assert exc.code == 503, exc
                time.sleep(0.2)
                continue
            if doc["simulation"]["time_seconds"] >= 40:
                break
            time.sleep(0.2)
        fleet = ObservedFleet()
        fetch_snapshots([exporter.url], fleet)
    (w,) = fleet.to_demand(margin=0.0).workloads
    assert w.name == "python3 job.py" and w.peak_memory_bytes == 20 * GIB
    assert w.max_peak_bytes < 20 * GIB and "learned profile" in w.sized_by


def test_state_dir_profiles_raise_observed_sizes_and_stand_alone(tmp_path, node_a_lines):
    """Profiles from `exporter profiles export` (keyed <key>@<N>GiB) raise the size of the workload
    seen running; alone they give one instance per profiled workload, and say so."""
    from exporter.foresight.profiles import WorkloadProfile
    from exporter.foresight.store import export_json
    from exporter.recommend.profiles_input import apply_profiles, load_profiles

    profile = WorkloadProfile(key="k8s:prod/web/server@79GiB", peak_bytes=18 * GIB, peak_offset_seconds=60,
                              duration_seconds=600, runs=2, samples=40, timeline=((0.0, GIB), (60.0, 18 * GIB)),
                              updated_at=1.0, device_bytes=80 * GIB)
    path = tmp_path / "profiles.json"
    path.write_text(export_json([profile]))
    profiles = load_profiles(str(path))
    demand = apply_profiles(demand_of(tmp_path, node_a_lines, margin=0.0), profiles, 0.1, str(path))
    web = next(w for w in demand.workloads if w.name == "k8s:prod/web/server")
    assert web.peak_memory_bytes == 18 * GIB and "learned profile" in web.sized_by
    assert demand.basis.learned_profiles == 1
    from exporter.recommend.demand import Demand

    alone = apply_profiles(Demand(workloads=()), profiles, 0.1, str(path))
    (w,) = alone.workloads
    assert (w.name, w.count, w.peak_memory_bytes) == ("k8s:prod/web/server", 1, 18 * GIB)
    assert any("one instance" in n or "each workload is planned with one" in n for n in alone.notes)
    with pytest.raises(UserError, match="--state-dir /nonexistent: no such directory"):
        load_profiles("/nonexistent")


def test_prometheus_queries_ask_thanos_to_deduplicate_and_read_each_cluster_alone():
    """Every query carries dedup=true (Thanos Query merges HA replicas; Prometheus ignores it). Over two
    clusters (Thanos over two clusters, each with a gpu-node-1), after the three queries that find the
    window and the clusters, every query of a cluster's read carries its matcher, so a node is (cluster,
    node); --cluster reads one, and an unknown one is refused in one line."""
    from urllib.parse import parse_qs, urlsplit

    from exporter.recommend.prometheus_input import load_clusters

    gpu = {"instance": "gpu-node-1", "uuid": "GPU-1", "gpu": "0", "name": "NVIDIA H100 80GB HBM3"}

    def answer(path, query):
        text = query.get("query", "")
        if text.startswith("count by (cluster)"):
            result = [{"metric": {"cluster": c}, "value": [0, "1"]} for c in ("us", "eu")]
        elif text.startswith(("gpushare_gpu_info", "last_over_time(gpushare_gpu_info")):
            result = [{"metric": {**gpu, "cluster": "eu"}, "value": [0, "1"]}]
        else:
            result = []
        return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}

    with _Server(answer) as server:
        plans = load_clusters(server.url, "1h")
        asked = [parse_qs(urlsplit(r).query)["query"][0] for r in server.requests]
        with pytest.raises(UserError, match=r"^--cluster ap: not a cluster at --prometheus .* \(clusters: eu, us\)$"):
            load_clusters(server.url, "1h", cluster="ap")
        assert [name for name, _ in load_clusters(server.url, "1h", cluster="us")] == ["us"]
    assert [name for name, _ in plans] == ["eu", "us"]
    assert all(len(d.gpus) == 1 for _, d in plans)
    assert any(s.startswith(f"prometheus {server.url} (cluster eu, window 1h") for s in plans[0][1].sources)
    assert asked[2].startswith("count by (cluster)")
    reads = asked[3:]
    half = len(reads) // 2
    assert len(reads) == 2 * half and reads[:half] == [q.replace('cluster="us"', 'cluster="eu"') for q in reads[half:]]
    assert all('cluster="eu"' in q for q in reads[:half]), [q for q in reads[:half] if 'cluster="eu"' not in q]
    assert server.requests and all("dedup=true" in r for r in server.requests)
