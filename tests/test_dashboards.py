"""Grafana dashboards as code: committed JSON, importable shape, units, and every query proven on a real Prometheus.

The end-to-end part runs four simulated exporters (at 30x the 8-GPU mixed H100 node, the fault demo through
the DCGM backend, the Kubernetes node whose pods share GPUs; at 60x the Wan 2.2 MPS out-of-memory story)
scraped every second by Debian's Prometheus with alerts/*.yml loaded, until the Wan scenario's OOM kill has
been scraped (~10 s after the Wan exporter starts). Then
every panel's queries run through the HTTP API with the dashboard variables substituted as
Grafana would: All, each exporter alone, and for the GPU detail dashboard each single GPU.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import re
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dashboards import common, generate, lint
from exporter.collectors import forecast
from exporter.collectors.base import Spec
from tests.conftest import REPO, SCENARIOS, require_binary
from tests.promstack import Exporter, Prometheus, QueryError, free_port, start_exporters, stop_all

BOARDS = lint.load_dashboards(REPO / "dashboards" / "json")
RULE_FILES = sorted((REPO / "alerts").glob("*.yml"))
UIDS = {"gpushare-fleet", "gpushare-gpu", "gpushare-mig", "gpushare-mps", "gpushare-advice"}
FORECAST_SPECS = (forecast.EXPECTED_PEAK, forecast.AT_CONTENTION, forecast.PROFILE_PEAK, forecast.PROFILE_DURATION,
                  forecast.PROFILE_OFFSET, forecast.PROFILE_RUNS, forecast.PROFILES_STORED, forecast.STORE_OK,
                  *forecast.GPU_SPECS.values(), *forecast.MIG_SPECS.values())
FORECAST_FAMILIES = {spec.name for spec in FORECAST_SPECS}
RATE_INTERVAL = "4s"  # Grafana's $__rate_interval floor: 4 x the 1 s scrape interval
GiB = 2**30


def all_targets():
    return [target for board in BOARDS.values() for target in lint.targets(board)]


def collector_specs() -> list[Spec]:
    """Every metric family the modules in exporter/collectors/ declare as a Spec (constants or dict values)."""
    specs = []
    for path in sorted((REPO / "exporter" / "collectors").glob("*.py")):
        module = importlib.import_module(f"exporter.collectors.{path.stem}")
        for value in vars(module).values():
            specs += [item for item in (value.values() if isinstance(value, dict) else (value,))
                      if isinstance(item, Spec)]
    return specs


def collector_families() -> set[str]:
    return {spec.name for spec in collector_specs()}


def metric_types() -> dict[str, str]:
    """Family name -> type, from the collectors' specs and docs/metrics.md's tables."""
    types = {spec.name: spec.kind for spec in collector_specs()}
    for name, kind in re.findall(r"^\| `(gpushare_\w+)` \| (\w+) \|", (REPO / "docs" / "metrics.md").read_text(),
                                 re.M):
        types[name] = kind
    return types


def test_committed_json_is_what_the_generator_makes():
    """Regenerating the dashboards gives the committed files byte for byte, with no file missing or left over."""
    assert generate.stale() == [], "run: python -m dashboards.generate"
    assert set(BOARDS) == UIDS


@pytest.mark.parametrize("uid", sorted(UIDS))
def test_dashboard_imports_into_grafana_10_without_naming_an_instance(uid):
    """Stable uid, Grafana >= 10 schema, a datasource variable every panel reads, and no hard-coded target."""
    board = BOARDS[uid]
    path = REPO / "dashboards" / "json" / f"{uid}.json"
    assert board["id"] is None and board["version"] == 1
    grafana = next(r for r in board["__requires"] if r["type"] == "grafana")
    assert grafana["version"].startswith("10.") and 36 <= board["schemaVersion"] <= 39
    variables = board["templating"]["list"]
    assert variables[0]["type"] == "datasource" and variables[0]["query"] == "prometheus"
    assert [v["name"] for v in variables] == ["datasource", "cluster", "job", "instance", "gpu"]
    # Grafana 10 keys its variable store by "id": a shared id would make the variables overwrite each other.
    assert all("id" not in v for v in variables)
    assert all(v["datasource"] == {"type": "prometheus", "uid": "${datasource}"} for v in variables[1:])
    ids = [p["id"] for p in board["panels"]]
    assert all(isinstance(i, int) for i in ids) and len(set(ids)) == len(ids)
    for panel in lint.panels(board):
        if panel["type"] == "text":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert all(t["datasource"] == panel["datasource"] for t in panel["targets"]), panel["title"]
    assert not re.search(r"localhost|127\.0\.0\.1|:\d{4,5}\b", path.read_text())


def test_docs_tour_every_dashboard_row():
    """docs/dashboards.md names every dashboard and the question of every row, as the dashboards title them."""
    docs = (REPO / "docs" / "dashboards.md").read_text()
    for board in BOARDS.values():
        assert f"### {board['title']}" in docs and f"`{board['uid']}.json`" in docs
        for panel in board["panels"]:
            if panel["type"] == "row":
                assert f"| {panel['title']} |" in docs, panel["title"]


def test_lint_reads_metric_names_counters_and_units_out_of_promql():
    """The PromQL reader skips functions, keywords, label lists, strings and ranges, and finds rate() arguments."""
    expr = ('sum by (gpu) (rate(gpushare_gpu_energy_joules_total{job=~"$job"}[5m])) / on(uuid) '
            'gpushare_gpu_info{sharing="mps"} unless gpushare_gpu_up offset 15m and time() > 0')
    assert lint.metric_names(expr) == ["gpushare_gpu_energy_joules_total", "gpushare_gpu_info", "gpushare_gpu_up"]
    assert lint.counter_arguments(expr) == ["gpushare_gpu_energy_joules_total"]
    assert lint.metric_names('label_replace(up, "x", "$1", "instance", "(.*)")') == ["up"]
    assert lint.metric_names("x_total unless x_total offset $__rate_interval") == ["x_total"]
    assert lint.expected_units("gpushare_gpu_memory_used_bytes / gpushare_gpu_memory_total_bytes") == {"percentunit"}
    assert lint.expected_units("gpushare_gpu_memory_used_bytes") == {"bytes"}
    assert lint.expected_units("rate(gpushare_gpu_energy_joules_total[1m])") == {"watt"}
    assert lint.expected_units("count(gpushare_gpu_memory_used_bytes)") == {"short", "none"}


def test_queries_select_job_instance_and_gpu_only_through_the_variables():
    """Every job, instance and gpu matcher in a panel query is the dashboard variable, never a literal value,
    and no other variable is left once the dashboard's are substituted."""
    for target in all_targets():
        lint.interpolate(target.expr, {"cluster": "c", "job": "j", "instance": "i", "gpu": "0"}, "1h", RATE_INTERVAL)
        for label, value in re.findall(r"\b(cluster|job|instance|gpu)\s*=~?\s*\"([^\"]*)\"", target.expr):
            assert value == f"${label}", (target.dashboard, target.panel, target.expr)


@pytest.mark.parametrize("uid", sorted(UIDS))
def test_panels_sit_on_the_grid_without_overlapping(uid):
    """Every panel lies inside the 24-column grid and no two panels share a cell."""
    taken: dict[tuple[int, int], str] = {}
    for panel in BOARDS[uid]["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in taken, f"{panel['title']} overlaps {taken.get((x, y))}"
                taken[(x, y)] = panel["title"]


def test_every_query_is_shown_in_a_unit_that_fits_what_it_computes():
    """A bytes metric shows as bytes (a ratio of two as percent), seconds as s, ratios as percent, watts..."""
    for target in all_targets():
        assert target.unit, (target.dashboard, target.panel)
        assert target.unit in lint.expected_units(target.expr), (target.dashboard, target.panel, target.ref_id,
                                                                 target.unit, target.expr)


def test_rate_and_increase_only_take_counters():
    """rate(), irate(), increase() and resets() in panels and rules are applied to counters only, never gauges."""
    types = metric_types()
    exprs = [(t.dashboard, t.expr) for t in all_targets()]
    exprs += [(name, expr) for path in RULE_FILES for name, expr in lint.rule_expressions(path)]
    checked = 0
    for where, expr in exprs:
        for name in lint.counter_arguments(expr):
            assert types.get(name) == "counter", (where, name, expr)
            checked += 1
    assert checked > 0  # the dashboards do use counters (energy, NVML errors, OOM kills)


def colour_at(panel: dict, value: float) -> str:
    """The colour Grafana gives ``value`` by the panel's absolute thresholds (a step applies from its value up)."""
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    colour = steps[0]["color"]
    for step in steps[1:]:
        if value >= step["value"]:
            colour = step["color"]
    return colour


def coloured(panel: dict, target: lint.Target) -> bool:
    """Whether Grafana colours the target's values: stats and bar gauges always, table columns when asked."""
    if panel["type"] in ("stat", "bargauge"):
        return True
    if panel["type"] != "table":
        return False
    return any(o["matcher"]["options"] == lint_column(panel, target) and p["id"] == "custom.cellOptions"
               for o in panel["fieldConfig"]["overrides"] for p in o["properties"])


def lint_column(panel: dict, target: lint.Target) -> str:
    return "Value" if len(panel["targets"]) == 1 else f"Value #{target.ref_id}"


def panel_of(target: lint.Target) -> dict:
    return next(p for p in lint.panels(BOARDS[target.dashboard]) if p["title"] == target.panel)


def memory_over_capacity(target: lint.Target) -> bool:
    """A query dividing device memory (used, expected demand, limits) by a capacity: above 1 is contention."""
    return target.unit == "percentunit" and "/" in lint.blank(target.expr) and bool(
        re.match(r"gpushare_\w+_bytes$", (lint.metric_names(target.expr) or [""])[0]))


def test_memory_over_capacity_is_red_from_100_percent():
    """Every ratio of memory to a capacity (peak demand of a MIG instance, used of usable, limits of the GPU...)
    is shown coloured, and red at and above 1: more than the device has is contention, never green."""
    checked = []
    for target in all_targets():
        if not memory_over_capacity(target):
            continue
        panel = panel_of(target)
        where = (target.dashboard, target.panel, target.ref_id)
        assert coloured(panel, target), where
        assert colour_at(panel, 1.0) == "red" and colour_at(panel, 1.12) == "red", where
        checked.append(where)
    assert ("gpushare-mig", "Peak use over the time range, as a fraction of the instance", "B") in checked
    assert len(checked) >= 6


def test_linear_trend_is_never_shown_as_an_out_of_memory_warning():
    """The exhaustion ETA (a straight line through 5 minutes of used memory) is never coloured orange or red and
    is titled for what it measures, so it cannot contradict "no collision predicted" next to it."""
    trend = [t for t in all_targets() if any(n.endswith("_memory_exhaustion_eta_seconds")
                                             for n in lint.metric_names(t.expr))]
    assert len(trend) >= 6
    for target in trend:
        panel = panel_of(target)
        if coloured(panel, target):
            colours = {step["color"] for step in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]}
            assert not colours & {"red", "orange", "dark-red", "semi-dark-red"}, (target.dashboard, target.panel)
        shown = target.panel
        if panel["type"] == "table":
            shown = panel["transformations"][-1]["options"]["renameByName"][lint_column(panel, target)]
        assert shown == "Linear trend reaches full in", (target.dashboard, target.panel)
        assert "ignores the learned" in panel["description"], (target.dashboard, target.panel)


def test_every_counter_is_classed_as_created_at_zero_or_at_its_first_count():
    """Each counter the collectors declare is either eager (exists at 0, or a driver total, from the first poll)
    or lazy (its series appears at its first count): a new counter must be classed before dashboards use it."""
    counters = {spec.name for spec in collector_specs() if spec.kind == "counter"}
    assert counters - set(lint.LAZY_COUNTERS) - set(lint.EAGER_COUNTERS) == set()
    assert set(lint.LAZY_COUNTERS) & set(lint.EAGER_COUNTERS) == set()
    assert set(lint.LAZY_COUNTERS) | set(lint.EAGER_COUNTERS) <= counters


def test_lazy_counters_are_counted_from_their_first_appearance():
    """No panel or rule rates or increases a lazily created counter (NVML errors, XIDs, namespace accounting)
    without taking a series born in the window at its value: rate() alone never sees an error that happens once."""
    exprs = [(f"{t.dashboard}: {t.panel}", t.expr) for t in all_targets()]
    exprs += [(name, expr) for path in RULE_FILES for name, expr in lint.rule_expressions(path)]
    assert [(where, lint.missed_first_values(expr)) for where, expr in exprs if lint.missed_first_values(expr)] == []
    assert any("gpushare_exporter_poll_errors_total" in expr for _, expr in exprs)


def test_lint_finds_a_lazy_counter_rated_without_its_first_appearance():
    """The check itself: rate() or increase() alone is caught, the new_in() form and rate() of an integral pass."""
    errors = 'gpushare_exporter_poll_errors_total{job=~"$job"}'
    assert lint.missed_first_values(f"sum(rate({errors}[5m]))") == ["gpushare_exporter_poll_errors_total"]
    assert lint.missed_first_values(f"increase({errors}[1h])") == ["gpushare_exporter_poll_errors_total"]
    assert lint.missed_first_values(f"sum by (call) ({common.new_in(errors, '$__rate_interval')})") == []
    assert lint.missed_first_values("rate(gpushare_namespace_sm_seconds_total[5m])") == []
    assert lint.missed_first_values("increase(gpushare_namespace_sm_seconds_total[1d])") == [
        "gpushare_namespace_sm_seconds_total"]
    assert lint.missed_first_values("rate(gpushare_gpu_energy_joules_total[5m])") == []


def test_every_panel_says_why_it_is_empty():
    """Every panel that queries data has a no-value text, so an empty panel reads "no MPS clients" or "no
    forecast yet" instead of an unexplained "No data"."""
    silent = [(uid, p["title"]) for uid, board in BOARDS.items() for p in lint.panels(board)
              if p["type"] != "text" and not p["fieldConfig"]["defaults"].get("noValue")]
    assert silent == []


# ---------------------------------------------------------------- end to end, on a real Prometheus

# Panels none of the three scenarios can feed, and why. A listed panel that gets data fails the test: drop it then.
CANNOT_FEED: dict[tuple[str, str], str] = {}
# Ratios that may exceed 1 by design.
MAY_EXCEED_ONE = {("gpushare-mps", "Pinned limits as a share of usable memory")}
SCENARIO_FILES = {"mixed": "h100-mixed-node.yaml", "wan": "wan22-h100-mps-together.yaml", "faults": "faults-demo.yaml",
                  "k8s": "k8s-shared-node.yaml"}


@dataclass
class Run:
    """What the stack saw: per (dashboard, panel, refId, selection) the values or the query error."""

    prom: Prometheus
    targets: dict[str, str]  # scenario -> host:port (the instance label)
    start: float
    end: float
    families: set[str]  # every family the exporters' /metrics pages declare (# TYPE lines)
    values: dict[tuple[str, str, str, str], list[float]] = field(default_factory=dict)
    errors: dict[tuple[str, str, str, str], str] = field(default_factory=dict)

    @property
    def forecast_served(self) -> bool:
        return bool(self.families & FORECAST_FAMILIES)


def selections(run: Run, uid: str) -> dict[str, dict[str, str]]:
    """Variable values to try: All and each exporter alone; for the one-GPU dashboard, each GPU."""
    if uid == "gpushare-gpu":
        gpus = run.prom.query("gpushare_gpu_info")
        return {f"{s['metric']['instance']}/{s['metric']['gpu']}":
                {"cluster": ".*", "job": s["metric"]["job"], "instance": s["metric"]["instance"], "gpu": s["metric"]["gpu"]}
                for s in gpus}
    out = {"all": {"cluster": ".*", "job": ".*", "instance": ".*", "gpu": ".*"}}
    for scenario, target in run.targets.items():
        out[scenario] = {"cluster": ".*", "job": ".*", "instance": lint.grafana_regex_escape(target), "gpu": ".*"}
    return out


def evaluate(run: Run) -> None:
    """Run every panel query for every selection; fill run.values and run.errors."""
    time_range = f"{int(run.end - run.start)}s"
    for uid, board in BOARDS.items():
        choices = selections(run, uid)
        for target in lint.targets(board):
            for name, variables in choices.items():
                key = (uid, target.panel, target.ref_id, name)
                expr = lint.interpolate(target.expr, variables, time_range, RATE_INTERVAL)
                try:
                    if target.instant:  # what the panel shows now; must parse and run
                        run.prom.query(expr, time=run.end)
                    # Data over the whole run: an instant panel viewed at that moment would have shown it.
                    result = [v for s in run.prom.query_range(expr, run.start, run.end, 1.0) for v in s["values"]]
                except QueryError as exc:
                    run.errors[key] = str(exc)
                    continue
                run.values[key] = [float(v) for _, v in result if not math.isnan(float(v))]


def seed_wan_profile(state_dir: Path) -> None:
    """Store what one Wan job run alone to its end teaches (as tests/test_foresight_sim.py learns it)."""
    from exporter.backend.sim import SimBackend
    from exporter.foresight import Foresight
    from exporter.sim.scenario import load_scenario

    together = load_scenario(SCENARIOS / SCENARIO_FILES["wan"])
    solo = dataclasses.replace(together, processes=together.processes[:1])
    foresight = Foresight(state_dir=state_dir)
    backend = SimBackend(solo)
    backend.open()
    try:
        for step in range(0, 42):
            backend.step_to(step * 15.0)
            foresight.observe(backend.poll())
    finally:
        backend.close()
    foresight.flush()


def serve_takes_state_dir() -> bool:
    """True once `exporter serve` has --state-dir (the forecast is then served)."""
    help_text = subprocess.run([sys.executable, "-m", "exporter", "serve", "--help"], cwd=REPO,
                               capture_output=True, text=True, timeout=60).stdout
    return "--state-dir" in help_text


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Four simulated exporters (three at 30x, the Wan story at 60x) and Prometheus with the alert rules, until
    the Wan OOM kill is scraped."""
    require_binary("prometheus")
    wan_args: list[str] = []
    if serve_takes_state_dir():
        state_dir = tmp_path_factory.mktemp("wan-state")
        seed_wan_profile(state_dir)
        wan_args = ["--state-dir", str(state_dir)]
    exporters: dict[str, Exporter] = {}
    # Ports chosen now, so that Prometheus starts first (its first 5 s discovery ticks overlap the exporters'
    # start-ups) and already scrapes the Wan target (finding it down) when that exporter starts: its first
    # scrape then comes within a second of the exporter's first poll, and the Wan story can play at 60x (a poll
    # every 15 simulated seconds, as the others at 30x) and still be seen from its first simulated minute.
    ports = {name: free_port() for name in ("mixed", "faults", "k8s", "wan")}
    targets = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
    try:
        with Prometheus({"gpushare": list(targets.values())}, rule_files=RULE_FILES) as prom:
            start = time.time()
            # Started together (their start-ups overlap): the mixed node; the fault demo through DCGM, whose A100
            # MIG instances get pipe activity (NVML's GPM has none before Hopper); pods sharing GPUs, which feed
            # the per-namespace row.
            exporters.update(zip(("mixed", "faults", "k8s"), start_exporters([
                (SCENARIOS / SCENARIO_FILES["mixed"], {"speed": 30, "interval": 0.5, "port": ports["mixed"]}),
                (SCENARIOS / SCENARIO_FILES["faults"], {"speed": 30, "interval": 0.5, "port": ports["faults"],
                                                        "extra_args": ["--gpu-timeout", "1", "--backend", "dcgm"]}),
                (SCENARIOS / SCENARIO_FILES["k8s"], {"speed": 30, "interval": 0.5, "port": ports["k8s"]})])))
            prom.wait_for(f'up{{instance="{targets["wan"]}"}}', timeout=60)  # the Wan target is scraped already
            exporters["wan"] = Exporter(SCENARIOS / SCENARIO_FILES["wan"], speed=60, interval=0.25,
                                        extra_args=wan_args, port=ports["wan"])
            prom.wait_for(f'gpushare_simulation_oom_kills_total{{instance="{targets["wan"]}"}} > 0', timeout=90)
            time.sleep(3)  # a few more scrapes after the kill, so rates and increases see it
            # Families declared now, and every name scraped during the run (some exist only while predicted).
            families = {line.split()[2] for e in exporters.values() for line in e.metrics().splitlines()
                        if line.startswith("# TYPE ")} | prom.series_names()
            result = Run(prom, {name: e.target for name, e in exporters.items()}, start, time.time(), families)
            evaluate(result)
            yield result
    finally:
        stop_all(exporters.values())


def panel_keys() -> set[tuple[str, str]]:
    return {(t.dashboard, t.panel) for t in all_targets()}


def only_forecast(uid: str, title: str) -> bool:
    """True when every query of the panel needs a forecast family."""
    return all(set(lint.metric_names(t.expr)) & FORECAST_FAMILIES
               for t in all_targets() if (t.dashboard, t.panel) == (uid, title))


@pytest.mark.e2e
def test_every_panel_query_runs_without_error(run):
    """Prometheus accepts every panel query, for every variable selection, with no parse or execution error."""
    assert run.values, "no query ran"
    assert run.errors == {}


@pytest.mark.e2e
def test_every_panel_the_scenarios_can_feed_has_data(run):
    """Each panel shows data for some selection, except those listed with a reason (and forecast panels while
    the exporter does not serve the forecast yet)."""
    fed = {(uid, title) for (uid, title, _, _), values in run.values.items() if values}
    missing = panel_keys() - fed
    not_fed_yet = {key for key in missing if not run.forecast_served and only_forecast(*key)}
    if not_fed_yet:
        warnings.warn("not fed yet (the exporter does not serve the forecast families): "
                      + "; ".join(f"{uid}: {title}" for uid, title in sorted(not_fed_yet)))
    unexplained = sorted(missing - not_fed_yet - CANNOT_FEED.keys())
    assert unexplained == [], f"no data in any selection: {unexplained}"
    assert sorted(CANNOT_FEED.keys() - missing) == [], "these panels have data now: remove them from CANNOT_FEED"


def series(run: Run, uid: str, title: str, scenario: str, ref_id: str = "A") -> list[list]:
    """Range result of one panel query, variables set to one scenario's exporter."""
    target = next(t for t in lint.targets(BOARDS[uid]) if (t.panel, t.ref_id) == (title, ref_id))
    variables = {"cluster": ".*", "job": ".*", "instance": lint.grafana_regex_escape(run.targets[scenario]), "gpu": ".*"}
    expr = lint.interpolate(target.expr, variables, f"{int(run.end - run.start)}s", RATE_INTERVAL)
    return run.prom.query_range(expr, run.start, run.end, 1.0)


def first_time(result: list[dict], condition) -> float | None:
    """Earliest timestamp at which some series of a range result meets ``condition``."""
    times = [float(t) for s in result for t, v in s["values"] if condition(float(v))]
    return min(times) if times else None


def sim_time_at(run: Run, scenario: str, at: float) -> float:
    (sample,) = run.prom.query(f'gpushare_simulation_time_seconds{{instance="{run.targets[scenario]}"}}', time=at)
    return float(sample["value"][1])


@pytest.mark.e2e
def test_values_are_plausible_for_the_unit_each_panel_shows(run):
    """Values fit the panel's unit: ratios in 0..1, bytes not MiB, hertz not MHz, watts not mW, sane Celsius
    (counter rates aside: simulated counters run at 30x and 60x)."""
    # Simulated counters advance --speed times faster than the wall clock Prometheus rates them by.
    units = {(t.dashboard, t.panel, t.ref_id): t.unit for t in all_targets() if not lint.counter_arguments(t.expr)}
    by_unit: dict[str, list[tuple[tuple, float]]] = {}
    for (uid, title, ref_id, _), values in run.values.items():
        if (uid, title, ref_id) not in units:
            continue
        by_unit.setdefault(units[(uid, title, ref_id)], []).extend(((uid, title), v) for v in values)
    def outside(unit: str, low: float, high: float) -> list:
        return sorted({(key, v) for key, v in by_unit[unit] if not low <= v <= high and key not in MAY_EXCEED_ONE})

    assert outside("percentunit", 0, 1) == []
    small = sorted({key for key, v in by_unit["bytes"] if 0 < abs(v) < 2**20})
    assert small == [], f"bytes panels showing MiB-sized numbers: {small}"
    assert max(v for _, v in by_unit["hertz"]) >= 1e8  # an H100 SM clock is ~2 GHz
    assert outside("watt", 0, 2000) == [] and max(v for _, v in by_unit["watt"]) > 10
    assert outside("celsius", 0, 130) == []
    for unit in ("s", "short"):
        assert outside(unit, 0, math.inf) == []
    assert {v for _, v in by_unit["bool_on_off"]} <= {0.0, 1.0}


@pytest.mark.e2e
def test_every_metric_a_dashboard_or_rule_uses_is_exported(run):
    """Every metric named by a panel query, a rule expression or an alert annotation query is a family the
    exporters declare or docs/metrics.md documents (recording rules and Prometheus' own series aside)."""
    documented = set()
    for doc in ("metrics.md", "alerts.md"):
        for cell in re.findall(r"^\| (`gpushare_[^|]*)\|", (REPO / "docs" / doc).read_text(), re.M):
            documented |= set(re.findall(r"`(gpushare_\w+)`", cell))
    # A family documented but absent from every scrape (e.g. only present while an OOM is predicted on a MIG
    # instance) must at least be one the exporter's collectors define.
    assert sorted(documented - run.families - collector_families()) == []
    known = documented | run.families | lint.PROMETHEUS_SERIES | lint.recorded_names(RULE_FILES)
    used = {(f"dashboard {t.dashboard}: {t.panel}", name) for t in all_targets() for name in lint.metric_names(t.expr)}
    for path in RULE_FILES:
        used |= {(f"{path.name}: {rule}", name) for rule, expr in lint.rule_expressions(path)
                 for name in lint.metric_names(expr)}
        used |= {(f"{path.name}: {rule} (annotation)", name) for rule, name in lint.rule_annotation_names(path)}
    assert len({name for _, name in used}) > 50
    unknown = sorted((where, name) for where, name in used if name not in known)
    assert unknown == [], f"not exported: {unknown}"


@pytest.mark.e2e
def test_alert_rules_load_and_evaluate_in_prometheus(run):
    """Prometheus loaded every rule of alerts/*.yml and evaluated each without an error."""
    rules = [rule for group in run.prom.rules() for rule in group["rules"]]
    expected = sum(1 for path in RULE_FILES for _ in lint.rule_expressions(path))
    assert len(rules) == expected
    assert [(r["name"], r.get("lastError")) for r in rules if r["health"] == "err"] == []


@pytest.mark.e2e
def test_activity_panels_show_the_a100_mig_instances_through_dcgm(run):
    """The fault demo's A100 (no GPM) runs MIG instances: read through DCGM, the MIG dashboard's SM panel and
    the fleet's SM panel show them, and the data-sources panel says DCGM delivers."""
    a100 = run.prom.query(f'gpushare_gpu_info{{instance="{run.targets["faults"]}", name=~".*A100.*"}}')
    assert a100, "the fault demo has an A100"
    uuid = a100[0]["metric"]["uuid"]
    mig = [s for s in series(run, "gpushare-mig", "SM active", "faults") if s["metric"]["uuid"] == uuid]
    assert mig and max(float(v) for s in mig for _, v in s["values"]) > 0
    fleet = [s for s in series(run, "gpushare-fleet", "SM active by GPU", "faults") if s["metric"]["uuid"] == uuid]
    assert fleet
    sources = {s["metric"]["source"]: s["values"][-1][1] for s in series(run, "gpushare-fleet", "Data sources", "faults")}
    assert sources == {"nvml": "1", "dcgm": "1", "dcgm_profiling": "1"}


@pytest.mark.e2e
def test_mps_dashboard_shows_the_wan_clients_and_their_oom_kill(run):
    """On the Wan scenario the MPS dashboard shows three clients without a limit holding 3 x 22 GiB, then a kill."""
    # The scenario: three MPS clients, no CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, 22 GiB each before the final spike.
    (unlimited,) = series(run, "gpushare-mps", "Clients without a pinned memory limit", "wan")
    assert max(float(v) for _, v in unlimited["values"]) == 3
    held = {}
    for s in series(run, "gpushare-mps", "Client memory", "wan"):
        for t, v in s["values"]:
            held[t] = held.get(t, 0.0) + float(v)
    assert max(held.values()) >= 66 * GiB
    kills = series(run, "gpushare-mps", "Out-of-memory kills in the time range", "wan")
    assert sum(float(s["values"][-1][1]) for s in kills) >= 1


@pytest.mark.e2e
def test_mps_dashboard_shows_the_contention_minutes_before_the_kill(run):
    """With the Wan job's profile learned, the headroom panel goes negative and the collision ETA appears at
    least 5 simulated minutes before the OOM kill panel counts the kill (the scenario kills at ~9 min)."""
    if not run.forecast_served:
        pytest.skip("not fed yet: the exporter does not serve the forecast families")
    headroom = series(run, "gpushare-mps", "Headroom at the expected peak", "wan")
    first_negative = first_time(headroom, lambda v: v < 0)
    kill = first_time(series(run, "gpushare-mps", "Out-of-memory kills", "wan"), lambda v: v >= 1)
    assert first_negative is not None and kill is not None
    assert sim_time_at(run, "wan", kill) - sim_time_at(run, "wan", first_negative) >= 5 * 60
    eta = first_time(series(run, "gpushare-mps", "Peaks collide in", "wan"), lambda v: v > 0)
    assert eta is not None and eta < kill
