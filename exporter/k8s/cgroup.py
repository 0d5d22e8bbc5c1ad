"""``/proc/<pid>/cgroup`` -> the pod UID and container id the kubelet and runtime put there.

Shapes handled (kubelet ``pkg/kubelet/cm`` naming; runtimes' scope names), on cgroup v1 (one
line per hierarchy, ``ID:controllers:path``), v2 (``0::path``) and hybrid hosts:

- systemd driver: ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with
  _>.slice/<scope>``, Guaranteed pods without the QoS level (``kubepods-pod<uid>.slice``);
  the scope is ``cri-containerd-<id>.scope`` (containerd), ``crio-<id>.scope`` (CRI-O; its
  sibling ``crio-conmon-<id>.scope`` holds conmon and is never a container) or
  ``docker-<id>.scope`` (cri-dockerd); CRI-O may add a ``container`` leaf below its scope.
- cgroupfs driver: ``/kubepods/burstable/pod<uid>/<64 hex id>``; CRI-O names the container
  ``crio-<id>`` there, with no ``.scope`` (cri-o#812), and its sandbox under systemd is
  ``crio-<id>`` without ``.scope`` as well (OpenShift, containerd/nri#227).
- the runtime's systemd ``<slice>:<prefix>:<id>`` cgroupsPath written as one directory name
  (``kubepods-besteffort-pod<uid>.slice:cri-containerd:<id>``), as containerd and CRI-O leave it
  when runc's cgroupfs manager receives it (opentelemetry-java#4507, elastic apm-agent-nodejs#3550).
- a ``--cgroup-root`` prefix (kind's ``/kubelet.slice/kubelet-kubepods.slice/...``).
- paths seen from inside a cgroup namespace start with ``../`` entries: matching is on path
  components anywhere in the path, never on a leading ``/kubepods``.

Pod UIDs are 36-character UUIDs, or 32 hex characters for static pods (the kubelet's hash of
the manifest; the mirror pod carries it in its ``kubernetes.io/config.hash`` annotation).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

_HEX = "0-9a-f"
# "pod" + UID at the start of a path component or after the "-" of a systemd slice name.
_POD = re.compile(
    rf"(?:^|-)pod(?P<uid>[{_HEX}]{{8}}[-_][{_HEX}]{{4}}[-_][{_HEX}]{{4}}[-_][{_HEX}]{{4}}[-_][{_HEX}]{{12}}"
    rf"|[{_HEX}]{{32}})(?:\.slice)?$"
)
# Container scopes by runtime; crio-conmon-<id> is deliberately not matched (64 hex digits must
# follow the prefix). ``.scope`` is optional: CRI-O's cgroupfs containers and its systemd sandboxes
# have none.
_SCOPES = (
    (re.compile(rf"^cri-containerd-(?P<id>[{_HEX}]{{64}})(?:\.scope)?$"), "containerd"),
    (re.compile(rf"^crio-(?P<id>[{_HEX}]{{64}})(?:\.scope)?$"), "cri-o"),
    (re.compile(rf"^docker-(?P<id>[{_HEX}]{{64}})(?:\.scope)?$"), "docker"),
)
# The runtime's systemd cgroupsPath "<slice>:<prefix>:<id>" kept as a single directory name.
_SYSTEMD_TRIPLE = re.compile(rf"^(?P<slice>[^:]+):(?P<prefix>[^:]+):(?P<id>[{_HEX}]{{64}})$")
_PREFIX_RUNTIME = {"cri-containerd": "containerd", "crio": "cri-o", "docker": "docker"}
_BARE_ID = re.compile(rf"^[{_HEX}]{{64}}$")  # cgroupfs driver: the container id is the component


@dataclass(frozen=True)
class CgroupRef:
    """Where a process sits: its pod's UID (dashed form) and container id, each None if absent.

    ``runtime`` is containerd / cri-o / docker when the scope name tells, else "".
    """

    pod_uid: str | None
    container_id: str | None
    runtime: str = ""


def _from_path(path: str) -> CgroupRef | None:
    """The pod and container of one cgroup path; None when it names neither."""
    pod_uid = container_id = None
    runtime = ""
    for component in path.split("/"):
        if not component or component == "..":
            continue
        triple = _SYSTEMD_TRIPLE.match(component)
        if triple is not None:
            slice_pod = _POD.search(triple.group("slice"))
            if slice_pod is not None:
                pod_uid = slice_pod.group("uid").replace("_", "-")
            container_id = triple.group("id")
            runtime = _PREFIX_RUNTIME.get(triple.group("prefix"), "")
            continue
        match = _POD.search(component)
        if match is not None:
            pod_uid = match.group("uid").replace("_", "-")
            container_id, runtime = None, ""  # a container belongs below its pod
            continue
        for pattern, name in _SCOPES:
            scope = pattern.match(component)
            if scope is not None:
                container_id, runtime = scope.group("id"), name
                break
        else:
            if _BARE_ID.match(component) and (pod_uid is not None or path.lstrip("./").startswith("docker/")):
                container_id, runtime = component, ("docker" if pod_uid is None else "")
    if pod_uid is None and container_id is None:
        return None
    return CgroupRef(pod_uid, container_id, runtime)


def parse_cgroup(text: str) -> CgroupRef | None:
    """The pod/container named by the contents of a ``/proc/<pid>/cgroup`` file; None outside any.

    On v1 and hybrid hosts every hierarchy's path is read and the answer most of them give
    wins (a process is in the same container in each; the v2 line of a hybrid host is often
    just ``/``); ties go to the answer that names a pod, then to the earlier line.
    """
    answers: Counter[CgroupRef] = Counter()
    first: dict[CgroupRef, int] = {}
    for number, line in enumerate(text.splitlines()):
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        ref = _from_path(parts[2].strip())
        if ref is not None:
            answers[ref] += 1
            first.setdefault(ref, number)
    if not answers:
        return None
    return max(answers, key=lambda r: (answers[r], r.pod_uid is not None, r.container_id is not None, -first[r]))


def normalize_container_id(value: str) -> str:
    """A container id as the API server writes it (``containerd://<id>``, ``cri-o://<id>``) -> ``<id>``."""
    return value.rpartition("://")[2].strip().lower()
