"""Kubernetes attribution: which pod and container a GPU process belongs to.

- :mod:`exporter.k8s.cgroup`: ``/proc/<pid>/cgroup`` -> pod UID + container id (every runtime
  and cgroup layout the kubelet produces).
- :mod:`exporter.k8s.pods`: the node's pods by UID and container id (fed by the API server).
- :mod:`exporter.k8s.apiserver`: list + watch of this node's pods with the service account.
- :mod:`exporter.k8s.podresources`: the kubelet pod-resources socket (the only gRPC/protobuf
  importer); :mod:`exporter.k8s.allocations` polls it in the background.
- :mod:`exporter.k8s.devices`: device ids as the kubelet reports them -> GPUs and MIG instances.
- :mod:`exporter.k8s.resolver`: the :class:`~exporter.identity.PodResolver` tying them together.

Nothing here is imported unless Kubernetes attribution is enabled, and only
:mod:`exporter.k8s.podresources` needs the optional ``[k8s]`` extra (grpcio, protobuf).
See docs/kubernetes.md for the design and its reasons.
"""
