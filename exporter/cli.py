"""The ``exporter`` command line: a registry of subcommands, one module each.

A command module provides ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``;
adding a command means adding one line to COMMANDS. Every :class:`UserError` (bad
flag, bad config, no GPU) ends as ``exporter: error: <one line>`` and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from types import ModuleType
from typing import Sequence

from exporter import __version__
from exporter.errors import UserError

# (command name, module implementing it), in the order `exporter --help` lists them.
COMMANDS: list[tuple[str, str]] = [
    ("serve", "exporter.commands.serve"),
    ("snapshot", "exporter.commands.snapshot"),
    ("recommend", "exporter.recommend.command"),
    ("profiles", "exporter.commands.profiles"),
]

log = logging.getLogger(__name__)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error becomes a UserError (one line, exit 2) instead of a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        command = self.prog.removeprefix("exporter").strip()  # "" at the top level, "serve" below
        where = f"{command}: " if command else ""
        raise UserError(f"{where}{message} (see '{self.prog} --help')")


def _unavailable(name: str, exc: ImportError) -> ModuleType:
    """Stand-in for a command whose module cannot be imported, so the other commands still work."""
    module = ModuleType(name)
    module.HELP = f"(unavailable: {exc})"

    def run(args: argparse.Namespace) -> int:
        raise UserError(f"{name}: command unavailable in this installation: {exc}")

    module.add_arguments = lambda parser: None
    module.run = run
    return module


def _chosen_command(argv: Sequence[str] | None) -> str | None:
    """The command ``argv`` runs, when it names one: the top level has no option taking a value,
    so the first word that is not an option is the command."""
    if argv is None:
        return None
    first = next((arg for arg in argv if not arg.startswith("-")), None)
    return first if first in {name for name, _ in COMMANDS} else None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The top-level parser with every registered command; given the ``argv`` it will parse,
    only the command that ``argv`` names is imported (start-up time: `exporter snapshot` does
    not load the web server, `exporter recommend --help` not the planner's SciPy)."""
    chosen = _chosen_command(argv)
    parser = _Parser(
        prog="exporter", description="Prometheus exporter for shared NVIDIA GPUs (MIG, MPS, time-slicing)."
    )
    parser.add_argument("--version", action="version", version=f"exporter {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module_name in COMMANDS:
        if chosen is not None and name != chosen:
            sub.add_parser(name)  # not run this time: its module stays unimported
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            module = _unavailable(name, exc)
        command = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``exporter`` script; returns the exit status."""
    try:
        parser = build_parser(sys.argv[1:] if argv is None else argv)
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help and --version
            return exc.code if isinstance(exc.code, int) else 0
        run = getattr(args, "_run", None)
        if run is None:
            names = ", ".join(name for name, _ in COMMANDS)
            raise UserError(f"missing command, one of: {names} (see 'exporter --help')")
        return int(run(args))
    except UserError as exc:
        message = " ".join(str(exc).split())
        print(f"exporter: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    except Exception as exc:  # noqa: BLE001 - a bug still gets one line; details at --log-level debug
        log.debug("unexpected error", exc_info=exc)
        print(f"exporter: error: unexpected {type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
