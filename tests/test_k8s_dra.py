"""GPUs allocated through Dynamic Resource Allocation get the same pod attribution and MIG mapping.

The kubelet reports a DRA claim in ``ContainerResources.dynamic_resources`` (claim name and
namespace, then driver / pool / device name per allocated device), not in ``devices``. The
scenario k8s-dra-node allocates a shared whole GPU and three MIG instances that way; its pods'
truth is the scenario's own ``pod`` entries and the simulator's MIG layout.
"""

from __future__ import annotations

import time

import pytest

from exporter.backend.sim import SimBackend
from exporter.errors import UserError
from exporter.k8s.allocations import ContainerDevices
from exporter.k8s.devices import dra_mig_names, pod_devices
from exporter.k8s.resolver import KubernetesResolver
from exporter.k8s.setup import build_resolver
from exporter.sim.kube import SimulatedKube, serve_kubelet
import yaml

from exporter.sim.scenario import load_scenario, parse_scenario
from tests.conftest import SCENARIOS

SCENARIO = load_scenario(SCENARIOS / "k8s-dra-node.yaml")
TIMES = (90, 300, 900)


def _truth(pid: int, t: float):
    for spec in SCENARIO.processes:
        if spec.pid == pid and spec.start <= t and (spec.end is None or t < spec.end):
            return spec
    return None


def _snapshots(backend, settle=None):
    """(t, snapshot) at each of TIMES; ``settle()`` runs between a first and the kept poll."""
    backend.open()
    try:
        out = []
        for t in TIMES:
            backend.step_to(t)
            snapshot = backend.poll()
            if settle is not None:
                settle()
                snapshot = backend.poll()
            out.append((t, snapshot))
        return out
    finally:
        backend.close()


def _check(snapshots):
    seen = 0
    for t, snapshot in snapshots:
        mig_gi = {(g.index, i.mig_index): i.gi for g in snapshot.gpus for i in g.mig_instances}
        held = {(d.namespace, d.pod, d.container): d for d in snapshot.pod_devices}
        for gpu in snapshot.gpus:
            for proc in gpu.processes:
                spec = _truth(proc.pid, t)
                assert (proc.namespace, proc.pod, proc.container) == (
                    spec.pod.namespace, spec.pod.name, spec.pod.container), f"pid {proc.pid} at {t}s"
                device = held[(proc.namespace, proc.pod, proc.container)]
                assert device.resource == "gpu.nvidia.com"
                assert device.gpu_index == spec.gpu
                expected_gi = None if spec.mig is None else mig_gi[(spec.gpu, spec.mig)]
                assert device.gi == expected_gi, f"{proc.pod}: gi {device.gi} != {expected_gi}"
                seen += 1
    return seen


def test_dra_claims_place_every_process_and_map_mig_instances_in_process():
    def resolver(procfs, simulation):
        return KubernetesResolver(procfs, index=None, allocations=SimulatedKube(simulation))

    assert _check(_snapshots(SimBackend(SCENARIO, pod_resolver=resolver))) >= 10


def test_dra_claims_through_the_real_kubelet_socket(tmp_path):
    """The gRPC client decodes dynamic_resources from a kubelet socket (no API server: the pod
    names come from the kubelet's list and each process's HOSTNAME)."""
    pytest.importorskip("grpc")
    holder = {}
    socket = str(tmp_path / "kubelet.sock")
    kubelet = serve_kubelet(socket, lambda: holder["kube"].kubelet_pods() if "kube" in holder else [])

    def resolver(procfs, simulation):
        holder["kube"] = SimulatedKube(simulation)
        holder["built"] = build_resolver(procfs, api="off", socket=socket, node_name="sim-node", environ={})
        return holder["built"]

    def settle():
        """A new pod is known after the kubelet's next List (woken by the unknown process)."""
        allocations = holder["built"].allocations
        want = holder["kube"].kubelet_pods()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if len(allocations.pods()) == len(want):
                return
            allocations.wake()
            time.sleep(0.1)

    try:
        assert _check(_snapshots(SimBackend(SCENARIO, pod_resolver=resolver), settle)) >= 10
    finally:
        kubelet.stop(0)


def test_two_claims_on_one_gpu_are_two_pods_on_the_whole_device():
    def resolver(procfs, simulation):
        return KubernetesResolver(procfs, index=None, allocations=SimulatedKube(simulation))

    _, snapshot = _snapshots(SimBackend(SCENARIO, pod_resolver=resolver))[1]
    on_gpu0 = sorted(d.pod for d in snapshot.pod_devices if d.gpu_index == 0)
    assert on_gpu0 == ["chat-6c9d7-abcde", "trainer-0"]
    assert all(d.gi is None and d.count == 1 for d in snapshot.pod_devices if d.gpu_index == 0)


def test_every_release_of_the_dra_drivers_mig_names_maps_to_the_instance():
    """k8s-dra-driver-gpu named MIG devices three ways over its releases; each names one instance."""
    backend = SimBackend(SCENARIO)
    backend.open()
    try:
        backend.step_to(60)
        snapshot = backend.poll()
    finally:
        backend.close()
    gpu = snapshot.gpus[1]
    assert len(gpu.mig_instances) == 3
    for inst in gpu.mig_instances:
        names = dra_mig_names(1, inst.profile, inst.profile_id, inst.placement_start, inst.placement_size)
        assert len(set(names)) == 3
        for name in names:
            allocs = [ContainerDevices("ns", "p", "c", "gpu.nvidia.com", (name,), claim="ns/c1")]
            (device,) = pod_devices(allocs, snapshot.gpus)
            assert (device.gpu_index, device.gi) == (1, inst.gi), name
    # the 3g.40gb instance, spelled as each release spells it
    three = next(i for i in gpu.mig_instances if i.profile == "3g.40gb")
    assert f"gpu-1-mig-3g40gb-{three.placement_start}-{three.placement_start + three.placement_size - 1}" in \
        dra_mig_names(1, three.profile, three.profile_id, three.placement_start, three.placement_size)
    # names of devices this host does not have are dropped, as stale device-plugin ids are
    stale = [ContainerDevices("ns", "p", "c", "gpu.nvidia.com", ("gpu-7", "gpu-1-mig-7g80gb-0-0"), claim="ns/x")]
    assert pod_devices(stale, snapshot.gpus) == ()


def test_claims_of_other_dra_drivers_are_not_gpus():
    pytest.importorskip("grpc")
    from exporter.k8s.podresources import ListResponse, decode, response_for

    response = response_for([("ml", "p", [("main", [
        ("gpu.nvidia.com", ["gpu-0"], "ml/p-gpu"),
        ("compute-domain.nvidia.com", ["channel-0"], "ml/p-imex"),
        ("nvidia.com/gpu", ["GPU-1"]),
    ])])], pool="node-a")
    _, devices = decode(ListResponse.FromString(response.SerializeToString()))
    assert [(d.resource, d.device_ids, d.claim) for d in devices] == [
        ("nvidia.com/gpu", ("GPU-1",), ""), ("gpu.nvidia.com", ("gpu-0",), "ml/p-gpu")]


@pytest.mark.parametrize("pod,message", [
    ("{namespace: a, name: b, claim: c}", "a claim is only for allocation: dra"),
    ("{namespace: a, name: b, allocation: dra, resource: nvidia.com/gpu}", "remove resource"),
    ("{namespace: a, name: b, allocation: plugin}", "expected one of device-plugin, dra"),
])
def test_scenario_dra_keys_are_checked_with_one_line(pod, message):
    text = f"name: t\nduration: 1m\ngpus: [{{model: H100-80GB}}]\nprocesses:\n  - {{pid: 1, cmdline: x, gpu: 0, memory: 1GiB, pod: {pod}}}\n"
    with pytest.raises(UserError) as err:
        parse_scenario(yaml.safe_load(text), "t.yaml")
    assert message in str(err.value) and "processes[0].pod" in str(err.value)
    assert "\n" not in str(err.value)
