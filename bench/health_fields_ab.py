"""The health reader's parse of its field-values answers, this checkout against another, in one process.

    python bench/health_fields_ab.py --base /tmp/base          # mixed 8-GPU node at 600 s

Polls a simulated node through serve's poller (bench/poll_profile.py's ``build``) and keeps,
for one poll, every GPU's ``nvmlDeviceGetFieldValues`` answer and its HealthReader. Then
``HealthReader._fields`` of this checkout and of ``--base`` (its exporter/backend/nvml_health.py
loaded beside this one's) parse those same answers, handed back by a stand-in poll context (no
driver call is timed), the versions alternating round by round; thread CPU per poll (all GPUs),
median of the rounds. Both must give the same result for every GPU (checked first).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]


class _Answer:
    """A poll context whose raw() hands back one recorded answer."""

    def __init__(self, answer) -> None:
        self.answer = answer

    def raw(self, *_args, **_kwargs):
        return self.answer


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--base", required=True, help="the other checkout (its exporter/backend/nvml_health.py)")
    parser.add_argument("--scenario", default="h100-mixed-node")
    parser.add_argument("--at", type=float, default=600.0)
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args(argv)
    path = Path(args.base) / "exporter" / "backend" / "nvml_health.py"
    if not path.is_file():
        print(f"--base {args.base}: no exporter/backend/nvml_health.py there", file=sys.stderr)
        return 2
    logging.disable(logging.WARNING)
    from poll_profile import build

    from exporter.backend import nvml_health, nvml_types

    spec = importlib.util.spec_from_file_location("base_nvml_health", path)
    base = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = base
    spec.loader.exec_module(base)

    backend, poller = build(args.scenario, args.at)
    try:
        for n in range(3):
            backend.step_to(args.at + 1 + n)
            poller.poll_once()
        answers, readers = [], []
        raw, fields = nvml_types.PollContext.raw, nvml_health.HealthReader._fields

        def recording_raw(self, section, fn, *call, **kwargs):
            value = raw(self, section, fn, *call, **kwargs)
            if fn == "nvmlDeviceGetFieldValues":
                answers.append(value)
            return value

        def recording_fields(self, ctx, h, mine):
            readers.append((self, h, mine))
            return fields(self, ctx, h, mine)

        nvml_types.PollContext.raw, nvml_health.HealthReader._fields = recording_raw, recording_fields
        try:
            backend.step_to(args.at + 4)
            poller.poll_once()
        finally:
            nvml_types.PollContext.raw, nvml_health.HealthReader._fields = raw, fields
    finally:
        backend.close()
    cases = [(reader, _Answer(answer), h, mine) for (reader, h, mine), answer in zip(readers, answers)]
    versions = {"base": base.HealthReader._fields, "this": nvml_health.HealthReader._fields}
    same = all(versions["base"](*case) == versions["this"](*case) for case in cases)
    print(f"{args.scenario} at {args.at:g} s: {len(cases)} GPUs, {sum(len(a) for a in answers)} field values a poll; "
          f"same result for every GPU: {same}")
    times: dict[str, list[float]] = {"base": [], "this": []}
    for round_ in range(args.rounds):
        for name in (("base", "this") if round_ % 2 == 0 else ("this", "base")):
            parse = versions[name]
            t0 = time.thread_time_ns()
            for _ in range(5):
                for case in cases:
                    parse(*case)
            times[name].append((time.thread_time_ns() - t0) / 5 / 1e3)
    b, t = statistics.median(times["base"]), statistics.median(times["this"])
    print(f"parse, µs per poll (median of {args.rounds} rounds): base {b:.1f}, this {t:.1f}, this / base {t / b:.2f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
