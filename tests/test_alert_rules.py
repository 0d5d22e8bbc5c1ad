"""Alert rules: promtool check and unit tests, test coverage of every alert, annotations and runbooks."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
ALERTS = REPO / "alerts"
RULE_FILES = sorted(ALERTS.glob("*.yml"))
TEST_FILES = sorted((ALERTS / "tests").glob("*.yml"))
REQUIRED_ANNOTATIONS = {"summary", "description", "runbook_url", "action"}
SEVERITIES = {"critical", "warning", "info"}


def alerting_rules(paths) -> list[dict]:
    """Every alerting rule (not recording rule) in the given rule files."""
    rules = []
    for path in paths:
        for group in yaml.safe_load(Path(path).read_text())["groups"]:
            rules.extend(rule for rule in group["rules"] if "alert" in rule)
    return rules


def untested_alerts(rule_paths, test_paths) -> list[str]:
    """Problems with test coverage: each alert name needs a must-fire and a must-not-fire case,
    and each (alert, severity) rule needs a must-fire case that asserts its severity."""
    firing: set[tuple[str, str]] = set()
    firing_names: set[str] = set()
    quiet: set[str] = set()
    for path in test_paths:
        for test in yaml.safe_load(Path(path).read_text()).get("tests", []):
            for case in test.get("alert_rule_test", []):
                expected = case.get("exp_alerts") or []
                if not expected:
                    quiet.add(case["alertname"])
                for alert in expected:
                    firing_names.add(case["alertname"])
                    firing.add((case["alertname"], alert.get("exp_labels", {}).get("severity", "")))
    problems = []
    for rule in alerting_rules(rule_paths):
        name, severity = rule["alert"], rule.get("labels", {}).get("severity", "")
        if (name, severity) not in firing:
            problems.append(f"{name} ({severity}): no case where it must fire")
        if name not in quiet:
            problems.append(f"{name}: no case where it must not fire")
    return problems


def github_anchors(markdown: str) -> set[str]:
    """Anchors GitHub generates for the headings of a markdown document."""
    anchors = set()
    for line in markdown.splitlines():
        match = re.match(r"#+\s+(.*)", line)
        if match:
            anchors.add(re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-"))
    return anchors


def test_promtool_check_rules_accepts_every_rule_file(promtool):
    """promtool check rules passes (syntax, PromQL, templates, duplicate lint) for alerts/*.yml."""
    assert RULE_FILES, "no rule files in alerts/"
    result = subprocess.run([promtool, "check", "rules", *map(str, RULE_FILES)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_pass(promtool):
    """promtool test rules passes for every file in alerts/tests/."""
    assert TEST_FILES, "no rule tests in alerts/tests/"
    result = subprocess.run([promtool, "test", "rules", *map(str, TEST_FILES)], capture_output=True, text=True,
                            cwd=ALERTS / "tests")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_firing_and_quiet_cases():
    """Each alert name fires in some case (per severity) and stays silent in another."""
    assert untested_alerts(RULE_FILES, TEST_FILES) == []


def test_coverage_check_catches_a_new_untested_alert(tmp_path):
    """Adding an alert without tests makes the coverage check fail, naming it."""
    extra = tmp_path / "extra.yml"
    extra.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [
        {"alert": "BrandNewAlert", "expr": "vector(1)", "labels": {"severity": "warning"}}]}]}))
    problems = untested_alerts([*RULE_FILES, extra], TEST_FILES)
    assert problems == ["BrandNewAlert (warning): no case where it must fire",
                        "BrandNewAlert: no case where it must not fire"]


def test_every_rule_file_is_loaded_by_some_unit_test():
    """A rule file that no test file loads would have its alerts 'tested' against nothing."""
    loaded = set()
    for path in TEST_FILES:
        for name in yaml.safe_load(path.read_text())["rule_files"]:
            loaded.add((path.parent / name).resolve())
    assert {p.resolve() for p in RULE_FILES} <= loaded


def test_firing_cases_assert_all_annotations():
    """Every must-fire case checks the severity and all four annotations, not just that something fired."""
    for path in TEST_FILES:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                for alert in case.get("exp_alerts") or []:
                    assert alert["exp_labels"].get("severity") in SEVERITIES, (path.name, case["alertname"])
                    assert set(alert["exp_annotations"]) == REQUIRED_ANNOTATIONS, (path.name, case["alertname"])


@pytest.mark.parametrize("rule", alerting_rules(RULE_FILES), ids=lambda r: f"{r['alert']}-{r['labels']['severity']}")
def test_alert_has_severity_annotations_and_a_runbook_section(rule):
    """Severity is one of ours; summary, description, runbook_url and action exist; the runbook anchor exists."""
    assert rule["labels"]["severity"] in SEVERITIES
    assert set(rule["annotations"]) == REQUIRED_ANNOTATIONS
    url = rule["annotations"]["runbook_url"]
    assert url.startswith("docs/runbooks.md#")
    assert url.split("#", 1)[1] == rule["alert"].lower()
    assert url.split("#", 1)[1] in github_anchors((REPO / "docs" / "runbooks.md").read_text())


def test_every_alert_is_documented_with_its_thresholds():
    """docs/alerts.md names every alert (its thresholds and windows live there)."""
    text = (REPO / "docs" / "alerts.md").read_text()
    for rule in alerting_rules(RULE_FILES):
        assert f"`{rule['alert']}`" in text, rule["alert"]


def test_rules_only_use_metrics_the_exporter_or_prometheus_define():
    """Every gpushare_* name in a rule is one the exporter documents or a recording rule defines."""
    known_prefixes = ("gpushare:",)
    metrics_doc = REPO / "docs" / "metrics.md"
    documented = set(re.findall(r"gpushare_[a-z0-9_]+", metrics_doc.read_text())) if metrics_doc.exists() else set()
    documented |= set(re.findall(r"gpushare_[a-z0-9_]+", (REPO / "docs" / "alerts.md").read_text()))
    # Recording rules named level:metric:operations (namespace:gpushare_sm_seconds:rate5m) define their names.
    recorded = {r["record"] for path in RULE_FILES for g in yaml.safe_load(path.read_text())["groups"]
                for r in g["rules"] if "record" in r}
    for path in RULE_FILES:
        text = path.read_text()
        for recorded_name in recorded:
            text = text.replace(recorded_name, "")
        for name in set(re.findall(r"gpushare[_:][a-z0-9_:]+", text)):
            assert name.startswith(known_prefixes) or name in documented, f"{path.name}: {name} is not documented"
