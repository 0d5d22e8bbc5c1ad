"""`exporter recommend`: the CLI subcommand (add_arguments / run, as exporter.cli expects)."""

from __future__ import annotations

import argparse
import math
import sys
from datetime import datetime, timezone

from exporter import catalog
from exporter.errors import UserError
from exporter.client_flags import add_client_flags, client_options  # not http_client: no ssl until a fetch

FORMATS = ("text", "json", "yaml", "mig-parted", "gpu-operator", "markdown", "html")
DEFAULT_WINDOW = "7d"
DEFAULT_MIN_WINDOW = "1d"
FROM_INTERVAL_SECONDS = 5.0

HELP = "recommend MIG layouts, workload placement and MPS settings from usage or a plan"
DESCRIPTION = """\
Reads observed usage (a running exporter, Prometheus history, snapshot files, learned
profiles) or a plan of workloads, and answers per GPU model and node: how many GPUs the
workloads need at their peak concurrency, which MIG layout, what changes on the GPUs that run
now, what MPS limits and start offsets keep MPS clients from killing each other, and what each
choice costs. See docs/recommend.md."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    src = parser.add_argument_group("inputs (at least one; they combine)")
    src.add_argument("--from", dest="from_urls", action="append", default=[], metavar="URL",
                     help="a running exporter, e.g. http://node-a:18474 (reads /api/v1/snapshot and the "
                          "learned peaks on /metrics); repeatable")
    src.add_argument("--prometheus", metavar="URL", help="Prometheus holding the exporter's history")
    src.add_argument("--window", metavar="DURATION",
                     help=f"history read from --prometheus (default {DEFAULT_WINDOW}), or how long to watch "
                          f"--from exporters, one look every {FROM_INTERVAL_SECONDS:g} s (default: one look)")
    src.add_argument("--at", metavar="TIME",
                     help="end of the --prometheus window: Unix seconds or an ISO date (default: now); "
                          "the same --at gives the same plan")
    src.add_argument("--node-label", default="instance", metavar="LABEL",
                     help="Prometheus label naming the node (default: instance)")
    src.add_argument("--cluster", metavar="NAME",
                     help="plan only this value of the cluster label (a Thanos Query or Mimir holding several "
                          "clusters is otherwise planned one cluster at a time)")
    src.add_argument("--snapshot", dest="snapshots", action="append", default=[], metavar="[NODE=]FILE",
                     help="`exporter snapshot` output (JSON Lines, a JSON list, or one snapshot); repeatable")
    src.add_argument("--state-dir", metavar="DIR",
                     help="learned workload profiles: an exporter's --state-dir (read only) or an "
                          "`exporter profiles export` JSON file")
    src.add_argument("--workloads", dest="plans", action="append", default=[], metavar="FILE",
                     help="a plan of workloads in YAML (docs/recommend.md); repeatable")
    opt = parser.add_argument_group("planning")
    opt.add_argument("--gpu-model", dest="gpu_models", action="append", default=[], metavar="MODEL",
                     help="GPU model for workloads that name none (repeat to compare models); "
                          f"known: {', '.join(catalog.MODELS)}")
    opt.add_argument("--margin", type=float, metavar="FRACTION",
                     help="margin on observed peaks and MPS limits (default 0.10); a plan sets its own")
    opt.add_argument("--quantile", type=float, metavar="Q",
                     help="observed size of a workload: this quantile of its instances' peaks (default 0.95)")
    opt.add_argument("--min-window", metavar="DURATION", default=DEFAULT_MIN_WINDOW,
                     help=f"observed history shorter than this makes the plan a draft (default {DEFAULT_MIN_WINDOW})")
    add_client_flags(parser, "from", "the exporters of --from")
    add_client_flags(parser, "prometheus", "--prometheus")
    opt.add_argument("--driver", metavar="VERSION",
                     help="driver the GPUs run (580.95.05 or R580): plan with that branch's MIG sizes "
                          "(default: the smallest any driver branch prints, sure to fit on all)")
    out = parser.add_argument_group("output")
    out.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    out.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    out.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="progress on stderr for --prometheus and --from (default: when stderr is a terminal)")


def parse_at(text: str) -> float:
    """Unix seconds from '1735689600' or an ISO date '2025-01-01T00:00:00Z'."""
    try:
        value = float(text)
    except ValueError:
        try:
            stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise UserError(f"--at {text}: expected Unix seconds or an ISO date such as 2025-01-31T12:00:00Z") from None
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=timezone.utc)
        value = stamp.timestamp()
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"--at {text}: expected a time after 1970")
    return value


def _check(args: argparse.Namespace) -> list[str]:
    from exporter.recommend.prometheus_input import parse_window

    if not (args.from_urls or args.prometheus or args.snapshots or args.plans or args.state_dir):
        raise UserError("recommend: give at least one input: --from, --prometheus, --snapshot, --state-dir "
                        "or --workloads")
    if args.window and not (args.prometheus or args.from_urls):
        raise UserError("--window: only meaningful with --prometheus or --from")
    if args.window and args.prometheus and args.from_urls:
        raise UserError("--window: ambiguous with both --prometheus and --from; run them separately")
    if args.at and not args.prometheus:
        raise UserError("--at: only meaningful with --prometheus")
    if args.cluster is not None and not args.prometheus:
        raise UserError("--cluster: only meaningful with --prometheus")
    if args.margin is not None and not (math.isfinite(args.margin) and 0 <= args.margin <= 10):
        raise UserError(f"--margin {args.margin:g}: expected a fraction between 0 and 10 (0.1 = 10%)")
    if args.quantile is not None and not (math.isfinite(args.quantile) and 0 < args.quantile <= 1):
        raise UserError(f"--quantile {args.quantile:g}: expected a fraction above 0 and at most 1 (0.95)")
    parse_window(args.min_window, "--min-window")
    if args.window:
        parse_window(args.window)
    targets = []
    for name in args.gpu_models:
        try:
            targets.append(catalog.resolve_model(name).key)
        except KeyError as exc:
            raise UserError(f"--gpu-model: {exc.args[0]}") from None
    return targets


def build_demand(args: argparse.Namespace):
    """The Demand every input given in ``args`` describes together (one cluster)."""
    clusters = build_demands(args)
    if len(clusters) > 1:
        raise UserError(f"--prometheus {args.prometheus}: holds {len(clusters)} clusters: give --cluster NAME")
    return clusters[0][1]


def build_demands(args: argparse.Namespace) -> list:
    """[(cluster, Demand)]: what the inputs in ``args`` describe together, per cluster of --prometheus
    ([(None, demand)] for one fleet)."""
    from exporter.recommend import plan_file, prometheus_input, snapshot_input
    from exporter.recommend.demand import Demand, merge
    from exporter.recommend.observed import ObservedFleet

    targets = _check(args)
    min_window = prometheus_input.parse_window(args.min_window, "--min-window")
    demands = []
    if args.from_urls or args.snapshots:
        fleet = ObservedFleet()
        snapshot_input.load_snapshot_files(args.snapshots, fleet)
        watch = prometheus_input.parse_window(args.window) if args.window and args.from_urls else 0
        bar = None
        if watch:
            looks = int(watch // FROM_INTERVAL_SECONDS) + 1
            bar = prometheus_input.Progress(looks, f"watching {len(args.from_urls)} exporter(s)", enabled=args.progress)
        snapshot_input.fetch_snapshots(args.from_urls, fleet, watch_seconds=watch, interval=FROM_INTERVAL_SECONDS,
                                       progress=(lambda n: bar.step()) if bar else None)
        observed = fleet.to_demand(args.margin, args.quantile, min_window)
        if not observed.workloads and not observed.gpus:
            raise UserError("recommend: the inputs hold no GPU and no process")
        demands.append(observed)
    clusters: list = [(None, None)]
    if args.prometheus:
        clusters = prometheus_input.load_clusters(
            args.prometheus, args.window or DEFAULT_WINDOW, node_label=args.node_label,
            at=parse_at(args.at) if args.at else None, cluster=args.cluster, margin=args.margin,
            quantile=args.quantile, min_window=min_window, progress=args.progress)
    if len(clusters) > 1 and (demands or args.plans):
        raise UserError(f"--prometheus {args.prometheus}: holds {len(clusters)} clusters (label cluster), planned "
                        "apart: give --cluster NAME to plan --from, --snapshot or --workloads with one of them")
    after = [plan_file.load_plan(path) for path in args.plans] + [Demand(workloads=(), targets=tuple(targets))]
    return [(name, _complete(merge([*demands, *([d] if d is not None else []), *after]), args, targets))
            for name, d in clusters]


def _complete(merged, args: argparse.Namespace, targets: list[str]):
    """``merged`` with the learned profiles of --state-dir and the --gpu-model targets applied."""
    from dataclasses import replace

    from exporter.recommend import profiles_input
    from exporter.recommend.demand import DEFAULT_OBSERVED_MARGIN

    if args.state_dir:
        margin = DEFAULT_OBSERVED_MARGIN if args.margin is None else args.margin
        merged = profiles_input.apply_profiles(merged, profiles_input.load_profiles(args.state_dir), margin,
                                               args.state_dir)
    if targets:  # --gpu-model wins over the plan's gpu_model for unpinned workloads
        merged = replace(merged, targets=tuple(targets))
    return merged


def render(rec, fmt: str) -> str:
    from exporter.recommend import outputs_data, outputs_html, outputs_migparted, outputs_operator, outputs_text

    return {
        "text": outputs_text.render_text,
        "markdown": outputs_text.render_markdown,
        "json": outputs_data.render_json,
        "yaml": outputs_data.render_yaml,
        "mig-parted": outputs_migparted.render_migparted,
        "gpu-operator": outputs_operator.render_gpu_operator,
        "html": outputs_html.render_html,
    }[fmt](rec)


def run(args: argparse.Namespace) -> int:
    """Plan and print; UserError (one line) for bad input."""
    try:
        import scipy.optimize  # noqa: F401
    except ImportError:
        raise UserError("recommend needs scipy: pip install 'gpushare-exporter[plan]'") from None
    from exporter.recommend import http_fetch
    from exporter.recommend.outputs_clusters import render_clusters
    from exporter.recommend.report import recommend

    http_fetch.configure(client_options(args, "from"), client_options(args, "prometheus"))
    try:
        catalog.driver_branch(args.driver)
    except ValueError as exc:
        raise UserError(f"--driver: {exc}") from None
    # A cluster with GPUs but no process has nothing to plan (docs/recommend.md): the others are planned.
    clusters = [(name, demand) for name, demand in build_demands(args) if demand.workloads]
    if not clusters:
        raise UserError("recommend: no workload to place (the inputs show GPUs but no process)")
    with catalog.sizes_for_driver(args.driver):  # planning and the basis line read MODELS
        if len(clusters) == 1:
            text = render(recommend(clusters[0][1]), args.format)
        else:
            text = render_clusters([(name, recommend(demand)) for name, demand in clusters], args.format, render)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
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
