"""The DCGM side of the DCGM backend: connection, entity mapping, watches, retries, status.

Per poll: ``read()`` before NVML is read ((re)connects and rewatches what failed when due,
returns this poll's values with the state of the sources "dcgm" (device fields) and
"dcgm_profiling" (pipe activity)); ``observe(view)`` after, with what NVML saw (UUIDs, GPU
instances): on a new connection or a changed layout it maps DCGM's entities to NVML's and
makes the watches, so that the next poll reads them.

Degrade, never die: every failure leaves the source unavailable with a one-line reason
(logged once, when it changes) and is retried after a delay that fits its cause (RETRY_SECONDS:
a host engine coming back or profiling counters released are noticed within a second, a
missing package or root every minute or half); meanwhile the NVML reader reads what DCGM
would have supplied, so only activity pre-Hopper goes missing. Reasons: dcgm_status.py.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

from exporter.backend.dcgm_bindings import Bindings
from exporter.backend.dcgm_caller import (
    CONNECTION_LOST, NO_DATA, NOT_SUPPORTED, NOT_WATCHED, PROFILING_MULTI_PASS, PROFILING_NOT_SUPPORTED, DcgmCaller,
    DcgmError,
)
from exporter.backend.dcgm_session import DcgmAddress, DcgmSession
from exporter.backend.dcgm_status import SourceLog, reason_for, single_pass_candidates
from exporter.backend.dcgm_values import FIELD_LABELS
from exporter.snapshot import SourceStatus

log = logging.getLogger(__name__)

# Seconds before a failed connect or watch is tried again, by DCGM_ST_* code: cheap retries for
# what clears by itself (an engine restarting: a refused connect costs microseconds; counters
# released by a profiler), slow ones for what needs a person (a package, root, an upgrade).
RETRY_SECONDS = {-21: 1.0, -37: 1.0, -12: 5.0, -33: 60.0, -29: 30.0}
RETRY_DEFAULT_SECONDS = 5.0
SLOW_CONNECT_SECONDS = 0.25  # a failed connect slower than this hit the connect timeout
SLOW_RETRY_SECONDS = 15.0
BLANK_POLLS = 2  # profiling values blank this many polls in a row: paused or taken by another tool


@dataclass
class NvmlView:
    """What the previous NVML read saw: UUID -> index, and each up GPU's MIG instances.

    A recreated instance keeps its GI id but gets a new MIG UUID: that is a layout change too.
    """

    uuids: dict[str, int]
    layout: dict[int, frozenset[tuple]]  # index -> {(GI id, profile id, MIG device UUID)}


@dataclass
class DcgmReading:
    """One poll's DCGM values, and which GPUs they cover."""

    device: dict[int, dict[int, object]] = field(default_factory=dict)  # index -> field -> value or None
    profiling: dict[tuple[int, int | None], dict[int, object]] = field(default_factory=dict)  # (index, GI id)
    # The same keys -> {field: DCGM_ST_*}, only where a value failed (its value above is None).
    device_status: dict[int, dict[int, int]] = field(default_factory=dict)
    profiling_status: dict[tuple[int, int | None], dict[int, int]] = field(default_factory=dict)
    profiled: frozenset[int] = frozenset()  # GPUs whose activity (GPU and instances) DCGM gives
    sources: dict[str, SourceStatus] = field(default_factory=dict)
    value_errors: list[tuple[str, str, str]] = field(default_factory=list)  # (section, call, error)


class DcgmSource:
    """The DCGM half of the backend; see the module docstring."""

    def __init__(self, bindings: Bindings, address: DcgmAddress | None, interval: float,
                 session: DcgmSession | None = None, update_interval: float | None = None):
        self.bindings = bindings
        self.update_interval = interval if update_interval is None else update_interval
        self.caller = session.caller if session is not None else DcgmCaller(bindings)
        self.address = address
        self.interval = interval
        self.session = session  # connected, or None
        self.down_reason = ""  # why session is None
        self.errors: dict[tuple[str, str], int] = {}  # cumulative value/call failures
        self._polls = 0
        self._next_connect = 0
        self._mapped = False  # entities mapped and watches made on this session
        self._view: NvmlView | None = None
        self._profiling: dict[int, tuple[str, str, int]] = {}  # index -> (state, reason, retry poll)
        self._blank: dict[int, int] = {}
        self._narrowed: set[int] = set()  # GPUs warned about a narrowed profiling watch
        # (fields, narrowed subset) -> GPUs narrowed so that since the last warning: one line for all
        self._narrowing: dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]] = {}
        self._slow_connect = False
        self._sources_key: tuple | None = None  # what _sources last made its statuses of
        self._sources_made: dict[str, SourceStatus] = {}
        self.log = SourceLog()

    @property
    def where(self) -> str:
        return "the embedded host engine" if self.address is None else f"nv-hostengine at {self.address}"

    def _polls_for(self, seconds: float) -> int:
        return max(1, math.ceil(seconds / self.interval))

    def _retry_polls(self, exc: DcgmError) -> int:
        """Polls to wait before trying again after ``exc`` (see RETRY_SECONDS)."""
        seconds = RETRY_SECONDS.get(exc.code, RETRY_DEFAULT_SECONDS)
        if self._slow_connect:
            seconds = max(seconds, SLOW_RETRY_SECONDS)
        return self._polls_for(seconds)

    # -- per poll -------------------------------------------------------------------------------

    def read(self) -> DcgmReading:
        self._polls += 1
        self.caller.begin_poll()
        reading = None
        try:
            self._connect_if_due()
            if self.session is not None and not self._mapped and self._view is not None and self._view.uuids:
                self._map_and_watch()  # reconnected: what NVML saw last poll is good enough to map
            if self.session is not None and self._mapped:
                self._retry_profiling()
                reading = self._values()
        except DcgmError as exc:
            self._drop(exc)
            reading = None
        if reading is None:
            reading = DcgmReading()
        reading.sources = self._sources(reading)
        self.log.update(reading.sources)
        return reading

    def observe(self, view: NvmlView) -> None:
        """After NVML's read: map entities and watch (again) on a new session or a changed layout."""
        old = self._view
        self._view = view
        if old is not None and self._mapped and (old.uuids != view.uuids or any(
                gis != old.layout.get(index) for index, gis in view.layout.items())):
            self._mapped = False  # GPUs or GPU instances changed: DCGM renumbers its entities
        if self.session is None or self._mapped or not view.uuids:
            return  # nothing to map to before NVML has read some GPU's identity
        try:
            self._map_and_watch()
        except DcgmError as exc:
            self._drop(exc)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    # -- steps -----------------------------------------------------------------------------------

    def _connect_if_due(self) -> None:
        if self.session is not None or self._polls < self._next_connect:
            return
        session = DcgmSession(self.bindings, self.caller, self.address, self.interval, self.update_interval)
        started = time.monotonic()
        try:
            session.connect()
        except DcgmError:
            session.close()
            # A refused connect returns at once and is cheap to repeat; one that ran into the
            # connect timeout (an unreachable address) would hold every poll up: try it rarely.
            self._slow_connect = time.monotonic() - started > SLOW_CONNECT_SECONDS
            raise
        self.session, self.down_reason, self._mapped, self._slow_connect = session, "", False, False
        log.info("connected to %s (DCGM %s); asking it to sample every %gs", self.where,
                 session.version or "version unknown", session.update_interval)

    def _drop(self, exc: DcgmError) -> None:
        self.down_reason = reason_for(exc, self.where)
        if self.session is not None:
            self.session.close()
            self.session = None
        self._mapped = False
        self._profiling.clear()
        self._next_connect = self._polls + self._retry_polls(exc)

    def _map_and_watch(self) -> None:
        session = self.session
        session.close_watches()
        session.discover(self._view.uuids)
        session.watch_device()
        self._profiling.clear()
        self._blank.clear()
        missing_module = None
        for index in sorted(session.gpu_index.values()):
            if missing_module is not None:
                self._profiling[index] = ("failed", missing_module, self._polls + self._polls_for(RETRY_SECONDS[-33]))
                continue
            self._watch_profiling(index)
            state = self._profiling[index]
            if state[0] == "failed" and "(-33)" in state[1]:
                missing_module = state[1]  # the module serves every GPU: no use asking again
        self._mapped = True
        self._warn_narrowed()
        session.update_all()

    def _watch_profiling(self, index: int) -> None:
        try:
            fields = self.session.supported_profiling(index)
            for n, subset in enumerate(single_pass_candidates(fields)):
                try:
                    self.session.watch_profiling(index, subset)
                except DcgmError as exc:
                    if exc.code != PROFILING_MULTI_PASS or n == len(single_pass_candidates(fields)) - 1:
                        raise
                    continue
                if subset != fields and index not in self._narrowed:
                    self._narrowed.add(index)
                    self._narrowing.setdefault((fields, subset), []).append(index)
                break
            self._profiling[index] = ("watched", "", 0)
        except DcgmError as exc:
            if exc.code in CONNECTION_LOST:
                raise
            if exc.code in (PROFILING_NOT_SUPPORTED, NOT_SUPPORTED):
                self._profiling[index] = ("unsupported", f"GPU {index} has no DCGM profiling metrics", 0)
            else:
                self._profiling[index] = ("failed", reason_for(exc, self.where), self._polls + self._retry_polls(exc))

    def _warn_narrowed(self) -> None:
        """One warning per narrowing, naming every GPU it applies to (not one line per GPU)."""
        for (fields, subset), indices in sorted(self._narrowing.items()):
            log.warning("%s %s: DCGM cannot collect profiling fields %s in one pass (-38); watching %s",
                        "GPU" if len(indices) == 1 else "GPUs", ", ".join(map(str, sorted(indices))),
                        list(fields), list(subset))
        self._narrowing.clear()

    def _retry_profiling(self) -> None:
        due = [i for i, (state, _, at) in self._profiling.items() if state == "failed" and self._polls >= at]
        for index in due:
            self._watch_profiling(index)
        self._warn_narrowed()
        if any(self._profiling[i][0] == "watched" for i in due):
            self.session.update_all()

    def _values(self) -> DcgmReading:
        session = self.session
        device, device_status = session.read_device()
        profiling, profiling_status = session.read_profiling()
        reading = DcgmReading(device=device, profiling=profiling, device_status=device_status,
                              profiling_status=profiling_status)
        for index, statuses in device_status.items():
            self._check(statuses, "gpu", reading)
        for (index, gi), statuses in profiling_status.items():
            self._check(statuses, "gpu" if gi is None else "mig", reading)
        blank_counts = self._blank
        for index in session.profiling:
            gpu_values = profiling.get((index, None))
            blank = bool(gpu_values) and (index, None) not in profiling_status and all(
                value is None for value in gpu_values.values())
            blank_counts[index] = blank_counts.get(index, 0) + 1 if blank else 0
        reading.profiled = frozenset(session.profiling)
        return reading

    def _check(self, statuses: dict[int, int], section: str, reading: DcgmReading) -> None:
        for fid, status in statuses.items():
            if status in (0, NO_DATA, NOT_SUPPORTED):
                continue  # NOT_SUPPORTED: this board has no such reading (absent, not an error)
            if status == NOT_WATCHED:
                self._mapped = False  # the engine forgot our watches (restarted): make them again
                continue
            error = self._status_name(status)
            label = FIELD_LABELS.get(fid, f"dcgm:{fid}")
            reading.value_errors.append((section, label, error))
            self.errors[(label, error)] = self.errors.get((label, error), 0) + 1

    def _status_name(self, status: int) -> str:
        cls = self.bindings.structs.DCGMError._valClassMapping.get(status) if hasattr(
            self.bindings.structs.DCGMError, "_valClassMapping") else None
        name = cls.__name__ if cls is not None else f"Code{status}"
        return name[len("DCGMError_"):] if name.startswith("DCGMError_") else name

    def _sources(self, reading: DcgmReading) -> dict[str, SourceStatus]:
        if self.session is None:
            reason = self.down_reason or f"not connected to {self.where} yet"
            return {"dcgm": SourceStatus(False, reason), "dcgm_profiling": SourceStatus(False, reason)}
        # Connected, the statuses change only with what they are made of: made again only then.
        key = (self.session, self._mapped, tuple(self._profiling.items()),
               tuple(index for index, polls in self._blank.items() if polls >= BLANK_POLLS), bool(self.session.gpu_index))
        if key != self._sources_key:
            self._sources_key, self._sources_made = key, self._connected_sources()
        return dict(self._sources_made)

    def _connected_sources(self) -> dict[str, SourceStatus]:
        out = {"dcgm": SourceStatus(True)}
        if not self._mapped and not self._profiling:
            return out  # profiling not set up yet: unknown, not unavailable
        problems = []
        blank = []
        for index, (state, reason, _) in sorted(self._profiling.items()):
            if state == "failed":
                problems.append(reason)
            elif state == "watched" and self._blank.get(index, 0) >= BLANK_POLLS:
                blank.append(str(index))
        if blank:  # one reason naming every GPU, not one per GPU
            problems.append(f"profiling values blank on GPU{'s' if len(blank) > 1 else ''} {', '.join(blank)}: "
                            "profiling paused (dcgmi profile --pause) or the GPU performance counters held by "
                            "another tool")
        if not self.session.gpu_index:
            problems.append(f"{self.where} reports none of the GPUs NVML sees")
        elif not any(state != "unsupported" for state, _, _ in self._profiling.values()):
            problems.append("no GPU here has DCGM profiling metrics")
        out["dcgm_profiling"] = SourceStatus(not problems, "; ".join(dict.fromkeys(problems)))
        return out
