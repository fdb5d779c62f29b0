"""`multinode scaling-test -f job.yaml --nodes 1,2,4,8`: throughput per size, efficiency, a verdict."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from multinode.cli.output import add_connection_arguments, dump, paint, table, use_colour
from multinode.cli.status import connect, error
from multinode.cli.svg import scaling_svg
from multinode.client.scaling import DEFAULT_TARGET, ScalingReport


def _sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(part) for part in text.split(",") if part})
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid sizes {text!r}: use e.g. 1,2,4,8") from None
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError("sizes must be node counts of at least 1")
    return sizes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--filename", required=True, type=Path, help="the TrainingJob YAML to run")
    parser.add_argument("--nodes", required=True, type=_sizes, help="node counts, e.g. 1,2,4,8")
    add_connection_arguments(parser)
    parser.add_argument("--target", type=float, default=DEFAULT_TARGET,
                        help=f"efficiency against linear each size must reach (default {DEFAULT_TARGET})")
    parser.add_argument("--svg", type=Path, help="write the plot here (default <job>-scaling.svg)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds each size may take (default 3600)")
    parser.add_argument("--keep", action="store_true", help="keep each size's job (default: deleted once read)")
    parser.add_argument("-o", "--output", choices=["json", "yaml"], help="the report as JSON or YAML")


def report_table(report: ScalingReport, colour: bool = False) -> str:
    rows = [[r.nodes, f"{r.throughput:.1f}", f"{r.speedup:.2f}x", f"{r.efficiency:.0%}",
             "ok" if r.efficiency >= report.target else "below target"] for r in report.results]
    moods = [None if r.efficiency >= report.target else "bad" for r in report.results]
    verdict = "PASS" if report.passed else "FAIL"
    summary = (f"verdict: {verdict} (target {report.target:.0%} of linear scaling from "
               f"{report.results[0].nodes} node{'s' if report.results[0].nodes > 1 else ''})")
    return table(["nodes", "samples/s", "speedup", "efficiency", "verdict"], rows, moods=moods, colour=colour) \
        + "\n" + paint(summary, "good" if report.passed else "bad", colour)


def run(args: argparse.Namespace) -> int:
    from multinode.client import ClientError, JobEnded, WaitTimeout, load_yaml
    from multinode.client.jobs import job_body
    from multinode.client.scaling import run_scaling_test

    try:
        [job] = load_yaml(args.filename)
    except ValueError as e:  # pydantic's ValidationError is a ValueError; so is a file of 0 or 2 jobs
        return error(f"{args.filename}: {e}")
    colour = use_colour(sys.stderr)
    seen: list[str] = []

    def progress(message: str) -> None:
        if not seen or seen[-1] != message:
            seen.append(message)
            print(paint(message, "dim", colour), file=sys.stderr, flush=True)

    try:
        report = run_scaling_test(connect(args), job_body(job), args.nodes, target=args.target, timeout=args.timeout,
                                  keep=args.keep, progress=progress)
    except (ClientError, JobEnded, WaitTimeout, ValueError) as e:
        return error(str(e))
    name = job.metadata.name or "job"
    svg = args.svg or Path(f"{name}-scaling.svg")
    svg.write_text(scaling_svg(report, f"{name}: throughput against nodes"))
    if args.output:
        print(dump({**report.as_dict(), "svg": str(svg)}, args.output))
    else:
        print(report_table(report, use_colour(sys.stdout)))
        print(f"plot: {svg}")
    return 0 if report.passed else 2
