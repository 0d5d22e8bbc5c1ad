"""`exporter recommend`: the CLI subcommand (add_arguments / run, as exporter.cli expects)."""

from __future__ import annotations

import argparse
import sys

from exporter import catalog
from exporter.errors import UserError

FORMATS = ("text", "json", "yaml", "mig-parted", "markdown", "html")

HELP = "recommend MIG layouts, workload placement and MPS settings from usage or a plan"
DESCRIPTION = """\
Reads observed usage (a running exporter, Prometheus history, snapshot files) or a plan of
workloads, and answers per GPU model and node: which MIG layout, which workload goes where,
what MPS limits and start offsets keep MPS clients from killing each other, and what each
choice costs. See docs/recommend.md."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    src = parser.add_argument_group("inputs (at least one; they combine)")
    src.add_argument("--from", dest="from_urls", action="append", default=[], metavar="URL",
                     help="a running exporter (reads URL/api/v1/snapshot); repeatable")
    src.add_argument("--prometheus", metavar="URL", help="Prometheus holding the exporter's history")
    src.add_argument("--window", metavar="DURATION", help="history window for --prometheus (default 7d)")
    src.add_argument("--node-label", default="instance", metavar="LABEL",
                     help="Prometheus label naming the node (default: instance)")
    src.add_argument("--snapshot", dest="snapshots", action="append", default=[], metavar="[NODE=]FILE",
                     help="`exporter snapshot` JSON (one, a list, or JSON Lines); repeatable")
    src.add_argument("--workloads", dest="plans", action="append", default=[], metavar="FILE",
                     help="a plan of workloads in YAML (docs/recommend.md); repeatable")
    opt = parser.add_argument_group("planning")
    opt.add_argument("--gpu-model", dest="gpu_models", action="append", default=[], metavar="MODEL",
                     help="GPU model for workloads that name none (repeat to compare models); "
                          f"known: {', '.join(catalog.MODELS)}")
    opt.add_argument("--margin", type=float, metavar="FRACTION",
                     help="margin on observed peaks (default 0.10); a plan sets its own")
    out = parser.add_argument_group("output")
    out.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    out.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    out.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="progress bar on stderr for --prometheus (default: when stderr is a terminal)")


def build_demand(args: argparse.Namespace):
    """The Demand every input given in ``args`` describes together."""
    from exporter.recommend import plan_file, prometheus_input, snapshot_input
    from exporter.recommend.demand import Demand, merge
    from exporter.recommend.observed import ObservedFleet

    if not (args.from_urls or args.prometheus or args.snapshots or args.plans):
        raise UserError("recommend: give at least one input: --from, --prometheus, --snapshot or --workloads")
    if args.window and not args.prometheus:
        raise UserError("--window: only meaningful with --prometheus")
    if args.margin is not None and not 0 <= args.margin <= 10:
        raise UserError(f"--margin {args.margin:g}: expected a fraction between 0 and 10 (0.1 = 10%)")
    targets = []
    for name in args.gpu_models:
        try:
            targets.append(catalog.resolve_model(name).key)
        except KeyError as exc:
            raise UserError(f"--gpu-model: {exc.args[0]}") from None
    demands = []
    if args.from_urls or args.prometheus or args.snapshots:
        fleet = ObservedFleet()
        snapshot_input.load_snapshot_files(args.snapshots, fleet)
        snapshot_input.fetch_snapshots(args.from_urls, fleet)
        if args.prometheus:
            prometheus_input.load_prometheus(args.prometheus, args.window or "7d", fleet,
                                             node_label=args.node_label, progress=args.progress)
        observed = fleet.to_demand(args.margin)
        if not observed.workloads and not observed.gpus:
            raise UserError("recommend: the inputs hold no GPU and no process")
        demands.append(observed)
    demands += [plan_file.load_plan(path) for path in args.plans]
    demands.append(Demand(workloads=(), targets=tuple(targets)))
    merged = merge(demands)
    if targets:  # --gpu-model wins over the plan's gpu_model for unpinned workloads
        from dataclasses import replace

        merged = replace(merged, targets=tuple(targets))
    return merged


def render(rec, fmt: str) -> str:
    from exporter.recommend import outputs_data, outputs_html, outputs_migparted, outputs_text

    return {
        "text": outputs_text.render_text,
        "markdown": outputs_text.render_markdown,
        "json": outputs_data.render_json,
        "yaml": outputs_data.render_yaml,
        "mig-parted": outputs_migparted.render_migparted,
        "html": outputs_html.render_html,
    }[fmt](rec)


def run(args: argparse.Namespace) -> int:
    """Plan and print; UserError (one line) for bad input."""
    try:
        import scipy.optimize  # noqa: F401
    except ImportError:
        raise UserError("recommend needs scipy: pip install 'gpushare-exporter[plan]'") from None
    from exporter.recommend.report import recommend

    demand = build_demand(args)
    if not demand.workloads:
        raise UserError("recommend: no workload to place (the inputs show GPUs but no process)")
    text = render(recommend(demand), args.format)
    if args.output:
        try:
            with open(args.output, "w") as f:
                f.write(text)
        except OSError as exc:
            raise UserError(f"--output {args.output}: {exc.strerror or exc}") from None
    else:
        sys.stdout.write(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (python -m exporter.recommend.command ...), for use before exporter.cli."""
    parser = argparse.ArgumentParser(prog="exporter recommend")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except UserError as exc:
        print(f"exporter: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
