"""`exporter serve --compat-listen` scraped by a real Prometheus, as a site replacing dcgm-exporter
would: every default counter stored under dcgm-exporter's name, labels and type, and every panel
of NVIDIA's dcgm-exporter Grafana dashboard (tests/fixtures/dcgm-exporter, source in SOURCE.md)
returning data, through --backend nvml and --backend dcgm."""

from __future__ import annotations

import json
import re

import pytest

from dcgm_helpers import write_scenario
from exporter.compat.dcgm_fields import DRIVER_VERSION_LABEL, FIELDS
from tests.promstack import Exporter, Prometheus, free_port
from tests.test_dcgm_exporter_compat import FIXTURES, SCENARIO

pytestmark = pytest.mark.e2e

# The compat node plus an XID on the lone pod's GPU, so that DCGM_FI_DEV_XID_ERRORS has a value.
E2E_SCENARIO = {**SCENARIO, "duration": "30m", "events": [{"at": "5s", "xid": {"gpu": 1, "code": 13}}]}
# Fields the simulated node cannot have: no vGPU driver runs on it (DCGM reports blank there too).
NOT_ON_THIS_NODE = {"DCGM_FI_DEV_VGPU_LICENSE_STATUS"}


def grafana_regex(values: list[str]) -> str:
    """What Grafana substitutes for a multi-value variable set to All (no allValue) in a Prometheus
    query: the values, regex-escaped for a PromQL string (a backslash doubled), as one alternation."""
    escaped = [re.sub(r"([\\.+*?()|\[\]{}^$'])", r"\\\\\1", v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def dashboard_queries(prom: Prometheus) -> list[tuple[str, str]]:
    """(panel title, query) of every panel target, template variables substituted as Grafana would."""
    dashboard = json.loads((FIXTURES / "dcgm-exporter-dashboard.json").read_text())
    variables = {}
    for var in dashboard["templating"]["list"]:
        if var["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", var["query"])
        assert match, var["query"]
        metric, label = match.groups()
        values = prom._api(f"label/{label}/values", {"match[]": metric})
        assert values, f"template variable {var['name']}: no values of {label} on {metric}"
        variables[var["name"]] = grafana_regex(sorted(values))
    queries = []

    def walk(panels):
        for panel in panels:
            walk(panel.get("panels", []))
            for target in panel.get("targets", []):
                expr = target["expr"]
                for name, value in variables.items():
                    expr = expr.replace(f"${name}", value)
                queries.append((panel["title"], expr))
    walk(dashboard["panels"])
    return queries


@pytest.fixture(scope="module", params=["nvml", "dcgm"])
def stack(request, tmp_path_factory):
    """One exporter and one Prometheus per backend, shared by the tests below, which only query them (the
    scenario plays 30 minutes at 10x, longer than the module runs)."""
    scenario = write_scenario(tmp_path_factory.mktemp(f"compat-{request.param}"), E2E_SCENARIO)
    compat_port = free_port()
    args = ["--compat-listen", f"127.0.0.1:{compat_port}", "--backend", request.param]
    if request.param == "dcgm":
        args += ["--dcgm-address", "127.0.0.1:5555"]
    exporter = Exporter(scenario, speed=10, interval=0.5, extra_args=args)
    try:
        with Prometheus({"dcgm-exporter": [f"127.0.0.1:{compat_port}"], "gpushare": [exporter.target]}) as prom:
            prom.wait_for('DCGM_FI_DEV_GPU_TEMP')
            prom.wait_for('DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL')  # needs two polls
            prom.wait_for('DCGM_FI_DEV_XID_ERRORS')
            prom.wait_for('count(gpushare_gpu_memory_total_bytes) == 3')
            yield request.param, prom, exporter
    finally:
        exporter.stop()


def test_every_default_counter_is_stored_under_its_name_labels_and_type(stack):
    backend, prom, _ = stack
    names = prom.series_names()
    expected = {f.name for f in FIELDS} - NOT_ON_THIS_NODE
    assert expected <= names, sorted(expected - names)
    assert not {n for n in names if n.startswith("DCGM_") and n.endswith("_total")}  # no _total added
    metadata = prom._api("metadata", {})
    for field in FIELDS:
        if field.name in expected:
            assert [m["type"] for m in metadata[field.name]] == [field.type], field.name
    for sample in prom.query('{__name__=~"DCGM_.*"}'):
        labels = sample["metric"]
        assert {"gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname", DRIVER_VERSION_LABEL} <= set(labels)
        assert labels["job"] == "dcgm-exporter"
    # Units as dcgm-exporter's: MiB (FB used + free + reserved = total), MHz, percent.
    # (a device's FB_USED is its largest: the per-pod series of a shared GPU are parts of it)
    fb = prom.query('max by (UUID) (DCGM_FI_DEV_FB_USED{GPU_I_ID=""}) + on(UUID) max by (UUID) (DCGM_FI_DEV_FB_FREE)'
                    ' + on(UUID) max by (UUID) (DCGM_FI_DEV_FB_RESERVED)')
    total = {s["metric"]["uuid"]: float(s["value"][1]) / 2**20
             for s in prom.query('gpushare_gpu_memory_total_bytes')}
    assert fb and all(abs(float(s["value"][1]) - total[s["metric"]["UUID"]]) <= 2 for s in fb)
    clock = prom.query('DCGM_FI_DEV_SM_CLOCK')
    assert clock and all(500 <= float(s["value"][1]) <= 3000 for s in clock)
    xid = prom.query('DCGM_FI_DEV_XID_ERRORS')
    assert {(s["metric"]["err_code"], s["metric"]["err_msg"], s["value"][1]) for s in xid} == \
        {("13", "Graphics Engine Exception", "13")}
    assert all(s["metric"]["device"] == "nvidia" + s["metric"]["gpu"] for s in clock)
    # The second GPU (NVML index 1) is DCGM's gpuId 0 in this scenario (dcgm.gpu_ids).
    (lone,) = prom.query('DCGM_FI_DEV_GPU_TEMP{pod="train-0"}')
    assert lone["metric"]["gpu"] == ("0" if backend == "dcgm" else "1")


def test_per_pod_series_on_a_shared_gpu_are_the_pods_own(stack):
    """The time-sliced GPU: each pod's FB_USED is its own (they add up to less than the device's,
    the host process holds the rest), never the device value copied (dcgm-exporter #582, #642)."""
    _, prom, _ = stack
    pods = prom.query('DCGM_FI_DEV_FB_USED{pod!="", GPU_I_ID=""} unless on(UUID) DCGM_FI_DEV_FB_USED{pod="train-0"}')
    device = prom.query('DCGM_FI_DEV_FB_USED{pod=""}')
    assert {s["metric"]["pod"] for s in pods} == {"llm-0", "embed-1"}
    shared = {s["metric"]["UUID"] for s in pods}
    (device_used,) = [float(s["value"][1]) for s in device if s["metric"]["UUID"] in shared]
    assert sum(float(s["value"][1]) for s in pods) < device_used


def test_every_panel_of_nvidias_dashboard_has_data(stack):
    _, prom, _ = stack
    queries = dashboard_queries(prom)
    assert len(queries) == 8
    empty = [(title, expr) for title, expr in queries if not prom.query(expr)]
    assert not empty, empty
