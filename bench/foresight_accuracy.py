"""Accuracy of the OOM forecast (foresight) on a seeded random corpus of shared-memory episodes.

    python3 bench/foresight_accuracy.py [--corpus 1|2|3] [--seed 1] [--episodes 88] [--interval 5] [--jobs 2]
                                        [--scrape-interval S] [--evaluation-interval E]
                                        [--json results.json] [--list] [--verbose]

Every episode of bench/foresight_corpus.py (--corpus 1; one GPU or MIG instance shared by 2-5
MPS clients: learning runs alone, then a test phase together), or of the independently written
bench/foresight_corpus2.py (--corpus 2), or of the third, also independent and never tuned on,
bench/foresight_corpus3.py (--corpus 3; its families in bench/foresight_families3.py), is played
through the real pipeline: simulator -> fake libnvidia-ml -> NvmlBackend (SimBackend) -> Foresight.observe,
one poll every --interval virtual seconds, a fresh Foresight per episode. During the test
phase the shipped contention rules (alerts/gpushare-memory.yml) are applied to each poll's
forecast: pending while headroom < 0 (a whole GPU only when its sharing is mps or
time_slicing), firing once pending for the rule's `for`, resolved when headroom >= 0 or the device row
is gone. Both tiers are scored: warning (any negative headroom) and critical (the forecast's
confidence at the rule's threshold as well; its imminent rule also needs the ETA within its bound, with
its own `for`). A tier with several rules pages while any of them fires: overlapping intervals count once. Truth is the simulator's OOM kills (reason "oom") in the test phase.

By default the rules see every poll, as a Prometheus that scrapes the exporter and evaluates the rules
every --interval would. --scrape-interval and --evaluation-interval (multiples of --interval) play
the cadence of a real Prometheus instead (:class:`_Cadence`): the rules are evaluated every E
seconds on what the last scrape (every S seconds) read; docs/alerts.md, "Scrape and evaluation
cadence", gives what each cadence costs.

--list prints the episodes' classes and exits; --verbose adds one row per episode (OOMs,
alert intervals, lead) to find why a forecast missed; --json writes every figure. The same
seed gives the same stdout, whatever --jobs; the wall time goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from exporter.backend.sim import SimBackend  # noqa: E402
from exporter.foresight import Foresight  # noqa: E402
import foresight_corpus  # noqa: E402
import foresight_corpus2  # noqa: E402
import foresight_corpus3  # noqa: E402

CORPORA = {1: foresight_corpus, 2: foresight_corpus2, 3: foresight_corpus3}  # 2, 3: written independently, never tuned on

class _Rule(NamedTuple):
    """One shipped GpuMemoryContentionPredicted rule, as the bench applies it."""
    for_seconds: float
    keep_firing_seconds: float
    confidence: float  # confidence it needs (0 without a confidence condition)
    eta_seconds: float | None  # the contention must be at most this far ahead (None without an ETA condition)


def _shipped_rules(severity: str) -> list[_Rule]:
    """Every GpuMemoryContentionPredicted rule of one severity in alerts/gpushare-memory.yml: its `for`,
    `keep_firing_for`, confidence threshold and ETA bound. A tier with several rules fires while any does
    (same alert name and labels: one alert)."""
    import re

    import yaml

    from exporter.units import parse_duration

    rules = yaml.safe_load((ROOT / "alerts" / "gpushare-memory.yml").read_text())["groups"][0]["rules"]
    found = []
    for rule in rules:
        if rule.get("alert") != "GpuMemoryContentionPredicted" or rule["labels"]["severity"] != severity:
            continue
        threshold = re.search(r"confidence_ratio\s*>=\s*([0-9.]+)", rule["expr"])
        eta = re.search(r"contention_eta_seconds\s*<=\s*([0-9.]+)", rule["expr"])
        found.append(_Rule(parse_duration(rule.get("for", "0s")), parse_duration(rule.get("keep_firing_for", "0s")),
                           float(threshold.group(1)) if threshold else 0.0, float(eta.group(1)) if eta else None))
    return found


# read from alerts/, so the bench follows the rules
TIERS = {tier: _shipped_rules(tier) for tier in ("warning", "critical")}  # tier -> its rules
CRITICAL_CONFIDENCE = min(r.confidence for r in TIERS["critical"])
LEAD_TARGET = 300.0  # issue 24's lead median target, "where the ceiling allows"
INCIDENT_SECONDS = 60.0  # kills this close belong to one collision; an alert this soon before one was right
GPU_SHARING = ("mps", "time_slicing")  # the GPU rule's gpushare_gpu_info{sharing=~...} filter
GiB = 2**30
DEFINITIONS = (
    "recall: OOM incidents (a device's first kill of a collision; kills within 60 s of the previous one join it)"
    " during which an alert was firing / all incidents",
    "precision: firing intervals with an incident while firing or within 60 s after they resolved / all intervals",
    "false alarms: firing intervals without such an incident / test-phase device-hours of all episodes x 100",
    "lead: incident time - start of the firing interval that contains it (misses excluded)",
    "ceiling: incident time - the last co-tenant start before it (the most lead any forecast can give)",
    "learned: episodes where every workload ran alone on the same device first; first run: the others",
    "tiers: warning = the rule on any negative headroom; critical = only where the forecast's confidence reaches"
    " the rule's threshold (its imminent rule: also an ETA within its bound, after a shorter `for`; docs/alerts.md);"
    " recall, precision, lead are per tier",
)


class _Alert:
    """One rule, applied poll by poll: pending, firing (after `for`), kept firing."""

    def __init__(self, rule: _Rule) -> None:
        self.rule = rule
        self.intervals: list[list] = []  # [start, end or None] of each firing interval
        self.pending = None
        self.last_true = 0.0  # last poll the alert's condition held
        self.scraped = False  # its condition on what the last scrape read (_Cadence)

    def step(self, t: float, condition: bool) -> None:
        firing = bool(self.intervals) and self.intervals[-1][1] is None
        if condition:
            self.pending = t if self.pending is None else self.pending
            self.last_true = t
            if t - self.pending >= self.rule.for_seconds and not firing:
                self.intervals.append([t, None])
        else:
            self.pending = None
            # keep_firing_for: a firing alert stays up until the condition has been false that long
            if firing and t - self.last_true >= self.rule.keep_firing_seconds:
                self.intervals[-1][1] = t


class _Cadence(NamedTuple):
    """When Prometheus sees the exporter: it scrapes every ``scrape`` seconds and evaluates the rules every
    ``evaluation`` seconds, both multiples of the poll interval and counted from the same instant (an
    evaluation that falls on a scrape reads it: the most favourable phase). A rule's condition is what
    it would be on the series of the last scrape; its `for` and keep_firing_for run on evaluations.
    Scrape = evaluation = the poll interval is the bench's default: every poll is evaluated."""

    scrape: float
    evaluation: float

    def step(self, alert: _Alert, t: float, condition: bool) -> None:
        if _on(t, self.scrape):
            alert.scraped = condition
        if _on(t, self.evaluation):
            alert.step(t, alert.scraped)


def step(alert: _Alert, t: float, condition: bool, when: _Cadence | None) -> None:
    """Step one rule at the poll at ``t``: at every poll (``when`` None), or as Prometheus sees it."""
    if when is None:
        alert.step(t, condition)
    else:
        when.step(alert, t, condition)


def _on(t: float, every: float) -> bool:
    """True when ``t`` (s) falls on a multiple of ``every`` (polls accumulate float steps)."""
    return abs(t / every - round(t / every)) < 1e-6


def cadence(interval: float, scrape: float | None = None, evaluation: float | None = None) -> _Cadence:
    """The _Cadence of a run polled every ``interval`` s; ValueError naming the setting that is not a
    multiple of it. Unset: the scrape is the poll interval, the evaluation the scrape interval."""
    scrape = interval if scrape is None else scrape
    evaluation = scrape if evaluation is None else evaluation
    for name, value in (("--scrape-interval", scrape), ("--evaluation-interval", evaluation)):
        if not value > 0 or not _on(value, interval):
            raise ValueError(f"{name} {value:g} is not a positive multiple of the poll interval {interval:g} s")
    return _Cadence(scrape, evaluation)


def play(episode, interval: float, corpus: int = 1, when: _Cadence | None = None) -> dict:
    """Poll one episode to its end; its incidents, firing intervals of each tier and a few diagnostics.
    ``when``: the scrape and evaluation cadence of the rules (None: every poll)."""
    backend = SimBackend(CORPORA[corpus].to_scenario(episode))
    backend.open()
    foresight = Foresight()
    alerts = {tier: [_Alert(rule) for rule in rules] for tier, rules in TIERS.items()}
    trace: list[tuple[float, int | None]] = []  # (t, headroom) of the test device per test poll
    profiles_at_test = None
    try:
        t = 0.0
        while t <= episode.end:
            backend.step_to(t)
            snapshot = backend.poll()
            foresight.observe(snapshot)
            if t >= episode.test_start:
                if profiles_at_test is None:
                    profiles_at_test = sum(p.usable for p in foresight.profiles.values())
                gpu = next(g for g in snapshot.gpus if g.index == 0)
                rows = [r for r in foresight.result().devices if r.gpu == 0 and r.forecast.headroom_bytes is not None
                        and (r.gi is not None or gpu.sharing in GPU_SHARING)]
                headroom = min((r.forecast.headroom_bytes for r in rows), default=None)
                trace.append((t, headroom))
                for alert in (a for tier in alerts.values() for a in tier):
                    step(alert, t, any(_holds(alert.rule, r) for r in rows), when)
            t += interval
        kills = sorted(e.time for e in backend.sim.oom_events
                       if e.reason == "oom" and e.gpu == 0 and e.time >= episode.test_start)
    finally:
        backend.close()
    scored = {tier: _score(episode, _union(a.intervals for a in tier_alerts), kills, trace, profiles_at_test or 0)
              for tier, tier_alerts in alerts.items()}
    # "any": a page or a warning, whichever fired (critical pages outlast warnings since the
    # sixth round's keep_firing_for, so the warning tier alone undercounts what was caught).
    scored["any"] = _score(episode, _union(a.intervals for tier_alerts in alerts.values() for a in tier_alerts),
                           kills, trace, profiles_at_test or 0)
    result = scored["warning"]
    result["tiers"] = {tier: {"incidents": r["incidents"], "alerts": r["alerts"]} for tier, r in scored.items()}
    return result


def _holds(rule: _Rule, row) -> bool:
    """A rule's condition on one device row: negative headroom, its confidence and ETA conditions.
    (getattr: code before the tiers has no confidence.)"""
    eta = row.forecast.contention_in_seconds
    return (row.forecast.headroom_bytes < 0 and (getattr(row, "confidence", None) or 0.0) >= rule.confidence
            and (rule.eta_seconds is None or (eta is not None and eta <= rule.eta_seconds)))


def _union(intervals) -> list[list]:
    """Firing intervals of a tier's rules as one alert's: it fires while any rule fires (same name, same labels)."""
    merged: list[list] = []
    for start, end in sorted((list(i) for each in intervals for i in each), key=lambda i: i[0]):
        if merged and (merged[-1][1] is None or start <= merged[-1][1]):
            if merged[-1][1] is not None and (end is None or end > merged[-1][1]):
                merged[-1][1] = end
        else:
            merged.append([start, end])
    return merged


def _score(episode, intervals: list[list], kills: list[float], trace, profiles: int) -> dict:
    incidents: list[float] = []
    last = None
    for k in kills:
        if last is None or k - last > INCIDENT_SECONDS:
            incidents.append(k)
        last = k
    starts = [r.start for r in episode.test_runs()]
    t0 = episode.test_start
    rows = []
    for k in incidents:
        hit = next((s for s, e in intervals if s <= k < (e if e is not None else math.inf)), None)
        before = [h for t, h in trace if t <= k and h is not None]
        rows.append({"t": round(k - t0, 1), "caught": hit is not None,
                     "lead": None if hit is None else round(k - hit, 1),
                     "ceiling": round(k - max(s for s in starts if s <= k), 1),
                     "headroom_before_gib": round(before[-1] / GiB, 2) if before else None})
    alerts = [{"start": s - t0, "end": None if e is None else e - t0,
               "true": any(s <= k <= (e if e is not None else math.inf) + INCIDENT_SECONDS for k in incidents)}
              for s, e in intervals]
    negative = [t for t, h in trace if h is not None and h < 0]
    return {"index": episode.index, "classes": episode.classes, "device": episode.model + (
            f" {episode.mig}" if episode.mig else ""), "tenants": len(starts), "ratio": round(episode.ratio, 3),
            "slowdown": round(episode.slowdown, 3), "test_hours": (episode.end - t0) / 3600,
            "kills": len(kills), "incidents": rows,
            "missed_spike_learning": sum(r.missed_spike for r in episode.runs), "alerts": alerts, "profiles_at_test": profiles,
            "negative_polls": len(negative), "first_negative": None if not negative else negative[0] - t0}


def _p10(values: list[float]) -> float:
    """Nearest-rank 10th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.1 * len(ordered)) - 1)]


def figures(results: list[dict], tier: str = "critical") -> dict:
    """Recall, precision, false alarms, lead and ceiling of one alert tier over some episodes."""
    incidents = [i for r in results for i in r["tiers"][tier]["incidents"]]
    alerts = [a for r in results for a in r["tiers"][tier]["alerts"]]
    hours = sum(r["test_hours"] for r in results)
    leads = [i["lead"] for i in incidents if i["caught"]]
    ceilings = [i["ceiling"] for i in incidents]
    # "lead median >= 300 s where the ceiling allows": only collisions whose last co-tenant started
    # at least LEAD_TARGET seconds before the kill could be foreseen that far ahead
    roomy = [i for i in incidents if i["ceiling"] >= LEAD_TARGET]
    roomy_leads = [i["lead"] for i in roomy if i["caught"]]
    false = sum(not a["true"] for a in alerts)
    return {
        "episodes": len(results), "incidents": len(incidents), "caught": len(leads),
        "recall": len(leads) / len(incidents) if incidents else None,
        "alerts": len(alerts), "true_alerts": len(alerts) - false,
        "precision": (len(alerts) - false) / len(alerts) if alerts else None,
        "false_alerts": false, "device_hours": round(hours, 3),
        "false_per_100h": 100 * false / hours if hours else None,
        "lead_median": statistics.median(leads) if leads else None, "lead_p10": _p10(leads) if leads else None,
        "ceiling_median": statistics.median(ceilings) if ceilings else None,
        "ceiling_p10": _p10(ceilings) if ceilings else None,
        "roomy_incidents": len(roomy), "roomy_caught": len(roomy_leads),
        "roomy_lead_median": statistics.median(roomy_leads) if roomy_leads else None,
    }


def _ratio(value, num, den) -> str:
    return "-" if value is None else f"{value:.2f} ({num}/{den})"


def _secs(value) -> str:
    return "-" if value is None else f"{value:.0f} s"


def _per100(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def _describe(rule: _Rule) -> str:
    return (f"`for` {rule.for_seconds:g} s, `keep_firing_for` {rule.keep_firing_seconds:g} s"
            + (f", confidence >= {rule.confidence:g}" if rule.confidence else "")
            + (f", ETA <= {rule.eta_seconds:g} s" if rule.eta_seconds is not None else ""))


def _cadence_text(args) -> str:
    """How the rules saw the polls, when not at every poll."""
    scrape = getattr(args, "scrape_interval", None)
    evaluation = getattr(args, "evaluation_interval", None)
    if scrape is None and evaluation is None:
        return ""
    when = cadence(args.interval, scrape, evaluation)
    return f", scraped every {when.scrape:g} s, rules evaluated every {when.evaluation:g} s"


def report(results: list[dict], args) -> dict:
    """Print the summary and per-class tables; the same figures as a dict."""
    learned = [r for r in results if r["classes"]["first_run"] == "no"]
    first = [r for r in results if r["classes"]["first_run"] == "yes"]
    based = [r for r in first if r["classes"]["learned"] != "never"]  # declared, learned elsewhere, trend
    never = [r for r in first if r["classes"]["learned"] == "never"]  # nothing to forecast from: the ceiling
    print(f"Foresight accuracy: corpus {args.corpus}, seed {args.seed}, {len(results)} episodes ({len(learned)} learned, "
          f"{len(first)} first run), poll every {args.interval:g} s{_cadence_text(args)}; rules (alerts/gpushare-memory.yml): "
          + "; ".join(f"{tier} {_describe(rule)}" for tier, rules in TIERS.items() for rule in rules))
    for line in DEFINITIONS:
        print(f"  {line}")
    out = {}
    for tier in ("critical", "warning"):
        fl, fa, fb, fn = (figures(pool, tier) for pool in (learned, results, based, never))
        out[tier] = {"learned": fl, "all": fa, "first_run_basis": fb, "first_run_never": fn}
        page = tier == "critical"
        rows = [
            ("recall (learned)", _ratio(fl["recall"], fl["caught"], fl["incidents"]), ">= 0.95" if page else "-"),
            ("recall (all)", _ratio(fa["recall"], fa["caught"], fa["incidents"]), "-"),
            ("precision (all)", _ratio(fa["precision"], fa["true_alerts"], fa["alerts"]), ">= 0.90" if page else "-"),
            ("false alarms / 100 device-hours", f"{_per100(fa['false_per_100h'])} ({fa['false_alerts']} in "
             f"{fa['device_hours']:.1f} h)", "<= 3" if page else "-"),
            (f"lead median (learned, {fl['caught']} caught)", _secs(fl["lead_median"]), "-"),
            ("lead p10 (learned)", _secs(fl["lead_p10"]), "-"),
            (f"lead median, ceiling >= {LEAD_TARGET:.0f} s ({fl['roomy_caught']}/{fl['roomy_incidents']} caught)",
             _secs(fl["roomy_lead_median"]), f">= {LEAD_TARGET:.0f} s*" if page else "-"),
            ("ceiling median / p10 (learned)", f"{_secs(fl['ceiling_median'])} / {_secs(fl['ceiling_p10'])}", "-"),
            ("first-run recall, with a basis", _ratio(fb["recall"], fb["caught"], fb["incidents"]), "-"),
            ("first-run recall, no basis (ceiling)", _ratio(fn["recall"], fn["caught"], fn["incidents"]), "-"),
        ]
        print(f"\n{tier + ' tier':40} {'measured':26} target")
        for name, measured, target in rows:
            print(f"{name:40} {measured:26} {target}")
    fb = figures(based, "any")
    print(f"{'first-run recall, with a basis, any tier':40} {_ratio(fb['recall'], fb['caught'], fb['incidents']):26} >= 0.7")
    print(f"  * where the ceiling allows: learned collisions whose last co-tenant started >= {LEAD_TARGET:.0f} s before"
          f" the kill (a collision 100 s after it cannot be foreseen {LEAD_TARGET:.0f} s ahead)")
    print("\nPer class, critical tier (learned episodes; the first_run and learned rows cover all episodes)")
    print(f"{'class':26} {'eps':>4} {'OOMs':>5} {'recall':>14} {'precision':>14} {'FA/100h':>8} "
          f"{'lead med':>9} {'lead p10':>9} {'ceil med':>9}")
    classes = {}
    for dim in ("sharing", "shape", "pattern", "mix", "slowdown", "first_run", "learned"):
        pool = results if dim in ("first_run", "learned") else learned
        for value in sorted({r["classes"][dim] for r in pool}):
            f = figures([r for r in pool if r["classes"][dim] == value])
            classes[f"{dim}={value}"] = f
            print(f"{dim + '=' + value:26} {f['episodes']:>4} {f['incidents']:>5} "
                  f"{_ratio(f['recall'], f['caught'], f['incidents']):>14} "
                  f"{_ratio(f['precision'], f['true_alerts'], f['alerts']):>14} {_per100(f['false_per_100h']):>8} "
                  f"{_secs(f['lead_median']):>9} {_secs(f['lead_p10']):>9} {_secs(f['ceiling_median']):>9}")
    return {**out, "classes": classes}


def verbose_row(r: dict) -> str:
    c = r["classes"]
    head = (f"ep {r['index']:3} {r['device']:18} {c['sharing']:7} {c['shape']:5} {c['pattern']:9} {c['mix']:8} "
            f"slow {r['slowdown']:.2f} n={r['tenants']} ratio {r['ratio']:.2f} learned={c['learned']} "
            f"profiles={r['profiles_at_test']} negative_polls={r['negative_polls']}"
            + (f" missed-spike learning runs={r['missed_spike_learning']}" if r["missed_spike_learning"] else ""))
    ooms = "; ".join(f"OOM +{i['t']:.0f}s {'caught lead ' + format(i['lead'], '.0f') + 's' if i['caught'] else 'MISSED'}"
                     f" ceiling {i['ceiling']:.0f}s headroom before "
                     f"{'-' if i['headroom_before_gib'] is None else format(i['headroom_before_gib'], '.2f') + 'GiB'}"
                     for i in r["incidents"]) or "no OOM"
    def spans(alerts):
        return " ".join(f"[+{a['start']:.0f}..{'end' if a['end'] is None else '+' + format(a['end'], '.0f')}"
                        f"{'' if a['true'] else ' FALSE'}]" for a in alerts) or "none"
    alerts = f"{spans(r['alerts'])} | critical {spans(r['tiers']['critical']['alerts'])}"
    return f"{head}\n      {ooms} | alerts {alerts}"


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=int, choices=sorted(CORPORA), default=1,
                        help="1: bench/foresight_corpus.py, 2: bench/foresight_corpus2.py, 3: bench/foresight_corpus3.py (default 1)")
    parser.add_argument("--seed", type=int, default=1, help="corpus seed (default 1)")
    parser.add_argument("--episodes", type=_positive(int), default=88, help="episodes (default 88)")
    parser.add_argument("--interval", type=_positive(float), default=5.0, help="poll interval, virtual s (default 5)")
    parser.add_argument("--jobs", type=_positive(int), default=1, help="worker processes (default 1)")
    parser.add_argument("--scrape-interval", type=_positive(float), metavar="S",
                        help="Prometheus scrapes the exporter every S virtual s, a multiple of --interval (default: --interval)")
    parser.add_argument("--evaluation-interval", type=_positive(float), metavar="E",
                        help="... and evaluates the rules every E s, a multiple of --interval (default: the scrape interval)")
    parser.add_argument("--json", metavar="FILE", help="write every figure and episode as JSON")
    parser.add_argument("--list", action="store_true", help="print the episodes' classes and exit")
    parser.add_argument("--verbose", action="store_true", help="one row per episode: OOMs, alerts, lead")
    args = parser.parse_args(argv)
    try:
        when = cadence(args.interval, args.scrape_interval, args.evaluation_interval)
    except ValueError as e:
        parser.error(str(e))  # one line, exit 2
    polled = args.scrape_interval is None and args.evaluation_interval is None  # every poll: the rules as ever
    began = time.monotonic()
    corpus = CORPORA[args.corpus].make_corpus(args.seed, args.episodes)
    if args.list:
        for e in corpus:
            print(f"ep {e.index:3} {e.model + (' ' + e.mig if e.mig else ''):18} "
                  + " ".join(f"{k}={v}" for k, v in e.classes.items())
                  + f" shapes={','.join(w.shape for w in e.workloads)} tenants={len(e.test_runs())} ratio={e.ratio:.2f}")
        return 0
    run = partial(play, interval=args.interval, corpus=args.corpus, when=None if polled else when)
    if args.jobs == 1:
        results = [run(e) for e in corpus]
    else:  # each worker installs its own simulated NVML: processes, not threads
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            results = pool.map(run, corpus, chunksize=1)
    summary = report(results, args)
    if args.verbose:
        print("\nEpisodes (times from the start of the test phase)")
        for r in results:
            print(verbose_row(r))
    if args.json:
        doc = {"corpus": args.corpus, "seed": args.seed, "episodes": args.episodes, "interval": args.interval,
               "scrape_interval": when.scrape, "evaluation_interval": when.evaluation,
               "rules": {tier: [rule._asdict() for rule in rules] for tier, rules in TIERS.items()}, "definitions": DEFINITIONS, **summary, "results": results}
        Path(args.json).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    sys.stdout.flush()  # the wall time (stderr) comes after the tables
    print(f"wall time {time.monotonic() - began:.1f} s ({args.jobs} job{'s' if args.jobs > 1 else ''})",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
