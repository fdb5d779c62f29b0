"""`multinode checkpoint JOB`: ask the job's trainer for a checkpoint now, and (--wait) until it is mirrored."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from multinode.api.checkpointing import CheckpointRequestState
from multinode.cli.output import add_connection_arguments
from multinode.cli.status import client_error, connect, error

if TYPE_CHECKING:
    from multinode.api import TrainingJob


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="TrainingJob name")
    add_connection_arguments(parser)
    parser.add_argument("--wait", action="store_true",
                        help="until the request is answered: a checkpoint mirrored (exit 0) or the wait over (exit 2)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds --wait waits at most (default 900)")


def request_id(now: float) -> str:
    """Unique per request and readable: the UTC time to the millisecond."""
    return time.strftime("cli-%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"


def answer(job: TrainingJob, wanted: str) -> dict[str, Any] | None:
    request = job.status.checkpoint_request if job.status else None
    if request is None or request.id != wanted or request.state == CheckpointRequestState.REQUESTED:
        return None
    return request.model_dump(by_alias=True, exclude_none=True)


class _Answered(Exception):
    def __init__(self, request: dict[str, Any]):
        super().__init__(request.get("state"))
        self.request = request


def run(args: argparse.Namespace) -> int:
    from multinode.client import ClientError, JobEnded, WaitTimeout

    jobs = None
    wanted = request_id(time.time())

    def seen(job: TrainingJob) -> None:
        found = answer(job, wanted)
        if found is not None:
            raise _Answered(found)

    try:
        jobs = connect(args)
        jobs.request_checkpoint(args.job, wanted)
        print(f"checkpoint {wanted} requested of {jobs.namespace}/{args.job}", file=sys.stderr)
        if not args.wait:
            return 0
        # Watched: every change of the job is looked at until the request is answered.
        jobs.wait(args.job, phases=(), timeout=args.timeout, on_progress=seen)
        return error(f"request {wanted} not answered")  # wait returns only on a phase of () : never
    except _Answered as answered:
        found = answered.request
    except WaitTimeout:
        return error(f"request {wanted} not answered after {args.timeout:.0f}s")
    except ClientError as e:
        return client_error(e, args, jobs)
    except (JobEnded, ValueError) as e:
        return error(str(e))
    if found["state"] == CheckpointRequestState.MIRRORED:
        print(f"checkpoint {found.get('checkpoint')} mirrored for request {wanted}")
        return 0
    print(f"request {wanted} timed out: no checkpoint was mirrored in time", file=sys.stderr)
    return 2
