"""The scrape configuration the Prometheus Operator generates from a ServiceMonitor or PodMonitor.

Tests feed it to a real Prometheus, so the Operator's target relabeling and the monitor's own
``relabelings``/``metricRelabelings``/``honorLabels`` run in Prometheus itself. What is derived
here follows the Operator's documented behaviour (prometheus-operator Documentation/ and
pkg/prometheus/promcfg.go, facts restated, no code taken):

- one scrape job per endpoint, named ``serviceMonitor/<ns>/<name>/<i>`` or ``podMonitor/<ns>/<name>/<i>``,
  ``honor_labels`` = the endpoint's ``honorLabels`` (forced false by the Prometheus resource's
  ``overrideHonorLabels``), interval, timeout and path from the endpoint;
- relabeling, in this order: ``job`` kept in ``__tmp_prometheus_job_name``; pods in phase Failed or
  Succeeded dropped; one ``keep`` per ``matchLabels`` entry on the (service or pod) label and its
  ``labelpresent`` twin with regex ``(<value>);true``; ``keep`` on the port name; then the target labels
  ``namespace``, ``service`` (ServiceMonitor), ``pod``, ``container`` from the discovery's meta labels
  (for role endpoints also ``pod``/``node`` from the endpoint's address target); ``job`` = the service
  name (ServiceMonitor) or ``<ns>/<name>`` (PodMonitor), replaced by the ``jobLabel`` label's value when
  it has one; ``endpoint`` = the port name; then the monitor's ``relabelings``; then the shard filter
  (hashmod of ``__address__``, one shard);
- ``metric_relabel_configs`` = the endpoint's ``metricRelabelings``.

There is no Kubernetes API here, so the discovery is simulated: each exporter pod becomes a
``static_configs`` entry carrying the ``__meta_kubernetes_*`` labels Prometheus' kubernetes_sd (role
``endpoints`` or ``pod``) attaches, built from the shipped DaemonSet and Service (pod template labels,
container and port names), the pod's name and its node. Its address is where the simulated exporter
really listens. Only the scrape interval is shortened (tests cannot wait 15 s per sample).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import yaml

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy" / "kubernetes"

# The Operator's relabeling of CRD field names to Prometheus' (RelabelConfig in monitoring.coreos.com/v1).
_RELABEL_FIELDS = {"sourceLabels": "source_labels", "separator": "separator", "targetLabel": "target_label",
                   "regex": "regex", "modulus": "modulus", "replacement": "replacement", "action": "action"}


def sanitize(name: str) -> str:
    """A Kubernetes label key as a Prometheus meta label suffix (kubernetes_sd: every other character -> _)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def load(name: str) -> dict:
    """The one object in deploy/kubernetes/<name>."""
    (obj,) = [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]
    return obj


@dataclass(frozen=True)
class ExporterPod:
    """One exporter pod of the DaemonSet as discovery would see it: its name, its node, and the
    ``host:port`` where the (simulated) exporter listens."""

    name: str
    node: str
    address: str

    @property
    def ip(self) -> str:
        return self.address.rsplit(":", 1)[0]

    @property
    def port(self) -> str:
        return self.address.rsplit(":", 1)[1]


def _object_labels(prefix: str, labels: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for key, value in labels.items():
        out[f"{prefix}_label_{sanitize(key)}"] = value
        out[f"{prefix}_labelpresent_{sanitize(key)}"] = "true"
    return out


def _pod_meta(daemonset: dict, pod: ExporterPod, port_name: str) -> dict[str, str]:
    """Labels kubernetes_sd role ``pod`` gives the target of ``pod``'s container port ``port_name``."""
    template = daemonset["spec"]["template"]
    (container,) = [c for c in template["spec"]["containers"] if any(p.get("name") == port_name for p in c.get("ports", []))]
    (port,) = [p for p in container["ports"] if p.get("name") == port_name]
    return {
        "__meta_kubernetes_namespace": daemonset["metadata"]["namespace"],
        "__meta_kubernetes_pod_name": pod.name,
        "__meta_kubernetes_pod_ip": pod.ip,
        "__meta_kubernetes_pod_node_name": pod.node,
        "__meta_kubernetes_pod_host_ip": pod.ip,
        "__meta_kubernetes_pod_ready": "true",
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_controller_kind": "DaemonSet",
        "__meta_kubernetes_pod_controller_name": daemonset["metadata"]["name"],
        "__meta_kubernetes_pod_container_name": container["name"],
        "__meta_kubernetes_pod_container_init": "false",
        "__meta_kubernetes_pod_container_port_name": port_name,
        "__meta_kubernetes_pod_container_port_number": pod.port,  # the simulated exporter's real port
        "__meta_kubernetes_pod_container_port_protocol": port.get("protocol", "TCP"),
        **_object_labels("__meta_kubernetes_pod", template["metadata"].get("labels", {})),
    }


def endpoints_targets(service: dict, daemonset: dict, pods: list[ExporterPod]) -> list[dict]:
    """kubernetes_sd role ``endpoints`` for ``service``: one target per pod and service port, with the
    endpoint's, the service's and the backing pod's meta labels."""
    groups = []
    for port in service["spec"]["ports"]:
        container_port = port.get("targetPort", port["port"])
        for pod in pods:
            labels = {
                "__meta_kubernetes_endpoints_name": service["metadata"]["name"],
                "__meta_kubernetes_endpoint_port_name": port.get("name", ""),
                "__meta_kubernetes_endpoint_port_protocol": port.get("protocol", "TCP"),
                "__meta_kubernetes_endpoint_ready": "true",
                "__meta_kubernetes_endpoint_node_name": pod.node,
                "__meta_kubernetes_endpoint_address_target_kind": "Pod",
                "__meta_kubernetes_endpoint_address_target_name": pod.name,
                "__meta_kubernetes_service_name": service["metadata"]["name"],
                **_object_labels("__meta_kubernetes_service", service["metadata"].get("labels", {})),
                **_pod_meta(daemonset, pod, container_port),
            }
            groups.append({"targets": [pod.address], "labels": labels})
    return groups


def pod_targets(daemonset: dict, pods: list[ExporterPod]) -> list[dict]:
    """kubernetes_sd role ``pod``: one target per declared container port of every pod."""
    template = daemonset["spec"]["template"]
    names = [p["name"] for c in template["spec"]["containers"] for p in c.get("ports", []) if p.get("name")]
    return [{"targets": [pod.address], "labels": _pod_meta(daemonset, pod, name)} for pod in pods for name in names]


def _relabel(rule: Mapping) -> dict:
    out = {}
    for key, value in rule.items():
        if key not in _RELABEL_FIELDS:
            raise ValueError(f"relabeling field {key!r} is not one the Operator knows")
        out[_RELABEL_FIELDS[key]] = value.lower() if key == "action" else value
    return out


def _selector_keeps(selector: Mapping, meta: str) -> list[dict]:
    if selector.get("matchExpressions"):
        raise NotImplementedError("matchExpressions: the shipped monitors use matchLabels only")
    return [{"action": "keep", "source_labels": [f"{meta}_label_{sanitize(k)}", f"{meta}_labelpresent_{sanitize(k)}"],
             "regex": f"({v});true"} for k, v in sorted(selector.get("matchLabels", {}).items())]


def scrape_config(monitor: dict, targets: list[dict], *, interval: str = "1s",
                  override_honor_labels: bool = False, name_suffix: str = "") -> dict:
    """The scrape job the Operator generates for the first endpoint of ``monitor`` (a ServiceMonitor or
    PodMonitor object), with ``targets`` (from :func:`endpoints_targets` / :func:`pod_targets`) in place
    of kubernetes_sd. ``name_suffix`` keeps job names apart when one Prometheus holds variants."""
    kind, meta, spec = monitor["kind"], monitor["metadata"], monitor["spec"]
    service = kind == "ServiceMonitor"
    (endpoint,) = spec["endpoints" if service else "podMetricsEndpoints"]
    prefix = "serviceMonitor" if service else "podMonitor"
    relabel: list[dict] = [{"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}]
    if not service:
        relabel.append({"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"})
    relabel += _selector_keeps(spec["selector"], "__meta_kubernetes_service" if service else "__meta_kubernetes_pod")
    port = endpoint["port"]
    relabel.append({"action": "keep", "regex": port, "source_labels": [
        "__meta_kubernetes_endpoint_port_name" if service else "__meta_kubernetes_pod_container_port_name"]})
    if service:
        kind_name = ["__meta_kubernetes_endpoint_address_target_kind", "__meta_kubernetes_endpoint_address_target_name"]
        relabel += [
            {"source_labels": kind_name, "separator": ";", "regex": "Node;(.*)", "replacement": "${1}", "target_label": "node"},
            {"source_labels": kind_name, "separator": ";", "regex": "Pod;(.*)", "replacement": "${1}", "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job", "replacement": "${1}"},
        ]
    else:
        relabel += [
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"target_label": "job", "replacement": f"{meta['namespace']}/{meta['name']}"},
        ]
    if spec.get("jobLabel"):
        source = ("__meta_kubernetes_service_label_" if service else "__meta_kubernetes_pod_label_") + sanitize(spec["jobLabel"])
        relabel.append({"source_labels": [source], "target_label": "job", "regex": "(.+)", "replacement": "${1}"})
    relabel.append({"target_label": "endpoint", "replacement": port})
    relabel += [_relabel(r) for r in endpoint.get("relabelings", [])]
    relabel += [{"source_labels": ["__address__"], "target_label": "__tmp_hash", "modulus": 1, "action": "hashmod"},
                {"source_labels": ["__tmp_hash"], "regex": "0", "action": "keep"}]  # shard 0 of 1
    config = {
        "job_name": f"{prefix}/{meta['namespace']}/{meta['name']}/0{name_suffix}",
        "honor_labels": bool(endpoint.get("honorLabels", False)) and not override_honor_labels,
        "scrape_interval": interval,
        "scrape_timeout": interval,
        "metrics_path": endpoint.get("path", "/metrics"),
        "static_configs": targets,
        "relabel_configs": relabel,
    }
    if endpoint.get("metricRelabelings"):
        config["metric_relabel_configs"] = [_relabel(r) for r in endpoint["metricRelabelings"]]
    return config


def shipped_jobs(pods: list[ExporterPod], *, monitors: tuple[str, ...] = ("servicemonitor.yaml",),
                 interval: str = "1s", override_honor_labels: bool = False) -> list[dict]:
    """Scrape jobs for the shipped monitors named (default: the one kustomization.yaml applies)."""
    daemonset, service = load("daemonset.yaml"), load("service.yaml")
    jobs = []
    for name in monitors:
        monitor = load(name)
        targets = (endpoints_targets(service, daemonset, pods) if monitor["kind"] == "ServiceMonitor"
                   else pod_targets(daemonset, pods))
        jobs.append(scrape_config(monitor, targets, interval=interval, override_honor_labels=override_honor_labels))
    return jobs


def without_fix(monitor: dict) -> dict:
    """``monitor`` as most exporters ship theirs (and this one did): no honorLabels, and of its
    relabelings only ``instance`` = node name."""
    key = "endpoints" if monitor["kind"] == "ServiceMonitor" else "podMetricsEndpoints"
    (endpoint,) = monitor["spec"][key]
    plain = {k: v for k, v in endpoint.items() if k != "honorLabels"}
    plain["relabelings"] = [r for r in endpoint["relabelings"] if r.get("targetLabel") == "instance"]
    return {**monitor, "spec": {**monitor["spec"], key: [plain]}}
