"""exporter profiles: export and import the learned workload memory profiles of a --state-dir.

Profiles are learned per host; exporting them from one exporter and importing them into
another (a new node, a fresh container) lets it forecast contention from its first poll
instead of after one complete run of each workload.
"""

from __future__ import annotations

import argparse
import os
import sys

from typing import TYPE_CHECKING

from exporter.errors import UserError

if TYPE_CHECKING:  # imported where used: `exporter --help` does not load foresight and SQLite
    from exporter.foresight.state import Foresight

HELP = "export or import learned workload memory profiles (JSON)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    export = actions.add_parser(
        "export", help="print the profiles of a state directory as JSON",
        description="Print every profile learned in --state-dir as a JSON export document.")
    export.add_argument("--state-dir", required=True, metavar="DIR", help="the exporter's --state-dir")
    export.add_argument("-o", "--output", metavar="FILE", help="write the JSON to FILE instead of stdout ('-' = stdout)")
    export.set_defaults(_action=_export)
    imp = actions.add_parser(
        "import", help="merge a JSON export into a state directory",
        description="Merge the profiles of FILE (from 'exporter profiles export'; '-' = stdin) into "
                    "--state-dir. Per workload the more recently updated profile wins. A running exporter "
                    "reads its state directory only at start: restart it to use the imported profiles.")
    imp.add_argument("--state-dir", required=True, metavar="DIR",
                     help="the exporter's --state-dir (created if missing, as serve does)")
    imp.add_argument("file", metavar="FILE", help="JSON export document, or - for stdin")
    imp.set_defaults(_action=_import)


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "_action", None)
    if action is None:
        raise UserError("profiles: missing action, one of: export, import (see 'exporter profiles --help')")
    from exporter.logging_setup import configure_logging

    configure_logging("warning", "text")  # store warnings (a corrupt file set aside) as one line each
    return action(args)


def _open(state_dir: str, need_store: bool) -> Foresight:
    """A Foresight over the state directory; UserError when it or (if needed) its store is missing.

    Without ``need_store`` (import) a missing directory is created, as ``serve --state-dir`` does:
    seeding a new node's state before its exporter first starts is the point of importing.
    """
    if not need_store and not os.path.exists(state_dir):
        try:
            os.makedirs(state_dir)
        except OSError as exc:
            raise UserError(f"--state-dir {state_dir}: cannot create: {exc.strerror or exc}") from None
    if not os.path.isdir(state_dir):
        raise UserError(f"--state-dir {state_dir}: no such directory")
    from exporter.foresight.state import Foresight
    from exporter.foresight.store import DB_NAME

    if need_store and not os.path.isfile(os.path.join(state_dir, DB_NAME)):
        raise UserError(f"--state-dir {state_dir}: no learned profiles here (no {DB_NAME})")
    foresight = Foresight(state_dir=state_dir)
    _check_store(foresight, state_dir)
    return foresight


def _check_store(foresight: Foresight, state_dir: str) -> None:
    store = foresight.store
    if store is not None and not store.ok:
        store.close()
        raise UserError(f"--state-dir {state_dir}: {store.error or 'profile store unusable'}")


def _export(args: argparse.Namespace) -> int:
    foresight = _open(args.state_dir, need_store=True)
    try:
        document = foresight.export_json()
        count = len(foresight.profiles)
    finally:
        foresight.store.close()
    if args.output in (None, "-"):
        sys.stdout.write(document)
        return 0
    try:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(document)
    except OSError as exc:
        raise UserError(f"-o {args.output}: cannot write: {exc.strerror or exc}") from None
    print(f"exported {count} workload profile{'' if count == 1 else 's'} to {args.output}")
    return 0


def _read(path: str) -> str:
    """The text of the import file ('-' = stdin); UserError naming it when unreadable."""
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file (expected JSON from 'exporter profiles export')") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _import(args: argparse.Namespace) -> int:
    place = "<stdin>" if args.file == "-" else args.file
    text = _read(args.file)
    from exporter.foresight.store import import_json as parse_export

    offered = len(parse_export(text, place))  # validates before the store is touched
    foresight = _open(args.state_dir, need_store=False)
    try:
        taken = foresight.import_json(text, place)
        _check_store(foresight, args.state_dir)  # import_json keeps going in memory when a write fails
    finally:
        foresight.store.close()
    skipped = offered - taken
    note = f" ({skipped} skipped: the stored profile is newer)" if skipped else ""
    print(f"imported {taken} of {offered} workload profile{'' if offered == 1 else 's'} "
          f"into {args.state_dir}{note}")
    return 0

