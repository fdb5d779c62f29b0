"""`multinode status JOB` (alias `describe`) and `multinode wait JOB`: thin over multinode.client."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from multinode.api.conditions import ConditionType
from multinode.cli.describe import DEFAULT_MAX_NODES, describe
from multinode.cli.output import add_connection_arguments, dump, first_kubeconfig, paint, phase_mood, use_colour

if TYPE_CHECKING:  # the client (and the Kubernetes library) is imported when a command runs, not at start
    from multinode.api import TrainingJob
    from multinode.client import ClientError, TrainingJobClient


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="TrainingJob name")
    add_connection_arguments(parser)
    parser.add_argument("-o", "--output", choices=["json", "yaml"],
                        help="the job object (metadata, spec, status) as JSON or YAML instead of the summary")
    parser.add_argument("--max-nodes", type=int, default=DEFAULT_MAX_NODES,
                        help=f"node rows at most; a bigger job shows the nodes that are not fine first "
                             f"(default {DEFAULT_MAX_NODES})")


def add_wait_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="TrainingJob name")
    add_connection_arguments(parser)
    parser.add_argument("--for", dest="goal", default="phase=Succeeded",
                        help="phase=P[,Q] or condition=TYPE (default phase=Succeeded)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds (default 600)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")


def connect(args: argparse.Namespace) -> TrainingJobClient:
    from multinode.client import TrainingJobClient

    return TrainingJobClient(args.namespace, kubeconfig=first_kubeconfig(args.kubeconfig), context=args.context)


def error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


def client_error(e: ClientError, args: argparse.Namespace, jobs: TrainingJobClient | None) -> int:
    if e.status == 404 and jobs is not None:
        return error(f'TrainingJob "{args.job}" not found in namespace "{jobs.namespace}"')
    return error(str(e))


def machine_view(job: dict[str, Any]) -> dict[str, Any]:
    """The object minus managedFields, which say who wrote what and only bury the status."""
    meta = {k: v for k, v in (job.get("metadata") or {}).items() if k != "managedFields"}
    return {**job, "metadata": meta}


def run_status(args: argparse.Namespace) -> int:
    from multinode.client import ClientError

    jobs = None
    try:
        jobs = connect(args)
        job = jobs.get_raw(args.job)
    except ClientError as e:
        return client_error(e, args, jobs)
    if args.output:
        print(dump(machine_view(job), args.output))
    else:
        print(describe(job, datetime.now(timezone.utc), max_nodes=args.max_nodes, colour=use_colour(sys.stdout)))
    return 0


def parse_goal(goal: str) -> tuple[tuple[str, ...], str | None]:
    kind, _, value = goal.partition("=")
    if kind == "phase" and value:
        return tuple(v for v in value.split(",") if v), None
    if kind == "condition" and value:
        return (), value
    raise ValueError(f"--for {goal!r}: expected phase=P[,Q] or condition=TYPE")


def progress_line(job: TrainingJob) -> str:
    status = job.status
    if status is None:
        return f"{job.metadata.name}: no status yet"
    phase = status.phase.value if status.phase else "-"
    reason = next((c.reason for c in status.conditions if c.status == "True" and c.type != ConditionType.CREATED), "")
    return (f"{job.metadata.name}: {phase}, {status.ready or '-'} ready, attempt {status.attempt}"
            + (f", {reason}" if reason else ""))


def run_wait(args: argparse.Namespace) -> int:
    from multinode.client import ClientError, JobEnded, WaitTimeout

    try:
        phases, condition = parse_goal(args.goal)
    except ValueError as e:
        return error(str(e))
    colour = use_colour(sys.stderr)
    last: list[str] = []

    def on_progress(job: TrainingJob) -> None:
        line = progress_line(job)
        if not args.quiet and (not last or last[-1] != line):  # one line per visible change
            last.append(line)
            phase = job.status.phase.value if job.status and job.status.phase else None
            print(paint(line, phase_mood(phase), colour), file=sys.stderr, flush=True)

    jobs = None
    try:
        jobs = connect(args)
        job = jobs.wait(args.job, phases=phases, condition=condition, timeout=args.timeout, on_progress=on_progress)
    except (JobEnded, WaitTimeout) as e:
        return error(str(e))
    except ClientError as e:
        return client_error(e, args, jobs)
    print(f"trainingjob/{job.metadata.name} {args.goal}")
    return 0
