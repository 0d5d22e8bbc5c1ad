"""docs/metrics.md and the real /metrics output describe the same families."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.poller import Poller
from snapshot_samples import rich_snapshot

DOC = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"
ROW = re.compile(r"^\| `(gpushare_[a-z0-9_]+)` \| (\w+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$")
PROMTOOL = "/usr/bin/promtool"


class RichBackend:
    name = "nvml"

    def open(self):
        pass

    def poll(self):
        return rich_snapshot()

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


@pytest.fixture(scope="module")
def exposition():
    poller = Poller(RichBackend(), interval=5.0)
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
