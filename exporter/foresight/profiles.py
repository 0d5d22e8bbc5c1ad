"""Learned memory profiles of workloads, built from per-poll observations of their processes.

A :class:`RunRecorder` follows one process (one "run") from first sight to exit and keeps
its (age, used bytes) samples, compacted so memory stays bounded however long it runs.
When the run ends, :func:`learn_run` folds it into the workload's :class:`WorkloadProfile`.

The profile's ``timeline`` is an *upper envelope* of memory over the age of a run, stored as
steps ``(age_start_seconds, bytes)``: the value of a step holds until the next step starts.
Compaction only ever raises values (it merges neighbouring steps into their maximum), so
the envelope never under-states what the run used at any age it covers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from exporter.foresight.envelope import Timeline, _dedupe, compact_envelope  # noqa: F401 - used and re-exported

MAX_TIMELINE_STEPS = 32  # steps kept per profile (about 0.5 KiB of JSON)
MAX_RUN_POINTS = 512  # raw samples kept per live run before compaction kicks in
PEAK_BAND = 0.9  # "at its peak" means at or above 90 % of the peak
RECENT_RUNS = 5  # complete runs whose peaks the learned peak is taken over


@dataclass(frozen=True)
class WorkloadProfile:
    """What the exporter has learned about one workload key.

    ``runs`` counts finished runs whose whole life was observed; a profile with ``runs == 0``
    is provisional (learned from running or truncated runs only) and is not used for
    forecasts, because its duration and what follows its last sample are unknown.
    """

    key: str
    peak_bytes: int  # learned peak memory of one run, bytes
    peak_offset_seconds: float  # age of a run when it first reaches its peak, seconds
    duration_seconds: float | None  # length of the newest finished run, seconds; None if none finished
    runs: int  # finished, fully observed runs learned
    samples: int  # observations folded in, over all runs
    timeline: Timeline  # upper envelope of memory by age (see module docstring)
    updated_at: float  # Unix seconds of the last change
    device_bytes: int | None = None  # usable memory of the device the timeline was learned on
    recent_peaks: tuple[int, ...] = ()  # peaks of the last RECENT_RUNS complete runs, oldest first (bytes)
    # ages (s) at which those runs first came within PEAK_BAND of the learned peak, oldest first: when in a
    # run its peak comes, and how much that varies from run to run (exporter.foresight.confidence)
    recent_peak_ages: tuple[float, ...] = ()

    @property
    def peak_at_fraction(self) -> float | None:
        """Where in its life a run peaks, as a fraction 0..1 of its duration; None if unknown."""
        if not self.duration_seconds:
            return None
        return min(1.0, self.peak_offset_seconds / self.duration_seconds)

    @property
    def usable(self) -> bool:
        """True when the profile may drive forecasts (at least one finished run with a timeline)."""
        return self.runs >= 1 and bool(self.timeline) and self.duration_seconds is not None

    def scaled_timeline(self) -> Timeline:
        """The timeline with its values scaled so its maximum equals ``peak_bytes``.

        The timeline comes from the newest finished run; the learned peak can be higher
        (an earlier or a running process went higher), and forecasts must use the higher one.
        """
        cached = self.__dict__.get("_scaled")  # asked for by every process each poll: compute once
        if cached is not None:
            return cached
        top = max((v for _, v in self.timeline), default=0)
        if top <= 0 or top >= self.peak_bytes:
            scaled = self.timeline
        else:
            factor = self.peak_bytes / top
            scaled = tuple((age, int(round(v * factor))) for age, v in self.timeline)
        self.__dict__["_scaled"] = scaled  # frozen, so the result never changes
        return scaled

    def peak_width_seconds(self) -> float:
        """How long a run stays within PEAK_BAND of its peak, seconds (0 when unknown)."""
        timeline = self.scaled_timeline()
        if not timeline or self.duration_seconds is None:
            return 0.0
        ends = [age for age, _ in timeline[1:]] + [max(self.duration_seconds, timeline[-1][0])]
        return sum(
            end - age for (age, v), end in zip(timeline, ends) if v >= PEAK_BAND * self.peak_bytes
        )


def timeline_level(timeline: Timeline, age: float, before: bool = False) -> int:
    """The value of the step in force at ``age`` (bytes; the first step's before it starts).

    ``before``: the step in force just before ``age``, so a step starting exactly there is not
    counted yet (a run waiting at a rise is on the level below it).
    """
    level = timeline[0][1] if timeline else 0
    for start, value in timeline:
        if start > age or (before and start >= age):
            break
        level = value
    return level


class RunRecorder:
    """Samples of one live process: ages in seconds since it started, memory in bytes."""

    def __init__(self, key: str, start: float, seen_from_start: bool, device_bytes: int | None = None) -> None:
        self.key = key
        self.device_bytes = device_bytes  # usable memory of the device it runs on
        self.start = start  # Unix seconds the run started (or was first seen)
        self.seen_from_start = seen_from_start  # False when it was already running when we began
        self.points: list[tuple[float, int]] = []
        self.peak_bytes = 0
        self.peak_offset = 0.0
        self.last_age = 0.0
        self.samples = 0

    def add(self, now: float, used_bytes: int) -> None:
        """Record one observation taken at Unix time ``now``."""
        age = now - self.start
        if not age > 0.0:  # max(0.0, age), NaN included, without the call (every process, every poll)
            age = 0.0
        self.samples += 1
        if age > self.last_age:
            self.last_age = age
        if used_bytes > self.peak_bytes:
            self.peak_bytes, self.peak_offset = used_bytes, age
        self.points.append((age, used_bytes))
        if len(self.points) > MAX_RUN_POINTS:
            self.points = list(compact_envelope(self.points, MAX_RUN_POINTS // 2))

    def first_age_at_or_above(self, threshold: float) -> float | None:
        """Age (seconds) of the first sample using at least ``threshold`` bytes; None if none did."""
        if self.peak_bytes < threshold:
            return None
        return next(age for age, value in self.points if value >= threshold)

    def age(self, now: float) -> float:
        """Seconds since the run started."""
        return max(0.0, now - self.start)

    def timeline(self) -> Timeline:
        """The run's memory envelope, compacted to MAX_TIMELINE_STEPS.

        A rise seen at one sample happened somewhere since the previous one; the step is
        moved back to the midpoint of that gap, so a peak's learned start is not biased late
        by the poll interval (falls stay at the sample that saw them, which is conservative).
        """
        points = self.points
        shifted = points[:1]
        for (prev_age, prev_value), (age, value) in zip(points, points[1:]):
            shifted.append(((prev_age + age) / 2 if value > prev_value else age, value))
        return compact_envelope(shifted, MAX_TIMELINE_STEPS)


def learn_run(
    old: WorkloadProfile | None, run: RunRecorder, now: float, truncated: bool, poll_interval: float = 0.0
) -> WorkloadProfile:
    """The profile after a run of its workload ended.

    A complete run (watched from its start, not killed while the device was full) is robust
    to a run that missed a short spike between two polls:

    - the learned peak is the highest peak of the last RECENT_RUNS complete runs (their
      upper quantile), not the newest run's, so one run that missed the spike does not
      lower it; an old peak leaves the window after RECENT_RUNS lower runs;
    - the timeline, duration and peak offset come from the newest run that reached
      PEAK_BAND of that peak; a run that stayed below it keeps the previous timeline.

    A truncated or partly watched run only raises the peak. The run ended somewhere between
    its last sighting and the next poll, so its duration is taken as the last sighted age plus
    half ``poll_interval`` (seconds).
    """
    complete = run.seen_from_start and not truncated and run.samples > 0
    if not complete:
        return learn_running(old, run, now)
    history = old.recent_peaks if old is not None and old.runs > 0 else ()
    if old is not None and old.runs > 0 and not history:  # a profile stored before recent_peaks
        history = (old.peak_bytes,)
    recent = (history + (run.peak_bytes,))[-RECENT_RUNS:]
    peak = max(recent)
    # When this run came within PEAK_BAND of the learned peak; a run that never did (its spike
    # fell between polls) says nothing about when the peak comes, and adds no age.
    peak_age = run.first_age_at_or_above(PEAK_BAND * peak)
    ages = old.recent_peak_ages if old is not None and old.runs > 0 else ()
    ages = (ages + (() if peak_age is None else (round(peak_age, 1),)))[-RECENT_RUNS:]
    runs = (old.runs if old else 0) + 1
    samples = (old.samples if old else 0) + run.samples
    if old is not None and old.usable and run.peak_bytes < PEAK_BAND * peak:
        # This run missed the peak (a spike between polls, a smaller input): keep the timing
        # of the runs that saw it.
        return replace(old, peak_bytes=peak, runs=runs, samples=samples, updated_at=now, recent_peaks=recent,
                       recent_peak_ages=ages)
    timeline = run.timeline()
    top = max(value for _, value in timeline)
    return WorkloadProfile(
        key=run.key,
        peak_bytes=peak,
        peak_offset_seconds=next(age for age, value in timeline if value == top),
        duration_seconds=run.last_age + poll_interval / 2,
        runs=runs,
        samples=samples,
        timeline=timeline,
        updated_at=now,
        device_bytes=run.device_bytes,
        recent_peaks=recent,
        recent_peak_ages=ages,
    )


def learn_running(old: WorkloadProfile | None, run: RunRecorder, now: float) -> WorkloadProfile:
    """The profile after looking at a run still in progress (or cut short): raise the peak only.

    Without a profile yet, this creates a provisional one (runs 0) from what the run did so far.
    """
    if old is None:
        return WorkloadProfile(
            key=run.key,
            peak_bytes=run.peak_bytes,
            peak_offset_seconds=run.peak_offset,
            duration_seconds=None,
            runs=0,
            samples=run.samples,
            timeline=run.timeline(),
            updated_at=now,
            device_bytes=run.device_bytes,
        )
    if old.runs == 0 and run.seen_from_start and run.last_age > _timeline_end(old):
        # A provisional profile follows the longest-watched run, so its timeline grows.
        higher = run.peak_bytes >= old.peak_bytes
        return replace(
            old,
            peak_bytes=max(old.peak_bytes, run.peak_bytes),
            peak_offset_seconds=run.peak_offset if higher else old.peak_offset_seconds,
            timeline=run.timeline(),
            samples=max(old.samples, run.samples),
            updated_at=now,
            device_bytes=run.device_bytes,
        )
    if run.peak_bytes <= old.peak_bytes:
        return old
    return replace(old, peak_bytes=run.peak_bytes, updated_at=now)


def _timeline_end(profile: WorkloadProfile) -> float:
    """Age of the last timeline step, seconds (0 for an empty timeline)."""
    return profile.timeline[-1][0] if profile.timeline else 0.0
