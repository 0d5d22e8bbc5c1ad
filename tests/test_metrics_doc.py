"""docs/metrics.md and the real /metrics output describe the same families.

The rendered exposition is the rich snapshot plus the forecast collector over a Foresight that
learned the Wan job on a whole MPS GPU and (at half size) in a MIG instance, then watched three
of each start together: every forecast family, the conditional ones included, has samples.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.collectors.forecast import ForecastCollector
from exporter.collectors.http import HttpCollector
from exporter.web.guard import HttpStats
from exporter.foresight import Foresight
from exporter.foresight.calibration import quiet_run, unwarned_kill
from exporter.foresight.store import ProfileStore
from exporter.poller import Poller
from exporter.snapshot import Snapshot
from foresight_scenarios import WAN_DURATION, Job, MiB, mig_snapshot, mps_gpu_snapshot, replay, wan_memory
from snapshot_samples import rich_snapshot_with_pods

DOC = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"
ROW = re.compile(r"^\| `(gpushare_[a-z0-9_]+)` \| (\w+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$")
PROMTOOL = "/usr/bin/promtool"


class RichBackend:
    name = "nvml"

    def open(self):
        pass

    def poll(self):
        return rich_snapshot_with_pods()

    def close(self):
        pass


def documented() -> dict[str, dict]:
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            name, kind, unit, labels, help_text, _source = (part.strip() for part in match.groups())
            assert name not in rows, f"{name} documented twice"
            rows[name] = {
                "type": kind,
                "unit": "" if unit == "—" else unit,
                "labels": set() if labels == "—" else {label.strip(" `") for label in labels.split(",")},
                "help": help_text,
            }
    return rows


MIG_UUID = "GPU-7f3a9c2e-0000-4000-8000-00000000000b"
MIG_INSTANCE = (1, "3g.40gb", 40448 * MiB)  # (gi, profile, bytes) as on an H100


def half_wan(age: float) -> int:
    """A Wan job at half size: 11 GiB, 16.5 GiB at its end; three need 49.5 GiB at once, 38.5 staggered."""
    return wan_memory(age) // 2


def two_gpus(t: float, jobs: list[Job]) -> Snapshot:
    """GPU 0: whole-GPU MPS with the jobs without gi; GPU 1: MIG with those in gi 1."""
    mps = mps_gpu_snapshot(t, [j for j in jobs if j.gi is None])
    mig = mig_snapshot(t, [j for j in jobs if j.gi is not None], [MIG_INSTANCE]).gpus[0]
    mig = replace(mig, index=1, uuid=MIG_UUID, pci_bus_id="00000000:2A:00.0",
                  processes=tuple(replace(p, gpu_index=1) for p in mig.processes))
    return replace(mps, gpus=mps.gpus + (mig,))


def contending_foresight(state_dir) -> Foresight:
    """A Foresight that learned one solo run per device size, then saw three jobs start together on each.

    Polled every 5 s from 30 s before the start to 15 s after: memory is rising (exhaustion
    ETA), the jobs follow their profiles, and their peaks together exceed both devices while a
    spacing of their starts fits (contention ETA, stagger, memory at contention).
    """
    foresight = Foresight(state_dir=state_dir)
    t0 = 1_000_000.0
    solo = [Job(pid=101, start=t0 + 10.0), Job(pid=201, start=t0 + 10.0, gi=1, memory=half_wan)]
    for _ in replay(foresight, solo, t0, t0 + WAN_DURATION + 20.0, build=two_gpus):
        pass
    start = t0 + WAN_DURATION + 400.0  # the solo run has left the 5-minute trend window
    together = [Job(pid=300 + i, start=start) for i in range(3)]
    together += [Job(pid=400 + i, start=start, gi=1, memory=half_wan) for i in range(3)]
    for _ in replay(foresight, together, start - 30.0, start + 15.0, build=two_gpus):
        pass
    return foresight


def seed_outcomes(state_dir) -> None:
    """What two workloads' outcomes taught, stored as the exporter stores it: one whose warnings
    twice ended quietly (slack), one OOM-killed unwarned (margin)."""
    quiet = None
    for forecast, real in ((40 * 2**30, 36 * 2**30), (40 * 2**30, 35 * 2**30)):
        quiet = quiet_run(quiet, "python3 serve.py --model m", forecast, real, 1_000_000.0)
    store = ProfileStore(state_dir)
    assert store.save_outcomes([quiet, unwarned_kill(None, "python3 leak.py", 1_000_000.0)])
    store.close()


@pytest.fixture(scope="module")
def exposition(tmp_path_factory):
    state_dir = tmp_path_factory.mktemp("state")
    seed_outcomes(state_dir)
    foresight = contending_foresight(state_dir)
    http = HttpStats()  # as `serve` has it with a web config, after some traffic
    http.responses[200] += 3
    http.rejected["malformed"] += 1
    http.open_connections, http.reload_ok, http.reload_timestamp = 1, True, 1_700_000_000.0
    poller = Poller(RichBackend(), interval=5.0, extra_collectors=[ForecastCollector(foresight), HttpCollector(http)])
    assert poller.poll_once()
    return poller.exposition


def exported(exposition) -> dict[str, dict]:
    """Families by exposed name (counters with _total, info with _info), read back from OpenMetrics."""
    families = {}
    for family in parse_openmetrics(exposition.body(openmetrics_format=True, gzipped=False).decode()):
        suffix = {"counter": "_total", "info": "_info"}.get(family.type, "")
        labels = set().union(*(sample.labels.keys() for sample in family.samples))
        families[family.name + suffix] = {
            "type": family.type,
            "unit": family.unit,
            "labels": labels,
            "help": family.documentation,
        }
    return families


def test_documented_families_equal_exported_families(exposition):
    """Every exported family is documented and every documented family is exported."""
    docs, live = set(documented()), set(exported(exposition))
    assert live - docs == set(), "exported but not documented"
    assert docs - live == set(), "documented but not exported by the rich snapshot"


def test_documented_type_unit_labels_help_match(exposition):
    """Type, unit, label names and help text in the doc are what a scrape shows."""
    live = exported(exposition)
    mismatches = {
        name: (row, live[name]) for name, row in documented().items() if name in live and row != live[name]
    }
    assert mismatches == {}


def test_doc_covers_the_contract_families():
    """The families the product promises are documented (guards against a test that passes on an empty doc)."""
    must = {
        "gpushare_gpu_info", "gpushare_gpu_up", "gpushare_mig_free_capacity", "gpushare_mps_clients",
        "gpushare_process_memory_used_bytes", "gpushare_exporter_collector_success",
        "gpushare_simulation_oom_kills_total", "gpushare_gpu_xid_errors_total",
    }
    assert must <= set(documented())


def test_forecast_families_are_rendered(exposition):
    """The forecast predicts contention on the MPS GPU and in the MIG instance, with advice, for the six jobs.

    Three Wan jobs need 99 GiB at their peaks on a 79 GiB GPU, three half-size ones 49.5 GiB in
    a 39.5 GiB instance; started apart both fit (77 and 38.5 GiB), so a stagger exists.
    """
    samples = {}
    for family in parse_text(exposition.text.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    assert [s.labels["uuid"] for s in samples["gpushare_gpu_memory_headroom_bytes"] if s.value < 0] == [
        "GPU-7f3a9c2e-0000-4000-8000-000000000001"]
    assert [s.labels["gi"] for s in samples["gpushare_mig_memory_headroom_bytes"] if s.value < 0] == ["1"]
    assert len(samples["gpushare_gpu_memory_stagger_needed_seconds"]) == 1
    assert len(samples["gpushare_mig_memory_stagger_needed_seconds"]) == 1
    assert sorted(s.labels["pid"] for s in samples["gpushare_process_memory_expected_at_contention_bytes"]) == [
        "300", "301", "302", "400", "401", "402"]
    assert [s.value for s in samples["gpushare_workload_profile_runs"]] == [1, 1]


def test_text_format_parses_and_types_agree(exposition):
    """The 0.0.4 text output parses, and info families appear there as gauges named *_info."""
    types = {family.name: family.type for family in parse_text(exposition.text.decode())}
    assert types["gpushare_gpu_info"] == "gauge"
    assert types["gpushare_gpu_energy_joules"] == "counter"  # the text parser strips _total


def test_promtool_check_metrics_is_clean(exposition):
    """promtool's linter finds nothing to complain about in the text output."""
    if not Path(PROMTOOL).exists() and shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (expected at /usr/bin/promtool)")
    binary = PROMTOOL if Path(PROMTOOL).exists() else shutil.which("promtool")
    result = subprocess.run(
        [binary, "check", "metrics"], input=exposition.text, capture_output=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert result.stdout.strip() == b"" and result.stderr.strip() == b""
