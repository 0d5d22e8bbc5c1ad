"""deploy/helm/gpushare-exporter: rendered by the real helm, for several value sets, every object
valid (kubernetes-validate, the Prometheus Operator's CRD schemas), and with default values the
same objects as the kustomize base (`kubectl kustomize deploy/kubernetes`) but for the documented
differences: no Namespace object and Helm's own labels (README of the chart, docs/kubernetes.md).
"""

from __future__ import annotations

import copy
import importlib.util
import os

import jsonschema
import pytest
import yaml

from tests.conftest import REPO
from tests.helm_render import (BASE, CHART, by_kind_and_name, crd_schema, find_tool, helm_template, kustomize, run,
                               validate, without_helm_labels)

TLS_SCRAPE = {"ca": {"secret": {"name": "gpushare-scrape", "key": "ca.crt"}}, "serverName": "gpushare-exporter"}
BASIC_SCRAPE = {"username": {"name": "gpushare-scrape", "key": "username"},
                "password": {"name": "gpushare-scrape", "key": "password"}}
VALUE_SETS = {
    "defaults": {},
    "podmonitor": {"serviceMonitor": {"enabled": False},
                   "podMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}, "interval": "30s"}},
    "minimal-privilege": {"privilege": "minimal"},
    "web-config-tls-basic-auth": {
        "webConfig": {"secretName": "gpushare-web", "basicAuth": True},
        "serviceMonitor": {"tlsConfig": TLS_SCRAPE, "basicAuth": BASIC_SCRAPE}},
    "web-config-tls": {"webConfig": {"secretName": "gpushare-web", "file": "config.yml"}},
    "gpu-operator-dcgm": {"backend": "dcgm", "dcgm": {"address": "nvidia-dcgm.gpu-operator.svc:5555",
                                                      "bindingsDir": "/usr/share/datacenter-gpu-manager-4/bindings/python3"}},
    "no-runtime-class": {"runtimeClassName": ""},
    "no-monitoring-crds": {"serviceMonitor": {"enabled": False}, "prometheusRule": {"enabled": False}},
    "scheduling-and-image": {
        "image": {"repository": "registry.example.com/gpu/gpushare-exporter", "tag": "0.2.0", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "registry"}], "priorityClassName": "", "processSeries": "workload",
        # Helm merges maps into the defaults: null removes the default GPU Feature Discovery label.
        "nodeSelector": {"node.example.com/gpu": "a100", "nvidia.com/gpu.present": None},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "extraArgs": ["--interval=2"], "rbac": {"create": False},
        "serviceAccount": {"create": False, "name": "existing"},
        "dashboards": {"namespace": "monitoring", "labels": {"grafana_dashboard": "gpu"}}},
}


def daemonset_of(objects):
    (daemonset,) = [o for o in objects if o["kind"] == "DaemonSet"]
    pod = daemonset["spec"]["template"]["spec"]
    return daemonset, pod, pod["containers"][0]


def exporter_args(container):
    """The container's arguments as the exporter's own command line parses them."""
    from exporter.cli import build_parser

    return build_parser().parse_args(container["args"])


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_value_set_lints_renders_and_validates(name, tmp_path):
    values = VALUE_SETS[name]
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    run([find_tool("helm"), "lint", "--strict", str(CHART), "--values", str(path)])
    objects = helm_template(values)
    kinds = validate(objects)
    assert {"DaemonSet", "ConfigMap"} <= kinds
    assert ("ServiceMonitor" in kinds) == (name not in ("podmonitor", "no-monitoring-crds"))
    assert ("PodMonitor" in kinds) == (name == "podmonitor")
    assert ("PrometheusRule" in kinds) == (name != "no-monitoring-crds")
    _, _, container = daemonset_of(objects)
    args = exporter_args(container)
    assert args.state_dir == "/var/lib/gpushare-exporter"


def test_defaults_render_what_kustomize_builds():
    first = run([find_tool("helm"), "template", "gpushare-exporter", str(CHART), "-n", "gpushare-exporter"]).stdout
    again = run([find_tool("helm"), "template", "gpushare-exporter", str(CHART), "-n", "gpushare-exporter"]).stdout
    assert first == again, "helm template is not deterministic"
    chart = by_kind_and_name([without_helm_labels(o) for o in yaml.safe_load_all(first) if o])
    built = kustomize(BASE)
    assert validate(built) >= {"Namespace", "DaemonSet", "ServiceMonitor", "PrometheusRule"}
    base = by_kind_and_name(built)
    assert base.pop(("Namespace", "gpushare-exporter"))  # documented: helm install --create-namespace + label
    assert sorted(chart) == sorted(base)
    for key, obj in base.items():
        assert chart[key] == obj, f"{key} differs between the chart and deploy/kubernetes"


def test_podmonitor_renders_the_kustomize_alternative():
    objects = helm_template({"serviceMonitor": {"enabled": False}, "podMonitor": {"enabled": True}})
    (monitor,) = [without_helm_labels(o) for o in objects if o["kind"] == "PodMonitor"]
    (shipped,) = [d for d in yaml.safe_load_all((BASE / "podmonitor.yaml").read_text()) if d]
    assert monitor == shipped
    assert not [o for o in objects if o["kind"] == "ServiceMonitor"]


CLUSTER_RELABEL = [{"targetLabel": "cluster", "replacement": "eu-1", "action": "replace"}]


@pytest.mark.parametrize("kind,key,values", [
    ("ServiceMonitor", "endpoints", {"serviceMonitor": {"relabelings": CLUSTER_RELABEL}}),
    ("PodMonitor", "podMetricsEndpoints",
     {"serviceMonitor": {"enabled": False}, "podMonitor": {"enabled": True, "relabelings": CLUSTER_RELABEL}}),
])
def test_monitors_keep_the_workloads_labels_and_name_the_node(kind, key, values):
    objects = helm_template(values, release="gpu-telemetry", namespace="observability")
    (monitor,) = [o for o in objects if o["kind"] == kind]
    (endpoint,) = monitor["spec"][key]
    assert endpoint["honorLabels"] is True
    assert endpoint["relabelings"] == [{"sourceLabels": ["__meta_kubernetes_pod_node_name"],
                                        "targetLabel": "instance", "action": "replace"},
                                       {"regex": "namespace|pod|container", "action": "labeldrop"}] + CLUSTER_RELABEL
    daemonset, _, _ = daemonset_of(objects)
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    if kind == "ServiceMonitor":
        # exactly one Service is selected: the dcgm-exporter-compatible one (compat.port) is not
        services = [o for o in objects if o["kind"] == "Service"]
        assert len(services) == 2
        (service,) = [s for s in services
                      if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]
        assert service["spec"]["selector"].items() <= pod_labels.items()


def test_compat_port_follows_its_values():
    """dcgm-exporter's output: on by default at 9400, moved or switched off by values."""
    def ports(values):
        objects = helm_template(values)
        daemonset, _, _ = daemonset_of(objects)
        (container,) = daemonset["spec"]["template"]["spec"]["containers"]
        args = [a for a in container["args"] if a.startswith("--compat-listen")]
        services = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "Service")
        return args, [p["containerPort"] for p in container["ports"]], services

    assert ports({}) == (["--compat-listen=:9400"], [18474, 9400], ["gpushare-exporter", "gpushare-exporter-dcgm"])
    assert ports({"compat": {"port": 9401}})[:2] == (["--compat-listen=:9401"], [18474, 9401])
    assert ports({"compat": {"enabled": False}}) == ([], [18474], ["gpushare-exporter"])


@pytest.mark.parametrize("values,message", [
    ({"podMonitor": {"enabled": True}}, "enable one, not both"),
    ({"privilege": "root"}, "at '/privilege': value must be one of 'standard', 'minimal'"),
    ({"processSeries": "container"}, "at '/processSeries': value must be one of 'pid', 'pod', 'workload'"),
    ({"serviceMonitor": {"enable": True}}, "at '/serviceMonitor': additional properties 'enable' not allowed"),
    ({"serviceMonitor": {"interval": "15 seconds"}}, "at '/serviceMonitor/interval'"),
    ({"prometheusRule": {"contentionEvaluationInterval": "soon"}}, "at '/prometheusRule/contentionEvaluationInterval'"),
    ({"port": "18474"}, "at '/port': got string, want integer"),
    ({"webConfig": {"scheme": "TLS"}}, "at '/webConfig/scheme'"),
])
def test_bad_values_are_refused_naming_the_value(values, message):
    """values.schema.json (and the template's own checks) refuse a misspelt or impossible value with a
    line naming it, instead of rendering a chart that silently ignores it."""
    result = helm_template(values, check=False)
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_set_flags_with_numbers_and_booleans_render_string_labels():
    """`--set` turns 1, 2 and true into a number and a boolean; labels, node selectors and the image
    tag must still be strings, or the API server refuses the object."""
    result = run([find_tool("helm"), "template", "gpushare-exporter", str(CHART), "-n", "gpushare-exporter",
                  "--set", "dashboards.labels.grafana_dashboard=1", "--set", "serviceMonitor.labels.release=2",
                  "--set", "prometheusRule.labels.prometheus=true", "--set", "image.tag=2",
                  "--set", "nodeSelector.gpu=true", "--set", "dashboards.annotations.grafana_folder=3"])
    objects = [d for d in yaml.safe_load_all(result.stdout) if d]
    validate(objects)
    _, pod, container = daemonset_of(objects)
    assert container["image"] == "gpushare-exporter:2" and pod["nodeSelector"]["gpu"] == "true"
    labels = {o["kind"]: o["metadata"]["labels"] for o in objects}
    assert labels["ServiceMonitor"]["release"] == "2" and labels["PrometheusRule"]["prometheus"] == "true"
    assert labels["ConfigMap"]["grafana_dashboard"] == "1" and labels["DaemonSet"]["app.kubernetes.io/version"] == "2"


def test_template_checks_hold_without_the_schema():
    result = run([find_tool("helm"), "template", "gpushare-exporter", str(CHART), "--skip-schema-validation",
                  "--set", "privilege=root"], check=False)
    assert result.returncode != 0 and 'privilege: "root" is neither standard nor minimal' in result.stderr


def test_minimal_privilege_is_the_same_in_helm_and_kustomize():
    standard = daemonset_of(helm_template())[2]["securityContext"]
    assert standard["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE", "DAC_READ_SEARCH"]}
    chart = by_kind_and_name([without_helm_labels(o) for o in helm_template({"privilege": "minimal"})])
    overlay = by_kind_and_name(kustomize(REPO / "deploy" / "overlays" / "minimal"))
    overlay.pop(("Namespace", "gpushare-exporter"))
    assert chart == overlay
    _, pod, container = daemonset_of(list(chart.values()))
    context = container["securityContext"]
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["runAsUser"] == 0 and context["allowPrivilegeEscalation"] is False
    assert context["privileged"] is False and pod["hostPID"] is True


def test_runtime_class_is_optional_in_helm_and_kustomize(tmp_path):
    assert daemonset_of(helm_template())[1]["runtimeClassName"] == "nvidia"
    assert daemonset_of(helm_template({"runtimeClassName": "nvidia-cdi"}))[1]["runtimeClassName"] == "nvidia-cdi"
    unset = daemonset_of(helm_template({"runtimeClassName": ""}))[1]
    assert "runtimeClassName" not in unset
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [os.path.relpath(BASE, overlay)],
        "components": [os.path.relpath(BASE / "components" / "no-runtime-class", overlay)]}))
    _, pod, _ = daemonset_of(kustomize(overlay))
    assert "runtimeClassName" not in pod and pod["priorityClassName"] == "system-node-critical"


def test_web_config_comes_from_the_secret_and_the_probes_still_work():
    _, pod, container = daemonset_of(helm_template(VALUE_SETS["web-config-tls-basic-auth"]))
    assert exporter_args(container).web_config_file == "/etc/gpushare-exporter/web/web.yml"
    (volume,) = [v for v in pod["volumes"] if v["name"] == "web-config"]
    assert volume["secret"]["secretName"] == "gpushare-web"
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "web-config"]
    assert mount == {"name": "web-config", "mountPath": "/etc/gpushare-exporter/web", "readOnly": True}
    # basic auth answers /health 401 to the kubelet: the probes check the port instead
    assert container["readinessProbe"]["tcpSocket"] == {"port": "metrics"} and "httpGet" not in container[
        "livenessProbe"]
    objects = helm_template(VALUE_SETS["web-config-tls-basic-auth"])
    (endpoint,) = [o for o in objects if o["kind"] == "ServiceMonitor"][0]["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"] == TLS_SCRAPE
    assert endpoint["basicAuth"] == BASIC_SCRAPE
    _, _, container = daemonset_of(helm_template(VALUE_SETS["web-config-tls"]))
    assert exporter_args(container).web_config_file == "/etc/gpushare-exporter/web/config.yml"
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "metrics", "scheme": "HTTPS"}


def test_dcgm_address_reaches_the_exporter_flags():
    _, _, container = daemonset_of(helm_template(VALUE_SETS["gpu-operator-dcgm"]))
    args = exporter_args(container)
    assert args.backend == "dcgm" and args.dcgm_address == "tcp://nvidia-dcgm.gpu-operator.svc:5555"
    assert args.dcgm_bindings == "/usr/share/datacenter-gpu-manager-4/bindings/python3"
    _, _, container = daemonset_of(helm_template())
    assert not [a for a in container["args"] if a.startswith(("--backend", "--dcgm"))]


def test_scheduling_image_and_naming_values_land_where_kubernetes_reads_them():
    values = VALUE_SETS["scheduling-and-image"]
    objects = helm_template(values, release="gpu-telemetry", namespace="observability")
    daemonset, pod, container = daemonset_of(objects)
    assert daemonset["metadata"]["name"] == "gpu-telemetry-gpushare-exporter"
    assert daemonset["metadata"]["namespace"] == "observability"
    assert container["image"] == "registry.example.com/gpu/gpushare-exporter:0.2.0"
    assert container["imagePullPolicy"] == "Always" and pod["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["nodeSelector"] == {"node.example.com/gpu": "a100"}
    assert pod["tolerations"] == values["tolerations"] and pod["affinity"] == values["affinity"]
    assert "priorityClassName" not in pod and container["resources"] == values["resources"]
    assert pod["serviceAccountName"] == "existing"
    assert exporter_args(container).process_series == "workload" and container["args"][-1] == "--interval=2"
    assert not [o for o in objects if o["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")]
    maps = [o for o in objects if o["kind"] == "ConfigMap"]
    assert maps and all(m["metadata"]["namespace"] == "monitoring" for m in maps)
    assert all(m["metadata"]["labels"]["grafana_dashboard"] == "gpu" for m in maps)


def test_crd_schemas_refuse_what_the_api_server_would():
    """The Operator's schemas, made strict, catch a misspelt field, a wrong type and a bad duration."""
    (monitor,) = [o for o in helm_template() if o["kind"] == "ServiceMonitor"]
    jsonschema.validate(monitor, crd_schema("ServiceMonitor"))
    for path, value in ((("honorLabel",), True), (("honorLabels",), "yes"), (("interval",), "15 seconds")):
        broken = copy.deepcopy(monitor)
        broken["spec"]["endpoints"][0][path[0]] = value
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, crd_schema("ServiceMonitor"))
    (rule,) = [o for o in helm_template() if o["kind"] == "PrometheusRule"]
    broken = copy.deepcopy(rule)
    broken["spec"]["groups"][0]["rules"][0]["fro"] = "5m"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, crd_schema("PrometheusRule"))


@pytest.mark.parametrize("values,interval", [
    ({}, "15s"),
    ({"serviceMonitor": {"interval": "10s"}}, "10s"),
    ({"serviceMonitor": {"enabled": False}, "podMonitor": {"enabled": True, "interval": "20s"}}, "20s"),
    ({"prometheusRule": {"contentionEvaluationInterval": "5s"}}, "5s"),
    ({"serviceMonitor": {"enabled": False}}, None),  # scraped by the user's own config: its interval is not known
])
def test_contention_alerts_are_evaluated_at_the_scrape_interval(values, interval):
    """The group of the contention alerts is evaluated at the enabled monitor's scrape interval (or the value
    set for it), not at the Prometheus's evaluationInterval: their `for` counts scrapes, and the Operator's
    default of 30s costs the critical tier pages (docs/alerts.md, "Scrape and evaluation cadence"). Nothing
    else of alerts/ changes."""
    (rule,) = [o for o in helm_template(values) if o["kind"] == "PrometheusRule"]
    groups = rule["spec"]["groups"]
    (memory,) = [g for g in groups if g["name"] == "gpushare.memory"]
    assert memory.pop("interval", None) == interval
    jsonschema.validate(rule, crd_schema("PrometheusRule"))
    sources = [g for p in sorted((REPO / "alerts").glob("*.yml")) for g in yaml.safe_load(p.read_text())["groups"]]
    assert groups == sources


def test_chart_files_are_generated_from_alerts_and_dashboards():
    """files/ holds exactly what deploy/kubernetes/generate.py writes (run it after changing alerts/ or
    dashboards/json), and the chart's appVersion is the exporter's version and the base's image tag."""
    spec = importlib.util.spec_from_file_location("deploy_generate", BASE / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    wanted = module.outputs()
    for path, text in wanted.items():
        assert path.read_text() == text, f"{path} is stale: run python3 deploy/kubernetes/generate.py"
    on_disk = set((CHART / "files").rglob("*.*"))
    assert on_disk == {p for p in wanted if CHART in p.parents}
    from exporter import __version__

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    (kustomization,) = [d for d in yaml.safe_load_all((BASE / "kustomization.yaml").read_text()) if d]
    assert chart["apiVersion"] == "v2" and chart["appVersion"] == __version__ == kustomization["images"][0]["newTag"]


def _leaf_keys(values, prefix=""):
    for key, value in values.items():
        if isinstance(value, dict) and value and key not in ("nodeSelector", "resources", "labels", "annotations"):
            yield from _leaf_keys(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def test_every_value_is_documented():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    docs = (REPO / "docs" / "kubernetes.md").read_text()
    missing = [key for key in _leaf_keys(values) if f"`{key}`" not in docs]
    assert missing == [], f"values not in docs/kubernetes.md's values table: {missing}"
