"""deploy/: Kubernetes manifests valid against the Kubernetes schemas, CRD objects against the
Prometheus Operator's CRD facts, generated files in sync, least privilege, and the systemd unit.

Built-in kinds are validated strictly (unknown fields are errors) by kubernetes-validate against
the schemas of every Kubernetes minor from 1.28 (pod-resources List GA) to the newest it ships.
ServiceMonitor, PodMonitor and PrometheusRule are custom resources kubernetes-validate has no
schema for: they are checked against the openAPIV3Schema of the prometheus-operator v0.93.0 CRDs
(monitoring.coreos.com/v1, stored unchanged in tests/data/prometheus-operator-crds with source and
commit), with unknown fields refused as the API server's strict field validation does.
"""

from __future__ import annotations

import copy
import importlib.util
import shutil
import subprocess

import jsonschema
import pytest
import yaml

from tests.conftest import REPO
from tests.helm_render import crd_schema

DEPLOY = REPO / "deploy" / "kubernetes"
MANIFESTS = sorted(DEPLOY.glob("*.yaml"))
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


def documents(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def all_objects():
    return [(path.name, d) for path in MANIFESTS if path.name != "kustomization.yaml" for d in documents(path)]


def generator():
    spec = importlib.util.spec_from_file_location("deploy_generate", DEPLOY / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kubernetes_versions() -> list[str]:
    kv = pytest.importorskip("kubernetes_validate")
    versions = sorted({v for v in kv.utils.all_versions()}, key=lambda v: tuple(map(int, v.split("."))))
    return [v for v in versions if tuple(map(int, v.split(".")))[:2] >= (1, 28)]


def test_generated_files_are_in_sync_with_alerts_and_dashboards():
    """prometheusrule.yaml holds alerts/*.yml's groups and grafana-dashboards.yaml the dashboard JSON, as
    generate.py writes them now (run `python3 deploy/kubernetes/generate.py` after changing either)."""
    module = generator()
    for name, build in module.OUTPUTS.items():
        assert (DEPLOY / name).read_text() == build(), f"{name} is stale"
    (rule,) = documents(DEPLOY / "prometheusrule.yaml")
    sources = [g for p in sorted((REPO / "alerts").glob("*.yml")) for g in yaml.safe_load(p.read_text())["groups"]]
    # one change: the contention alerts' group is evaluated at the monitors' scrape interval (docs/alerts.md)
    scrape = {kind: monitor["spec"][key][0]["interval"] for kind, key in (("servicemonitor", "endpoints"),
                                                                          ("podmonitor", "podMetricsEndpoints"))
              for monitor in documents(DEPLOY / f"{kind}.yaml")}
    groups = rule["spec"]["groups"]
    (memory,) = [g for g in groups if g["name"] == "gpushare.memory"]
    assert list(memory)[:2] == ["name", "interval"] and scrape == {"servicemonitor": "15s", "podmonitor": "15s"}
    assert memory.pop("interval") == scrape["servicemonitor"]
    assert groups == sources
    maps = documents(DEPLOY / "grafana-dashboards.yaml")
    boards = sorted(p.name for p in (REPO / "dashboards" / "json").glob("*.json"))
    assert sorted(name for m in maps for name in m["data"]) == boards
    assert all(m["metadata"]["labels"]["grafana_dashboard"] == "1" for m in maps)


def test_a_prometheus_evaluates_the_contention_group_at_the_scrape_interval(tmp_path):
    """The groups of prometheusrule.yaml, written to a rule file as the Operator writes a PrometheusRule's
    spec, loaded by a real Prometheus whose global evaluation interval is the Operator's default 30s: the
    group gpushare.memory is evaluated every 15 s (the ServiceMonitor's scrape interval), the others at
    30 s (docs/alerts.md, "Scrape and evaluation cadence")."""
    from tests.conftest import require_binary
    from tests.promstack import Prometheus

    require_binary("prometheus")
    (rule,) = documents(DEPLOY / "prometheusrule.yaml")
    rules = tmp_path / "gpushare.rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    with Prometheus({}, rule_files=[rules], scrape_interval="30s") as prometheus:
        intervals = {g["name"]: g["interval"] for g in prometheus.rules()}
    assert intervals.pop("gpushare.memory") == 15
    assert intervals.pop("gpushare.forecast_outcome") == 300  # its own, as alerts/ has it
    assert intervals and set(intervals.values()) == {30}


def test_builtin_kinds_validate_against_every_supported_kubernetes():
    kv = pytest.importorskip("kubernetes_validate")
    checked = set()
    # Parsed once, not once per version: PyYAML's pure-Python parser took three quarters of the test.
    objects = [obj for _, obj in all_objects() if obj["kind"] not in CRD_KINDS]
    for version in kubernetes_versions():
        for obj in objects:
            kv.validate(copy.deepcopy(obj), version, strict=True)  # raises ValidationError naming the field
            checked.add(obj["kind"])
    assert checked == {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "Service",
                       "ConfigMap"}


def test_a_broken_manifest_is_caught():
    """The validation above can fail: a misspelt field and a wrong type are reported."""
    kv = pytest.importorskip("kubernetes_validate")
    (daemonset,) = documents(DEPLOY / "daemonset.yaml")
    version = kubernetes_versions()[-1]
    daemonset["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(kv.ValidationError):
        kv.validate(daemonset, version, strict=True)
    (daemonset,) = documents(DEPLOY / "daemonset.yaml")
    daemonset["spec"]["template"]["spec"]["hostPID"] = "yes"
    with pytest.raises(kv.ValidationError):
        kv.validate(daemonset, version, strict=True)
    (monitor,) = documents(DEPLOY / "servicemonitor.yaml")
    monitor["spec"]["endpoints"][0]["interval"] = "15 seconds"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, CRD_SCHEMAS["ServiceMonitor"])


# -- Prometheus Operator CRDs: the Operator's own schemas (tests/data/prometheus-operator-crds) --------

CRD_SCHEMAS = {kind: crd_schema(kind) for kind in CRD_KINDS}


def test_custom_resources_match_the_prometheus_operator_crds():
    checked = set()
    for name, obj in all_objects():
        if obj["kind"] in CRD_KINDS:
            jsonschema.validate(obj, CRD_SCHEMAS[obj["kind"]])
            checked.add(obj["kind"])
    assert checked == CRD_KINDS


def test_monitors_name_the_node_as_instance_and_find_the_pods():
    (daemonset,) = documents(DEPLOY / "daemonset.yaml")
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    (service,) = documents(DEPLOY / "service.yaml")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    port_names = {p["name"] for p in daemonset["spec"]["template"]["spec"]["containers"][0]["ports"]}
    for path, key in ((DEPLOY / "servicemonitor.yaml", "endpoints"), (DEPLOY / "podmonitor.yaml", "podMetricsEndpoints")):
        (monitor,) = documents(path)
        labels = service["metadata"]["labels"] if key == "endpoints" else pod_labels
        assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
        (endpoint,) = monitor["spec"][key]
        assert endpoint["port"] in port_names | {p["name"] for p in service["spec"]["ports"]}
        assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance",
                "action": "replace"} in endpoint["relabelings"]


def test_kustomization_lists_every_manifest_but_the_podmonitor_alternative():
    (kustomization,) = documents(DEPLOY / "kustomization.yaml")
    listed = set(kustomization["resources"])
    present = {p.name for p in MANIFESTS} - {"kustomization.yaml"}
    assert listed == present - {"podmonitor.yaml"}


def test_kustomize_builds_when_kubectl_is_there():
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (kustomize build checked by the listing test above)")
    out = subprocess.run([kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(out.stdout) if d)
    assert kinds.count("ConfigMap") == 5 and "DaemonSet" in kinds and "PrometheusRule" in kinds


def test_daemonset_privileges_are_exactly_the_documented_ones():
    """hostPID, root with only SYS_PTRACE + DAC_READ_SEARCH, no privileged mode or escalation, read-only
    root filesystem, and host paths limited to the kubelet's pod-resources directory (read-only) and the
    state directory."""
    (daemonset,) = documents(DEPLOY / "daemonset.yaml")
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert pod["hostPID"] is True and not pod.get("hostNetwork") and not pod.get("hostIPC")
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE", "DAC_READ_SEARCH"]}
    assert context["privileged"] is False and context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host_paths == {"/var/lib/kubelet/pod-resources", "/var/lib/gpushare-exporter"}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/var/lib/kubelet/pod-resources"]["readOnly"] is True
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    (rbac_role, _) = documents(DEPLOY / "rbac.yaml")
    assert rbac_role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]


def test_daemonset_flags_are_ones_the_exporter_accepts():
    """The container's arguments parse with the exporter's own command line."""
    from exporter.cli import build_parser

    (daemonset,) = documents(DEPLOY / "daemonset.yaml")
    args = build_parser().parse_args(daemonset["spec"]["template"]["spec"]["containers"][0]["args"])
    assert args.process_series == "pod" and args.state_dir == "/var/lib/gpushare-exporter"


# -- systemd ----------------------------------------------------------------------------------


def test_systemd_unit_is_sandboxed_and_verifies():
    unit = (REPO / "deploy" / "systemd" / "gpushare-exporter.service").read_text()
    for option in ("NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=read-only", "PrivateTmp=yes",
                   "ProtectKernelTunables=yes", "ProtectKernelModules=yes", "ProtectControlGroups=yes",
                   "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6", "StateDirectory=gpushare-exporter",
                   "CapabilityBoundingSet=CAP_SYS_PTRACE CAP_DAC_READ_SEARCH", "SystemCallFilter=@system-service"):
        assert option in unit, option
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    from exporter.cli import build_parser

    build_parser().parse_args(exec_start.split()[1:])
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not installed")
    result = subprocess.run([analyze, "verify", "--man=no", str(REPO / "deploy" / "systemd" /
                                                                "gpushare-exporter.service")],
                            capture_output=True, text=True, timeout=60)
    unknown = [line for line in result.stderr.splitlines() if "Unknown" in line or "unknown" in line]
    assert unknown == [], result.stderr


# -- image -------------------------------------------------------------------------------------


def test_image_base_is_pinned_and_runtime_dependencies_constrained():
    import re
    import tomllib

    dockerfile = (REPO / "Dockerfile").read_text()
    (base,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", dockerfile, re.M)
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", base), base
    assert all(line.split()[1] == "${PYTHON_IMAGE}" for line in dockerfile.splitlines() if line.startswith("FROM "))
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[re.sub(r"[-_.]+", "-", name.lower())] = version
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runtime = project["dependencies"] + project["optional-dependencies"]["k8s"]
    for requirement in runtime:
        name = re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower())
        assert name in pins and re.fullmatch(r"\d+(\.\d+)*", pins[name]), requirement
    assert "--constraint" in dockerfile and "'.[k8s]'" in dockerfile
