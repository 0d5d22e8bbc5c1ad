"""exporter serve: poll the GPUs and serve /metrics until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from typing import TYPE_CHECKING

from exporter import commands
from exporter.errors import NoGpuError, UserError

if TYPE_CHECKING:  # imported where used: `exporter --help` and the other commands never load the web server
    from exporter.compat.dcgm_exporter import DcgmExporterOutput
    from exporter.foresight.state import Foresight
    from exporter.poller import Poller
    from exporter.web.guard import HttpLimits, HttpStats
    from exporter.web.live import LiveWebConfig

HELP = "poll the GPUs and serve Prometheus metrics over HTTP"
SETTINGS = ("listen", "interval", "backend", "simulate", "speed", "log_level", "log_format", "procfs", "gpu_timeout",
            "state_dir", "dcgm_address", "dcgm_bindings", "dcgm_update_interval", "web_config_file", "web_max_connections",
            "web_read_timeout", "web_idle_timeout", "process_series", "kubernetes_api", "pod_resources_socket",
            "node_name", "compat_listen")

log = logging.getLogger(__name__)

# The poll thread holds the GIL for long stretches of Python; a shorter switch interval lets
# the HTTP loop answer a scrape within a millisecond or so instead of waiting out 5 ms slices.
GIL_SWITCH_INTERVAL_SECONDS = 0.0005
# Python's garbage collector runs a generation-0 pass every 700 container allocations net of
# frees. A poll of the mixed 8-GPU node builds a few thousand (readings, records, series) before
# the previous poll's are freed, so every poll paid a pass over all of them (about 0.5 ms, 5 % of
# the poll) to find cyclic garbage the poll path does not make. At 20,000 the pass comes when
# garbage and growth have really piled up (none in 60 polls of that node: docs/performance.md,
# "Poll, fourth pass"); the older generations keep their defaults.
GC_THRESHOLDS = (20_000, 10, 10)


def settle_gc() -> None:
    """The collector settings serve polls under (benches call this too, to measure what serve
    runs): what start-up built is frozen out of every later pass (it lives as long as the
    process), and generation 0 is collected at GC_THRESHOLDS."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands.add_setting_flags(parser, SETTINGS)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from exporter.foresight.state import Foresight
    from exporter.logging_setup import configure_logging
    from exporter.web.guard import HttpLimits, HttpStats
    from exporter.web.live import LiveWebConfig

    settings = commands.settings_from_args(args)
    configure_logging(settings.log_level, settings.log_format)
    host, port = settings.listen_address
    # The web config is checked before anything starts: a bad file is one line and exit 2.
    http_stats = HttpStats()
    web_config = LiveWebConfig.from_path(settings.web_config_file, http_stats)
    limits = HttpLimits(max_connections=settings.web_max_connections, read_timeout=settings.web_read_timeout,
                        idle_timeout=settings.web_idle_timeout)
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_SECONDS)
    foresight = Foresight(state_dir=settings.state_dir, rules=settings.workload_rules)
    compat = None
    if settings.compat_listen is not None:
        from exporter.compat.dcgm_exporter import DcgmExporterOutput

        # dcgm-exporter's hostname label: $NODE_NAME, else the host's name.
        compat = DcgmExporterOutput(settings.node_name or os.environ.get("NODE_NAME") or None)
    poller = make_poller(commands.make_backend(settings), settings.interval, foresight, settings.process_series,
                         gpu_timeout=settings.gpu_timeout, http_stats=http_stats, compat=compat)
    settle_gc()
    try:
        asyncio.run(_serve(poller, host, port, settings.listen, web_config, limits,
                           compat=(compat, settings.compat_listen) if compat is not None else None))
    finally:
        # Bounded wait: a poll stuck in the driver must not keep the process alive forever.
        poller.stop(timeout=settings.gpu_timeout + 5.0)
        foresight.flush()  # learned profiles survive the restart
    log.info("stopped")
    return 0


def make_poller(backend, interval: float, foresight: Foresight, process_series: str = "pod", *,
                gpu_timeout: float = 0.0, http_stats: HttpStats | None = None,
                compat: DcgmExporterOutput | None = None) -> Poller:
    """The poller serve runs: snapshot collectors, the forecasts ``foresight`` learns from each
    poll, the HTTP self-metrics, and the log of what changed between polls. ``process_series``
    is what one per-process series stands for (exporter.collectors.instances).

    /health allows STALE_AFTER_INTERVALS intervals plus ``gpu_timeout`` since the last good
    poll: the poll in which a GPU hangs lasts up to an interval plus the timeout, so a single
    hung GPU never flaps /health (docs/configuration.md). ``compat`` renders each poll as
    dcgm-exporter's /metrics for the --compat-listen listener (docs/dcgm-exporter.md).
    """
    from exporter.collectors.forecast import ForecastCollector
    from exporter.collectors.http import HttpCollector
    from exporter.poller import STALE_AFTER_INTERVALS, Poller
    from exporter.transitions import TransitionLog

    extra = ([ForecastCollector(foresight, process_series)]
             + ([HttpCollector(http_stats)] if http_stats is not None else []))
    observers = [TransitionLog().observe, foresight.observe] + ([compat.observe] if compat is not None else [])
    return Poller(backend, interval, extra_collectors=extra, observers=observers,
                  stale_after=STALE_AFTER_INTERVALS * interval + gpu_timeout, process_series=process_series)


async def _serve(poller: Poller, host: str, port: int, listen: str, web_config: LiveWebConfig | None = None,
                 limits: HttpLimits | None = None, compat: tuple[DcgmExporterOutput, str] | None = None) -> None:
    import asyncio

    from exporter.server import start_server
    from exporter.web.live import describe

    # Handlers go in before the "listening" line: whoever reacts to that line may signal at once.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    pending: set[asyncio.Task] = set()

    def reload_web_config() -> None:
        if web_config is None or web_config.current is None:
            log.info("SIGHUP: no --web.config.file to reload")
            return
        task = loop.create_task(web_config.reload("SIGHUP"))
        pending.add(task)
        task.add_done_callback(pending.discard)

    for sig, action in ((signal.SIGINT, stop.set), (signal.SIGTERM, stop.set), (signal.SIGHUP, reload_web_config)):
        try:
            loop.add_signal_handler(sig, action)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread (embedded use): KeyboardInterrupt still ends main()
    try:
        try:
            server = await start_server(poller, host, port, web_config=web_config, limits=limits)
        except OSError as exc:
            raise UserError(f"--listen {listen}: cannot listen: {exc.strerror or exc}") from None
        servers = [server]
        if compat is not None:
            # Same web config (TLS, auth) and limits as the main listener.
            from exporter.compat.listener import start_compat_server

            output, compat_listen = compat
            try:
                servers.append(await start_compat_server(poller, output, compat_listen, web_config, limits))
            except OSError as exc:
                await server.close()
                raise UserError(f"--compat-listen {compat_listen}: cannot listen: {exc.strerror or exc}") from None
        # Polling starts once the port is ours, so a port in use is the first and only line.
        try:
            poller.start()
        except NoGpuError as exc:
            for each in servers:
                await each.close()
            raise UserError(commands.no_gpu_message(exc, "serve")) from None
        security = describe(web_config.current) if web_config is not None and web_config.current else "no web config"
        log.info("listening on %s (backend %s, polling every %gs; %s)", server.url, poller.backend_name,
                 poller.interval, security)
        if len(servers) > 1:
            log.info("serving dcgm-exporter's metrics on %smetrics (--compat-listen)", servers[1].url)
        try:
            await stop.wait()
            log.info("shutting down")
        finally:
            for each in servers:
                await each.close()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
