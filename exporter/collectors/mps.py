"""MPS series (gpushare_mps_*): servers, client counts and per-client limits.

A device "runs MPS" when it has a server, on the whole GPU (gi "") or on one MIG
instance (gi = its id). Client counts are exported for every such device, 0 included,
so a server with no clients is visible.
"""

from __future__ import annotations

from collections import Counter

from exporter.collectors.base import Families, SnapshotCollector, Spec, gi_label, gpu_labels
from exporter.collectors.instances import POD, total, with_mode_labels
from exporter.collectors.process import PROCESS, process_series
from exporter.snapshot import Snapshot

DEVICE = ("gpu", "uuid", "gi")

SERVER_INFO = Spec(
    "gpushare_mps_server_info",
    "info",
    "An nvidia-cuda-mps-server process serving this GPU or MIG instance; always 1.",
    DEVICE + ("pid",),
)
CLIENTS = Spec("gpushare_mps_clients", "gauge", "MPS client processes on this GPU or MIG instance.", DEVICE)
CLIENT_MEMORY_LIMIT = Spec(
    "gpushare_mps_client_memory_limit_bytes",
    "gauge",
    "Pinned device memory limit of an MPS client (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT).",
    PROCESS,
    "bytes",
)
CLIENT_ACTIVE_THREADS = Spec(
    "gpushare_mps_client_active_thread_ratio",
    "gauge",
    "Share of SMs an MPS client may use (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE / 100).",
    PROCESS,
    "ratio",
)


class MpsCollector(SnapshotCollector):
    """Exports the MPS families listed in docs/metrics.md."""

    name = "mps"
    section = "mps"

    def __init__(self, source, mode: str = POD) -> None:
        super().__init__(source)
        self.mode = mode
        self._limit = with_mode_labels(CLIENT_MEMORY_LIMIT, mode)
        self._threads = with_mode_labels(CLIENT_ACTIVE_THREADS, mode)

    def families(self, snapshot: Snapshot) -> Families:
        out = Families()
        # A client list that failed this poll gives no count at all (not 0, not a partial count);
        # the section flag is per poll, so every device's count is held back for that poll.
        counts_known = snapshot.section_ok.get("mps", True) and snapshot.section_ok.get("process", True)
        for gpu in snapshot.gpus:
            if not gpu.up:
                continue
            clients = [p for p in gpu.processes if p.is_mps_client]
            if not clients and not gpu.mps_servers:
                continue  # no MPS on this GPU: no series (most GPUs of a node)
            ids = gpu_labels(gpu.index, gpu.uuid)
            per_device = Counter(gi_label(p.gi) for p in clients)
            for server in sorted(gpu.mps_servers, key=lambda s: (gi_label(s.gi), s.pid)):
                out.add(SERVER_INFO, ids + (gi_label(server.gi), str(server.pid)), 1)
                per_device.setdefault(gi_label(server.gi), 0)
            for gi in sorted(per_device):
                out.add(CLIENTS, ids + (gi,), per_device[gi] if counts_known else None)
            for labels, members in process_series(gpu, clients, self.mode):
                # A container's clients together may pin the sum of their limits and use the
                # sum of their SM shares (at most all of them); unknown if any is unlimited.
                if len(members) == 1:
                    out.add_all(labels, ((self._limit, members[0].mps_memory_limit_bytes),
                                         (self._threads, members[0].mps_active_thread_ratio)))
                    continue
                threads = total([p.mps_active_thread_ratio for p in members])
                out.add_all(labels, ((self._limit, total([p.mps_memory_limit_bytes for p in members])),
                                     (self._threads, None if threads is None else min(1.0, threads))))
        return out
