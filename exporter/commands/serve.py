"""exporter serve: poll the GPUs and serve /metrics until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import signal
import sys

from exporter import commands
from exporter.collectors.forecast import ForecastCollector
from exporter.errors import NoGpuError, UserError
from exporter.foresight.state import Foresight
from exporter.logging_setup import configure_logging
from exporter.poller import STALE_AFTER_INTERVALS, Poller
from exporter.server import start_server

HELP = "poll the GPUs and serve Prometheus metrics over HTTP"
SETTINGS = ("listen", "interval", "backend", "simulate", "speed", "log_level", "log_format", "procfs", "gpu_timeout",
            "state_dir", "process_series", "kubernetes_api", "pod_resources_socket", "node_name")

log = logging.getLogger(__name__)

# The poll thread holds the GIL for long stretches of Python; a shorter switch interval lets
# the HTTP loop answer a scrape within a millisecond or so instead of waiting out 5 ms slices.
GIL_SWITCH_INTERVAL_SECONDS = 0.0005


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands.add_setting_flags(parser, SETTINGS)


def run(args: argparse.Namespace) -> int:
    settings = commands.settings_from_args(args)
    configure_logging(settings.log_level, settings.log_format)
    host, port = settings.listen_address
    if settings.gpu_timeout >= STALE_AFTER_INTERVALS * settings.interval and \
            "gpu_timeout" not in commands.explicit_settings(args):
        # A short --interval without a --gpu-timeout: shrink the default with it, so that a hung
        # GPU cannot make /health flap (the user asked for nothing that conflicts).
        settings = dataclasses.replace(settings, gpu_timeout=(STALE_AFTER_INTERVALS - 1) * settings.interval)
        log.debug("--gpu-timeout defaults to %gs with --interval %gs", settings.gpu_timeout, settings.interval)
    if settings.gpu_timeout >= STALE_AFTER_INTERVALS * settings.interval:
        # A hung GPU makes each poll last gpu_timeout; /health would then flap to 503.
        log.warning("--gpu-timeout %gs is not below %d x --interval (%gs): /health will report stale "
                    "polls while a GPU hangs", settings.gpu_timeout, STALE_AFTER_INTERVALS,
                    STALE_AFTER_INTERVALS * settings.interval)
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_SECONDS)
    foresight = Foresight(state_dir=settings.state_dir, rules=settings.workload_rules)
    poller = make_poller(commands.make_backend(settings), settings.interval, foresight, settings.process_series)
    try:
        poller.start()
    except NoGpuError as exc:
        raise UserError(commands.no_gpu_message(exc, "serve")) from None
    try:
        asyncio.run(_serve(poller, host, port, settings.listen))
    finally:
        # Bounded wait: a poll stuck in the driver must not keep the process alive forever.
        poller.stop(timeout=settings.gpu_timeout + 5.0)
        foresight.flush()  # learned profiles survive the restart
    log.info("stopped")
    return 0


def make_poller(backend, interval: float, foresight: Foresight, process_series: str = "pod") -> Poller:
    """The poller serve runs: snapshot collectors plus the forecasts ``foresight`` learns from each poll."""
    return Poller(backend, interval, extra_collectors=[ForecastCollector(foresight, process_series)],
                  observers=[foresight.observe], process_series=process_series)


async def _serve(poller: Poller, host: str, port: int, listen: str) -> None:
    # Handlers go in before the "listening" line: whoever reacts to that line may signal at once.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread (embedded use): KeyboardInterrupt still ends main()
    try:
        try:
            server = await start_server(poller, host, port)
        except OSError as exc:
            raise UserError(f"--listen {listen}: cannot listen: {exc.strerror or exc}") from None
        log.info("listening on %s (backend %s, polling every %gs)", server.url, poller.backend_name, poller.interval)
        try:
            await stop.wait()
            log.info("shutting down")
        finally:
            await server.close()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
