"""Every GPU process lands on its pod: the simulated node (time-slicing, MPS and MIG pods on
containerd, CRI-O and docker) read through the real resolver, with each source.

The truth is the scenario's own ``pod`` entries; the exporter sees only the fake /proc (cgroup
files, environment) and what the fake API server / kubelet serve.
"""

from __future__ import annotations

import os

import pytest

from exporter.backend.procinfo import ProcFs
from exporter.backend.sim import SimBackend
from exporter.k8s.pods import PodIndex
from exporter.k8s.resolver import KubernetesResolver
from exporter.k8s.setup import build_resolver
from exporter.sim.kube import FakeApiServer, SimulatedKube, pod_objects, serve_kubelet
from exporter.sim.scenario import load_scenario
from tests.conftest import SCENARIOS

SCENARIO = load_scenario(SCENARIOS / "k8s-shared-node.yaml")
# Times at which every kind of process is alive at least once (burn-in, first Job pod, each
# notebook kernel, both MPS pods, both MIG pods), and after the churn.
TIMES = (30, 100, 420, 800, 1200, 1500, 1790)


def truth(pid: int, t: float):
    for spec in SCENARIO.processes:
        if spec.pid == pid and spec.start <= t and (spec.end is None or t < spec.end):
            return None if spec.pod is None else (spec.pod.namespace, spec.pod.name, spec.pod.container)
    return None


def polls(backend: SimBackend):
    backend.open()
    try:
        for t in TIMES:
            backend.step_to(t)
            yield t, backend.poll()
    finally:
        backend.close()


def check_every_process(backend: SimBackend, placed=None, unknown_container=()) -> int:
    seen = 0
    for t, snapshot in polls(backend):
        if placed:
            placed(t, snapshot)
        for gpu in snapshot.gpus:
            for proc in gpu.processes:
                expected = truth(proc.pid, t)
                if proc.pid in unknown_container and proc.container == "":
                    expected = expected[:2] + ("",)  # ambiguous while both containers hold the GPU
                got = (proc.namespace, proc.pod, proc.container) if proc.pod else None
                assert got == expected, f"pid {proc.pid} at {t}s: {got} != {expected}"
                seen += 1
    return seen


def test_in_process_sources_place_every_process():
    """--simulate's own sources: every process on its pod, host processes and MPS servers on none."""
    assert check_every_process(SimBackend(SCENARIO)) > 40


def test_real_clients_against_fake_api_server_and_kubelet(tmp_path):
    """The API-server watch and the kubelet socket, over HTTP and gRPC, give the same answers."""
    pytest.importorskip("grpc")
    api = FakeApiServer(pod_objects(SCENARIO)).start()
    holder = {}
    kubelet = serve_kubelet(str(tmp_path / "kubelet.sock"), lambda: holder["kube"].kubelet_pods()
                            if "kube" in holder else [])

    def resolver(procfs, simulation):
        holder["kube"] = SimulatedKube(simulation)
        built = build_resolver(procfs, api=api.url, socket=str(tmp_path / "kubelet.sock"), node_name="sim-node",
                               environ={})
        _wait(lambda: built.index.synced)
        return built

    try:
        backend = SimBackend(SCENARIO, pod_resolver=resolver)
        devices = {}

        def placed(t, snapshot):
            devices[t] = snapshot.pod_devices

        check_every_process(backend, placed)
    finally:
        api.close()
        kubelet.stop(0)
    # The kubelet's allocations reached the snapshot: the MIG pods hold their instances.
    mig = {(d.namespace, d.pod): d.gi for d in devices[TIMES[-1]] if d.gi is not None}
    assert set(mig) == {("vision", "detect-5f6g7c8d9-q2w3e"), ("kube-system", "gpu-burn-node-1")}


def test_kubelet_only_names_pods_from_hostname():
    """Without the API server (no RBAC), the kubelet's list and each process's HOSTNAME still place
    every pod process (the pods here have unique names). The container stays unknown only where
    two containers of one pod hold the same GPU (wan-render-a's render and upscale under MPS)."""
    def resolver(procfs, simulation):
        return KubernetesResolver(procfs, index=None, allocations=SimulatedKube(simulation))

    check_every_process(SimBackend(SCENARIO, pod_resolver=resolver), unknown_container=(5001, 5002))


def test_a_pod_known_late_is_picked_up_without_restarting(tmp_path):
    """Watch lag: a process seen before its pod reached the index gets its pod once it arrives."""
    index = PodIndex()
    kube = {}

    def resolver(procfs, simulation):
        kube["all"] = SimulatedKube(simulation).index.pods()
        return KubernetesResolver(procfs, index=index)

    backend = SimBackend(SCENARIO, pod_resolver=resolver)
    backend.open()
    try:
        backend.step_to(100)
        early = {p.pid: p for g in backend.poll().gpus for p in g.processes}
        assert early[1001].pod == "" and early[1001].workload != "k8s:serving/llm/vllm"
        index.replace_all(kube["all"])  # the watch delivers
        backend.step_to(101)
        late = {p.pid: p for g in backend.poll().gpus for p in g.processes}
        assert (late[1001].namespace, late[1001].pod, late[1001].container) == ("serving", "llm-7d9f8b6c4-x2k9p", "vllm")
        assert late[1001].workload == "k8s:serving/llm/vllm"
    finally:
        backend.close()


def test_hostname_fallback_refuses_ambiguity(tmp_path):
    """A HOSTNAME naming pods in two namespaces, or a process outside any pod, is not placed."""
    from exporter.k8s.allocations import ContainerDevices, PodContainers, StaticAllocations

    uid = "0f5e8b4c-3a2d-4e1f-9b8a-7c6d5e4f3a21"
    cid = "ab" * 32
    for pid, cgroup, environ in ((1, f"0::/kubepods/pod{uid}/{cid}\n", "HOSTNAME=web-0\0"),
                                 (2, f"0::/kubepods/pod{uid}/{cid}\n", "HOSTNAME=api-0\0NVIDIA_VISIBLE_DEVICES=GPU-b\0"),
                                 (3, "0::/user.slice\n", "HOSTNAME=api-0\0"),
                                 (4, f"0::/kubepods/pod{uid}/{cid}\n", "PATH=/bin\0")):
        os.makedirs(tmp_path / str(pid))
        (tmp_path / str(pid) / "cgroup").write_text(cgroup)
        (tmp_path / str(pid) / "environ").write_text(environ)
    allocations = StaticAllocations(
        [PodContainers("a", "web-0", ("main",)), PodContainers("b", "web-0", ("main",)),
         PodContainers("c", "api-0", ("main", "side", "gpu2"))],
        [ContainerDevices("c", "api-0", "main", "nvidia.com/gpu", ("GPU-a::0",)),
         ContainerDevices("c", "api-0", "gpu2", "nvidia.com/gpu", ("GPU-b::1",))])
    resolver = KubernetesResolver(ProcFs(str(tmp_path)), allocations=allocations)
    assert resolver.resolve(1) is None  # web-0 exists in namespaces a and b
    placed = resolver.resolve(2)
    assert (placed.namespace, placed.pod, placed.container) == ("c", "api-0", "gpu2")  # by its visible device
    assert resolver.resolve(3) is None  # not in a pod, whatever its HOSTNAME says
    assert resolver.resolve(4) is None  # no HOSTNAME
    assert resolver.resolve(5) is None  # gone


def _wait(predicate, timeout=10.0):
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "pod source never synced"
        time.sleep(0.02)
