"""`multinode logs JOB`: every chosen rank's trainer log as one stream, each line prefixed with its rank."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import TYPE_CHECKING

from multinode.cli.output import add_connection_arguments, paint, use_colour
from multinode.cli.status import client_error, connect, error
from multinode.client.pods import DEFAULT_MAX_STREAMS

if TYPE_CHECKING:
    from multinode.client import LogLine

_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
# Prefix colours cycle by rank, as stern does, so interleaved ranks are told apart at a glance.
_RANK_MOODS = ("good", "warn", "dim", "bad")


def parse_duration(text: str) -> int:
    """kubectl's --since: 30s, 5m, 2h, 1h30m (or plain seconds)."""
    if text.isdigit():
        return int(text)
    match = _DURATION.match(text)
    if not text or not match or not any(match.groups()):
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: use e.g. 30s, 5m, 1h30m")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def parse_ranks(text: str) -> list[int]:
    """--rank 0 --rank 3, or --rank 0,3, or --rank 4-7."""
    ranks: list[int] = []
    for part in text.split(","):
        low, dash, high = part.partition("-")
        try:
            ranks.extend(range(int(low), int(high) + 1) if dash else [int(low)])
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid rank {part!r}: use e.g. 0, 0,3 or 4-7") from None
    return ranks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="TrainingJob name")
    add_connection_arguments(parser)
    parser.add_argument("--rank", action="append", type=parse_ranks, metavar="R",
                        help="only these ranks (node indexes); repeat or list: --rank 0,3 --rank 4-7")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--attempt", type=int, metavar="K", help="an earlier attempt's pods (while they exist)")
    which.add_argument("--all-attempts", action="store_true", help="every attempt whose pods still exist")
    parser.add_argument("-f", "--follow", action="store_true",
                        help="stream as written; the next attempt's pods are picked up when the gang restarts; "
                             "ends when the job has finished")
    parser.add_argument("--since", type=parse_duration, metavar="DURATION", help="only newer lines: 30s, 5m, 1h")
    parser.add_argument("--tail", type=int, metavar="N", help="the last N lines of each rank")
    parser.add_argument("--max-streams", type=int, default=DEFAULT_MAX_STREAMS, metavar="N",
                        help=f"without --rank, stream at most N ranks (default {DEFAULT_MAX_STREAMS}; 0: all): "
                             "the leader first, then failing, then not running ranks, then the rest by rank")
    parser.add_argument("--no-prefix", action="store_true", help="lines as written, without [rank R]")
    parser.add_argument("-o", "--output", choices=["json"],
                        help="json: one object a line, {rank, attempt, pod, text}, for jq and scripts")


class Prefixer:
    """`[rank R] ` before each line, `[rank R attempt K] ` once more than one attempt is in the output
    (asked for with --all-attempts, or seen while following a restarting gang)."""

    def __init__(self, *, all_attempts: bool, colour: bool, enabled: bool = True, as_json: bool = False):
        self.show_attempt, self.colour, self.enabled, self.as_json = all_attempts, colour, enabled, as_json
        self.attempts: set[int] = set()

    def __call__(self, line: LogLine) -> str:
        self.attempts.add(line.attempt)
        if not self.enabled and not self.as_json:
            return line.text
        if len(self.attempts) > 1:
            self.show_attempt = True
        if self.as_json:
            return json.dumps({"rank": line.rank, "attempt": line.attempt, "pod": line.pod, "text": line.text})
        label = f"[rank {line.rank} attempt {line.attempt}]" if self.show_attempt else f"[rank {line.rank}]"
        return f"{paint(label, _RANK_MOODS[line.rank % len(_RANK_MOODS)], self.colour)} {line.text}"


def run(args: argparse.Namespace) -> int:
    from multinode.client import ClientError

    ranks = sorted({r for group in args.rank for r in group}) if args.rank else None
    prefix = Prefixer(all_attempts=args.all_attempts, colour=use_colour(sys.stdout), enabled=not args.no_prefix,
                      as_json=args.output == "json")

    def notice(message: str) -> None:
        print(f"multinode logs: {message}", file=sys.stderr, flush=True)

    jobs = None
    try:
        jobs = connect(args)
        jobs.get_raw(args.job)  # a job that does not exist is an error, not an empty stream
        for line in jobs.logs(args.job, ranks=ranks, attempt=args.attempt, all_attempts=args.all_attempts,
                              follow=args.follow, since_seconds=args.since, tail_lines=args.tail,
                              max_streams=args.max_streams, notice=notice):
            print(prefix(line), flush=args.follow)
    except ClientError as e:
        return client_error(e, args, jobs)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `| head`: the reader left
        return 0
    if args.attempt is not None and not prefix.attempts and jobs is not None \
            and args.attempt not in jobs.pods(args.job):
        return error(f"no pods of attempt {args.attempt} left (the operator deletes an attempt's pods when the "
                     "gang restarts)")
    return 0
