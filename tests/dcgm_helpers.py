"""Running a scenario through the exporter with one backend and reading /metrics back.

Shared by the DCGM backend tests: the same pipeline as ``exporter serve --simulate`` (fake
NVML and fake DCGM -> backend -> collectors -> exposition), polled on a manual virtual clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from exporter.backend.choose import DcgmOptions
from exporter.backend.dcgm_session import DcgmAddress
from exporter.backend.sim import SimBackend
from exporter.poller import Poller

NV_HOSTENGINE = DcgmAddress("tcp", "127.0.0.1:5555")

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Series:
    """{(sample name, sorted labels): value} of a text exposition."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def write_scenario(tmp_path: Path, data: dict, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@contextmanager
def embedded_engine(tmp_path: Path, data: dict, bindings) -> Iterator[tuple]:
    """The fake libdcgm over a scenario, an embedded host engine started through ``bindings`` (the
    loaded DCGM modules) in AUTO mode: yields (simulation, library, engine handle), stops it after."""
    from exporter.sim import Simulation, fakedcgm
    from exporter.sim.scenario import load_scenario

    scenario = load_scenario(write_scenario(tmp_path, data))
    sim = Simulation(scenario)
    sim.install()
    lib = fakedcgm.install(sim, scenario.dcgm)
    try:
        bindings.structs._dcgmInit()
        handle = bindings.agent.dcgmStartEmbedded(bindings.structs.DCGM_OPERATION_MODE_AUTO)
        yield sim, lib, handle
        bindings.agent.dcgmStopEmbedded(handle)
    finally:
        fakedcgm.uninstall(lib)
        sim.close()


class Run:
    """A SimBackend + Poller on a manual clock; ``poll(t)`` returns the scrape at virtual time t."""

    def __init__(self, scenario, backend: str, address: DcgmAddress | None = None, interval: float = 1.0):
        self.backend = SimBackend(scenario, backend=backend,
                                  dcgm=DcgmOptions(address=address, interval=interval))
        wall = iter(range(1_800_000_000, 1_900_000_000, 10))
        self.poller = Poller(self.backend, interval=interval, wall_clock=lambda: float(next(wall)))
        self.backend.open()

    def poll(self, t: float) -> Series:
        self.backend.step_to(t)
        assert self.poller.poll_once(), self.poller.stats.last_error
        return parse(self.poller.exposition.body(openmetrics_format=False, gzipped=False).decode())

    @property
    def snapshot(self):
        return self.poller.exposition.snapshot

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def scrape_at(scenario, backend: str, times, **kwargs) -> Series:
    """The scrape after polling at each of ``times`` (virtual seconds, increasing)."""
    with Run(scenario, backend, **kwargs) as run:
        series = {}
        for t in times:
            series = run.poll(t)
        return series


def value(series: Series, name: str, **labels) -> float | None:
    """The value of the one sample ``name`` whose labels include ``labels``; None if absent."""
    found = [v for (n, ls), v in series.items() if n == name and labels.items() <= dict(ls).items()]
    assert len(found) <= 1, f"{name}{labels}: {len(found)} samples"
    return found[0] if found else None


def names(series: Series) -> set[str]:
    return {name for name, _ in series}
