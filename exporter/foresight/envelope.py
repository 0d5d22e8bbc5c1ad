"""Compaction of a memory timeline into at most N steps that never go below it (an upper envelope).

Split from exporter.foresight.profiles, which compacts a live run's samples as it records them
and a run's timeline when it learns from it (every minute for each running run).
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush

Timeline = tuple[tuple[float, int], ...]  # ((age_seconds, bytes), ...) ascending ages, steps


def compact_envelope(points: list[tuple[float, int]] | Timeline, max_steps: int) -> Timeline:
    """At most ``max_steps`` steps that are >= the input steps at every age.

    Neighbouring steps are merged (into the earlier age and the larger value), cheapest
    first, where the cost is the extra byte-seconds the merge adds: flat stretches merge for
    free and short spikes keep their own step, so a peak does not get wider than it was.
    """
    steps = _dedupe(points)
    if len(steps) <= max_steps:
        return tuple(steps)
    ages = [a for a, _ in steps]
    values = [v for _, v in steps]
    # Length of the last step is unknown; give it the median step length so its cost is fair.
    gaps = sorted(b - a for a, b in zip(ages, ages[1:]))
    tail = gaps[len(gaps) // 2] if gaps else 1.0
    ends = ages[1:] + [ages[-1] + tail]
    # Merge the cheapest neighbours, the earliest of equally cheap ones, until max_steps are left.
    # The costs of the pairs are kept in a heap (a merge changes only the two pairs around it), not
    # recomputed over every pair for every merge: n log n, not n squared, for the same merges.
    count = len(ages)
    following = list(range(1, count + 1))  # the next surviving step (count: none)
    preceding = list(range(-1, count - 1))  # the previous surviving step (-1: none)
    version = [0] * count  # a heap entry of step i is current while its version is version[i]

    def cost(i: int) -> float:
        j = following[i]
        top = max(values[i], values[j])
        return (top - values[i]) * (ends[i] - ages[i]) + (top - values[j]) * (ends[j] - ages[j])

    heap = [(cost(i), i, 0) for i in range(count - 1)]  # (cost of merging i with the next, i, version)
    heapify(heap)
    while count > max_steps:
        _, i, seen = heappop(heap)
        if seen != version[i]:
            continue  # stale: step i merged or changed since
        j = following[i]
        values[i] = max(values[i], values[j])
        ends[i] = ends[j]
        following[i] = following[j]
        if following[i] < len(ages):
            preceding[following[i]] = i
        version[j] = -1  # gone
        count -= 1
        version[i] += 1
        if following[i] < len(ages):
            heappush(heap, (cost(i), i, version[i]))
        h = preceding[i]
        if h >= 0:
            version[h] += 1
            heappush(heap, (cost(h), h, version[h]))
    kept = []
    i = 0
    while i < len(ages):
        kept.append((ages[i], values[i]))
        i = following[i]
    return tuple(kept)


def _dedupe(points) -> list[tuple[float, int]]:
    """Sorted steps with repeated values and repeated ages folded together (max wins)."""
    # A run's samples (float ages, strictly ascending; int bytes) are sorted already: sorting them
    # would keep their order, and no two share an age, so only repeated values fold. Every
    # running run's samples come through here at each persist: skip the sort where it changes nothing.
    steps: list[tuple[float, int]] = []
    previous = None
    for point in points:
        age, value = point
        if type(age) is not float or type(value) is not int or not (previous is None or age > previous):
            return _dedupe_sorted(points)
        previous = age
        if not steps or steps[-1][1] != value:
            steps.append((age, value))
    return steps


def _dedupe_sorted(points) -> list[tuple[float, int]]:
    """_dedupe of points in any order, of any number types."""
    steps: list[tuple[float, int]] = []
    for age, value in sorted((float(a), int(v)) for a, v in points):
        if steps and steps[-1][0] == age:
            steps[-1] = (age, max(steps[-1][1], value))
        elif steps and steps[-1][1] == value:
            continue
        else:
            steps.append((age, value))
    return steps
