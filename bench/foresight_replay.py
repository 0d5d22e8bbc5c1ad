"""Record a corpus's forecasts once, then replay confidence and rule variants on them offline.

    python3 bench/foresight_replay.py record --corpus 3 --seed 1 --episodes 40 --jobs 2 --out c3s1.pkl.gz
    python3 bench/foresight_replay.py replay c3s1.pkl.gz [...]          # shipped confidence and rules
    python3 bench/foresight_replay.py replay --scrape-interval 15 --evaluation-interval 30 c3s1.pkl.gz  # at Prometheus's cadence
    python3 bench/foresight_replay.py misses c3s1.pkl.gz [...]          # why each learned critical miss missed
    python3 bench/foresight_replay.py false c3s1.pkl.gz [...]           # what each false critical page rested on
    python3 bench/foresight_replay.py classify c3s1.pkl.gz [...]        # each learned critical miss in one class

`record` plays every episode through the same pipeline as bench/foresight_accuracy.py (simulator,
NVML backend, Foresight) and keeps, for every poll whose forecast predicts contention on the test
GPU, the forecast and the process states its confidence was computed from, with the simulator's
kills and, per poll, the devices on which the exporter noticed one (confidence.after_kill). The
confidence never feeds back into the forecast (the outcome learning reads headroom), so `replay`
can recompute it under other settings (exporter.foresight.confidence's constants), hold it poll
by poll with confidence.hold_confidence and after_kill, and apply the rules with the bench's own
state machine and scoring (`_Alert`, `_union`, `_score`, `figures`); with several recordings it
adds their total. The docs/foresight.md rounds that compare rule or confidence variants ("The
critical tier, fifth round", "sixth round", "seventh round") use it.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import math
import multiprocessing
import pickle
import sys
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import foresight_accuracy as fa  # noqa: E402
from exporter.backend.sim import SimBackend  # noqa: E402
from exporter.foresight import Foresight, confidence as conf  # noqa: E402
from exporter.foresight import state as fstate  # noqa: E402
from exporter.foresight.state import OUTCOME_GRACE  # noqa: E402
from exporter.foresight.unscheduled import due_eta  # noqa: E402


def _record_episode(episode, interval: float, corpus: int) -> dict:
    """One episode: per test poll, the eligible rows of GPU 0 (headroom, ETA, exported confidence) and,
    where contention is predicted, the states and forecast its confidence rests on."""
    seen: dict[int, tuple] = {}  # id(forecast) -> (states, forecast, grace) of this poll

    def capture(states, forecast, grace=0.0):
        seen[id(forecast)] = (tuple(states), forecast, grace)
        return original(states, forecast, grace)

    noticed: list = []  # devices (gi) of GPU 0 whose held confidence a kill noticed this poll ended

    def kill_noticed(hold, now):  # state.py passes the device's own hold: find which device it is
        noticed.extend(gi for (uuid, gi), h in foresight._confidence.items() if uuid == gpu0_uuid and h is hold)
        return original_kill(hold, now)

    original, original_kill = fstate.contention_confidence, fstate.after_kill
    fstate.contention_confidence, fstate.after_kill = capture, kill_noticed
    backend = SimBackend(fa.CORPORA[corpus].to_scenario(episode))
    backend.open()
    foresight = Foresight()
    polls = []
    try:
        t = 0.0
        while t <= episode.end:
            backend.step_to(t)
            snapshot = backend.poll()
            seen.clear()
            noticed.clear()
            gpu = next(g for g in snapshot.gpus if g.index == 0)
            gpu0_uuid = gpu.uuid
            foresight.observe(snapshot)
            rows = []
            for r in foresight.result().devices:
                if r.gpu != 0 or r.forecast.headroom_bytes is None:
                    continue
                if not (r.gi is not None or gpu.sharing in fa.GPU_SHARING):
                    continue
                states, forecast, grace = seen.get(id(r.forecast), (None, r.forecast, interval))
                contended = r.forecast.headroom_bytes < 0 and r.forecast.contention_in_seconds is not None
                rows.append({"gi": r.gi, "headroom": r.forecast.headroom_bytes, "eta": r.forecast.contention_in_seconds,
                             "capacity": r.forecast.capacity_bytes, "confidence": r.confidence,
                             "states": states if contended else None, "forecast": forecast if contended else None,
                             "grace": grace})
            polls.append((t, t >= episode.test_start, rows, tuple(noticed)))
            t += interval
        kills = sorted(e.time for e in backend.sim.oom_events
                       if e.reason == "oom" and e.gpu == 0 and e.time >= episode.test_start)
    finally:
        backend.close()
        fstate.contention_confidence, fstate.after_kill = original, original_kill
    return {"index": episode.index, "polls": polls, "kills": kills}


def record(args) -> int:
    corpus = fa.CORPORA[args.corpus].make_corpus(args.seed, args.episodes)
    run = partial(_record_episode, interval=args.interval, corpus=args.corpus)
    if args.jobs == 1:
        episodes = [run(e) for e in corpus]
    else:
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            episodes = pool.map(run, corpus, chunksize=1)
    doc = {"corpus": args.corpus, "seed": args.seed, "episodes": args.episodes, "interval": args.interval,
           "records": episodes}
    with gzip.open(args.out, "wb") as f:
        pickle.dump(doc, f, protocol=pickle.HIGHEST_PROTOCOL)
    return 0


def load(path: str) -> dict:
    with gzip.open(path, "rb") as f:
        return pickle.load(f)


@contextlib.contextmanager
def settings(**values):
    """Temporarily set exporter.foresight.confidence's module constants (a confidence variant)."""
    old = {k: getattr(conf, k) for k in values}
    for k, v in values.items():
        setattr(conf, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(conf, k, v)


def raw_confidence(row, confidence_fn=None):
    """The raw confidence of one recorded row (None without contention), by the tree's code or a variant."""
    if row["states"] is None:
        return None
    fn = confidence_fn or conf.contention_confidence
    return fn(row["states"], row["forecast"], row["grace"])


def replay_episode(rec: dict, episode, rules: dict, confidence_fn=None, trace_rows=False, when=None) -> dict:
    """Recompute the exported confidence of every poll (raw, then held), apply the rules of each tier,
    score like the bench. ``rules``: tier -> list of fa._Rule; ``when``: the fa._Cadence the rules see
    the polls at (default: every poll)."""
    holds: dict = {}
    alerts = {tier: [fa._Alert(rule) for rule in tier_rules] for tier, tier_rules in rules.items()}
    trace = []  # (t, headroom) per test poll, as the bench keeps it
    per_poll = []
    before = None
    for t, test, rows, *noticed in rec["polls"]:
        scored_rows = []
        for row in rows:
            raw = raw_confidence(row, confidence_fn)
            overflow = -(row["headroom"] or 0)
            pids = frozenset() if row["states"] is None else frozenset(s.pid for s in row["states"])
            due = due_eta(raw, row["states"], row["forecast"])  # as state.py tells mark_due
            holds[row["gi"]] = conf.mark_due(holds.get(row["gi"]), t, due, row["grace"], overflow, row["capacity"])
            held, holds[row["gi"]] = conf.hold_confidence(raw, holds.get(row["gi"]), t, overflow, row["capacity"],
                                                          OUTCOME_GRACE, pids)
            scored_rows.append((row, raw, held))
        for gi in _kills_noticed(noticed, holds, rec["kills"], before, t):
            holds[gi] = conf.after_kill(holds.get(gi), t)
        before = t
        if not test:
            continue
        headroom = min((r["headroom"] for r, _, _ in scored_rows), default=None)
        trace.append((t, headroom))
        if trace_rows:
            per_poll.append((t, scored_rows))
        for tier in alerts.values():
            for alert in tier:
                fa.step(alert, t, any(_holds(alert.rule, r, held) for r, _, held in scored_rows), when)
    scored = {tier: fa._score(episode, fa._union(a.intervals for a in tier_alerts), rec["kills"], trace, 0)
              for tier, tier_alerts in alerts.items()}
    scored["any"] = fa._score(episode, fa._union(a.intervals for tier_alerts in alerts.values() for a in tier_alerts),
                              rec["kills"], trace, 0)  # as foresight_accuracy.play scores it
    result = scored["warning"]
    result["tiers"] = {tier: {"incidents": r["incidents"], "alerts": r["alerts"]} for tier, r in scored.items()}
    if trace_rows:
        result["per_poll"] = per_poll
    return result


def _kills_noticed(noticed: list, holds: dict, kills: list[float], before: float | None, now: float):
    """The devices whose held confidence the poll at ``now`` ended by noticing a kill (confidence.after_kill):
    as recorded; a recording made before the record kept them: every device, at the first poll after a
    simulated kill on the GPU (the exporter notices a killed run at the poll after it vanished)."""
    if noticed:
        return noticed[0]
    return list(holds) if before is not None and any(before < k < now for k in kills) else []


def _holds(rule, row, held) -> bool:
    eta = row["eta"]
    return (row["headroom"] < 0 and (held or 0.0) >= rule.confidence
            and (rule.eta_seconds is None or (eta is not None and eta <= rule.eta_seconds)))


def replay(doc: dict, rules=None, confidence_fn=None, trace_rows=False, when=None) -> list[dict]:
    corpus = fa.CORPORA[doc["corpus"]].make_corpus(doc["seed"], doc["episodes"])
    rules = rules or fa.TIERS
    return [replay_episode(rec, ep, rules, confidence_fn, trace_rows, when) for rec, ep in zip(doc["records"], corpus)]


def summary(results: list[dict], tier: str = "critical") -> dict:
    learned = [r for r in results if r["classes"]["first_run"] == "no"]
    based = [r for r in results if r["classes"]["first_run"] == "yes" and r["classes"]["learned"] != "never"]
    return {"learned": fa.figures(learned, tier), "all": fa.figures(results, tier),
            "basis_any": fa.figures(based, "any"), "basis_critical": fa.figures(based, tier)}


def line(name: str, s: dict) -> str:
    """One run's critical-tier figures on one line."""
    fl, fa_ = s["learned"], s["all"]
    return (f"{name:28} recall(learned) {fl['caught']}/{fl['incidents']}  precision {fa_['true_alerts']}/{fa_['alerts']}"
            f"  false {fa_['false_alerts']} in {fa_['device_hours']:.1f} h  lead med "
            f"{'-' if fl['lead_median'] is None else format(fl['lead_median'], '.0f')} s"
            f"  first-run basis critical {s['basis_critical']['caught']}/{s['basis_critical']['incidents']}"
            f" any {s['basis_any']['caught']}/{s['basis_any']['incidents']}")


def components(row) -> dict | None:
    """The factors of one poll's raw confidence, as contention_confidence computes them (confidence_factors):
    growth-weighted grounding, the margin factor (and what is ungrounded), timing; per process its basis, runs,
    spread, grounding, growth, past its end, what it may give back."""
    if row["states"] is None:
        return None
    states, forecast = row["states"], row["forecast"]
    factors = conf.confidence_factors(states, forecast, row["grace"])
    if factors is None:
        return None
    at = forecast.at_contention_bytes
    procs = [(s.basis, None if s.profile is None else s.profile.runs, round(conf.peak_spread(s), 3),
              round(conf.grounding(s), 2), round(max(0, at.get(s.pid, 0) - s.used_bytes) / 2**30, 2), conf._past_end(s),
              round(conf._gives_back(s) / 2**30, 2)) for s in states]
    return {"grounded": round(factors.grounded, 2), "clears": round(factors.clears, 2),
            "timing": round(factors.timing, 2), "over_gib": round(-forecast.headroom_bytes / 2**30, 2),
            "overflow_share": round(-forecast.headroom_bytes / (forecast.capacity_bytes or 1), 3),
            "ungrounded_gib": round(factors.ungrounded_bytes / 2**30, 2), "over_s": factors.over_seconds,
            "drift_s": None if factors.drift_seconds is None else round(factors.drift_seconds, 1), "procs": procs}


def missed_learned(doc: dict, results: list[dict]):
    """(episode, its result, incident, the warning tier's incident at the same time or None) of every learned
    incident the critical tier missed in a replayed run."""
    corpus = fa.CORPORA[doc["corpus"]].make_corpus(doc["seed"], doc["episodes"])
    for ep, res in zip(corpus, results):
        if res["classes"]["first_run"] != "no":
            continue
        for inc in res["tiers"]["critical"]["incidents"]:
            if not inc["caught"]:
                yield ep, res, inc, next((i for i in res["tiers"]["warning"]["incidents"] if i["t"] == inc["t"]), None)


def misses(doc: dict, results: list[dict], window: float = 900.0) -> None:
    """Print, for every learned incident the critical tier missed, the polls before it: ETA, raw and held
    confidence and its factors."""
    for ep, res, inc, warned in missed_learned(doc, results):
        t0 = ep.test_start
        print(f"\n### corpus {doc['corpus']} seed {doc['seed']} ep {ep.index} {res['device']} {res['classes']} "
              f"OOM +{inc['t']:.0f}s ceiling {inc['ceiling']:.0f}s warning "
              f"{'lead ' + str(warned['lead']) if warned and warned['caught'] else 'MISSED'}")
        k = t0 + inc["t"]
        for t, rows in res["per_poll"]:
            if not (k - window <= t <= k):
                continue
            for row, raw, held in rows:
                if row["headroom"] < 0:
                    print(_poll_line(t, t0, row, raw, held))


def _poll_line(t: float, t0: float, row, raw, held) -> str:
    c = components(row)
    return (f"  +{t - t0:6.0f} eta {row['eta']!s:>6} raw {raw} held {held} "
            + ("" if c is None else f"g {c['grounded']} clears {c['clears']} timing {c['timing']} "
               f"over {c['over_gib']}GiB ({c.get('overflow_share')}) ungr {c.get('ungrounded_gib')} "
               f"over_s {c.get('over_s')} drift {c.get('drift_s')} procs {c['procs']}"))


def false_pages(doc: dict, results: list[dict], before: float = 120.0) -> list[dict]:
    """Every false critical page of a run: its episode, classes, interval (s from the test start), the kills
    of the episode, and the polls from ``before`` seconds ahead of it to its end that predicted contention,
    each as (t, row, raw, held)."""
    corpus = fa.CORPORA[doc["corpus"]].make_corpus(doc["seed"], doc["episodes"])
    pages = []
    for rec, ep, res in zip(doc["records"], corpus, results):
        t0 = ep.test_start
        for alert in res["tiers"]["critical"]["alerts"]:
            if alert["true"]:
                continue
            start, end = t0 + alert["start"], math.inf if alert["end"] is None else t0 + alert["end"]
            polls = [(t, row, raw, held) for t, rows in res["per_poll"] if start - before <= t <= end
                     for row, raw, held in rows if row["headroom"] < 0]
            pages.append({"corpus": doc["corpus"], "seed": doc["seed"], "episode": ep.index, "device": res["device"],
                          "classes": res["classes"], "start": alert["start"], "end": alert["end"],
                          "kills": [round(k - t0, 1) for k in rec["kills"]], "t0": t0, "polls": polls})
    return pages


def print_false(doc: dict, results: list[dict]) -> None:
    """Print every false critical page with the polls before and during it: ETA, raw and held confidence and
    its factors (as `misses` does for misses)."""
    for page in false_pages(doc, results):
        print(f"\n### corpus {page['corpus']} seed {page['seed']} ep {page['episode']} {page['device']} "
              f"{page['classes']} false page +{page['start']:.0f}..{page['end']} kills {page['kills']}")
        for t, row, raw, held in page["polls"]:
            print(_poll_line(t, page["t0"], row, raw, held))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--corpus", type=int, choices=sorted(fa.CORPORA), required=True)
    rec.add_argument("--seed", type=int, required=True)
    rec.add_argument("--episodes", type=int, default=40)
    rec.add_argument("--interval", type=float, default=5.0)
    rec.add_argument("--jobs", type=int, default=1)
    rec.add_argument("--out", required=True)
    rep = sub.add_parser("replay")
    rep.add_argument("--scrape-interval", type=fa._positive(float), metavar="S",
                     help="the rules see a scrape every S s, as bench/foresight_accuracy.py (default: every poll)")
    rep.add_argument("--evaluation-interval", type=fa._positive(float), metavar="E",
                     help="... and are evaluated every E s (default: the scrape interval)")
    rep.add_argument("files", nargs="+")
    mis = sub.add_parser("misses")
    mis.add_argument("files", nargs="+")
    fal = sub.add_parser("false")
    fal.add_argument("files", nargs="+")
    cls = sub.add_parser("classify")
    cls.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    if args.cmd == "record":
        return record(args)
    every: list[dict] = []
    classified: list[dict] = []
    for path in args.files:
        try:
            doc = load(path)
        except (OSError, EOFError, pickle.UnpicklingError) as e:  # not a recording of `record`
            print(f"foresight_replay: {path}: not a readable recording ({e.__class__.__name__}: {e})", file=sys.stderr)
            return 2
        if args.cmd == "misses":
            misses(doc, replay(doc, trace_rows=True))
        elif args.cmd == "false":
            print_false(doc, replay(doc, trace_rows=True))
        elif args.cmd == "classify":
            # imported here: foresight_misses imports this module
            from foresight_misses import classify_misses
            classified.extend(classify_misses(doc, replay(doc, trace_rows=True)))
        else:
            when = None
            if args.scrape_interval is not None or args.evaluation_interval is not None:
                try:
                    when = fa.cadence(doc["interval"], args.scrape_interval, args.evaluation_interval)
                except ValueError as e:  # the recording's polls do not fall on the cadence
                    print(f"foresight_replay: {path}: {e}", file=sys.stderr)
                    return 2
            results = replay(doc, when=when)
            every.extend(results)
            print(line(f"corpus {doc['corpus']} seed {doc['seed']}", summary(results)))
    if args.cmd == "classify":
        from foresight_misses import print_classes
        print_classes(classified)
    if len(args.files) > 1 and args.cmd == "replay":  # the figures of all runs together
        print(line(f"all {len(args.files)} runs", summary(every)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
