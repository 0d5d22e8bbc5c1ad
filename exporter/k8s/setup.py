"""Builds the pod resolver the settings ask for: which sources, started or not, and why not.

``kubernetes_api``: ``auto`` (in a pod: the in-cluster API server), ``off``, or a URL.
``pod_resources_socket``: ``auto`` (the kubelet's socket when it exists), ``off``, or a path.
``node_name``: whose pods to watch; default ``$NODE_NAME`` (downward API ``spec.nodeName``).

``auto`` sources that are absent are skipped quietly (a host outside Kubernetes); a source
asked for by name that cannot work is a one-line UserError naming the setting.
"""

from __future__ import annotations

import logging
import os
from typing import Mapping

from exporter.backend.procinfo import ProcFs
from exporter.errors import UserError
from exporter.k8s.pods import PodIndex
from exporter.k8s.resolver import KubernetesResolver

log = logging.getLogger(__name__)

AUTO, OFF = "auto", "off"
EXTRA_HINT = "pip install 'gpushare-exporter[k8s]'"


def _api_source(api: str, node_name: str | None, environ: Mapping[str, str]):
    from exporter.k8s.apiserver import SERVICE_ACCOUNT_DIR, ApiServerPods, in_cluster_url

    if api == OFF:
        return None
    url = in_cluster_url(environ) if api == AUTO else api
    if url is None:
        return None  # not in a pod: nothing to ask
    node = node_name or environ.get("NODE_NAME", "").strip()
    if not node:
        if api == AUTO:
            log.warning("kubernetes API: set NODE_NAME (downward API spec.nodeName) or --node-name to "
                        "name pods from the API server; falling back to the kubelet and the environment")
            return None
        raise UserError(f"--kubernetes-api {api}: needs --node-name (or $NODE_NAME) to watch that node's pods")
    index = PodIndex()
    try:
        source = ApiServerPods(index, node, url, token_file=os.path.join(SERVICE_ACCOUNT_DIR, "token"),
                               ca_file=os.path.join(SERVICE_ACCOUNT_DIR, "ca.crt"))
    except ValueError as exc:
        raise UserError(f"--kubernetes-api: {exc}") from None
    log.info("kubernetes API: watching pods of node %s at %s", node, url)
    return index, source


def _kubelet_source(socket: str):
    from exporter.k8s.allocations import DEFAULT_SOCKET

    if socket == OFF:
        return None
    path = DEFAULT_SOCKET if socket == AUTO else socket
    if socket == AUTO and not os.path.exists(path):
        return None
    try:
        from exporter.k8s.allocations import KubeletAllocations
        from exporter.k8s.podresources import Client  # ImportError without grpcio/protobuf

        source = KubeletAllocations(path, client=Client(path))
    except ImportError as exc:
        if socket == AUTO:
            log.warning("pod-resources socket %s found, but reading it needs %s (%s)", path, EXTRA_HINT, exc)
            return None
        raise UserError(f"--pod-resources-socket {socket}: needs {EXTRA_HINT} ({exc})") from None
    log.info("pod-resources: reading device allocations from %s", path)
    return source


def build_resolver(procfs: ProcFs, api: str = AUTO, socket: str = AUTO, node_name: str | None = None,
                   environ: Mapping[str, str] = os.environ) -> KubernetesResolver | None:
    """A started resolver over the sources that apply; None when none does (not on Kubernetes)."""
    api_source = _api_source(api, node_name, environ)
    allocations = _kubelet_source(socket)
    if api_source is None and allocations is None:
        return None
    index, closers = None, []
    if api_source is not None:
        index, watcher = api_source
        watcher.start()
        closers.append(watcher.close)
    if allocations is not None:
        allocations.start()
        closers.append(allocations.close)
    return KubernetesResolver(procfs, index=index, allocations=allocations, closers=closers)
