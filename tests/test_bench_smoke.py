"""Smoke tests of the exporter bench harness (bench/exporter_bench.py) and the real-GPU check.

They check that the harness runs end to end and reports; they never assert on speed (the
figures themselves are the bench's output, not test material).
"""

from __future__ import annotations

import ctypes.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import bench_module

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench" / "exporter_bench.py"
REAL_GPU = REPO / "bench" / "real_gpu_smoke.py"


def _run(script: str, *args: str, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    """bench/<script> with these arguments, from the checkout, its output captured as text."""
    return subprocess.run([sys.executable, str(REPO / "bench" / script), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=env)


def _bench(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return _run(BENCH.name, "--smoke", *args, env=env)


def test_smoke_run_prints_every_table():
    """A --smoke run on the 1-GPU scenario exits 0 and prints targets, scaling and NVML call tables."""
    out = _bench()
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    for title in ("== Targets: gpushare on 1gpu-10proc", "== Scaling: gpushare per poll",
                  "== NVML calls per poll on 1gpu-10proc", "== C symbols called per poll on 1gpu-10proc"):
        assert title in text
    # The peer is either measured side by side or skipped with its one line, never silently absent.
    assert "== Side by side on 1gpu-10proc" in text or "nvitop-exporter: skipped:" in text
    calls = re.search(r"NVML calls per poll / minimum\s+(\d+) / (\d+)", text)
    assert calls is not None
    # The minimum leaves out cached identity the exporter also skips, so it can never exceed the calls made.
    assert 0 < int(calls.group(2)) <= int(calls.group(1))


def test_missing_peer_is_skipped_with_one_line(tmp_path):
    """When nvitop-exporter cannot be imported the bench says so in one line and still finishes."""
    stub = tmp_path / "nvitop_exporter"
    stub.mkdir()
    (stub / "__init__.py").write_text('raise ImportError("hidden by the bench smoke test")\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    out = _bench("--peers", "nvitop", env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    skipped = [line for line in out.stdout.splitlines() if "nvitop-exporter: skipped:" in line]
    assert len(skipped) == 1
    assert "not installed" in skipped[0]
    assert "== Side by side" not in out.stdout


def test_unknown_peer_is_a_usage_error():
    """Naming a peer the bench does not know is refused before anything runs."""
    out = _bench("--peers", "no-such-exporter")
    assert out.returncode == 2
    assert "unknown peer" in out.stderr


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this host has an NVIDIA driver")
def test_real_gpu_check_refuses_without_a_driver():
    """Without an NVIDIA driver the real-GPU check prints one error line and exits 2."""
    out = _run(REAL_GPU.name, timeout=60)
    assert out.returncode == 2
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("real_gpu_smoke: error:")
    assert "driver" in lines[0]


def test_dcgm_bench_smoke_reports_both_backends():
    """bench/dcgm_bench.py --smoke prints the DCGM backend's poll cost next to NVML's on the A100 MIG scenario."""
    out = _run("dcgm_bench.py", "--smoke")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {line.split()[1]: line.split() for line in out.stdout.splitlines()
            if line.startswith("a100-40gb-two-3g@300s")}
    assert set(rows) == {"nvml", "dcgm"}
    # Through DCGM the exporter makes DCGM calls and fewer NVML calls, and exports the activity NVML cannot.
    assert int(rows["dcgm"][5]) < int(rows["nvml"][5]) and float(rows["dcgm"][6]) > 0 == float(rows["nvml"][6])
    assert int(rows["dcgm"][4]) > int(rows["nvml"][4])


def test_dcgm_profile_smoke_splits_both_backends_by_room():
    """bench/dcgm_profile.py --smoke profiles an NVML and a DCGM poll of the A100 MIG node: the DCGM
    one has the rooms only DCGM has (the bindings' wrappers, the DCGM backend), the NVML one not,
    and the simulated host engine is listed apart from the exporter's rooms."""
    out = _run("dcgm_profile.py", "--smoke")
    assert out.returncode == 0, out.stderr[-2000:]
    nvml, dcgm = out.stdout.split("backend dcgm:")
    assert "backend nvml:" in nvml and "exporter: collectors" in nvml and "exporter: collectors" in dcgm
    for room in ("exporter: DCGM bindings", "exporter: backend reads (DCGM)", "(sim: fake DCGM host engine"):
        assert room in dcgm and room not in nvml
    assert re.search(r"^\s+[+-]\d+\.\d+\s+exporter: backend reads \(DCGM\)$", dcgm, re.M)


def test_dcgm_profile_fused_estimate_smoke():
    """bench/dcgm_profile.py --fused --smoke: the Activities of the A100 node's profiling read set
    built three ways (it asserts they are the same before timing), with the counts of the read set."""
    out = _run("dcgm_profile.py", "--fused", "--smoke")
    assert out.returncode == 0, out.stderr[-2000:]
    match = re.search(r"a100-40gb-two-3g@300s\s+entities (\d+)\s+values (\d+)\s+dicts \+ activity\(\) ([\d.]+)\s+"
                      r"activity\(\) on kept dicts ([\d.]+)\s+straight from the values ([\d.]+)", out.stdout)
    assert match, out.stdout
    assert (int(match[1]), int(match[2])) == (3, 24)  # the A100 and its two 3g instances, 8 profiling fields each
    assert all(float(match[n]) > 0 for n in (3, 4, 5))


def test_dcgm_profile_own_work_smoke():
    """bench/dcgm_profile.py --own --smoke times the DCGM backend's own work per poll (host engine
    and NVML poll replaced by their last answers) and its two parts, each less than the whole."""
    out = _run("dcgm_profile.py", "--own", "--smoke")
    assert out.returncode == 0, out.stderr[-2000:]
    match = re.search(r"a100-40gb-two-3g@300s\s+poll \(DCGM backend's own work\) ([\d.]+)\s+DcgmSource\.read ([\d.]+)"
                      r"\s+merge into the Snapshot ([\d.]+)", out.stdout)
    assert match, out.stdout
    whole, read, merge = map(float, match.groups())
    assert 0 < read < whole and 0 < merge < whole


def test_dcgm_bytes_digests_each_poll_of_four_nodes():
    """bench/dcgm_bytes.py digests the DCGM backend's /metrics poll by poll on four nodes (the
    before/after check of issue 22's DCGM work): one line per node and poll, and the values move
    between polls, so a digest that ignored them would show here."""
    out = _run("dcgm_bytes.py", "2")
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    rows = [re.fullmatch(r"(.+) poll (\d): (\d+) lines, sha256 ([0-9a-f]{64})", line) for line in lines]
    assert len(lines) == 8 and all(rows), lines
    for first, second in zip(rows[::2], rows[1::2]):
        assert first[1] == second[1] and first[4] != second[4] and int(first[3]) > 100


REAL_DCGM = REPO / "bench" / "real_dcgm_smoke.py"


def test_real_dcgm_check_refuses_cleanly_without_dcgm(tmp_path):
    """Where DCGM's bindings are not, the real-DCGM check says so in one line and exits 2 (no traceback)."""
    out = _run(REAL_DCGM.name, "--dcgm-bindings", str(tmp_path), timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("real_dcgm_smoke: error: --backend dcgm: DCGM Python bindings not found")
    assert "Traceback" not in out.stderr


def test_real_dcgm_check_dry_run_on_the_simulator():
    """The same script against the simulated DCGM: entity mapping, activity per GPU instance, both polls timed."""
    out = _run(REAL_DCGM.name, "--simulate", "examples/scenarios/a30-mig-dcgm.yaml", "--interval", "30", "--polls", "2",
               timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "DCGM 4.6.0 through the embedded host engine" in text and "-> NVML GPU 0" in text
    assert re.search(r"GI 2 2g\.12gb\s+dcgm: sm=0\.95 ", text)  # the compute-bound training instance
    assert "source dcgm_profiling: available" in text
    assert re.search(r"poll dcgm: .* NVML calls / [1-9]\d* DCGM calls", text)
def test_soak_bench_smoke_reports_rss_and_fds():
    """A short soak (12 virtual minutes) runs the whole serve stack and reports RSS and fd growth."""
    out = _run("soak_bench.py", "--hours", "0.2")
    assert out.returncode in (0, 1), out.stderr[-2000:]  # 1 = a target missed: a bench result, not a crash
    assert re.search(r"RSS MiB: start [\d.]+, after warm-up [\d.]+, end [\d.]+, max [\d.]+; growth [+-][\d.]+",
                     out.stdout), out.stdout
    assert re.search(r"open fds: after warm-up \d+, end \d+, max \d+; growth [+-]\d+", out.stdout), out.stdout


def test_security_bench_smoke_prints_every_configuration():
    out = _run("security_bench.py", "--scrapes", "20")
    assert out.returncode == 0, out.stderr[-2000:]
    for label in ("baseline (bare aiohttp)", "guarded, no web config", "basic auth", "TLS ",
                  "TLS + client cert + basic auth"):
        assert label in out.stdout


def test_k8s_bench_churn_node_is_a_valid_pod_scenario():
    """The churning node of bench/k8s_bench.py: every process runs in a pod (a field-order slip once
    put the pods in another field and the bench measured 0 series)."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import k8s_bench
    finally:
        sys.path.remove(str(REPO / "bench"))
    scenario = k8s_bench.churn_node(0.1)
    assert scenario.processes and all(p.pod is not None and p.env["HOSTNAME"] == p.pod.name
                                      for p in scenario.processes)
    assert not any(p.memory_na for p in scenario.processes)


ACCURACY = REPO / "bench" / "foresight_accuracy.py"


def _accuracy(*args: str) -> subprocess.CompletedProcess:
    return _run(ACCURACY.name, *args)


# corpus 3's seed 1 starts with no learned collision (its third episode's collision is a first run)
@pytest.mark.parametrize(("corpus", "seed"), [("1", "1"), ("2", "1"), ("3", "3")])
def test_foresight_accuracy_smoke_prints_the_table_with_ratios_in_range(tmp_path, corpus, seed):
    """Three episodes (one of them an OOM) end to end: both tiers' tables, sane figures, the shipped
    rules as the bench applies them, the same bytes with 2 jobs."""
    out = _accuracy("--corpus", corpus, "--seed", seed, "--episodes", "3", "--json", str(tmp_path / "a.json"), "--verbose")
    assert out.returncode == 0, out.stderr[-2000:]
    for line in (f"corpus {corpus}, seed {seed}", "critical tier", "warning tier", "recall (learned)", "precision (all)",
                 "false alarms / 100 device-hours", "lead median", "lead p10", "lead median, ceiling >= 300 s",
                 "first-run recall, with a basis",
                 "first-run recall, no basis (ceiling)", "sharing=", "pattern=colliding", "ep   2 ", "| critical "):
        assert line in out.stdout
    assert re.search(r"^wall time [\d.]+ s", out.stderr, re.M)
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["warning"]["all"]["incidents"] >= 1  # a collision: the smoke run exercises the OOM path
    tiers = [doc[tier][pool] for tier in ("critical", "warning")
             for pool in ("learned", "all", "first_run_basis", "first_run_never")]
    for figures in [*tiers, *doc["classes"].values()]:
        for ratio in ("recall", "precision"):
            assert figures[ratio] is None or 0.0 <= figures[ratio] <= 1.0
        assert figures["false_per_100h"] is None or figures["false_per_100h"] >= 0
        assert figures["caught"] <= figures["incidents"] and figures["true_alerts"] <= figures["alerts"]
        assert figures["roomy_caught"] <= figures["roomy_incidents"] <= figures["incidents"]
    # the lead target's row counts only learned collisions the ceiling lets be foreseen 300 s ahead
    learned = [i for r in doc["results"] if r["classes"]["first_run"] == "no" for i in r["tiers"]["critical"]["incidents"]]
    roomy = [i for i in learned if i["ceiling"] >= 300]
    assert doc["critical"]["learned"]["roomy_incidents"] == len(roomy)
    assert doc["critical"]["learned"]["roomy_caught"] == sum(i["caught"] for i in roomy)
    # "any tier": an incident is caught when a warning or a page covers it, nothing else
    for result in doc["results"]:
        either = [w["caught"] or c["caught"] for w, c in zip(result["tiers"]["warning"]["incidents"],
                                                            result["tiers"]["critical"]["incidents"])]
        assert [i["caught"] for i in result["tiers"]["any"]["incidents"]] == either
    # the bench applies every shipped rule of each tier: the critical tier's imminent one included (alerts/gpushare-memory.yml)
    assert [r["for_seconds"] for r in doc["rules"]["warning"]] == [30.0]
    assert [(r["for_seconds"], r["confidence"], r["eta_seconds"]) for r in doc["rules"]["critical"]] == [
        (30.0, 0.8, None), (10.0, 0.9, 30.0)]
    parallel = _accuracy("--corpus", corpus, "--seed", seed, "--episodes", "3", "--verbose", "--jobs", "2")
    assert parallel.returncode == 0 and parallel.stdout == out.stdout  # deterministic whatever --jobs


def test_foresight_replay_of_recorded_forecasts_gives_the_bench_figures(tmp_path):
    """bench/foresight_replay.py records the forecasts of three episodes once, then replays the confidence and
    the shipped rules on them: every episode's incidents and both tiers' alert intervals equal what the bench
    itself measures, so rule and confidence variants can be compared offline (docs/foresight.md, sixth round)."""
    record = tmp_path / "r.pkl.gz"
    out = _run("foresight_replay.py", "record", "--corpus", "1", "--seed", "1", "--episodes", "3",
               "--out", str(record))
    assert out.returncode == 0, out.stderr[-2000:]
    bench = _accuracy("--corpus", "1", "--seed", "1", "--episodes", "3", "--json", str(tmp_path / "a.json"))
    assert bench.returncode == 0, bench.stderr[-2000:]
    measured = json.loads((tmp_path / "a.json").read_text())["results"]
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import foresight_replay
    finally:
        sys.path.remove(str(REPO / "bench"))
    doc = foresight_replay.load(str(record))
    replayed = foresight_replay.replay(doc)
    assert any(r["tiers"]["warning"]["incidents"] for r in replayed)  # an OOM among them: scoring is exercised
    assert [r["tiers"] for r in replayed] == [r["tiers"] for r in measured]
    assert [r["incidents"] for r in replayed] == [r["incidents"] for r in measured]
    # at the cadence of every poll the replay is the same; evaluated every 30 s, pages start on evaluations only
    assert foresight_replay.replay(doc, when=foresight_replay.fa.cadence(5.0, 5.0, 5.0)) == replayed
    coarse = foresight_replay.replay(doc, when=foresight_replay.fa.cadence(5.0, 15.0, 30.0))
    episodes = {e.index: e for e in foresight_replay.fa.CORPORA[1].make_corpus(1, 3)}
    starts = [a["start"] + episodes[r["index"]].test_start for r in coarse for a in r["tiers"]["critical"]["alerts"]]
    assert starts and all(foresight_replay.fa._on(start, 30.0) for start in starts)
    assert starts != [a["start"] + episodes[r["index"]].test_start for r in replayed for a in r["tiers"]["critical"]["alerts"]]
    bad = _run("foresight_replay.py", "replay", "--scrape-interval", "7", str(record))
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        f"foresight_replay: {record}: --scrape-interval 7 is not a positive multiple of the poll interval 5 s"]
    # the kills the exporter noticed are recorded per poll (confidence.after_kill is replayed from them)
    assert any(noticed for rec in doc["records"] for _t, _test, _rows, noticed in rec["polls"])
    # `false` lists exactly the pages a tier scores as false, with the polls they rested on: with the
    # kills taken out of the recording every page is false
    unkilled = dict(doc, records=[dict(rec, kills=[]) for rec in doc["records"]])
    results = foresight_replay.replay(unkilled, trace_rows=True)
    pages = foresight_replay.false_pages(unkilled, results)
    assert pages and [(p["episode"], p["start"]) for p in pages] == [
        (r["index"], a["start"]) for r in replayed for a in r["tiers"]["critical"]["alerts"]]
    assert all(p["polls"] and all(row["headroom"] < 0 for _t, row, _raw, _held in p["polls"]) for p in pages)
    listed = _run("foresight_replay.py", "false", str(record))
    assert listed.returncode == 0 and listed.stdout.count("### ") == sum(
        not a["true"] for r in replayed for a in r["tiers"]["critical"]["alerts"])
    both = _run("foresight_replay.py", "replay", str(record), str(record))
    one, _, total = both.stdout.strip().splitlines()
    figures = foresight_replay.summary(replayed)["all"]
    assert total.startswith("all 2 runs") and f"false {2 * figures['false_alerts']} in" in total
    assert f"precision {2 * figures['true_alerts']}/{2 * figures['alerts']}" in total and "precision" in one



def test_foresight_replay_classifies_every_learned_miss(tmp_path):
    """`classify` puts each learned collision the critical tier missed in one class (docs/foresight.md,
    eighth round). Replayed under rules that cannot page in time, every learned incident of the recording
    is a miss; a `for` longer than an incident's ceiling puts it in the ceiling class, and the same `for`
    makes the next one, whose confidence reached the tier too briefly before its kill, a page that came late."""
    record = tmp_path / "r.pkl.gz"
    out = _run("foresight_replay.py", "record", "--corpus", "1", "--seed", "1", "--episodes", "3", "--out", str(record))
    assert out.returncode == 0, out.stderr[-2000:]
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import foresight_misses
        import foresight_replay
    finally:
        sys.path.remove(str(REPO / "bench"))
    doc = foresight_replay.load(str(record))
    rule = foresight_replay.fa._Rule
    learned = [i for r in foresight_replay.replay(doc) if r["classes"]["first_run"] == "no"
               for i in r["tiers"]["critical"]["incidents"]]
    assert len(learned) >= 2 and all(i["caught"] for i in learned)  # the shipped rules catch them: no misses
    assert foresight_misses.classify_misses(doc, foresight_replay.replay(doc, trace_rows=True)) == []
    never = {"warning": foresight_replay.fa.TIERS["warning"], "critical": [rule(30.0, 240.0, 2.0, None)]}
    missed = foresight_misses.classify_misses(doc, foresight_replay.replay(doc, never, trace_rows=True), never)
    assert [m["t"] for m in missed] == [i["t"] for i in learned]
    assert all(m["class"].startswith("confidence short: ") and m["class"] in foresight_misses.MISS_CLASSES
               and m["held_max"] >= 0.8 for m in missed)  # exported at 0.8 or more, short of an impossible 2.0
    # a `for` between the two ceilings: the shorter-ceiling incident cannot be paged by it at all
    ceilings = sorted(i["ceiling"] for i in learned)
    slow = {"warning": never["warning"], "critical": [rule(ceilings[0] + 1.0, 240.0, 0.8, None)]}
    late = foresight_misses.classify_misses(doc, foresight_replay.replay(doc, slow, trace_rows=True), slow)
    by_ceiling = {m["ceiling"]: m["class"] for m in late}
    assert by_ceiling == {ceilings[0]: "ceiling", ceilings[1]: "page came late"}
    listed = _run("foresight_replay.py", "classify", str(record))
    assert listed.returncode == 0 and listed.stdout.strip().splitlines()[-1].startswith("misses 0:")

def test_foresight_accuracy_refuses_a_bad_flag_value():
    out = _accuracy("--episodes", "0")
    assert out.returncode == 2
    assert "--episodes" in out.stderr.strip().splitlines()[-1]


def _fired(when, rule, polls):
    """Start times of the firing intervals of one rule fed one condition per 5 s poll, seen at ``when``."""
    fa = bench_module("foresight_accuracy")
    alert = fa._Alert(rule)
    for i, condition in enumerate(polls):
        when.step(alert, 5.0 * i, condition)
    return [start for start, _end in alert.intervals]


def test_rules_see_the_polls_at_prometheus_cadence():
    """--scrape-interval / --evaluation-interval (docs/alerts.md, "Scrape and evaluation cadence"): the rules
    are evaluated every E s on what the last scrape (every S s) read, so a `for` waits for evaluations and a
    collision predicted between two scrapes is never seen; evaluated faster than the scrape, one scrape counts
    for several evaluations and a 10 s `for` is met by a single scrape."""
    fa = bench_module("foresight_accuracy")
    page = fa._Rule(30.0, 240.0, 0.8, None)
    imminent = fa._Rule(10.0, 240.0, 0.9, 30.0)
    every_poll = fa.cadence(5.0)
    assert every_poll == fa._Cadence(5.0, 5.0) and fa.cadence(5.0, 15.0) == fa._Cadence(15.0, 15.0)
    from_5s = [False] + [True] * 12  # predicted from the poll at 5 s on
    assert _fired(every_poll, page, from_5s) == [35.0]
    assert _fired(fa.cadence(5.0, 15.0, 30.0), page, from_5s) == [60.0]  # first seen at 30 s, paged 30 s later
    between = [False] * 4 + [True, True] + [False] * 7  # at 20 and 25 s only: between the scrapes at 15 and 30 s
    assert _fired(every_poll, fa._Rule(0.0, 0.0, 0.0, None), between) == [20.0]
    assert _fired(fa.cadence(5.0, 15.0, 15.0), fa._Rule(0.0, 0.0, 0.0, None), between) == []
    one_scrape = [False] * 3 + [True] + [False] * 9  # one poll, the scrape at 15 s
    assert _fired(fa.cadence(5.0, 15.0, 15.0), imminent, one_scrape) == []
    assert _fired(fa.cadence(5.0, 15.0, 5.0), imminent, one_scrape) == [25.0]  # 15, 20, 25 s read the same scrape
    for scrape, evaluation, flag in ((7.0, None, "--scrape-interval 7 "), (15.0, 12.0, "--evaluation-interval 12 ")):
        with pytest.raises(ValueError, match=flag):
            fa.cadence(5.0, scrape, evaluation)
    out = _accuracy("--scrape-interval", "15", "--evaluation-interval", "12")
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].endswith(
        "error: --evaluation-interval 12 is not a positive multiple of the poll interval 5 s")


def test_foresight_corpus_is_seeded_and_its_classes_hold():
    """Same seed, same corpus; replicas share a workload key, other jobs do not; each start pattern
    puts the simultaneous peak where its class says (above memory only when colliding)."""
    corpus = bench_module("foresight_corpus")
    from exporter.foresight.workload import workload_key

    episodes = corpus.make_corpus(7, 40)
    assert [e.runs for e in episodes] == [e.runs for e in corpus.make_corpus(7, 40)]
    assert {e.classes["pattern"] for e in episodes} == set(corpus.PATTERNS)
    for e in episodes:
        keys: dict[int, set] = {}
        for r in e.runs:
            keys.setdefault(r.workload, set()).add(workload_key(r.cmdline, "python3"))
        assert all(len(k) == 1 for k in keys.values()) and len(set.union(*keys.values())) == len(keys)
        assert (e.ratio > 1.0) == (e.classes["pattern"] == "colliding"), (e.index, e.ratio)
        assert 2 <= len(e.test_runs()) <= 5 and all(r.start >= e.test_start for r in e.test_runs())
        assert len({r.pid for r in e.runs}) == len(e.runs)
    corpus.to_scenario(episodes[0])  # the scenario loader accepts what the corpus builds


def test_second_foresight_corpus_is_seeded_and_its_classes_hold():
    """Corpus 2: same seed, same corpus; each workload keeps one key over its runs (volatile flags
    differ), different jobs get different keys; colliding puts the simultaneous peak above memory,
    the other patterns below; first runs have no learning run on the test device."""
    corpus = bench_module("foresight_corpus2")
    from exporter.foresight.workload import workload_key

    episodes = corpus.make_corpus(7, 40)
    assert [e.runs for e in episodes] == [e.runs for e in corpus.make_corpus(7, 40)]
    assert {e.classes["pattern"] for e in episodes} == {"colliding", "near_miss", "staggered"}
    assert {e.classes["sharing"] for e in episodes} == {"mps", "mig+mps"}
    for e in episodes:
        keys: dict[int, set] = {}
        for r in e.runs:
            keys.setdefault(r.workload, set()).add(workload_key(r.cmdline, "python3"))
        assert all(len(k) == 1 for k in keys.values())
        distinct = {next(iter(k)) for k in keys.values()}
        assert len(distinct) == (1 if e.classes["mix"] == "replicas" else len(keys)), e.index
        assert (e.ratio > 1.0) == (e.classes["pattern"] == "colliding"), (e.index, e.ratio)
        assert 2 <= len(e.test_runs()) <= 4 and all(r.start >= e.test_start for r in e.test_runs())
        assert len({r.pid for r in e.runs}) == len(e.runs)
        learned_here = {r.workload for r in e.runs if r.phase == "learn" and r.gpu == 0}
        if e.classes["learned"] in ("declared", "never", "trend"):
            assert 0 not in learned_here
        if e.classes["learned"] == "declared":
            assert all(dict(r.env).get("GPUSHARE_EXPECTED_PEAK") for r in e.test_runs() if r.workload == 0)
    corpus.to_scenario(episodes[0])  # the scenario loader accepts what the corpus builds


def test_foresight_bench_sim_alerts_minutes_before_the_wan_oom():
    """--sim learns the Wan job on the simulated host's clock: the together row alerts >= 300 s before its OOM."""
    out = _run("foresight_bench.py", "--sim")
    row = next(line.split() for line in out.stdout.splitlines() if line.startswith("wan22-h100-mps-together"))
    assert row[3].endswith("s") and int(row[3][:-1]) >= 300, out.stdout


def test_poll_instructions_refuses_a_tree_that_is_not_a_checkout(tmp_path):
    """A wrong --tree is one line naming it and exit 2, before valgrind is looked for or run."""
    out = _run("poll_instructions.py", "--tree", str(tmp_path), timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and str(tmp_path) in out.stderr and "Traceback" not in out.stderr


def test_poll_instructions_child_polls_this_checkout():
    """The program valgrind counts runs as it is, without valgrind: polls of this checkout's exporter."""
    module = bench_module("poll_instructions")
    code = module.child_code(REPO, 2)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=240,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode == 0, out.stderr[-2000:]


@pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")) or not Path("/usr/include/valgrind/callgrind.h").is_file(),
                    reason="needs gcc and valgrind's callgrind.h")
def test_poll_instructions_exporter_only_child_toggles_around_the_simulator(tmp_path):
    """--exporter-only: the helper builds, and the child (run without valgrind, where the client
    request does nothing) switches collection off and on again around every fake driver call,
    simulation advance and clock step, never inside one (a nested switch would count the rest)."""
    module = bench_module("poll_instructions")
    helper = module.build_helper(tmp_path)
    assert isinstance(helper, Path) and helper.is_file(), helper
    code = module.child_code(REPO, 2, helper)
    # The probe: the simulator's entries counted beneath the child's wrappers, and the switch's
    # state followed (off inside an entry, on outside).
    probe = code.replace("toggle = ctypes.CDLL", "_toggle = ctypes.CDLL").replace(
        ".gpushare_toggle_collect\n", """.gpushare_toggle_collect
STATE = {"on": True, "toggles": 0, "entries": 0, "counted_inside": 0}
def toggle():
    STATE["on"] = not STATE["on"]
    STATE["toggles"] += 1
    _toggle()
def _entered(original):
    def call(*args):
        STATE["entries"] += 1
        STATE["counted_inside"] += STATE["on"]
        return original(*args)
    return call
fakelib._Symbol.__call__ = _entered(fakelib._Symbol.__call__)
simulation.Simulation.advance_to = _entered(simulation.Simulation.advance_to)
""", 1)
    probe += "\nprint(STATE['toggles'], STATE['entries'], STATE['counted_inside'], STATE['on'])\n"
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=240,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode == 0, out.stderr[-2000:]
    toggles, entries, counted_inside, on = out.stdout.split()[-4:]
    # Two switches per entry and per clock step (2 polls), none counted inside, on at the end.
    assert int(entries) > 100 and int(toggles) == 2 * (int(entries) + 2), out.stdout
    assert counted_inside == "0" and on == "True", out.stdout


def test_poll_instructions_child_imports_the_tree_it_counts(tmp_path):
    """Run from another checkout's directory (where ``python -c`` looks first), the child still
    imports the exporter of the tree it is given: a comparison of two trees compares them."""
    module = bench_module("poll_instructions")
    other = tmp_path / "other"
    (other / "exporter").mkdir(parents=True)
    (other / "exporter" / "__init__.py").write_text("raise SystemExit('imported the wrong tree')\n")
    code = module.child_code(REPO, 1).replace("with serve_gc():", "import exporter\nprint(exporter.__file__)\nwith serve_gc():")
    out = subprocess.run([sys.executable, "-c", code], cwd=other, capture_output=True, text=True, timeout=240,
                         env=dict(os.environ, PYTHONPATH=str(other)))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == str(REPO / "exporter" / "__init__.py")
