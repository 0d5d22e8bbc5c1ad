"""A small typed builder for Grafana 10+ dashboard JSON (schemaVersion 38).

Why not grafana-foundation-sdk: its Python builds for Grafana 10.x give every template
variable the same ``id`` (all zeros), and Grafana 10's variable store is keyed by that id, so
the variables of an imported dashboard overwrite each other; it also leaves panel ids unset
and writes ``"options": null``. The subset needed here is small enough to own.

A dashboard is rows of panels; panels flow left to right, 24 grid units per line. Ids are
assigned in order, so the JSON is a pure function of the definitions (byte-stable output).
Every panel reads the ``$datasource`` variable: nothing names a Grafana instance or datasource.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 38  # Grafana 10.0 - 10.2; newer Grafana migrates it on load
GRAFANA_MIN = "10.0.0"
GRID_WIDTH = 24
PANEL_TYPES = ("timeseries", "stat", "table", "bargauge", "piechart", "text")


@dataclass(frozen=True)
class Query:
    """One PromQL target. ``instant`` queries feed stat, bar gauge, pie and table panels."""

    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class Column:
    """A table column fed by one query's value (``Value #<refId>``): header text and unit."""

    header: str
    unit: str
    colored: bool = False  # colour the cell background by the panel's thresholds


@dataclass(frozen=True)
class Panel:
    """A panel. ``unit`` is a Grafana unit id (bytes, s, percentunit, watt, celsius, hertz, short...).

    ``thresholds`` are (lower bound, colour) steps above the base colour; ``columns`` name and
    unit the value columns of a table (one per query, in order); ``hide`` lists table columns
    (labels) to leave out.
    """

    title: str
    kind: str
    unit: str
    queries: tuple[Query, ...] = ()
    description: str = ""
    width: int = 12
    height: int = 8
    thresholds: tuple[tuple[float, str], ...] = ()
    base_color: str = "green"
    minimum: float | None = None
    maximum: float | None = None
    columns: tuple[Column, ...] = ()
    hide: tuple[str, ...] = ()
    content: str = ""  # markdown of a text panel
    stack: bool = False
    no_value: str = ""  # shown instead of "No data" where absence has a meaning (e.g. nothing predicted)

    def __post_init__(self) -> None:
        if self.kind not in PANEL_TYPES:
            raise ValueError(f"panel {self.title!r}: unknown kind {self.kind!r}")
        if self.kind != "text" and not self.queries:
            raise ValueError(f"panel {self.title!r}: no query")
        if self.kind == "table" and self.columns and len(self.columns) != len(self.queries):
            raise ValueError(f"panel {self.title!r}: {len(self.columns)} columns for {len(self.queries)} queries")
        if not 1 <= self.width <= GRID_WIDTH:
            raise ValueError(f"panel {self.title!r}: width {self.width} outside 1..{GRID_WIDTH}")


@dataclass(frozen=True)
class Row:
    """A row of panels; its title is the question the row answers."""

    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Variable:
    """A query variable over a Prometheus label (``label_values(<metric>{<match>}, <label>)``)."""

    name: str
    label: str
    metric: str
    match: str = ""
    multi: bool = True

    @property
    def query(self) -> str:
        selector = f"{self.metric}{{{self.match}}}" if self.match else self.metric
        return f"label_values({selector}, {self.name})"


@dataclass(frozen=True)
class Dashboard:
    """A whole dashboard. ``uid`` is stable across regenerations (links and provisioning rely on it)."""

    uid: str
    title: str
    description: str
    variables: tuple[Variable, ...]
    rows: tuple[Row, ...]
    tags: tuple[str, ...] = ("gpushare",)
    time_from: str = "now-1h"
    refresh: str = "30s"
    links: tuple[dict, ...] = field(default=())

    def panels(self) -> list[Panel]:
        """Every panel, in display order."""
        return [panel for row in self.rows for panel in row.panels]


def render(dashboard: Dashboard) -> str:
    """The dashboard as Grafana JSON text: sorted keys, two-space indent, trailing newline."""
    return json.dumps(to_json(dashboard), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def to_json(dashboard: Dashboard) -> dict:
    """The dashboard model Grafana imports."""
    panels: list[dict] = []
    next_id = 1
    y = 0
    for row in dashboard.rows:
        panels.append({"collapsed": False, "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y}, "id": next_id,
                       "panels": [], "title": row.title, "type": "row"})
        next_id += 1
        y += 1
        x, line_height = 0, 0
        for panel in row.panels:
            if x + panel.width > GRID_WIDTH:
                x, y, line_height = 0, y + line_height, 0
            panels.append(_panel(panel, next_id, {"h": panel.height, "w": panel.width, "x": x, "y": y}))
            next_id += 1
            x += panel.width
            line_height = max(line_height, panel.height)
        y += line_height
    kinds = sorted({panel.kind for panel in dashboard.panels()})
    return {
        "__requires": [
            {"id": "grafana", "name": "Grafana", "type": "grafana", "version": GRAFANA_MIN},
            {"id": "prometheus", "name": "Prometheus", "type": "datasource", "version": "1.0.0"},
            *({"id": kind, "name": kind, "type": "panel", "version": ""} for kind in kinds),
        ],
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
            "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard",
        }]},
        "description": dashboard.description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": list(dashboard.links),
        "liveNow": False,
        "panels": panels,
        "refresh": dashboard.refresh,
        "schemaVersion": SCHEMA_VERSION,
        "tags": list(dashboard.tags),
        "templating": {"list": [_datasource_variable()] + [_variable(v) for v in dashboard.variables]},
        "time": {"from": dashboard.time_from, "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": dashboard.title,
        "uid": dashboard.uid,
        "version": 1,
        "weekStart": "",
    }


def _datasource_variable() -> dict:
    # "default" resolves to the Grafana instance's default Prometheus datasource, whatever it is called.
    return {"current": {"selected": False, "text": "default", "value": "default"}, "hide": 0,
            "includeAll": False, "label": "Data source", "multi": False, "name": "datasource", "options": [],
            "query": "prometheus", "refresh": 1, "regex": "", "skipUrlSync": False, "type": "datasource"}


def _variable(variable: Variable) -> dict:
    out = {"current": {}, "datasource": DATASOURCE, "definition": variable.query, "hide": 0,
           "includeAll": variable.multi, "label": variable.label, "multi": variable.multi, "name": variable.name,
           "options": [], "query": variable.query, "refresh": 2, "regex": "", "skipUrlSync": False, "sort": 3,
           "type": "query"}
    if variable.multi:
        out["allValue"] = ".*"  # one short regex instead of every value joined
    return out


def _panel(panel: Panel, panel_id: int, grid: dict) -> dict:
    out: dict = {"description": panel.description, "gridPos": grid, "id": panel_id, "title": panel.title,
                 "type": panel.kind}
    if panel.kind == "text":
        out["options"] = {"content": panel.content, "mode": "markdown"}
        return out
    out["datasource"] = DATASOURCE
    out["targets"] = [_target(query, chr(ord("A") + i), panel.kind) for i, query in enumerate(panel.queries)]
    out["fieldConfig"] = {"defaults": _defaults(panel), "overrides": _overrides(panel)}
    out["options"] = _options(panel)
    transformations = _transformations(panel)
    if transformations:
        out["transformations"] = transformations
    return out


def _target(query: Query, ref_id: str, kind: str) -> dict:
    instant = query.instant or kind != "timeseries"
    target = {"datasource": DATASOURCE, "editorMode": "code", "expr": query.expr, "instant": instant,
              "legendFormat": query.legend or "__auto", "range": not instant, "refId": ref_id}
    if kind == "table":
        target["format"] = "table"
    return target


def _defaults(panel: Panel) -> dict:
    steps = [{"color": panel.base_color, "value": None}]
    steps += [{"color": color, "value": value} for value, color in panel.thresholds]
    defaults: dict = {"color": {"mode": "thresholds" if panel.kind != "timeseries" else "palette-classic"},
                      "mappings": [], "thresholds": {"mode": "absolute", "steps": steps}, "unit": panel.unit}
    if panel.no_value:
        defaults["noValue"] = panel.no_value
    if panel.minimum is not None:
        defaults["min"] = panel.minimum
    if panel.maximum is not None:
        defaults["max"] = panel.maximum
    if panel.kind == "timeseries":
        defaults["custom"] = {
            "drawStyle": "line", "fillOpacity": 20 if panel.stack else 5, "lineWidth": 1, "showPoints": "never",
            "spanNulls": False, "stacking": {"group": "A", "mode": "normal" if panel.stack else "none"},
            "thresholdsStyle": {"mode": "line" if panel.thresholds else "off"},
        }
    if panel.kind == "table":
        defaults["custom"] = {"align": "auto", "cellOptions": {"type": "auto"}, "inspect": False}
    return defaults


def _overrides(panel: Panel) -> list[dict]:
    if panel.kind != "table" or not panel.columns:
        return []
    # After the merge transformation each query's value column is "Value #<refId>".
    out = []
    for i, column in enumerate(panel.columns):
        properties: list[dict] = [{"id": "unit", "value": column.unit}]
        if column.colored:
            properties.append({"id": "custom.cellOptions", "value": {"mode": "basic", "type": "color-background"}})
        out.append({"matcher": {"id": "byName", "options": value_column(panel, i)}, "properties": properties})
    return out


def value_column(panel: Panel, index: int) -> str:
    """Name Grafana gives the value field of query ``index`` in a table: "Value", or "Value #<refId>" once merged."""
    return "Value" if len(panel.queries) == 1 else f"Value #{chr(ord('A') + index)}"


def _transformations(panel: Panel) -> list[dict]:
    if panel.kind != "table":
        return []
    renames = {value_column(panel, i): column.header for i, column in enumerate(panel.columns)}
    excluded = {name: True for name in ("Time", "__name__", *panel.hide)}
    steps: list[dict] = []
    if len(panel.queries) > 1:
        steps.append({"id": "merge", "options": {}})
    steps.append({"id": "organize", "options": {"excludeByName": excluded, "indexByName": {},
                                                "renameByName": renames}})
    return steps


def _options(panel: Panel) -> dict:
    reduce = {"calcs": ["lastNotNull"], "fields": "", "values": False}
    if panel.kind == "timeseries":
        return {"legend": {"calcs": ["lastNotNull", "max"], "displayMode": "table", "placement": "bottom",
                           "showLegend": True},
                "tooltip": {"mode": "multi", "sort": "desc"}}
    if panel.kind == "stat":
        return {"colorMode": "value", "graphMode": "none", "justifyMode": "auto", "orientation": "auto",
                "reduceOptions": reduce, "textMode": "auto"}
    if panel.kind == "bargauge":
        return {"displayMode": "gradient", "minVizHeight": 10, "minVizWidth": 0, "orientation": "horizontal",
                "reduceOptions": reduce, "showUnfilled": True, "valueMode": "color"}
    if panel.kind == "piechart":
        return {"displayLabels": ["name", "value"], "legend": {"displayMode": "list", "placement": "right",
                                                              "showLegend": True},
                "pieType": "pie", "reduceOptions": reduce, "tooltip": {"mode": "single", "sort": "none"}}
    return {"cellHeight": "sm", "footer": {"countRows": False, "fields": "", "reducer": ["sum"], "show": False},
            "showHeader": True}
