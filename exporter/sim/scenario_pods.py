"""Scenario loader, part 4: the ``pod`` of a process (Kubernetes attribution in simulation).

A process with a ``pod`` runs in that pod's container: the fake /proc writes the cgroup file
the kubelet and the runtime would produce (exporter.sim.kube.cgroup_file), its environment
gets ``HOSTNAME`` = the pod name, and the simulated API server and kubelet list the pod.
See docs/scenarios.md ("Kubernetes pods").
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from exporter.sim.model import PodSpec
from exporter.sim.scenario_fields import as_int, as_str, check_keys, fail, item, key

POD_KEYS = ("namespace", "name", "container", "uid", "runtime", "cgroup_driver", "cgroup_version", "qos",
            "resource", "node", "allocation", "claim")
ALLOCATIONS = ("device-plugin", "dra")
RUNTIMES = ("containerd", "cri-o", "docker")
DRIVERS = ("systemd", "cgroupfs", "systemd-literal")
QOS_CLASSES = ("guaranteed", "burstable", "besteffort")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_UID = re.compile(r"^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})$")
# A namespace for uuid5: pods without an explicit uid get one derived from namespace/name.
_UID_NAMESPACE = uuid.UUID("6f1d0c7e-2a4b-4c55-9a43-7b0f35f5e0a1")


def _name(raw: Any, path: str, pattern: re.Pattern, limit: int, what: str) -> str:
    text = as_str(raw, path)
    if len(text) > limit or not pattern.match(text):
        fail(path, f"{text!r} is not a valid {what} (lowercase letters, digits and '-', at most {limit})")
    return text


def _choice(raw: Any, path: str, options: tuple[str, ...], default: str) -> str:
    if raw is None:
        return default
    text = as_str(raw, path).lower()
    if text not in options:
        fail(path, f"expected one of {', '.join(options)}, got {raw!r}")
    return text


def parse_pod(raw: Any, path: str) -> PodSpec:
    """A validated PodSpec from a process's ``pod`` mapping."""
    check_keys(raw, path, POD_KEYS, required=("namespace", "name"))
    namespace = _name(raw["namespace"], key(path, "namespace"), _DNS_LABEL, 63, "namespace name")
    name = _name(raw["name"], key(path, "name"), _DNS_SUBDOMAIN, 253, "pod name")
    container = _name(raw.get("container", "main"), key(path, "container"), _DNS_LABEL, 63, "container name")
    if raw.get("uid") is not None:
        uid = as_str(raw["uid"], key(path, "uid")).lower()
        if not _UID.match(uid):
            fail(key(path, "uid"), f"{uid!r} is not a pod UID (a UUID, or 32 hex characters for a static pod)")
    else:
        uid = str(uuid.uuid5(_UID_NAMESPACE, f"{namespace}/{name}"))
    version = as_int(raw.get("cgroup_version", 2), key(path, "cgroup_version"), minimum=1)
    if version not in (1, 2):
        fail(key(path, "cgroup_version"), f"expected 1 or 2, got {version}")
    resource = None
    if raw.get("resource") is not None:
        resource = as_str(raw["resource"], key(path, "resource"))
        if "/" not in resource:
            fail(key(path, "resource"), f"{resource!r} is not an extended resource name (e.g. nvidia.com/gpu)")
    node = _name(raw.get("node", "sim-node"), key(path, "node"), _DNS_SUBDOMAIN, 253, "node name")
    allocation = _choice(raw.get("allocation"), key(path, "allocation"), ALLOCATIONS, "device-plugin")
    claim = None
    if raw.get("claim") is not None:
        if allocation != "dra":
            fail(key(path, "claim"), "a claim is only for allocation: dra")
        claim = _name(raw["claim"], key(path, "claim"), _DNS_SUBDOMAIN, 253, "ResourceClaim name")
    if resource is not None and allocation == "dra":
        fail(key(path, "resource"), "DRA pods hold a claim, not an extended resource: remove resource")
    return PodSpec(
        namespace=namespace, name=name, container=container, uid=uid,
        runtime=_choice(raw.get("runtime"), key(path, "runtime"), RUNTIMES, "containerd"),
        cgroup_driver=_choice(raw.get("cgroup_driver"), key(path, "cgroup_driver"), DRIVERS, "systemd"),
        cgroup_version=version,
        qos=_choice(raw.get("qos"), key(path, "qos"), QOS_CLASSES, "burstable"),
        resource=resource, node=node, allocation=allocation, claim=claim,
    )


def check_pods(processes) -> None:
    """Processes naming one pod agree on it: same UID, runtime, cgroup layout and QoS class."""
    first: dict[tuple[str, str], tuple[int, Any]] = {}
    by_uid: dict[str, tuple[str, str]] = {}
    for index, proc in enumerate(processes):
        pod = proc.pod
        if pod is None:
            continue
        ident = (pod.namespace, pod.name)
        where = key(item("processes", index), "pod")
        if by_uid.setdefault(pod.uid, ident) != ident:
            fail(key(where, "uid"), f"{pod.uid} is already the UID of pod {'/'.join(by_uid[pod.uid])}")
        seen = first.setdefault(ident, (index, pod))
        other = seen[1]
        for attr in ("uid", "runtime", "cgroup_driver", "cgroup_version", "qos", "node", "allocation"):
            if getattr(other, attr) != getattr(pod, attr):
                fail(key(where, attr), f"{getattr(pod, attr)!r} differs from processes[{seen[0]}], which names "
                     f"the same pod with {getattr(other, attr)!r}")
