"""The pod sources, against real servers: a fake API server over HTTP and a fake kubelet socket.

The clients are the exporter's own (exporter.k8s.apiserver, exporter.k8s.podresources); the
servers are the simulator's (exporter.sim.kube), fed with Pod objects it builds from a scenario.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from exporter.k8s.allocations import KubeletAllocations
from exporter.k8s.apiserver import ApiServerPods, in_cluster_url
from exporter.k8s.devices import DeviceMap, pod_devices, split_replica
from exporter.k8s.pods import PodIndex, pod_from_api
from exporter.k8s.podresources import Client, PodResourcesError, serve
from exporter.sim.kube import FakeApiServer, pod_object
from exporter.sim.model import PodSpec
from exporter.snapshot import GpuInfo, MigInstance

UID_A = "0f5e8b4c-3a2d-4e1f-9b8a-7c6d5e4f3a21"
UID_B = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
STATIC = "5d41402abc4b2a76b9719d911017c592"


def spec(name: str, uid: str, namespace: str = "ml", node: str = "gpu-node-1", runtime: str = "containerd") -> PodSpec:
    return PodSpec(namespace, name, "main", uid, runtime, "systemd", 2, "burstable", node=node)


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


# -- pod objects and the index -----------------------------------------------------------


def test_pod_from_api_maps_container_ids_of_every_runtime():
    for runtime in ("containerd", "cri-o", "docker"):
        pod = spec("trainer-0", UID_A, runtime=runtime)
        meta = pod_from_api(pod_object(pod, ["main", "sidecar"]))
        main_id = PodSpec(**{**pod.__dict__, "container": "main"}).container_id
        assert meta.uid == UID_A and (meta.namespace, meta.name) == ("ml", "trainer-0")
        assert meta.containers[main_id] == "main"
        assert meta.container_of(main_id) == "main" and meta.container_of("f" * 64) == ""


def test_static_pod_is_found_by_its_manifest_hash():
    """The mirror pod has its own UID; the cgroup carries the hash from its config.hash annotation."""
    index = PodIndex()
    index.replace_all([pod_from_api(pod_object(spec("etcd-node-1", STATIC, namespace="kube-system"), ["etcd"]))])
    found = index.get(STATIC)
    assert found is not None and found.name == "etcd-node-1" and found.uid != STATIC


def test_index_generation_moves_only_on_change():
    index = PodIndex()
    a = pod_from_api(pod_object(spec("a", UID_A), ["main"]))
    index.replace_all([a])
    first = index.generation
    index.replace_all([a])
    index.upsert(a)
    assert index.generation == first
    index.remove(UID_A)
    assert index.generation == first + 1 and index.get(UID_A) is None


# -- API server: list + watch -------------------------------------------------------------


@pytest.fixture
def api():
    server = FakeApiServer([pod_object(spec("a-0", UID_A), ["main"]),
                            pod_object(spec("elsewhere", UID_B, node="gpu-node-2"), ["main"]),
                            pod_object(spec("a-1", "4" * 8 + "-4444-4444-8444-" + "4" * 12), ["main"])],
                           token="s3cret", page_size=1).start()
    yield server
    server.close()


def test_list_pages_and_keeps_only_this_node(api, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    index = PodIndex()
    source = ApiServerPods(index, "gpu-node-1", api.url, token_file=str(token), ca_file=None)
    source.list_pods()
    assert sorted(p.name for p in index.pods()) == ["a-0", "a-1"] and index.synced
    assert any("continue=" in r for r in api.requests), "the list was not paged"
    assert all("fieldSelector=spec.nodeName%3Dgpu-node-1" in r for r in api.requests)


def test_watch_follows_adds_changes_deletes_and_relists_after_410(api, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret")
    index = PodIndex()
    source = ApiServerPods(index, "gpu-node-1", api.url, token_file=str(token), ca_file=None).start()
    try:
        wait_for(lambda: index.get(UID_A) is not None)
        new = spec("b-0", "2" * 8 + "-2222-4222-8222-" + "2" * 12)
        api.add(pod_object(new, ["main"]))
        wait_for(lambda: index.get(new.uid) is not None)
        renamed = pod_object(new, ["main", "logger"])
        api.modify(renamed)
        wait_for(lambda: index.get(new.uid).container_names == ("main", "logger"))
        api.delete(UID_A)
        wait_for(lambda: index.get(UID_A) is None)
        lists_before = sum("watch" not in r for r in api.requests)
        api.expire()  # the watch gets 410 Gone: the source must list again
        late = spec("c-0", "3" * 8 + "-3333-4333-8333-" + "3" * 12)
        api.add(pod_object(late, ["main"]))
        wait_for(lambda: index.get(late.uid) is not None)
        assert sum("watch" not in r for r in api.requests) > lists_before
    finally:
        source.close()
    assert not source._thread.is_alive()


def test_unauthorized_is_reported_once_and_recovers_with_a_rotated_token(api, tmp_path, caplog):
    token = tmp_path / "token"
    token.write_text("expired")
    index = PodIndex()
    source = ApiServerPods(index, "gpu-node-1", api.url, token_file=str(token), ca_file=None).start()
    try:
        wait_for(lambda: source.last_error is not None)
        assert "401" in source.last_error
        token.write_text("s3cret")  # the kubelet rotated the projected token
        wait_for(lambda: index.get(UID_A) is not None, timeout=15)
    finally:
        source.close()
    warnings = [r for r in caplog.records if "401" in r.getMessage()]
    assert len(warnings) == 1 and "rbac" in warnings[0].getMessage().lower()


def test_in_cluster_url_from_the_service_environment():
    assert in_cluster_url({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}) == \
        "https://10.96.0.1:443"
    assert in_cluster_url({"KUBERNETES_SERVICE_HOST": "fd00::1"}) == "https://[fd00::1]:443"
    assert in_cluster_url({}) is None


# -- kubelet pod-resources ------------------------------------------------------------------

KUBELET_PODS = [
    ("ml", "trainer-0", [("main", [("nvidia.com/gpu.shared", ["GPU-aaaa::0", "GPU-aaaa::3"])]), ("sidecar", [])]),
    ("vision", "detect-1", [("main", [("nvidia.com/mig-3g.40gb", ["MIG-bbbb"])])]),
]


@pytest.fixture
def kubelet(tmp_path):
    sock = str(tmp_path / "kubelet.sock")
    server = serve(sock, lambda: KUBELET_PODS)
    yield sock
    server.stop(0)


def test_client_lists_pods_and_their_devices(kubelet):
    pods, devices = Client(kubelet, timeout=5).list()
    assert [(p.namespace, p.pod, p.containers) for p in pods] == [
        ("ml", "trainer-0", ("main", "sidecar")), ("vision", "detect-1", ("main",))]
    assert [(d.pod, d.container, d.resource, d.device_ids) for d in devices] == [
        ("trainer-0", "main", "nvidia.com/gpu.shared", ("GPU-aaaa::0", "GPU-aaaa::3")),
        ("detect-1", "main", "nvidia.com/mig-3g.40gb", ("MIG-bbbb",))]


def test_a_missing_socket_is_one_line(tmp_path):
    with pytest.raises(PodResourcesError) as info:
        Client(str(tmp_path / "absent.sock"), timeout=1).list()
    assert "\n" not in str(info.value) and "absent.sock" in str(info.value)


def test_background_allocations_refresh_and_survive_a_kubelet_restart(tmp_path, caplog):
    sock = str(tmp_path / "kubelet.sock")
    answer = {"pods": KUBELET_PODS[:1]}
    server = serve(sock, lambda: answer["pods"])
    source = KubeletAllocations(sock, interval=0.1, client=Client(sock)).start()
    try:
        wait_for(lambda: len(source.pods()) == 1)
        generation = source.generation
        server.stop(0).wait()
        if os.path.exists(sock):
            os.remove(sock)
        wait_for(lambda: source.last_error is not None)
        assert len(source.pods()) == 1, "the last answer is kept while the kubelet is away"
        answer["pods"] = KUBELET_PODS
        server = serve(sock, lambda: answer["pods"])
        wait_for(lambda: len(source.pods()) == 2)
        assert source.generation > generation and source.last_error is None
    finally:
        source.close()
        server.stop(0)


def test_wire_format_matches_the_kubelet_proto(tmp_path):
    """Bytes from classes protoc generates for the kubelet's full v1 messages (with every field the
    exporter does not declare: cpu ids, memory, topology) decode to the same allocations, and the
    DRA claim (dynamic_resources) decodes to an allocation of the claim's device."""
    grpc_tools = pytest.importorskip("grpc_tools.protoc")
    proto = tmp_path / "api.proto"
    proto.write_text(KUBELET_PROTO)
    assert grpc_tools.main(["protoc", f"-I{tmp_path}", f"--python_out={tmp_path}", str(proto)]) == 0
    script = f"""
import sys; sys.path.insert(0, {str(tmp_path)!r})
import api_pb2
r = api_pb2.ListPodResourcesResponse()
p = r.pod_resources.add(name="trainer-0", namespace="ml", cpu_ids=[1, 2])
c = p.containers.add(name="main", cpu_ids=[3])
d = c.devices.add(resource_name="nvidia.com/gpu", device_ids=["GPU-aaaa::1"])
d.topology.nodes.add(ID=0)
c.memory.add(memory_type="memory", size=1 << 30)
c.dynamic_resources.add(claim_name="gpu-claim", claim_namespace="ml").claim_resources.add(
    driver_name="gpu.nvidia.com", pool_name="node-1", device_name="gpu-0").cdi_devices.add(name="nvidia.com/gpu=0")
sys.stdout.buffer.write(r.SerializeToString())
"""
    # A separate interpreter: protoc's classes and ours must not share a descriptor pool.
    data = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True).stdout
    from exporter.k8s.podresources import ListResponse, decode

    pods, devices = decode(ListResponse.FromString(data))
    assert [(p.namespace, p.pod, p.containers) for p in pods] == [("ml", "trainer-0", ("main",))]
    assert [(d.container, d.resource, d.device_ids, d.claim) for d in devices] == [
        ("main", "nvidia.com/gpu", ("GPU-aaaa::1",), ""), ("main", "gpu.nvidia.com", ("gpu-0",), "ml/gpu-claim")]


# The kubelet's pkg/apis/podresources/v1 messages (field numbers from dcgm_k8s_facts.md B1).
KUBELET_PROTO = """
syntax = "proto3";
package v1;
message ListPodResourcesRequest {}
message ListPodResourcesResponse { repeated PodResources pod_resources = 1; }
message PodResources { string name = 1; string namespace = 2; repeated ContainerResources containers = 3;
                       repeated int64 cpu_ids = 4; repeated ContainerMemory memory = 5; }
message ContainerResources { string name = 1; repeated ContainerDevices devices = 2; repeated int64 cpu_ids = 3;
                             repeated ContainerMemory memory = 4; repeated DynamicResource dynamic_resources = 5; }
message ContainerMemory { string memory_type = 1; uint64 size = 2; TopologyInfo topology = 3; }
message ContainerDevices { string resource_name = 1; repeated string device_ids = 2; TopologyInfo topology = 3; }
message TopologyInfo { repeated NUMANode nodes = 1; }
message NUMANode { int64 ID = 1; }
message DynamicResource { string claim_name = 2; string claim_namespace = 3; repeated ClaimResource claim_resources = 4; }
message ClaimResource { repeated CDIDevice cdi_devices = 1; string driver_name = 2; string pool_name = 3;
                        string device_name = 4; optional string share_id = 5; }
message CDIDevice { string name = 1; }
"""


# -- device ids -> GPUs and MIG instances -----------------------------------------------

GPU0 = "GPU-aaaaaaaa-0000-4000-8000-000000000000"
GPU1 = "GPU-bbbbbbbb-0000-4000-8000-000000000001"
MIG_A = "MIG-cccccccc-0000-4000-8000-00000000000a"
MIG_B = "MIG-cccccccc-0000-4000-8000-00000000000b"


def gpus():
    whole = GpuInfo(index=0, uuid=GPU0, name="NVIDIA H100 80GB HBM3", pci_bus_id="0", up=True)
    instances = tuple(MigInstance(gi=gi, ci=0, mig_index=i, mig_uuid=u, profile="3g.40gb", profile_id=9,
                                  placement_start=4 * i, placement_size=4, sm_count=60, memory_total_bytes=None,
                                  memory_used_bytes=None, memory_free_bytes=None)
                      for i, (gi, u) in enumerate(((2, MIG_A), (1, MIG_B))))
    mig = GpuInfo(index=1, uuid=GPU1, name="NVIDIA H100 80GB HBM3", pci_bus_id="1", up=True, mig_mode=True,
                  mig_instances=instances)
    return [whole, mig]


@pytest.mark.parametrize("device_id,expected", [
    (GPU0, (0, GPU0, None)),
    (GPU0.lower() + "::7", (0, GPU0, None)),
    (MIG_A, (1, GPU1, 2)),
    (MIG_B + "::1", (1, GPU1, 1)),
    (f"MIG-{GPU1}/1/0", (1, GPU1, 1)),
    ("0", (0, GPU0, None)),
    ("1:0", (1, GPU1, 2)),
    ("nvidia0", (0, GPU0, None)),
    ("nvidia0/vgpu3", (0, GPU0, None)),
    ("nvidia1/gi1", (1, GPU1, 1)),
    ("nvidia1/gi1/vgpu0", (1, GPU1, 1)),
    ("GPU-ffffffff-0000-4000-8000-000000000009", None),
    ("7", None),
    ("1:5", None),
    ("nonsense", None),
])
def test_device_id_shapes(device_id, expected):
    assert DeviceMap(gpus()).resolve(device_id) == expected


def test_replica_ids_are_counted_per_container_and_device():
    from exporter.k8s.allocations import ContainerDevices

    allocations = [ContainerDevices("ml", "a", "main", "nvidia.com/gpu.shared", (GPU0 + "::0", GPU0 + "::5")),
                   ContainerDevices("ml", "b", "main", "nvidia.com/mig-3g.40gb", (MIG_A,)),
                   ContainerDevices("ml", "c", "main", "nvidia.com/gpu", ("GPU-gone",))]
    devices = pod_devices(allocations, gpus())
    assert [(d.pod, d.gpu_index, d.gi, d.count) for d in devices] == [("a", 0, None, 2), ("b", 1, 2, 1)]
    assert split_replica("GPU-x::12") == ("GPU-x", 12) and split_replica("GPU-x") == ("GPU-x", None)


def test_without_the_k8s_extra_serve_starts_off_kubernetes(tmp_path):
    """No grpcio (no [k8s] extra) on a host without a kubelet: `exporter serve` still starts and
    reports the missing driver in one line (it once died on `No module named 'grpc'`)."""
    blocker = tmp_path / "grpc.py"
    blocker.write_text("raise ImportError(\"No module named 'grpc'\")\n")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), repo]))
    env.pop("KUBERNETES_SERVICE_HOST", None)
    out = subprocess.run([sys.executable, "-m", "exporter", "serve", "--procfs", str(tmp_path),
                          "--listen", "127.0.0.1:0", "--backend", "nvml"],
                         capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and "grpc" not in out.stderr, out.stderr
    assert lines[-1].startswith("exporter: error: nvml:"), out.stderr
