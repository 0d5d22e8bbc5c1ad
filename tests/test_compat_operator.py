"""The dcgm-exporter compatible port scraped the way GPU Operator sites scrape dcgm-exporter.

The GPU Operator's own ServiceMonitor for dcgm-exporter (NVIDIA/gpu-operator,
assets/state-dcgm-exporter/0500_service_monitor.yaml: port ``gpu-metrics``, path ``/metrics``,
``jobLabel: app``, no ``honorLabels`` unless the ClusterPolicy's
``dcgmExporter.serviceMonitor.honorLabels`` sets it) is moved to this exporter by changing its
selector only (docs/dcgm-exporter.md). Through the Operator's relabeling (tests/operator_scrape.py) a
real Prometheus must then store the compat series as it stored dcgm-exporter's: without honorLabels
the workloads' pod labels as ``exported_pod``/``exported_namespace`` (what dcgm-exporter users'
queries already say) and the exporter's own pod as ``pod``; with honorLabels, the workloads' as
``pod``. The expected pods are read from what the exporter's compat port really serves.
"""

from __future__ import annotations

import contextlib
import re
import time
import urllib.request

import pytest

from tests import operator_scrape as osc
from tests.conftest import SCENARIOS, require_binary
from tests.promstack import Prometheus, free_port, start_exporter

pytestmark = pytest.mark.e2e

SCENARIO = SCENARIOS / "k8s-shared-node.yaml"
EXPORTER_POD = "gpushare-exporter-q8w2z"
NODE = "gpu-node-7"


def gpu_operator_monitor(honor_labels: bool | None) -> dict:
    """The GPU Operator's dcgm-exporter ServiceMonitor, its selector pointed at this exporter's Service."""
    endpoint = {"port": "gpu-metrics", "path": "/metrics"}
    if honor_labels is not None:
        endpoint["honorLabels"] = honor_labels
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": "nvidia-dcgm-exporter", "namespace": "gpu-operator",
                         "labels": {"app": "nvidia-dcgm-exporter"}},
            "spec": {"endpoints": [endpoint], "jobLabel": "app",
                     "namespaceSelector": {"matchNames": ["gpushare-exporter"]},
                     "selector": {"matchLabels": osc.load("service.yaml")["metadata"]["labels"]}}}


def served_pods(url: str) -> set[tuple[str, str]]:
    """(namespace, pod) on DCGM_FI_DEV_FB_USED as the compat port serves it."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out = set()
    for line in text.splitlines():
        if line.startswith("DCGM_FI_DEV_FB_USED{") and 'pod="' in line:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0]))
            out.add((labels["namespace"], labels["pod"]))
    return out


@pytest.fixture(scope="module")
def stack():
    require_binary("prometheus")
    compat = f"127.0.0.1:{free_port()}"
    daemonset, service = osc.load("daemonset.yaml"), osc.load("service.yaml")
    with contextlib.ExitStack() as stack:
        exporter = stack.enter_context(start_exporter(SCENARIO, speed=10, extra_args=("--compat-listen", compat)))
        pods = [osc.ExporterPod(EXPORTER_POD, NODE, compat)]
        # One Prometheus per setting: both store the device series under the same labels.
        plain, honor = (stack.enter_context(Prometheus({}, scrape_configs=[osc.scrape_config(
            gpu_operator_monitor(setting), osc.endpoints_targets(service, daemonset, pods))]))
            for setting in (None, True))
        plain.wait_for('DCGM_FI_DEV_FB_USED{exported_pod!=""}', timeout=60)
        honor.wait_for(f'DCGM_FI_DEV_FB_USED{{pod!="{EXPORTER_POD}", pod!=""}}', timeout=60)
        yield {"plain": plain, "honor": honor, "url": f"http://{compat}/metrics", "exporter": exporter}


def _stored(stack, honor: bool) -> list[dict]:
    return [s["metric"] for s in stack["honor" if honor else "plain"].query("DCGM_FI_DEV_FB_USED")]


def _scraped_since(prom, since: float) -> None:
    """Wait until Prometheus stored a scrape of the compat port that started after ``since`` (Unix time)."""
    prom.wait_for(f"min(timestamp(DCGM_FI_DEV_FB_USED)) > {since:.3f}", timeout=30)


def _between(stack, before: set[tuple[str, str]], stored: set[tuple[str, str]]) -> None:
    """Pods come and go while the scenario plays (a Job's pods every few simulated minutes, tens of
    seconds apart here): a pod stored at the last scrape was served before it or is still served
    after it, and a pod served both before that scrape and after the query was alive at it."""
    again = served_pods(stack["url"])
    assert before and again, "the scenario's pods hold GPUs: the compat port names them"
    assert before & again <= stored <= before | again, (stored, before, again)


def test_the_gpu_operator_monitor_finds_the_compat_port(stack):
    series = _stored(stack, honor=False)
    assert series and {s["endpoint"] for s in series} == {"gpu-metrics"}
    assert {s["service"] for s in series} == {osc.load("service.yaml")["metadata"]["name"]}


def test_without_honor_labels_the_workloads_arrive_as_exported_pod_as_with_dcgm_exporter(stack):
    before = served_pods(stack["url"])
    _scraped_since(stack["plain"], time.time())  # a scrape between `before` and what the query reads
    series = _stored(stack, honor=False)
    stored = {(s["exported_namespace"], s["exported_pod"]) for s in series if "exported_pod" in s}
    _between(stack, before, stored)
    assert {s["pod"] for s in series} == {EXPORTER_POD}  # the Operator's target label, as for dcgm-exporter


def test_with_honor_labels_the_workloads_keep_pod_and_namespace(stack):
    before = served_pods(stack["url"])
    _scraped_since(stack["honor"], time.time())  # a scrape between `before` and what the query reads
    series = _stored(stack, honor=True)
    assert not any("exported_pod" in s for s in series)
    _between(stack, before, {(s["namespace"], s["pod"]) for s in series if s.get("pod") != EXPORTER_POD})
