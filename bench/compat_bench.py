"""Cost of the dcgm-exporter output (--compat-listen, issue 21) per poll, as a ratio of the main
exposition's, on the same snapshots in the same run.

    python bench/compat_bench.py            # about 20 s on 2 cores
    python bench/compat_bench.py --quick    # a third of the polls

The 8-GPU mixed node (examples/scenarios/h100-mixed-node.yaml, ~80 processes) and the Kubernetes
node (k8s-shared-node.yaml: time-sliced, MPS and MIG pods) are polled through the simulator every
10 virtual seconds; for each poll the bench times (a) what the poller does for /metrics: collect
the registry and encode the OpenMetrics + gzip variant Prometheus asks for, and (b) what
--compat-listen adds: DcgmExporterOutput.observe (render the dcgm-exporter text). Best of 3 passes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(HERE)]

from exporter.backend.sim import SimBackend  # noqa: E402
from exporter.compat.dcgm_exporter import DcgmExporterOutput  # noqa: E402
from exporter.identity import Identifier  # noqa: E402
from exporter.poller import Poller  # noqa: E402
from exporter.render import render  # noqa: E402

SCENARIOS = ("h100-mixed-node", "k8s-shared-node")


def snapshots(name: str, count: int) -> tuple[Poller, list]:
    backend = SimBackend(str(REPO / "examples" / "scenarios" / f"{name}.yaml"), identifier=Identifier())
    backend.open()
    wall = iter(range(1_800_000_000, 1_900_000_000))
    poller = Poller(backend, interval=1.0, wall_clock=lambda: float(next(wall)))
    out = []
    for t in range(60, 60 + 10 * count, 10):
        backend.step_to(float(t))
        assert poller.poll_once(), poller.stats.last_error
        out.append(poller.exposition.snapshot)
    backend.close()
    return poller, out


def best_of(passes: int, work) -> float:
    best = float("inf")
    for _ in range(passes):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    polls = 20 if parser.parse_args().quick else 60
    for name in SCENARIOS:
        poller, snaps = snapshots(name, polls)
        output = DcgmExporterOutput("bench-node")

        def main_exposition():
            for snap in snaps:
                poller._snapshot = snap  # what the collectors read
                render(poller._registry, snap, 0.0).variant((True, True))

        def compat():
            for snap in snaps:
                output.observe(snap)

        main_s, compat_s = best_of(3, main_exposition) / len(snaps), best_of(3, compat) / len(snaps)
        print(f"{name}: main /metrics {main_s * 1e3:.2f} ms/poll, dcgm-exporter output {compat_s * 1e3:.2f} ms/poll "
              f"(ratio {compat_s / main_s:.2f}); {len(output.body)} bytes per poll")


if __name__ == "__main__":
    main()
