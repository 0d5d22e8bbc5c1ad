"""Where a live run is on its workload's learned timeline, and how much slower it runs.

Co-tenants slow each other down, so a run reaches each part of its learned timeline later
than the solo run it was learned from. Comparing the run with the timeline at its raw age
goes wrong in both directions: a late run looks as if it skipped its ramp (and is dropped
from the forecast just before its peak), and a late peak is expected too early.

Instead the learned timeline is cut into *landmarks*: the ages where it rises or falls by at
least LANDMARK_SHARE of its peak since the previous landmark, each with the level half-way
across the change. A run passes a landmark when a sample of it crosses that level (in the
landmark's direction), in order. The ratio of the age at which a run passed a landmark to
the landmark's learned age measures the run's slowdown; the run's *position* on the learned
timeline is the last passed landmark plus the time since, divided by that slowdown, and never
beyond the next landmark while the run has not crossed it (a late peak is still to come).

A run may cross a landmark between two polls unseen (a spike shorter than the poll interval):
a landmark not crossed by LATE_FACTOR times its expected age (plus two polls) is skipped.

Only a profile that works as a clock is read this way: one whose peak comes once, in the
second half of its run (a render, a batch job, a fine-tune's final evaluation). A server's
load spikes and a trainer's periodic evaluations come when they come; their learned times
are not a schedule the run must keep. Such a run's position is its age over the device's
slowdown, and it measures no slowdown.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.foresight.profiles import PEAK_BAND, WorkloadProfile
from exporter.foresight.unscheduled import unscheduled

LANDMARK_SHARE = 0.1  # a change of at least this share of the peak is a landmark
MIN_SPEED_POLLS = 10  # a landmark times a run once it is this many polls old (crossing known to +-5 %)
MIN_SPEED_AGE = 20.0  # ... and never earlier than this
LATE_FACTOR = 1.5  # a landmark this late (relative to the expected slowdown) was crossed unseen
MAX_SLOWDOWN = 4.0  # never stretch learned timelines by more than this
MIN_SPEEDUP = 1.0  # never read a run as faster than its learned one: envelopes place rises early (see speed())
SMALLER_SHARE = 0.25  # a run still under this share of the peak when its load is long over is another kind


@dataclass(frozen=True)
class Landmark:
    """A change in a learned timeline: learned age (s), level half-way across it (bytes), direction."""

    age: float
    level: int
    rising: bool


CLOCK_PEAK_FRACTION = 0.2  # a clock peaks after its first fifth (a server peaks as it loads)


_CACHE: dict[tuple[str, float, int], tuple[Landmark, ...]] = {}


def is_clock(profile: WorkloadProfile) -> bool:
    """True when the profile's timeline times a run: one peak excursion, late in the run."""
    if (profile.peak_at_fraction or 0.0) < CLOCK_PEAK_FRACTION:
        return False
    band = PEAK_BAND * profile.peak_bytes
    excursions, inside = 0, False
    for _age, value in profile.scaled_timeline():
        if value >= band and not inside:
            excursions += 1
        inside = value >= band
    return excursions == 1


def landmarks(profile: WorkloadProfile) -> tuple[Landmark, ...]:
    """The landmarks of a profile's (scaled) timeline, in age order; cached per profile version."""
    cache_key = (profile.key, profile.updated_at, profile.peak_bytes)
    found = _CACHE.get(cache_key)
    if found is not None:
        return found
    step = LANDMARK_SHARE * profile.peak_bytes
    marks: list[Landmark] = []
    reference, since = 0, 0  # a run starts from nothing; steps since the last landmark start at `since`
    timeline = profile.scaled_timeline()
    for i, (age, value) in enumerate(timeline):
        if step > 0 and abs(value - reference) >= step:
            level, rising = (reference + value) // 2, value > reference
            # Timed where the timeline crossed the level, as a run is (a ramp crosses it early).
            crossed = next(a for a, v in timeline[since:i + 1] if (v >= level if rising else v <= level))
            marks.append(Landmark(crossed, level, rising))
            reference, since = value, i + 1
    if len(_CACHE) > 4096:  # profiles change as they learn; old versions are not asked again
        _CACHE.clear()
    found = _CACHE[cache_key] = tuple(marks)
    return found


class RunProgress:
    """The landmarks one live run has passed, fed with its samples as they come."""

    def __init__(self, profile: WorkloadProfile) -> None:
        self.profile = profile
        self.clock = is_clock(profile)
        self.marks = landmarks(profile) if self.clock else ()
        self.passed_at: list[float | None] = []  # run age at each passed landmark; None: skipped
        self.smaller = False  # it stayed far below its profile long after loading: another kind of run
        self.interval = 15.0  # poll interval of the last sample (s): how exactly crossings are timed

    @property
    def passed(self) -> int:
        """How many landmarks the run is past."""
        return len(self.passed_at)

    def feed(self, age: float, used_bytes: int, run_max: int, slowdown: float, interval: float) -> None:
        """Take one sample: ``age`` (s) and memory now; ``run_max`` the most it used so far.

        ``slowdown`` is the device's current estimate, ``interval`` the poll interval (s): a
        rise seen at this sample happened somewhere since the previous one.
        """
        self.interval = interval
        while self.passed < len(self.marks):
            mark = self.marks[self.passed]
            crossed = used_bytes >= mark.level if mark.rising else used_bytes <= mark.level
            if crossed:
                self.passed_at.append(max(0.0, age - interval / 2) if mark.rising else age)
                continue
            if age > mark.age * max(1.0, slowdown) * LATE_FACTOR + 2 * interval:
                if mark.rising and mark.level >= 0.5 * self.profile.peak_bytes and \
                        run_max < SMALLER_SHARE * self.profile.peak_bytes and not unscheduled(self.profile):
                    # (a run of a workload that peaks at no fixed age waits for it: unscheduled.py)
                    self.smaller = True  # never even got near the big part of its profile
                self.passed_at.append(None)  # crossed unseen, or never will: move on
                continue
            break

    def speed(self, age: float) -> tuple[float | None, bool]:
        """(slowdown, measured) of the run: learned age x slowdown = its age.

        Measured (True) at the last landmark it was seen to cross at a learned age of at least
        MIN_SPEED_POLLS poll intervals (and MIN_SPEED_AGE), where a poll's uncertainty is small.
        Never below MIN_SPEEDUP (1): a learned timeline is an upper envelope whose compaction
        moves rises earlier, so a run crossing a landmark "early" is on time, not faster.
        A run already later than its next landmark is at least age / that landmark's age
        (False: a lower bound). (None, False) when nothing is known yet.
        """
        earliest = max(MIN_SPEED_AGE, MIN_SPEED_POLLS * self.interval)
        measured = None
        for mark, at in zip(self.marks, self.passed_at):
            if at is not None and mark.age >= earliest:
                measured = at / mark.age
        bound = None
        if self.passed < len(self.marks):
            upcoming = self.marks[self.passed].age
            if upcoming >= earliest and age > upcoming * (measured or 1.0):
                bound = age / upcoming
        value = bound if bound is not None else measured
        if value is None:
            return None, False
        return min(MAX_SLOWDOWN, max(MIN_SPEEDUP, value)), bound is None

    def slowdown(self, age: float, device: float) -> float:
        """The slowdown to read this run's timeline with: its own when measured, else the
        device's, but never less than the run's own lower bound."""
        own, measured = self.speed(age)
        if measured:
            return own
        return max(device, own or 1.0)

    def position(self, age: float, slowdown: float) -> float:
        """The run's age on the learned timeline (s), at ``slowdown`` (see module docstring)."""
        if not self.clock:
            return age / slowdown
        position, since = 0.0, 0.0
        for mark, at in zip(self.marks, self.passed_at):
            if at is not None:
                position, since = mark.age, at
            else:  # skipped: assume it was crossed on time
                position, since = mark.age, mark.age * slowdown
        position = position + max(0.0, age - since) / slowdown
        if self.passed < len(self.marks):
            position = min(position, self.marks[self.passed].age)  # not crossed: still to come
        return position


def device_slowdown(speeds: list[float | None]) -> float:
    """The slowdown of a device: the largest its runs measured (1 when none), >= 1.

    Co-tenants slow each other down alike, so what one run measured holds for the others.
    """
    measured = [s for s in speeds if s is not None]
    return max([1.0] + measured)
