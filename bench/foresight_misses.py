"""Why the critical tier missed each learned collision of a replayed recording (`foresight_replay.py classify`).

    python3 bench/foresight_replay.py classify c1s2.pkl.gz ... c3s7007.pkl.gz

Each miss gets one class (MISS_CLASSES, classify_misses), the ceiling class apart: the rounds of
docs/foresight.md that weigh recall ("The critical tier, eighth round") count misses by these classes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import foresight_accuracy as fa  # noqa: E402
from foresight_replay import components, missed_learned  # noqa: E402


MISS_CLASSES = ("ceiling", "no forecast", "held down as a repeat", "page ended before the kill", "page came late",
                "forecast clear at the kill", "confidence short: grounded", "confidence short: clears", "confidence short: timing")


def classify_misses(doc: dict, results: list[dict], rules=None) -> list[dict]:
    """Every learned collision the critical tier missed, with why (one of MISS_CLASSES), from a replay made with
    trace_rows=True (and the same ``rules``; default the shipped ones). In order:

    - ``ceiling``: its last co-tenant started less than the critical rule's `for` plus one poll before the kill:
      no forecast can page it by that rule (the imminent rule's own bound aside); reported apart, not chased;
    - ``no forecast``: no poll from the last co-tenant's start to the kill predicted contention on the device
      (a spike its learning run's polls missed, a learned rise that came late enough to drop the profile);
    - ``held down as a repeat``: a poll's raw confidence reached the tier but hold_confidence held it under;
    - ``page ended before the kill``: the tier paged within the ceiling, and the page had ended (its
      `keep_firing_for` included) before the kill;
    - ``page came late``: the exported confidence reached the tier, but not for the rule's `for` before the kill;
    - ``forecast clear at the kill``: it never reached the tier, and at the last poll before the kill no
      contention was predicted (the contention it predicted earlier cleared, or was another meeting);
    - ``confidence short: <factor>``: it never reached the tier; the factor that capped the poll of highest raw
      confidence (components(): grounded, clears or timing).
    ``headroom_before_gib`` > 0 says the forecast was clear at the last poll before the kill."""
    rules = rules or fa.TIERS
    critical = rules["critical"]
    threshold = min(r.confidence for r in critical)
    floor = max(r.for_seconds for r in critical if r.eta_seconds is None) + doc.get("interval", 5.0)
    out = []
    for ep, res, inc, warned in missed_learned(doc, results):
        t0 = ep.test_start
        kill = t0 + inc["t"]
        polls = [(t, row, raw, held) for t, rows in res["per_poll"] if kill - inc["ceiling"] <= t <= kill
                 for row, raw, held in rows if row["headroom"] < 0]
        pages = [a for a in res["tiers"]["critical"]["alerts"]
                 if t0 + a["start"] <= kill and (a["end"] is None or t0 + a["end"] >= kill - inc["ceiling"])]
        best = max(polls, key=lambda p: (p[2] or 0.0), default=None)
        factors = None if best is None else components(best[1])
        if inc["ceiling"] < floor:
            why = "ceiling"
        elif not polls:
            why = "no forecast"
        elif any((raw or 0.0) >= threshold for _t, _r, raw, _h in polls) and not any(
                (held or 0.0) >= threshold for _t, _r, _raw, held in polls):
            why = "held down as a repeat"
        elif pages:  # it paged within the ceiling, and was no longer firing at the kill
            why = "page ended before the kill"
        elif any((held or 0.0) >= threshold for _t, _r, _raw, held in polls):
            why = "page came late"  # at the tier, but not for the rule's `for` before the kill
        elif (inc["headroom_before_gib"] or 0.0) > 0:
            why = "forecast clear at the kill"  # what it predicted earlier was not this collision, or cleared
        else:
            limits = {k: factors[k] for k in ("grounded", "clears", "timing")} if factors else {"grounded": 0.0}
            why = "confidence short: " + min(limits, key=limits.get)
        out.append({"corpus": doc["corpus"], "seed": doc["seed"], "episode": ep.index, "device": res["device"],
                    "shape": res["classes"].get("shape"), "t": inc["t"],
                    "ceiling": inc["ceiling"], "class": why, "headroom_before_gib": inc["headroom_before_gib"],
                    "held_max": max(((held or 0.0) for _t, _r, _raw, held in polls), default=None),
                    "factors": None if factors is None else {k: factors[k] for k in ("grounded", "clears", "timing")},
                    "warning_lead": warned["lead"] if warned and warned["caught"] else None})
    return out


def print_classes(rows: list[dict]) -> None:
    """One line per classified miss, then how many of each class (the ceiling class apart)."""
    for m in rows:
        print(f"corpus {m['corpus']} seed {m['seed']} ep {m['episode']:>2} {m['device']:18} {m['shape'] or '-':12} "
              f"kill +{m['t']:.0f} s ceiling {m['ceiling']:.0f} s  {m['class']:28} held max {m['held_max']} "
              f"factors {m['factors']} headroom before {m['headroom_before_gib']} GiB warning lead {m['warning_lead']}")
    counts = {c: sum(m["class"] == c for m in rows) for c in MISS_CLASSES}
    beyond = len(rows) - counts["ceiling"]
    print(f"misses {len(rows)}: ceiling {counts['ceiling']} (reported apart); the other {beyond}: "
          + ", ".join(f"{c} {n}" for c, n in counts.items() if n and c != "ceiling"))
