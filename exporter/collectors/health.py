"""Per physical GPU health and I/O series (gpushare_gpu_*), from GpuInfo.health.

What the board or driver does not report (a GDDR board's remapped rows, NVLink on a PCIe card
without a bridge... see exporter.snapshot.DeviceHealth) has no series, never a 0. A GPU that
could not be read this poll keeps only its last XID (often the reason it went down).
"""

from __future__ import annotations

from itertools import repeat
from operator import attrgetter

from exporter.collectors.base import Block, Families, SnapshotCollector, Spec, gpu_labels
from exporter.snapshot import DeviceHealth, NvLink, Snapshot

GPU = ("gpu", "uuid")
LINK = GPU + ("link",)

MEMORY_TEMPERATURE = Spec("gpushare_gpu_memory_temperature_celsius", "gauge",
                          "Device memory (HBM) temperature.", GPU, "celsius")
PCIE_REPLAYS = Spec("gpushare_gpu_pcie_replay_errors_total", "counter",
                    "PCIe replays (link-level retransmissions) since the driver was loaded.", GPU)
# Counters, not the driver's 20 ms throughput sample: rate() over them is the throughput.
PCIE_TX = Spec("gpushare_gpu_pcie_transmit_bytes_total", "counter",
               "PCIe bytes sent by the GPU since the driver was loaded.", GPU, "bytes")
PCIE_RX = Spec("gpushare_gpu_pcie_receive_bytes_total", "counter",
               "PCIe bytes received by the GPU since the driver was loaded.", GPU, "bytes")
ENCODER = Spec("gpushare_gpu_encoder_utilization_ratio", "gauge",
               "Fraction of the last sample period the video encoder (NVENC) was busy.", GPU, "ratio")
DECODER = Spec("gpushare_gpu_decoder_utilization_ratio", "gauge",
               "Fraction of the last sample period the video decoder (NVDEC) was busy.", GPU, "ratio")
ENCODER_SESSIONS = Spec("gpushare_gpu_encoder_sessions", "gauge", "Active video encoder sessions.", GPU)
NVLINK_UP = Spec("gpushare_gpu_nvlink_up", "gauge", "1 if the NVLink is active, else 0.", LINK)
NVLINK_TX = Spec("gpushare_gpu_nvlink_transmit_bytes_total", "counter",
                 "NVLink data bytes sent since the driver was loaded.", LINK, "bytes")
NVLINK_RX = Spec("gpushare_gpu_nvlink_receive_bytes_total", "counter",
                 "NVLink data bytes received since the driver was loaded.", LINK, "bytes")
# Summed over links, as dcgm-exporter's DCGM_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL: 4 series per
# GPU instead of 4 per link (72 on an H100 SXM); the per-link counts stay in NvLink.errors.
NVLINK_ERRORS = Spec("gpushare_gpu_nvlink_errors_total", "counter",
                     "NVLink data-link errors (crc_flit, crc_data, replay, recovery) since the driver was loaded, "
                     "summed over the GPU's links.", GPU + ("type",))
REMAPPED_ROWS = Spec("gpushare_gpu_remapped_rows_total", "counter",
                     "Memory rows remapped over the board's life, by the error that caused it.", GPU + ("kind",))
REMAP_PENDING = Spec("gpushare_gpu_row_remap_pending", "gauge",
                     "1 while a row remap waits for a GPU reset to take effect, else 0.", GPU)
REMAP_FAILURE = Spec("gpushare_gpu_row_remap_failure", "gauge",
                     "1 if a row could not be remapped (no spare row left), else 0.", GPU)
RETIRED_PAGES = Spec("gpushare_gpu_retired_pages_total", "counter",
                     "Memory pages retired over the board's life, by cause.", GPU + ("cause",))
RETIRED_PENDING = Spec("gpushare_gpu_retired_pages_pending", "gauge",
                       "1 while a page retirement waits for a driver reload, else 0.", GPU)
CLOCK_EVENT_SECONDS = Spec("gpushare_gpu_clock_event_duration_seconds_total", "counter",
                           "Time the clocks were held below the requested clocks, by limiting policy.",
                           GPU + ("reason",), "seconds")
VGPU_LICENSE = Spec("gpushare_gpu_vgpu_license_status", "gauge",
                    "1 if the vGPU guest driver holds a license, 0 if not; absent outside vGPU.", GPU)
LAST_XID = Spec("gpushare_gpu_last_xid", "gauge", "Code of the last XID error seen since the exporter started.", GPU)
LAST_XID_TIME = Spec("gpushare_gpu_last_xid_timestamp_seconds", "gauge",
                     "When the last XID error was seen (Unix time, within one poll interval).", GPU, "seconds")


def _flag(value: bool | None) -> int | None:
    return None if value is None else int(value)


_IO = Block(MEMORY_TEMPERATURE, PCIE_REPLAYS, PCIE_TX, PCIE_RX, ENCODER, DECODER, ENCODER_SESSIONS)
_io_values = attrgetter("memory_temperature_celsius", "pcie_replay_errors", "pcie_tx_bytes", "pcie_rx_bytes",
                        "encoder_utilization_ratio", "decoder_utilization_ratio", "encoder_sessions")
_LINK_NUMBER, _LINK_ACTIVE, _LINK_TX, _LINK_RX, _LINK_ERRORS = (
    attrgetter(name) for name in ("link", "active", "tx_bytes", "rx_bytes", "errors"))
_LINK_LABELS_KEPT = 1024  # (GPU, link numbers) -> label tuples; GPUs and their links rarely change


class HealthCollector(SnapshotCollector):
    """Exports the GPU health families listed in docs/metrics.md."""

    name = "health"
    section = "gpu"

    def __init__(self, source) -> None:
        super().__init__(source)
        self._link_labels: dict[tuple, tuple[tuple[str, ...], ...]] = {}

    def families(self, snapshot: Snapshot) -> Families:
        out = Families()
        for gpu in snapshot.gpus:
            ids = gpu_labels(gpu.index, gpu.uuid)
            if gpu.up:
                self._add(out, ids, gpu.health)
            out.add(LAST_XID, ids, gpu.health.last_xid)
            out.add(LAST_XID_TIME, ids, gpu.health.last_xid_timestamp)
        return out

    def _add(self, out: Families, ids: tuple[str, str], h: DeviceHealth) -> None:
        out.put(_IO, ids, _io_values(h))
        links = h.nvlinks
        if links:
            self._add_links(out, ids, links)
        out.add_each(REMAPPED_ROWS, ids, sorted(h.remapped_rows.items()))
        out.add_all(ids, ((REMAP_PENDING, _flag(h.row_remap_pending)), (REMAP_FAILURE, _flag(h.row_remap_failure))))
        out.add_each(RETIRED_PAGES, ids, sorted(h.retired_pages.items()))
        out.add(RETIRED_PENDING, ids, _flag(h.retired_pages_pending))
        out.add_each(CLOCK_EVENT_SECONDS, ids, sorted(h.clock_event_seconds.items()))
        out.add(VGPU_LICENSE, ids, h.vgpu_license_status)

    def _add_links(self, out: Families, ids: tuple[str, str], links: tuple[NvLink, ...]) -> None:
        """The per-link series (up, bytes each way) and the errors summed over the links.

        Most of the health series of an NVLink board are per link (54 of an H100 SXM's 72): they
        go in one family at a time, from the links' values taken in C, under label tuples kept
        per (GPU, link numbers) from poll to poll. A link whose value is unknown, or repeated
        link numbers, take the series-by-series way, which gives the same series in the same
        order."""
        key = (ids, tuple(map(_LINK_NUMBER, links)))
        labels = self._link_labels.get(key)
        if labels is None:
            numbers = key[1]
            labels = tuple(ids + (str(number),) for number in numbers)
            if len(set(numbers)) != len(numbers):
                labels = ()  # not distinct: one series per link number, the first one's
            if len(self._link_labels) >= _LINK_LABELS_KEPT:
                self._link_labels.clear()
            self._link_labels[key] = labels
        up, tx, rx = tuple(map(_LINK_ACTIVE, links)), tuple(map(_LINK_TX, links)), tuple(map(_LINK_RX, links))
        if labels and None not in up and None not in tx and None not in rx:
            out.put_column(NVLINK_UP, labels, up)
            out.put_column(NVLINK_TX, labels, tx)
            out.put_column(NVLINK_RX, labels, rx)
        else:
            for link in links:
                out.add_all(ids + (str(link.link),), ((NVLINK_UP, _flag(link.active)), (NVLINK_TX, link.tx_bytes),
                                                      (NVLINK_RX, link.rx_bytes)))
        counts = tuple(map(_LINK_ERRORS, links))
        try:  # every count of a kind, link by link, added up in C; a type no link reports has no series
            out.add_each(NVLINK_ERRORS, ids, [(kind, sum(map(dict.get, counts, repeat(kind), repeat(0))))
                                              for kind in sorted(set().union(*counts))])
        except TypeError:  # error maps that are not dicts
            errors: dict[str, int] = {}
            for link in links:
                for kind, count in link.errors.items():
                    errors[kind] = errors.get(kind, 0) + count
            out.add_each(NVLINK_ERRORS, ids, sorted(errors.items()))
