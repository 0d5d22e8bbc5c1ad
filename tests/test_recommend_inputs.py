"""Inputs of `recommend`: plan files, snapshot files, --from a running exporter, --prometheus."""

from __future__ import annotations

import dataclasses
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from exporter.errors import UserError
from exporter.recommend.observed import ObservedFleet
from exporter.recommend.plan_file import load_plan, parse_plan
from exporter.recommend.prometheus_input import Progress, load_prometheus, parse_window
from exporter.recommend.snapshot_input import fetch_snapshots, load_snapshot_files, parse_snapshot_text
from exporter.snapshot import Activity, GpuInfo, MigInstance, ProcessInfo, Snapshot

GIB = 2**30


# --- plan files -----------------------------------------------------------------------------

def test_sizing_rule_from_params_and_precision():
    """Seed 004's rule: 8B parameters in fp16 need 8e9 x 2 x 1.2 = 19.2e9 bytes; count expands."""
    demand = parse_plan({"gpu_model": "H100", "workloads": [
        {"name": "llama", "count": 2, "params": "8B", "precision": "fp16"}]})
    assert [w.name for w in demand.workloads] == ["llama#1", "llama#2"]
    assert demand.workloads[0].peak_memory_bytes == 19_200_000_000
    assert demand.targets == ("H100-80GB",)  # alias resolved to the catalog key


def test_timeline_sets_the_peak_and_starts_at_zero():
    """A timeline's highest point is the peak when no memory is given."""
    demand = parse_plan({"gpu_model": "H100-80GB", "workloads": [
        {"name": "job", "timeline": [["0s", 0], ["10s", "2GiB"], ["1m", "3GiB"]]}]})
    (w,) = demand.workloads
    assert w.peak_memory_bytes == 3 * GIB and w.duration_seconds == 60


@pytest.mark.parametrize("doc,where", [
    ({"workloads": []}, "workloads"),
    ({"workloads": [{"name": "a"}]}, "workloads[0]"),
    ({"workloads": [{"name": "a", "memory": 16}]}, "workloads[0].memory"),
    ({"workloads": [{"name": "a", "memory": "16 GXB"}]}, "workloads[0].memory"),
    ({"workloads": [{"name": "a", "params": "8B", "precision": "fp13"}]}, "workloads[0].precision"),
    ({"workloads": [{"name": "a", "params": "lots", "precision": "fp16"}]}, "workloads[0].params"),
    ({"workloads": [{"name": "a", "memory": "1GiB", "count": 0}]}, "workloads[0].count"),
    ({"workloads": [{"name": "a", "memory": "1GiB", "colour": "red"}]}, "workloads[0]"),
    ({"workloads": [{"name": "a", "memory": "1GiB", "gpu_model": "H900"}]}, "workloads[0].gpu_model"),
    ({"workloads": [{"name": "a", "timeline": [["5s", "1GiB"], ["9s", "1GiB"]]}]}, "workloads[0].timeline[0][0]"),
    ({"workloads": [{"name": "a", "timeline": [["0s", "1GiB"], ["9s", "1GiB"], ["3s", 0]]}]},
     "workloads[0].timeline[2][0]"),
    ({"workloads": [{"name": "a", "memory": "1GiB"}, {"name": "a", "memory": "1GiB"}]}, "workloads[1].name"),
    ({"workloads": [{"name": "a", "memory": "1GiB"}], "fleet": [{"node": "n"}]}, "fleet[0]"),
    ({"workloads": [{"name": "a", "memory": "1GiB"}],
      "fleet": [{"gpu_model": "H100-80GB", "layout": {"3g.40gb": 3}}]}, "fleet[0].layout"),
    ({"workloads": [{"name": "a", "memory": "1GiB"}], "margin": -1}, "margin"),
])
def test_plan_errors_name_the_file_and_the_place(doc, where):
    """Every bad plan gives one line: the file, the path inside it, the problem."""
    with pytest.raises(UserError) as info:
        parse_plan(doc, "plan.yaml")
    message = str(info.value)
    assert message.startswith(f"plan.yaml: {where}:")
    assert "\n" not in message


def test_plan_file_that_is_not_yaml(tmp_path):
    """A YAML syntax error names the file and the line."""
    path = tmp_path / "bad.yaml"
    path.write_text("workloads:\n  - name: [unclosed\n")
    with pytest.raises(UserError, match=r"bad.yaml: line \d+"):
        load_plan(str(path))


def test_missing_plan_file():
    """A missing file is named with the flag."""
    with pytest.raises(UserError, match="--workloads /nonexistent.yaml"):
        load_plan("/nonexistent.yaml")


# --- snapshots ---------------------------------------------------------------------------------

def _proc(pid, gpu, used, gi=None, util=None, mps=False, server=False, name="python3"):
    return ProcessInfo(pid=pid, name=name, cmdline="", gpu_index=gpu, gi=gi, ci=None if gi is None else 0,
                       used_memory_bytes=used, sm_utilization_ratio=util, is_mps_client=mps,
                       is_mps_server=server)


def snapshot(ts, procs0, procs1=()):
    """Two H100s: gpu0 without MIG (MPS), gpu1 with MIG 3g.40gb at 0 and 4."""
    mig = tuple(MigInstance(gi=g, ci=0, mig_index=i, mig_uuid=f"MIG-{g}", profile="3g.40gb", profile_id=9,
                            placement_start=start, placement_size=4, sm_count=60, memory_total_bytes=40448 * 2**20,
                            memory_used_bytes=None, memory_free_bytes=None,
                            activity=Activity(sm_active=0.5, tensor_active=0.25))
                for i, (g, start) in enumerate([(1, 4), (2, 0)]))
    gpus = (
        GpuInfo(index=0, uuid="GPU-0", name="NVIDIA H100 80GB HBM3", pci_bus_id="0", up=True, mig_mode=False,
                sharing="mps", processes=tuple(procs0)),
        GpuInfo(index=1, uuid="GPU-1", name="NVIDIA H100 80GB HBM3", pci_bus_id="1", up=True, mig_mode=True,
                sharing="mig", mig_instances=mig, processes=tuple(procs1)),
    )
    doc = dataclasses.asdict(Snapshot(timestamp=ts, backend="nvml", driver_version="550", poll_duration_seconds=0.1,
                                      gpus=gpus))
    doc["call_errors"] = {}
    return doc


def test_snapshot_gives_gpus_layouts_workloads_and_shared_devices(tmp_path):
    """One snapshot: peaks, SM-equivalents (util x SMs, or instance activity x its SMs), MPS sharing."""
    doc = snapshot(100.0, [_proc(10, 0, 20 * GIB, util=0.5, mps=True), _proc(11, 0, 30 * GIB, util=0.25, mps=True),
                           _proc(12, 0, 64 * 2**20, server=True, name="nvidia-cuda-mps-server")],
                   [_proc(20, 1, 25 * GIB, gi=1)])
    path = tmp_path / "node-a.json"
    path.write_text(json.dumps(doc))
    fleet = ObservedFleet()
    load_snapshot_files([str(path)], fleet)
    demand = fleet.to_demand(margin=0.1)
    by_name = {w.name: w for w in demand.workloads}
    assert set(by_name) == {"node-a:python3[10]", "node-a:python3[11]", "node-a:python3[20]"}  # server left out
    assert by_name["node-a:python3[10]"].compute_sms == pytest.approx(0.5 * 132)
    assert by_name["node-a:python3[20]"].compute_sms == pytest.approx(0.5 * 60)
    assert by_name["node-a:python3[20]"].tensor_ratio == 0.25
    assert by_name["node-a:python3[10]"].memory_need_bytes == pytest.approx(22 * GIB, abs=1)
    assert {(g.node, g.index, g.layout) for g in demand.gpus} == {
        ("node-a", 0, None), ("node-a", 1, (("3g.40gb", 0), ("3g.40gb", 4)))}
    (shared,) = demand.shared
    assert shared.mps and set(shared.workloads) == {"node-a:python3[10]", "node-a:python3[11]"}


def test_snapshot_series_learns_a_timeline_for_a_whole_job(tmp_path):
    """JSON Lines over time: a job that ends inside the series gets its memory timeline, each interval
    between two looks holding the larger sample (a spike may start right after a look)."""
    memory = {1: None, 2: 2, 3: 6, 4: 9, 5: None}
    lines = [json.dumps(snapshot(10.0 * t, [_proc(7, 0, m * GIB)] if m else [])) for t, m in memory.items()]
    path = tmp_path / "series.jsonl"
    path.write_text("\n".join(lines))
    fleet = ObservedFleet()
    load_snapshot_files([f"gpu-node={path}"], fleet)
    (w,) = fleet.to_demand().workloads
    assert w.name == "gpu-node:python3[7]"
    assert w.peak_memory_bytes == 9 * GIB
    assert w.timeline == ((0.0, 6 * GIB), (10.0, 6 * GIB), (10.0, 9 * GIB), (20.0, 9 * GIB), (30.0, 9 * GIB))


@pytest.mark.parametrize("text,problem", [
    ("", "empty"), ("{not json", "not valid JSON"), ('{"gpus": 3}', "not a snapshot"), ("[1]", "not a snapshot"),
])
def test_bad_snapshot_text_is_one_line(text, problem):
    """Bad snapshot files fail with one line naming the source."""
    with pytest.raises(UserError, match=problem) as info:
        parse_snapshot_text(text, "snap.json")
    assert str(info.value).startswith("snap.json:") and "\n" not in str(info.value)


def test_unknown_gpu_model_is_noted_not_fatal():
    """A product name the catalog lacks is reported and its processes skipped."""
    doc = snapshot(1.0, [_proc(1, 0, GIB)])
    doc["gpus"][0]["name"] = "NVIDIA Imaginary 9000"
    fleet = ObservedFleet()
    from exporter.recommend.snapshot_input import add_snapshot
    add_snapshot(fleet, "n", doc, "x")
    demand = fleet.to_demand()
    assert not demand.workloads and any("Imaginary" in n for n in demand.notes)


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


def test_from_url_reads_the_exporter_snapshot_endpoint():
    """--from fetches /api/v1/snapshot; the node is the URL's host:port."""
    doc = snapshot(5.0, [_proc(3, 0, 4 * GIB)])
    with _Server(lambda path, q: (200, doc) if path == "/api/v1/snapshot" else (404, {})) as server:
        fleet = ObservedFleet()
        fetch_snapshots([server.url], fleet)
    (w,) = fleet.to_demand().workloads
    assert w.name == f"{server.url.split('//')[1]}:python3[3]"
    assert server.requests == ["/api/v1/snapshot"]


def test_from_url_errors_are_one_line():
    """An HTTP error or an unreachable exporter names --from and the URL."""
    with _Server(lambda path, q: (500, {})) as server:
        with pytest.raises(UserError, match=r"--from .*HTTP 500"):
            fetch_snapshots([server.url], ObservedFleet())
    with pytest.raises(UserError, match="--from http://127.0.0.1:9: cannot fetch"):
        fetch_snapshots(["http://127.0.0.1:9"], ObservedFleet(), timeout=2)
    with pytest.raises(UserError, match="expected an http"):
        fetch_snapshots(["node-a:9835"], ObservedFleet())


# --- Prometheus --------------------------------------------------------------------------------

def _series(value, **labels):
    return {"metric": labels, "value": [1700000000.0, str(value)]}


def fake_prometheus(path, q):
    """Answers the queries load_prometheus makes for two nodes, one MPS GPU shared by two jobs."""
    query = q.get("query", "")
    base = {"instance": "n1:9835", "gpu": "0", "uuid": "GPU-a"}
    if path == "/api/v1/query_range":
        start = float(q["start"])
        values = [[start + 3600 + 15 * k, str((k + 1) * GIB)] for k in range(5)]
        result = [{"metric": {**base, "gi": "", "pid": "1", "process": "train"}, "values": values}]
    elif "gpushare_gpu_info" in query:
        result = [_series(1, **base, name="NVIDIA H100 80GB HBM3", mig_mode="false"),
                  _series(1, instance="n2:9835", gpu="0", uuid="GPU-b", name="NVIDIA H100 80GB HBM3",
                          mig_mode="false")]
    elif "count by" in query:
        result = [_series(2, **base, gi="")]
    elif "gpushare_process_memory_used_bytes" in query:
        result = [_series(30 * GIB, **base, gi="", pid="1", process="train", sharing="mps"),
                  _series(20 * GIB, **base, gi="", pid="2", process="serve", sharing="mps"),
                  _series(GIB, **base, gi="", pid="3", process="nvidia-cuda-mps-server", sharing="mps")]
    elif "gpushare_process_sm_utilization_ratio" in query:
        result = [_series(0.5, **base, gi="", pid="1")]
    elif "gpushare_gpu_sm_active_ratio" in query:
        result = [_series(0.6, **base)]
    else:
        result = []
    return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}


def test_prometheus_history_gives_peaks_compute_sharing_and_timelines():
    """Peaks from max_over_time, SMs from per-process utilisation (else the GPU's activity shared out),
    the MPS server left out, the GPU shared by two processes at once, and a whole job's timeline."""
    stream = io.StringIO()
    with _Server(fake_prometheus) as server:
        fleet = ObservedFleet()
        load_prometheus(server.url, "1d", fleet, progress_stream=stream, progress=True)
    demand = fleet.to_demand(margin=0.0)
    by_name = {w.name: w for w in demand.workloads}
    assert set(by_name) == {"n1:9835:train[1]", "n1:9835:serve[2]"}
    assert by_name["n1:9835:train[1]"].peak_memory_bytes == 30 * GIB
    assert by_name["n1:9835:train[1]"].compute_sms == pytest.approx(0.5 * 132)
    assert by_name["n1:9835:serve[2]"].compute_sms == pytest.approx(0.6 * 132 / 2)
    assert by_name["n1:9835:train[1]"].timeline[-1][1] == 5 * GIB
    assert len(demand.gpus) == 2
    (shared,) = demand.shared
    assert shared.mps and len(shared.workloads) == 2
    assert "[##############################] 2/2" in stream.getvalue()
    assert any("max_over_time" in r for r in server.requests)


def test_prometheus_errors_are_one_line():
    """A query error, an empty fleet and an unreachable server each name --prometheus."""
    with _Server(lambda p, q: (400, {"status": "error", "error": "parse error"})) as server:
        with pytest.raises(UserError, match="--prometheus .*HTTP 400.*parse error"):
            load_prometheus(server.url, "7d", ObservedFleet())
    empty = {"status": "success", "data": {"result": []}}
    with _Server(lambda p, q: (200, empty)) as server:
        with pytest.raises(UserError, match="no gpushare_gpu_info series in the last 7d"):
            load_prometheus(server.url, "7d", ObservedFleet())
    with pytest.raises(UserError, match="cannot reach"):
        load_prometheus("http://127.0.0.1:9", "7d", ObservedFleet())


@pytest.mark.parametrize("text,seconds", [("7d", 604800), ("1d12h", 129600), ("90m", 5400), ("2w", 1209600)])
def test_window_parsing(text, seconds):
    """Prometheus durations, compound ones included."""
    assert parse_window(text) == seconds


@pytest.mark.parametrize("text", ["", "7", "7x", "0d", "d7"])
def test_bad_window_is_one_line(text):
    """A malformed --window names the flag."""
    with pytest.raises(UserError, match="--window"):
        parse_window(text)


def test_progress_bar_is_silent_off_a_terminal():
    """No bar when stderr is not a terminal and nobody asked for one."""
    stream = io.StringIO()
    bar = Progress(3, "x", stream)
    bar.step(3)
    assert stream.getvalue() == ""
