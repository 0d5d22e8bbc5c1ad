"""Kubernetes around a simulated node: cgroup files, Pod objects, a fake API server and kubelet.

- :func:`cgroup_file`: the ``/proc/<pid>/cgroup`` the kubelet + runtime give a pod's process
  (cgroup v1 or v2; systemd or cgroupfs driver; containerd, CRI-O or docker scopes).
- :func:`pod_objects`: the scenario's pods as the API server returns them (JSON objects).
- :class:`SimulatedKube`: in-process sources for ``--simulate`` (no sockets, no ports):
  the pod index and the kubelet's allocations of the pods alive at the virtual time.
- :class:`FakeApiServer` / :func:`serve_kubelet`: real servers on 127.0.0.1 / a unix socket
  for the tests and the end-to-end runs of the real clients.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Iterable
from urllib.parse import parse_qs, urlsplit

from exporter.sim.model import PodSpec, Scenario

if TYPE_CHECKING:  # exporter.k8s loads where pods are served: a node without pods needs only the cgroup files
    from exporter.k8s.allocations import ContainerDevices, PodContainers

HOST_CGROUP = "0::/user.slice/user-1000.slice/session-1.scope\n"  # a process outside Kubernetes
_SCHEMES = {"containerd": "containerd://", "cri-o": "cri-o://", "docker": "docker://"}
_SCOPES = {"containerd": "cri-containerd-{}.scope", "cri-o": "crio-{}.scope", "docker": "docker-{}.scope"}
_TRIPLE_PREFIX = {"containerd": "cri-containerd", "cri-o": "crio", "docker": "docker"}
_QOS = {"guaranteed": "Guaranteed", "burstable": "Burstable", "besteffort": "BestEffort"}
# cgroup v1 hierarchies of a typical host, as /proc/<pid>/cgroup lists them (highest id first).
_V1_CONTROLLERS = ("hugetlb", "cpuset", "memory", "devices", "pids", "net_cls,net_prio", "perf_event",
                   "freezer", "blkio", "cpu,cpuacct", "misc")


def cgroup_path(pod: PodSpec) -> str:
    """The container's cgroup path as the kubelet (``pkg/kubelet/cm``) and the runtime name it."""
    qos = "" if pod.qos == "guaranteed" else pod.qos
    cid = pod.container_id
    if pod.cgroup_driver == "cgroupfs":
        # CRI-O names its containers crio-<id> under cgroupfs too, without .scope (cri-o#812);
        # containerd and docker use the bare id.
        leaf = f"crio-{cid}" if pod.runtime == "cri-o" else cid
        parts = ["kubepods"] + ([qos] if qos else []) + [f"pod{pod.uid}", leaf]
        return "/" + "/".join(parts)
    uid = pod.uid.replace("-", "_")  # systemd slice names cannot hold '-' inside a component
    prefix = "kubepods" + (f"-{qos}" if qos else "")
    if pod.cgroup_driver == "systemd-literal":
        # The runtime's systemd cgroupsPath "<slice>:<prefix>:<id>" left as one directory name
        # (runc's cgroupfs manager given a systemd path: opentelemetry-java#4507).
        return f"/{prefix}-pod{uid}.slice:{_TRIPLE_PREFIX[pod.runtime]}:{cid}"
    parts = ["kubepods.slice"] + ([f"kubepods-{qos}.slice"] if qos else []) + [f"{prefix}-pod{uid}.slice"]
    parts.append(_SCOPES[pod.runtime].format(cid))
    return "/" + "/".join(parts)


def cgroup_file(pod: PodSpec) -> str:
    """Contents of ``/proc/<pid>/cgroup`` for a process of ``pod`` (seen from the host's namespace)."""
    path = cgroup_path(pod)
    if pod.cgroup_version == 2:
        return f"0::{path}\n"
    lines = [f"{12 - i}:{controller}:{path}" for i, controller in enumerate(_V1_CONTROLLERS)]
    lines.append(f"1:name=systemd:{path}")
    lines.append("0::/")  # hybrid hosts: the unified hierarchy is not used by the kubelet
    return "\n".join(lines) + "\n"


def process_cgroups(scenario: Scenario) -> dict[tuple[int, float], str]:
    """(pid, start) -> cgroup file of every scenario process that runs in a pod."""
    return {(p.pid, p.start): cgroup_file(p.pod) for p in scenario.processes if p.pod is not None}


def scenario_pods(scenario: Scenario) -> dict[tuple[str, str], tuple[PodSpec, list[str]]]:
    """(namespace, name) -> (the pod, its container names in first-use order)."""
    pods: dict[tuple[str, str], tuple[PodSpec, list[str]]] = {}
    for proc in scenario.processes:
        if proc.pod is None:
            continue
        entry = pods.setdefault((proc.pod.namespace, proc.pod.name), (proc.pod, []))
        if proc.pod.container not in entry[1]:
            entry[1].append(proc.pod.container)
    return pods


def _container_specs(pod: PodSpec, containers: list[str]) -> dict[str, PodSpec]:
    return {name: PodSpec(**{**pod.__dict__, "container": name}) for name in containers}


def pod_object(pod: PodSpec, containers: list[str], resource_version: int = 1, phase: str = "Running") -> dict:
    """A Pod as ``GET /api/v1/pods`` returns it (the fields the exporter and a reader care about)."""
    specs = _container_specs(pod, containers)
    static = len(pod.uid) == 32  # a static pod: the API holds its mirror, with its own UID
    metadata: dict[str, Any] = {
        "name": pod.name, "namespace": pod.namespace, "resourceVersion": str(resource_version),
        "uid": str(uuid.uuid5(uuid.NAMESPACE_OID, pod.uid)) if static else pod.uid,
        "labels": {"app": pod.name.split("-")[0]},
    }
    if static:
        from exporter.k8s.pods import CONFIG_HASH_ANNOTATION

        metadata["annotations"] = {CONFIG_HASH_ANNOTATION: pod.uid, "kubernetes.io/config.mirror": pod.uid,
                                   "kubernetes.io/config.source": "file"}
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": metadata,
        "spec": {"nodeName": pod.node, "containers": [{"name": name, "image": "registry.example/gpu-job:1"}
                                                      for name in containers]},
        "status": {"phase": phase, "qosClass": _QOS[pod.qos], "containerStatuses": [
            {"name": name, "ready": True, "restartCount": 0,
             "containerID": _SCHEMES[pod.runtime] + spec.container_id}
            for name, spec in specs.items()]},
    }


def pod_objects(scenario: Scenario) -> list[dict]:
    """Every pod of the scenario as an API object."""
    return [pod_object(pod, containers) for pod, containers in scenario_pods(scenario).values()]


def _default_resource(device) -> str:
    if device.instance is not None:
        return f"nvidia.com/mig-{device.instance.profile.name}"
    return "nvidia.com/gpu"


DRA_DRIVER = "gpu.nvidia.com"


def dra_device_name(device) -> str:
    """The device's name as NVIDIA's current DRA driver publishes it in its ResourceSlice."""
    gpu = device.key[0]
    inst = device.instance
    if inst is None:
        return f"gpu-{gpu}"
    from exporter.k8s.devices import dra_mig_names

    return dra_mig_names(gpu, inst.profile.name, inst.profile.profile_id, inst.start,
                         inst.profile.memory_slices)[-1]


class SimulatedKube:
    """Pod index and kubelet allocations of a running Simulation, read in-process.

    The index holds every pod of the scenario (as a watch would have delivered them);
    the allocations are those of the pods with a live process at the simulation's time,
    with replica ids (``GPU-<uuid>::<n>``) on GPUs more than one container shares.
    """

    def __init__(self, simulation) -> None:
        from exporter.k8s.pods import PodIndex, pod_from_api

        self.simulation = simulation
        self.index = PodIndex()
        self.index.replace_all([pod_from_api(obj) for obj in pod_objects(simulation.scenario)])
        self._specs = {(p.pid, p.start): p for p in simulation.scenario.processes if p.pod is not None}
        engine = simulation.engine
        sharing: dict[int, list[tuple[str, str, str]]] = {}
        for proc in engine.procs:
            spec = self._specs.get((proc.pid, proc.start))
            if spec is not None and engine.devices[proc.device].instance is None and spec.pod.allocation != "dra":
                ident = (spec.pod.namespace, spec.pod.name, spec.pod.container)
                if ident not in sharing.setdefault(proc.gpu, []):
                    sharing[proc.gpu].append(ident)
        self._replica = {(gpu, ident): n for gpu, idents in sharing.items() for n, ident in enumerate(idents)}
        self._shared = {gpu for gpu, idents in sharing.items()
                        if len(idents) > 1 or engine.gpus[gpu].mps}
        self._cache: tuple[tuple, list[PodContainers], list[ContainerDevices]] | None = None
        self.generation = 0

    def _current(self) -> tuple[list[PodContainers], list[ContainerDevices]]:
        engine = self.simulation.engine
        alive = tuple((p.pid, p.start) for p in engine.alive() if (p.pid, p.start) in self._specs)
        if self._cache is not None and self._cache[0] == alive:
            return self._cache[1], self._cache[2]
        containers: dict[tuple[str, str], list[str]] = {}
        devices: dict[tuple[str, str, str, str, str], list[str]] = {}
        by_key = {(p.pid, p.start): p for p in engine.alive()}
        for key in alive:
            spec, proc = self._specs[key], by_key[key]
            pod = spec.pod
            names = containers.setdefault((pod.namespace, pod.name), [])
            if pod.container not in names:
                names.append(pod.container)
            device = engine.devices[proc.device]
            ident = (pod.namespace, pod.name, pod.container)
            if pod.allocation == "dra":
                # A claim names the device itself; sharing is several claims on one device.
                group = ident + (DRA_DRIVER, f"{pod.namespace}/{pod.claim or pod.name + '-gpu'}")
                device_id = dra_device_name(device)
            else:
                group = ident + (pod.resource or _default_resource(device), "")
                device_id = device.uuid
                if device.instance is None and proc.gpu in self._shared:
                    device_id = f"{device.uuid}::{self._replica[(proc.gpu, ident)]}"
            ids = devices.setdefault(group, [])
            if device_id not in ids:
                ids.append(device_id)
        from exporter.k8s.allocations import ContainerDevices, PodContainers

        pods = [PodContainers(ns, name, tuple(names)) for (ns, name), names in sorted(containers.items())]
        allocs = [ContainerDevices(ns, pod, container, resource, tuple(ids), claim=claim)
                  for (ns, pod, container, resource, claim), ids in sorted(devices.items())]
        self._cache = (alive, pods, allocs)
        self.generation += 1
        return pods, allocs

    # -- the allocations interface (exporter.k8s.allocations) ------------------------------

    def pods(self) -> list[PodContainers]:
        return self._current()[0]

    def devices(self) -> list[ContainerDevices]:
        return self._current()[1]

    def wake(self) -> None:
        pass

    def close(self) -> None:
        pass

    def kubelet_pods(self) -> list:
        """The current allocations in :func:`exporter.k8s.podresources.serve`'s input shape."""
        pods, devices = self._current()
        out = []
        for pod in pods:
            groups = {c: [] for c in pod.containers}
            for alloc in devices:
                if alloc.namespace == pod.namespace and alloc.pod == pod.pod:
                    groups[alloc.container].append((alloc.resource, alloc.device_ids, alloc.claim))
            out.append((pod.namespace, pod.pod, list(groups.items())))
        return out


def serve_kubelet(socket_path: str, pods_callable):
    """A fake kubelet pod-resources socket answering ``pods_callable()`` (needs the [k8s] extra)."""
    from exporter.k8s.podresources import serve

    return serve(socket_path, pods_callable)


class FakeApiServer:
    """``GET /api/v1/pods`` (list with fieldSelector, paging, watch) on 127.0.0.1, over HTTP.

    ``token`` set: requests without ``Authorization: Bearer <token>`` get 401. Change the pods
    with :meth:`add` / :meth:`modify` / :meth:`delete` (watchers get the events);
    :meth:`expire` makes the next watch from an old version answer 410 Gone.
    """

    def __init__(self, pods: Iterable[dict] = (), token: str | None = None, page_size: int | None = None) -> None:
        self.token = token
        self.page_size = page_size
        self._lock = threading.Condition()
        self._version = 1
        self._pods: dict[str, dict] = {}
        self._events: list[tuple[int, str, dict]] = []
        self._oldest = 0  # watches from a version below this answer 410
        self._closing = False
        self.requests: list[str] = []
        for pod in pods:
            self.add(pod)
        from http.server import ThreadingHTTPServer  # here: a simulated node without tests never serves

        handler = self._handler()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeApiServer:
        self._thread.start()
        return self

    def close(self) -> None:
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        self._server.shutdown()
        self._server.server_close()

    # -- state --------------------------------------------------------------------------

    def _bump(self, kind: str, pod: dict) -> None:
        self._version += 1
        pod = json.loads(json.dumps(pod))
        pod["metadata"]["resourceVersion"] = str(self._version)
        if kind == "DELETED":
            self._pods.pop(pod["metadata"]["uid"], None)
        else:
            self._pods[pod["metadata"]["uid"]] = pod
        self._events.append((self._version, kind, pod))
        self._lock.notify_all()

    def add(self, pod: dict) -> None:
        with self._lock:
            self._bump("ADDED", pod)

    def modify(self, pod: dict) -> None:
        with self._lock:
            self._bump("MODIFIED", pod)

    def delete(self, uid: str) -> None:
        with self._lock:
            if uid in self._pods:
                self._bump("DELETED", self._pods[uid])

    def expire(self) -> None:
        """Compact history: watches from any version so far get 410 Gone."""
        with self._lock:
            self._oldest = self._version + 1
            self._lock.notify_all()

    # -- HTTP ---------------------------------------------------------------------------

    def _handler(self):
        from http.server import BaseHTTPRequestHandler

        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                fake.requests.append(self.path)
                url = urlsplit(self.path)
                if url.path != "/api/v1/pods":
                    return self._json(404, {"kind": "Status", "code": 404, "message": "not found"})
                if fake.token and self.headers.get("Authorization") != f"Bearer {fake.token}":
                    return self._json(401, {"kind": "Status", "code": 401, "message": "Unauthorized"})
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                node = query.get("fieldSelector", "").partition("spec.nodeName=")[2]
                if query.get("watch") in ("1", "true"):
                    return self._watch(node, int(query.get("resourceVersion") or 0),
                                       float(query.get("timeoutSeconds") or 5))
                return self._list(node, query)

            def _json(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _list(self, node: str, query: dict) -> None:
                with fake._lock:
                    items = [p for p in fake._pods.values() if not node or p["spec"].get("nodeName") == node]
                    version = fake._version
                start = int(query.get("continue") or 0)
                size = fake.page_size or len(items) or 1
                page = items[start:start + size]
                meta = {"resourceVersion": str(version)}
                if start + size < len(items):
                    meta["continue"] = str(start + size)
                self._json(200, {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": page})

            def _chunk(self, event: dict) -> None:
                data = json.dumps(event).encode() + b"\n"
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _watch(self, node: str, since: int, timeout: float) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                deadline = time.monotonic() + min(timeout, 30.0)
                sent = since
                try:
                    while time.monotonic() < deadline:
                        with fake._lock:
                            if since < fake._oldest:
                                self._chunk({"type": "ERROR", "object": {
                                    "kind": "Status", "code": 410, "reason": "Expired",
                                    "message": f"too old resource version: {since} ({fake._oldest})"}})
                                break
                            if fake._closing:
                                break
                            pending = [e for e in fake._events if e[0] > sent]
                            if not pending:
                                fake._lock.wait(0.2)
                                continue
                        for version, kind, pod in pending:
                            sent = version
                            if not node or pod["spec"].get("nodeName") == node:
                                self._chunk({"type": kind, "object": pod})
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass

        return Handler
