"""Health and I/O reads of one GPU into a DeviceHealth (receives the NvmlCaller; no pynvml import).

Getters and their units (every call goes through NvmlCaller.call, the choke point):

- ``nvmlDeviceGetFieldValues``, one call per poll for:
  ``NVML_FI_DEV_MEMORY_TEMP`` (°C), ``NVML_FI_DEV_PCIE_REPLAY_COUNTER`` (count since driver
  load), ``NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES`` (PCIe bytes since driver load; "Value can be
  wrapped", nvml.h) and, per NVLink, ``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX`` with
  scopeId = link (KiB of data since driver load, so bytes = KiB * 1024).
  The PCIe byte counters replace ``nvmlDeviceGetPcieThroughput``, which samples the bus for
  20 ms per call on a real driver (40 ms of every poll per GPU for TX and RX): the counters
  are exported as they are, and the bytes/s of DeviceHealth are derived from two polls'
  counters over the driver's own timestamps (absent on the first poll and after a wrap).
  In the same call, ``NVML_FI_DEV_PERF_POLICY_POWER`` ... ``_RELIABILITY`` (74-79): the ns the
  clocks were held below the requested clocks by that policy, cumulative (-> seconds), the
  value ``nvmlDeviceGetViolationStatus(h, NVML_PERF_POLICY_*).violationTime`` gives, without
  its six calls per GPU.
- ``nvmlDeviceGetEncoderUtilization`` / ``nvmlDeviceGetDecoderUtilization``: [percent, sampling
  period µs] (-> ratio); ``nvmlDeviceGetEncoderStats``: (sessions, fps, latency µs).
- ``nvmlDeviceGetRemappedRows``: (correctable, uncorrectable, pending, failure) rows;
  ``nvmlDeviceGetRetiredPages`` per cause (page addresses: counted) and
  ``nvmlDeviceGetRetiredPagesPendingStatus``. Read every poll: one call on a board with a row
  remapper (the choke point remembers NotSupported, so the other costs nothing), and these are
  what an operator pages on: they must not lag a minute behind the driver.

Slow-changing values are read on the first poll and then once SLOW_SECONDS have passed on the
backend's clock (the simulated host's clock in simulation), and kept in between (a poll in
between costs no call for them): each NVLink's state (``nvmlDeviceGetNvLinkState``) and error
counters (``nvmlDeviceGetNvLinkErrorCounter``, counts: 4 calls per link, 72 on an H100 SXM),
and the vGPU license (``nvmlDeviceGetVirtualizationMode``; ``nvmlDeviceGetGridLicensableFeatures`` only in a
vGPU guest). NotSupported (NA) leaves a value None / absent, never 0.
"""

from __future__ import annotations

from exporter.backend.nvml_fieldrows import field_rows
from exporter.backend.nvml_types import NA, PollContext, field_of, frozen_maker, ok
from exporter.snapshot import DeviceHealth, NvLink

# Slow-changing reads happen on the first poll and then at most once a minute (every 12th poll
# at a 5 s interval): link states and the license change on a scale of days, and NVLink error
# counters are read by alerts as rates over minutes.
SLOW_SECONDS = 60.0

# Snapshot clock_event_seconds key -> pynvml perf policy field id (what DCGM_FI_DEV_*_VIOLATION report).
VIOLATION_FIELDS = (
    ("power", "NVML_FI_DEV_PERF_POLICY_POWER"),
    ("thermal", "NVML_FI_DEV_PERF_POLICY_THERMAL"),
    ("sync_boost", "NVML_FI_DEV_PERF_POLICY_SYNC_BOOST"),
    ("board_limit", "NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT"),
    ("low_utilization", "NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION"),
    ("reliability", "NVML_FI_DEV_PERF_POLICY_RELIABILITY"),
)
# NvLink.errors key -> pynvml NVLink error counter constant.
NVLINK_ERRORS = (
    ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT"),
    ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA"),
    ("replay", "NVML_NVLINK_ERROR_DL_REPLAY"),
    ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY"),
)
# 18 links a board, every field given: built without object.__setattr__ calls, by filling the new
# object's __dict__ (read() does it inline), which frozen_maker says NvLink allows.
_new = object.__new__
_NVLINK_BY_DICT = frozen_maker(NvLink) is not NvLink
_device_health = frozen_maker(DeviceHealth)
_VGPU_GUEST = 2  # NVML_GPU_VIRTUALIZATION_MODE_VGPU: the driver runs inside a vGPU VM


class HealthReader:
    """DeviceHealth of one GPU; state kept between polls: the slow values and the link count."""

    def __init__(self, caller, clock):
        """``clock``: seconds now, on the clock that paces the slow reads."""
        self.caller = caller
        self.nv = caller.nv
        self.clock = clock
        self._slow_at: float | None = None  # clock() at the last slow read
        self._slow: dict = {}  # DeviceHealth keyword values of the last slow read
        self._links: int | None = None  # NVLink links of this board (0: none); None: not known yet
        self._link_state: dict[int, tuple[bool | None, dict[str, int]]] = {}
        self.last_xid: tuple[int, float] | None = None  # (code, Unix seconds), set by the XID drain
        self._violation_keys = {getattr(self.nv, const): key for key, const in VIOLATION_FIELDS}
        self._value_members = _value_members(self.nv)  # NVML_VALUE_TYPE_* -> c_nvmlValue_t member
        # direction ("tx", "rx") -> (bytes, driver timestamp µs) of the last poll: the rate's base
        self._pcie_last: dict[str, tuple[int, int]] = {}
        self._ids: dict[tuple[bool, int | None], tuple] = {}  # (own health fields?, links) -> field ids

    def reset(self) -> None:
        """Forget what belongs to a handle (a lost or reset GPU): read everything again."""
        self._slow_at = None
        self._slow = {}
        self._links = None
        self._link_state = {}
        self._pcie_last = {}

    def read(self, ctx: PollContext, h, mig_mode: bool | None, skip: frozenset[str] = frozenset(),
             supplied: dict | None = None) -> DeviceHealth:
        """This poll's health of the GPU behind handle ``h``. ``skip``: "health" when another
        source (DCGM) supplies memory temperature, PCIe replays, media engines, violations,
        remapped rows and retired pages (NVLink, PCIe throughput and the license stay here);
        ``supplied``: that source's DeviceHealth values, set over what is read here."""
        now = self.clock()
        slow_due = self._slow_at is None or not 0 <= now - self._slow_at < SLOW_SECONDS
        mine = "health" not in skip
        if slow_due:
            self._slow, self._slow_at = self._read_slow(ctx, h), now
        values: dict = dict(self._slow)
        fields = self._fields(ctx, h, mine)
        values.update(fields.pop("_values"))
        states, tx, rx = self._link_state, fields["tx"], fields["rx"]
        nvlinks = []
        for link in range(self._links or 0):
            active, errors = states.get(link) or (None, {})
            if not _NVLINK_BY_DICT:
                nvlinks.append(NvLink(link, active, tx.get(link), rx.get(link), errors))
                continue
            # frozen_maker's fast way inline (every field given, in field order): 144 a poll on the
            # 8-GPU NVLink node, a call and a keyword check less each (tests/test_health.py).
            nvlink = _new(NvLink)
            nvlink.__dict__.update(link=link, active=active, tx_bytes=tx.get(link), rx_bytes=rx.get(link),
                                   errors=errors)
            nvlinks.append(nvlink)
        values["nvlinks"] = tuple(nvlinks)
        values.update(self._pcie_rates(fields["pcie"]))
        values.update(self._media(ctx, h, mig_mode, utilization=mine))
        if mine:
            values["clock_event_seconds"] = fields["violations"]
            values.update(self._memory(ctx, h))
        if self.last_xid is not None:
            values["last_xid"], values["last_xid_timestamp"] = self.last_xid
        if supplied:
            values.update(supplied)
        return _device_health(**values)

    # -- per poll -------------------------------------------------------------------------

    def _fields(self, ctx: PollContext, h, mine: bool) -> dict:
        """Memory temperature, PCIe replays and byte counters, clock-event (violation) times
        and NVLink data counters in one field-values call."""
        nv = self.nv
        ids = self._ids.get((mine, self._links))
        if ids is None:  # the request depends only on these two: built once, not every poll
            ids = [nv.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, nv.NVML_FI_DEV_PCIE_COUNT_RX_BYTES]
            if mine:
                ids += [nv.NVML_FI_DEV_MEMORY_TEMP, nv.NVML_FI_DEV_PCIE_REPLAY_COUNTER, *self._violation_keys]
            if self._links is None:
                ids.append(nv.NVML_FI_DEV_NVLINK_LINK_COUNT)
            for link in range(self._links or 0):
                ids += [(nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link), (nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link)]
            ids = self._ids[(mine, self._links)] = tuple(ids)
        out: dict = {"_values": {}, "tx": {}, "rx": {}, "pcie": {}, "violations": {}}
        answer = ctx.raw("gpu", "nvmlDeviceGetFieldValues", h, ids)
        if answer is NA and self._links is None:
            self._links = 0  # no field values at all (old driver): no NVLink either
        if not ok(answer):
            return out  # a failure: asked again next poll
        success = nv.NVML_SUCCESS
        link_count, memory_temp, replays = (nv.NVML_FI_DEV_NVLINK_LINK_COUNT, nv.NVML_FI_DEV_MEMORY_TEMP,
                                             nv.NVML_FI_DEV_PCIE_REPLAY_COUNTER)
        pcie_tx, pcie_rx = nv.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, nv.NVML_FI_DEV_PCIE_COUNT_RX_BYTES
        link_tx, link_rx = nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
        violation_keys, members = self._violation_keys, self._value_members
        # every entry in one step (struct), its value raw, or None: read through ctypes
        rows, converts = field_rows(answer, members) or (_ctypes_rows(answer, members), {})
        tx, rx = out["tx"], out["rx"]
        for fid, scope, stamp, _latency, value_type, ret, number in rows:
            if ret != success:
                if fid == link_count:
                    self._links = 0  # NotSupported: a board without NVLink
                continue
            if value_type in converts:  # not an unsigned long long (the counters are)
                number = converts[value_type](number)
            # NVLink counters first: 36 of an 18-link board's 46 entries (the field ids differ,
            # so the order of the tests changes nothing else).
            if fid == link_tx:
                tx[int(scope)] = int(number) * 1024  # KiB -> bytes
            elif fid == link_rx:
                rx[int(scope)] = int(number) * 1024
            elif fid == memory_temp:
                out["_values"]["memory_temperature_celsius"] = float(number)
            elif fid == replays:
                out["_values"]["pcie_replay_errors"] = int(number)
            elif fid in violation_keys:
                out["violations"][violation_keys[fid]] = number / 1e9  # ns -> s
            elif fid == pcie_tx:
                out["pcie"]["tx"] = (int(number), int(stamp))
            elif fid == pcie_rx:
                out["pcie"]["rx"] = (int(number), int(stamp))
            elif fid == link_count:
                self._links = int(number)
        if self._links and not self._link_state:
            self._link_state = self._read_links(ctx, h)  # the count just became known
        return out

    def _pcie_rates(self, counters: dict[str, tuple[int, int]]) -> dict:
        """The PCIe byte counters, and bytes/s since the previous poll's counters (none on the
        first poll, when the driver's timestamp did not move, or when a counter went back: a
        wrap or a reset)."""
        out: dict = {}
        for direction, (count, stamp) in counters.items():
            out[f"pcie_{direction}_bytes"] = count
            last = self._pcie_last.get(direction)
            if last is not None and stamp > last[1] and count >= last[0]:
                out[f"pcie_{direction}_bytes_per_second"] = (count - last[0]) / ((stamp - last[1]) / 1e6)
        self._pcie_last = dict(counters)
        return out

    def _media(self, ctx: PollContext, h, mig_mode: bool | None, utilization: bool) -> dict:
        out: dict = {}
        if mig_mode:
            return out  # the media engines belong to GPU instances under MIG: NotSupported here
        engines = (("encoder_utilization_ratio", "nvmlDeviceGetEncoderUtilization"),
                   ("decoder_utilization_ratio", "nvmlDeviceGetDecoderUtilization"))
        for key, fn in engines if utilization else ():  # DCGM supplies them (fields 206, 207)
            util = ctx.get("gpu", fn, h)
            if util is not None:
                out[key] = util[0] / 100.0
        stats = ctx.get("gpu", "nvmlDeviceGetEncoderStats", h)
        if stats is not None:
            out["encoder_sessions"] = int(stats[0])
        return out

    # -- at most every SLOW_SECONDS ------------------------------------------------------

    def _read_slow(self, ctx: PollContext, h) -> dict:
        out: dict = {}
        if self._links:
            self._link_state = self._read_links(ctx, h)
        out["vgpu_license_status"] = self._license(ctx, h)
        return out

    def _memory(self, ctx: PollContext, h) -> dict:
        """Remapped rows and retired pages (each board has one mechanism or the other, or none)."""
        out: dict = {}
        rows = ctx.get("gpu", "nvmlDeviceGetRemappedRows", h)
        if rows is not None:
            corrected, uncorrected, pending, failure = rows
            out["remapped_rows"] = {"correctable": int(corrected), "uncorrectable": int(uncorrected)}
            out["row_remap_pending"], out["row_remap_failure"] = bool(pending), bool(failure)
            return out  # a board with a row remapper retires no pages: no call, no warning
        retired = {}
        for key, const in (("single_bit_ecc", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
                           ("double_bit_ecc", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR")):
            pages = ctx.get("gpu", "nvmlDeviceGetRetiredPages", h, getattr(self.nv, const))
            if pages is not None:
                retired[key] = len(pages)
        out["retired_pages"] = retired
        if retired:
            pending = ctx.get("gpu", "nvmlDeviceGetRetiredPagesPendingStatus", h)
            if pending is not None:
                out["retired_pages_pending"] = pending == self.nv.NVML_FEATURE_ENABLED
        return out

    def _read_links(self, ctx: PollContext, h) -> dict[int, tuple[bool | None, dict[str, int]]]:
        nv = self.nv
        state = {}
        for link in range(self._links or 0):
            active = ctx.get("gpu", "nvmlDeviceGetNvLinkState", h, link)
            errors = {}
            for key, const in NVLINK_ERRORS:
                count = ctx.get("gpu", "nvmlDeviceGetNvLinkErrorCounter", h, link, getattr(nv, const))
                if count is not None:
                    errors[key] = int(count)
            state[link] = (None if active is None else bool(active), errors)
        return state

    def _license(self, ctx: PollContext, h) -> int | None:
        """1 licensed / 0 not, from the first licensable feature; None outside a vGPU guest."""
        mode = ctx.get("gpu", "nvmlDeviceGetVirtualizationMode", h)
        if mode != _VGPU_GUEST:
            return None
        features = ctx.get("gpu", "nvmlDeviceGetGridLicensableFeatures_v4", h)
        if not ok(features) or features is NA or not features.licensableFeaturesCount:
            return None
        return int(bool(features.gridLicensableFeatures[0].featureState))


def _ctypes_rows(answer, members: dict[int, str]):
    """field_rows() read entry by entry through ctypes (a layout field_rows does not read)."""
    for entry in answer:
        # The struct's fields read directly: pynvml's struct class hooks every attribute read
        # in Python to turn bytes into str, and no field of a field value is bytes. The value
        # is read as its valueType says (one dict lookup, not a chain of ifs).
        value_type = field_of(entry, "valueType")
        yield (field_of(entry, "fieldId"), field_of(entry, "scopeId"), field_of(entry, "timestamp"), None, value_type,
               field_of(entry, "nvmlReturn"), getattr(field_of(entry, "value"), members.get(value_type, "ullVal")))


def _value_members(nv) -> dict[int, str]:
    """NVML_VALUE_TYPE_* -> the c_nvmlValue_t member holding that type (unsigned long long for
    any other type, as before)."""
    members = {nv.NVML_VALUE_TYPE_DOUBLE: "dVal", nv.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
               nv.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal", nv.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal"}
    signed_int = getattr(nv, "NVML_VALUE_TYPE_SIGNED_INT", None)
    if signed_int is not None:
        members.setdefault(signed_int, "siVal")
    return members

