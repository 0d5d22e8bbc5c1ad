"""The kubelet pod-resources API (``v1.PodResourcesLister``): the only gRPC and protobuf importer.

The kubelet serves it on ``/var/lib/kubelet/pod-resources/kubelet.sock`` (GA since 1.28).
``List`` answers, for every active pod, its containers and the device ids each was
allocated per extended resource (``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``, renamed
time-slicing resources such as ``nvidia.com/gpu.shared``...). It carries no pod UID.

The message types are declared here from the field numbers of the kubelet's ``api.proto``
(``pkg/apis/podresources/v1``) and built at import time with protobuf's descriptor pool, so
there is no generated ``*_pb2.py`` to keep in step with the installed protobuf runtime.
Only the fields the exporter reads are declared; protobuf skips the others (cpu ids, memory,
topology) on decoding.

Dynamic Resource Allocation (``ContainerResources.dynamic_resources``, gate
``KubeletPodResourcesDynamicResources``, beta 1.34): each ``DynamicResource`` is one
ResourceClaim (name, namespace) and its ``ClaimResource`` entries name the allocated devices
by DRA driver, pool and device name. Claims of NVIDIA's GPU DRA driver (``gpu.nvidia.com``)
become allocations like the device plugin's, keyed by the driver's device names; other
drivers' claims (NICs, IMEX channels, ``compute-domain.nvidia.com``) are not GPUs and are skipped.

:func:`serve` runs the same service for the simulator and the tests, so a fake kubelet and
the client share one definition of the wire format.
"""

from __future__ import annotations

import uuid
from concurrent import futures
from typing import Callable, Iterable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from exporter.k8s.allocations import DEFAULT_SOCKET, AllocationsError, ContainerDevices, PodContainers

SERVICE = "v1.PodResourcesLister"
LIST_METHOD = f"/{SERVICE}/List"
# dcgm-exporter allows 10 s; the kubelet answers from memory in about a millisecond.
LIST_TIMEOUT_SECONDS = 10.0

_STRING = descriptor_pb2.FieldDescriptorProto.TYPE_STRING
_MESSAGE = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
_REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
_OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL

# DRA drivers whose devices are this host's GPUs and MIG instances (NVIDIA k8s-dra-driver-gpu).
GPU_DRA_DRIVERS = ("gpu.nvidia.com",)

# message -> ((field, number, type, repeated, message type), ...)
_MESSAGES = {
    "ListPodResourcesRequest": (),
    "ListPodResourcesResponse": (("pod_resources", 1, _MESSAGE, True, "PodResources"),),
    "PodResources": (
        ("name", 1, _STRING, False, None),
        ("namespace", 2, _STRING, False, None),
        ("containers", 3, _MESSAGE, True, "ContainerResources"),
    ),
    "ContainerResources": (
        ("name", 1, _STRING, False, None),
        ("devices", 2, _MESSAGE, True, "ContainerDevices"),
        ("dynamic_resources", 5, _MESSAGE, True, "DynamicResource"),
    ),
    "ContainerDevices": (
        ("resource_name", 1, _STRING, False, None),
        ("device_ids", 2, _STRING, True, None),
    ),
    # Field 1 (class_name) was removed in 1.31; 2..4 are stable since.
    "DynamicResource": (
        ("claim_name", 2, _STRING, False, None),
        ("claim_namespace", 3, _STRING, False, None),
        ("claim_resources", 4, _MESSAGE, True, "ClaimResource"),
    ),
    "ClaimResource": (
        ("cdi_devices", 1, _MESSAGE, True, "CDIDevice"),
        ("driver_name", 2, _STRING, False, None),
        ("pool_name", 3, _STRING, False, None),
        ("device_name", 4, _STRING, False, None),
        ("share_id", 5, _STRING, False, None),
    ),
    "CDIDevice": (
        ("name", 1, _STRING, False, None),
    ),
}


def _build_classes() -> dict[str, type]:
    proto = descriptor_pb2.FileDescriptorProto(name="gpushare/podresources_v1.proto", package="v1", syntax="proto3")
    for message_name, message_fields in _MESSAGES.items():
        message = proto.message_type.add(name=message_name)
        for field_name, number, kind, repeated, type_name in message_fields:
            entry = message.field.add(name=field_name, number=number, type=kind,
                                      label=_REPEATED if repeated else _OPTIONAL)
            if type_name:
                entry.type_name = f".v1.{type_name}"
    pool = descriptor_pool.DescriptorPool()  # private: never clashes with another copy of the proto
    pool.AddSerializedFile(proto.SerializeToString())
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"v1.{name}")) for name in _MESSAGES}


_CLASSES = _build_classes()
ListRequest = _CLASSES["ListPodResourcesRequest"]
ListResponse = _CLASSES["ListPodResourcesResponse"]


def target(socket_path: str) -> str:
    """The gRPC target for a unix socket path."""
    return "unix://" + socket_path if socket_path.startswith("/") else "unix:" + socket_path


def decode(response) -> tuple[list[PodContainers], list[ContainerDevices]]:
    """Pods and device allocations of a ListPodResourcesResponse."""
    pods, devices = [], []
    for pod in response.pod_resources:
        pods.append(PodContainers(pod.namespace, pod.name, tuple(c.name for c in pod.containers)))
        for container in pod.containers:
            for group in container.devices:
                if group.device_ids:
                    devices.append(ContainerDevices(pod.namespace, pod.name, container.name,
                                                    group.resource_name, tuple(group.device_ids)))
            devices.extend(_claims(pod.namespace, pod.name, container))
    return pods, devices


def _claims(namespace: str, pod: str, container) -> list[ContainerDevices]:
    """The GPU devices of a container's DRA claims: one allocation per (claim, driver)."""
    out: list[ContainerDevices] = []
    for claim in container.dynamic_resources:
        by_driver: dict[str, list[str]] = {}
        for resource in claim.claim_resources:
            if resource.driver_name in GPU_DRA_DRIVERS and resource.device_name:
                names = by_driver.setdefault(resource.driver_name, [])
                if resource.device_name not in names:
                    names.append(resource.device_name)
        for driver, names in by_driver.items():
            out.append(ContainerDevices(namespace, pod, container.name, driver, tuple(names),
                                        claim=f"{claim.claim_namespace or namespace}/{claim.claim_name}"))
    return out


class Client:
    """A channel to the kubelet socket, reused across calls (gRPC reconnects by itself)."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout: float = LIST_TIMEOUT_SECONDS) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel = grpc.insecure_channel(target(socket_path))
        self._list = self._channel.unary_unary(LIST_METHOD, request_serializer=ListRequest.SerializeToString,
                                               response_deserializer=ListResponse.FromString)

    def list(self) -> tuple[list[PodContainers], list[ContainerDevices]]:
        """Call List; raises :class:`PodResourcesError` with a one-line reason."""
        try:
            return decode(self._list(ListRequest(), timeout=self.timeout))
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            name = code.name if code is not None else "error"
            raise PodResourcesError(f"{self.socket_path}: List failed: {name}: {details}") from None

    def close(self) -> None:
        self._channel.close()


class PodResourcesError(AllocationsError):
    """The socket could not be asked (absent, refused, timeout, permission)."""


# -- serving (simulator and tests) -------------------------------------------------------

Pod = tuple[str, str, Iterable[tuple[str, Iterable[tuple[str, Iterable[str]]]]]]


def response_for(pods: Iterable[Pod], pool: str = "") -> object:
    """A ListPodResourcesResponse from (namespace, pod, ((container, (group, ...)), ...)).

    A group is ``(resource, ids)`` for a device plugin's allocation, or
    ``(driver, device names, "namespace/claim")`` for a DRA claim, answered as the kubelet
    does in ``dynamic_resources`` (``pool`` is the driver's pool: the node name for GPUs).
    """
    response = ListResponse()
    for namespace, pod_name, containers in pods:
        pod = response.pod_resources.add(name=pod_name, namespace=namespace)
        for container_name, groups in containers:
            container = pod.containers.add(name=container_name)
            for group in groups:
                resource, ids = group[0], group[1]
                claim = group[2] if len(group) > 2 else ""
                if not claim:
                    container.devices.add(resource_name=resource, device_ids=list(ids))
                    continue
                claim_namespace, _, claim_name = claim.partition("/")
                entry = container.dynamic_resources.add(claim_name=claim_name, claim_namespace=claim_namespace)
                claim_uid = uuid.uuid5(uuid.NAMESPACE_URL, f"claim:{claim}")
                for name in ids:
                    # A CDI name of the shape <vendor>/<class>=<claim uid>-<device>; the exporter
                    # never reads CDI names (they hold no GPU identity the device name lacks).
                    entry.claim_resources.add(driver_name=resource, pool_name=pool, device_name=name,
                                              cdi_devices=[{"name": f"k8s.{resource}/claim={claim_uid}-{name}"}])
    return response


def serve(socket_path: str, pods: Callable[[], Iterable[Pod]], pool: str = "sim-node"):
    """Serve ``List`` on a unix socket from ``pods()``; returns the started grpc server (``.stop(0)``)."""
    def handle(request, context):
        return response_for(pods(), pool)

    handler = grpc.method_handlers_generic_handler(SERVICE, {
        "List": grpc.unary_unary_rpc_method_handler(handle, request_deserializer=ListRequest.FromString,
                                                    response_serializer=ListResponse.SerializeToString),
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=(handler,))
    server.add_insecure_port(target(socket_path))
    server.start()
    return server
