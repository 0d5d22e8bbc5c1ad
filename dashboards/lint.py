"""Read dashboard JSON and rule files back: their queries, the metric names they use, the units they show.

Used by tests/test_dashboards.py (and reusable for other checks of alerts/*.yml). The PromQL
reading is deliberately small: strings, label matchers, ranges and label lists are blanked
out, and what is left that looks like an identifier and is not a function or keyword is a
metric name.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import yaml

KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
            "offset", "inf", "nan", "atan2",
            # aggregation operators: "sum by (x) (...)" is not followed by "(" directly
            "sum", "avg", "min", "max", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values",
            "group"}
# Series Prometheus makes itself: scrape health and alert state.
PROMETHEUS_SERIES = {"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds", "scrape_samples_scraped",
                     "scrape_samples_post_metric_relabeling", "scrape_series_added"}
COUNTER_FUNCTIONS = ("rate", "irate", "increase", "resets")
# Counters the exporter creates only when they first count (no series at 0 before), each with why.
# increase() alone misses their first value, and rate() cannot see it at all: a panel has to take
# a series born in the window at its value (dashboards.common.new_in).
LAZY_COUNTERS = {
    "gpushare_exporter_poll_errors_total": "a (call, error) series appears at its first failure, at 1",
    "gpushare_gpu_xid_errors_total": "an XID series appears at its first occurrence, at 1",
    "gpushare_exporter_http_responses_total": "a code series appears with its first response",
    "gpushare_namespace_sm_seconds_total": "a namespace appears with its first poll's SM-seconds",
    "gpushare_namespace_memory_byte_seconds_total": "a namespace appears with its first poll's byte-seconds",
    "gpushare_namespace_energy_joules_total": "a namespace appears with its first poll's joules",
    "gpushare_pod_sm_seconds_total": "a pod appears with its first poll's SM-seconds",
    "gpushare_pod_memory_byte_seconds_total": "a pod appears with its first poll's byte-seconds",
    "gpushare_pod_energy_joules_total": "a pod appears with its first poll's joules",
}
# Counters that exist from their device's first poll (at 0, or at a driver total since boot), so
# rate() and increase() see every increment; a counter in neither set fails the dashboard tests.
EAGER_COUNTERS = {
    "gpushare_gpu_energy_joules_total": "read from the driver: since driver load, present every poll",
    "gpushare_gpu_ecc_errors_total": "read from the driver every poll, 0 when none",
    "gpushare_simulation_oom_kills_total": "every simulated device starts at 0",
    "gpushare_exporter_polls_total": "counts every poll from the first",
    "gpushare_exporter_http_rejected_total": "every reason is exported from the start, at 0",
    "gpushare_suspected_oom_kills_total": "both predicted values at 0 from the first poll that reads a GPU",
    "gpushare_memory_contention_warnings_total": "both outcomes at 0 from the first poll that reads a GPU",
    # GPU health (issue 21): driver totals, present from the first poll of a board that reports them
    "gpushare_gpu_pcie_replay_errors_total": "read from the driver: since driver load, present every poll",
    "gpushare_gpu_pcie_transmit_bytes_total": "read from the driver: since driver load, present every poll",
    "gpushare_gpu_pcie_receive_bytes_total": "read from the driver: since driver load, present every poll",
    "gpushare_gpu_nvlink_transmit_bytes_total": "read from the driver: since driver load, present every poll",
    "gpushare_gpu_nvlink_receive_bytes_total": "read from the driver: since driver load, present every poll",
    "gpushare_gpu_nvlink_errors_total": "read from the driver (once a minute, kept between), every type at 0 up",
    "gpushare_gpu_remapped_rows_total": "read from the driver: the board's life total, both kinds every poll",
    "gpushare_gpu_retired_pages_total": "read from the driver: the board's life total, both causes every poll",
    "gpushare_gpu_clock_event_duration_seconds_total": "read from the driver: since driver load, every policy",
}
# Counters summed over time where missing one poll at a series' birth is a bounded, documented
# error: rate() of them (a per-second average) is accepted; increase() must still count the birth.
INTEGRAL_COUNTERS = {name for name in LAZY_COUNTERS if name.startswith(("gpushare_namespace_", "gpushare_pod_"))}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_BRACES = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?")
_OFFSET = re.compile(r"\boffset\s+-?\$?[\w.]+")  # 15m, or a Grafana variable ($__range)


@dataclass(frozen=True)
class Target:
    """One panel query as Grafana stores it, with the unit Grafana shows its values in."""

    dashboard: str  # uid
    panel: str  # title
    kind: str  # panel type
    ref_id: str
    expr: str
    instant: bool
    unit: str


def blank(expr: str) -> str:
    """``expr`` without strings, label matchers, ranges, offsets and label lists (what stays: names, operators)."""
    text = _STRING.sub('""', expr)
    text = _BRACES.sub("", text)
    text = _BRACKETS.sub("", text)
    text = _OFFSET.sub("", text)
    return _LABEL_LIST.sub(r"\1", text)


def metric_names(expr: str) -> list[str]:
    """Metric (and recording rule) names ``expr`` selects, in order of appearance, without repeats."""
    names: list[str] = []
    for match in _IDENT.finditer(blank(expr)):
        name, call = match.groups()
        if call or name in KEYWORDS or name in names:
            continue
        names.append(name)
    return names


def counter_arguments(expr: str) -> list[str]:
    """Metric names passed to rate(), irate(), increase() or resets() in ``expr``."""
    return [name for _function, name in counter_calls(expr)]


def counter_calls(expr: str) -> list[tuple[str, str]]:
    """(function, metric name) for each rate(), irate(), increase() or resets() argument in ``expr``."""
    out = []
    text = _STRING.sub('""', expr)
    for match in re.finditer(rf"\b({'|'.join(COUNTER_FUNCTIONS)})\s*\(", text):
        depth, i = 1, match.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out += [(match.group(1), name) for name in metric_names(text[match.end():i - 1])]
    return out


def missed_first_values(expr: str) -> list[str]:
    """Lazily created counters ``expr`` rates or increases without counting a series born in the window.

    The term that counts it is ``<counter> unless <counter> offset <window>`` (dashboards.common.new_in).
    """
    text = _BRACES.sub("", _STRING.sub('""', expr))
    # "x unless x offset w", or "x > 0 unless x offset w" as the XID recording rule writes it.
    born = set(re.findall(r"([A-Za-z_:][\w:]*)(?:\s*[<>!=]=?\s*[\d.]+)?\s+unless\s+\1\s+offset\b", text))
    missed = []
    for function, name in counter_calls(expr):
        if name not in LAZY_COUNTERS or (function == "rate" and name in INTEGRAL_COUNTERS):
            continue
        if name not in born and name not in missed:
            missed.append(name)
    return missed


def expected_units(expr: str) -> set[str]:
    """Grafana units that fit what ``expr`` computes, judged from its first metric's base-unit suffix."""
    names = metric_names(expr)
    if not names:
        return set()
    first, blanked = names[0], blank(expr)
    if re.match(r"\s*count\b", blanked):
        return {"short", "none"}
    in_rate = first in counter_arguments(expr) and "increase" not in blanked
    in_increase = first in counter_arguments(expr) and "increase" in blanked
    # Accounting counters: rate of byte-seconds is bytes held, rate of SM-seconds is GPUs busy.
    if first.endswith("_byte_seconds_total"):
        return {"bytes"} if in_rate else {"short", "none"}
    if first.endswith("_seconds_total") and in_rate:
        return {"short", "none"}
    if first.endswith("_seconds_total") and in_increase:
        return {"s"}
    if first.endswith("_joules_total") and in_increase:
        return {"joule"}
    if first in PROMETHEUS_SERIES or first.endswith(("_info", "_up")):
        return {"none", "short"}
    if first.endswith("_bytes"):
        return {"percentunit"} if "/" in blanked else {"bytes"}
    if first.endswith("_seconds"):
        return {"s"}
    if first.endswith("_ratio"):
        return {"percentunit"}
    if first.endswith("_watts") or (first.endswith("_joules_total") and in_rate):
        return {"watt"}
    if first.endswith("_celsius"):
        return {"celsius"}
    if first.endswith("_hertz"):
        return {"hertz"}
    if first.endswith("_active"):
        return {"bool_on_off", "none"}
    if first.endswith("_total") and in_rate:
        return {"cps", "ops"}
    return {"short", "none"}


def load_dashboards(folder: Path) -> dict[str, dict]:
    """uid -> dashboard JSON of every ``*.json`` in ``folder``."""
    boards = {}
    for path in sorted(folder.glob("*.json")):
        board = json.loads(path.read_text())
        boards[board["uid"]] = board
    return boards


def panels(board: dict) -> Iterator[dict]:
    """Every panel of a dashboard that is not a row (rows nested in collapsed rows included)."""
    for panel in board["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def targets(board: dict) -> Iterator[Target]:
    """Every query of every panel, with the unit of the column or panel that shows it."""
    for panel in panels(board):
        queries = panel.get("targets", [])
        defaults = panel.get("fieldConfig", {}).get("defaults", {})
        column_units = {}
        for override in panel.get("fieldConfig", {}).get("overrides", []):
            for prop in override["properties"]:
                if prop["id"] == "unit":
                    column_units[override["matcher"]["options"]] = prop["value"]
        for target in queries:
            column = "Value" if len(queries) == 1 else f"Value #{target['refId']}"
            yield Target(board["uid"], panel["title"], panel["type"], target["refId"], target["expr"],
                         bool(target.get("instant")), column_units.get(column, defaults.get("unit", "")))


def rule_expressions(path: Path) -> Iterator[tuple[str, str]]:
    """(rule name, expr) of every alerting and recording rule in a Prometheus rule file."""
    for group in yaml.safe_load(path.read_text())["groups"]:
        for rule in group["rules"]:
            yield rule.get("alert") or rule["record"], rule["expr"]


def rule_annotation_names(path: Path) -> Iterator[tuple[str, str]]:
    """(alert, metric name) for every gpushare metric an alert's annotation templates query."""
    for group in yaml.safe_load(path.read_text())["groups"]:
        for rule in group["rules"]:
            for text in rule.get("annotations", {}).values():
                for name in re.findall(r"\bgpushare_\w+", text):
                    yield rule.get("alert", rule.get("record")), name


def recorded_names(paths: list[Path]) -> set[str]:
    """Names of the recording rules defined in ``paths``."""
    return {rule["record"] for path in paths for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"] if "record" in rule}


def interpolate(expr: str, variables: dict[str, str], time_range: str, rate_interval: str) -> str:
    """``expr`` as Grafana sends it to Prometheus: ``$__range``, ``$__rate_interval`` and the dashboard
    variables (``$name`` or ``${name}``/``${name:format}``) replaced by the given values.

    Raises ValueError when a variable is left (``$1`` of label_replace is not one).
    """
    text = expr.replace("$__rate_interval", rate_interval).replace("$__range", time_range)
    for name, value in variables.items():
        text = re.sub(rf"\$\{{{name}(?::\w+)?\}}|\${name}\b", lambda _: value, text)
    if re.search(r"\$\{?[A-Za-z_]", text):
        raise ValueError(f"variable left in {text!r}")
    return text


def grafana_regex_escape(value: str) -> str:
    """One value of a multi-value variable as Grafana writes it into PromQL: regex characters escaped, and the
    backslash doubled for the PromQL string (``a.b`` -> ``a\\\\.b``)."""
    return re.sub(r"[$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m.group(), value)
