"""Write the dashboards as Grafana JSON under dashboards/json/ (or check that the files are current).

    python -m dashboards.generate          # rewrite dashboards/json/*.json
    python -m dashboards.generate --check  # exit 1 and name the stale files if regenerating would change them
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dashboards import advice, fleet, gpu, mig, mps
from dashboards.grafana import Dashboard, render

OUT = Path(__file__).resolve().parent / "json"
DASHBOARDS: tuple[Dashboard, ...] = (fleet.DASHBOARD, gpu.DASHBOARD, mig.DASHBOARD, mps.DASHBOARD, advice.DASHBOARD)


def rendered() -> dict[str, str]:
    """File name -> JSON text of every dashboard (the file is named after the dashboard's uid)."""
    return {f"{board.uid}.json": render(board) for board in DASHBOARDS}


def stale(out: Path = OUT) -> list[str]:
    """Files under ``out`` that differ from what the generator makes, are missing, or are left over."""
    wanted = rendered()
    present = {path.name for path in out.glob("*.json")} if out.is_dir() else set()
    problems = [name for name, text in wanted.items()
                if name not in present or (out / name).read_bytes() != text.encode()]
    return sorted(problems + sorted(present - set(wanted)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboards.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report files that are not current")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale()
        for name in problems:
            print(f"dashboards/json/{name}: not what the generator makes; run python -m dashboards.generate",
                  file=sys.stderr)
        return 1 if problems else 0
    OUT.mkdir(exist_ok=True)
    wanted = rendered()
    for leftover in set(p.name for p in OUT.glob("*.json")) - set(wanted):
        (OUT / leftover).unlink()
    for name, text in wanted.items():
        (OUT / name).write_bytes(text.encode())
    print(f"wrote {len(wanted)} dashboards to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
