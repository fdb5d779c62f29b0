"""The `multinode` command (also `kubectl multinode`, as a kubectl plugin)."""

from __future__ import annotations

import argparse
import sys

from multinode import __version__
from multinode.cli import checkpoint, completion, logs, operator, pod_commands, scaling, status


def build_parser(prog: str = "multinode") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Multi-node GPU training jobs on Kubernetes.")
    parser.add_argument("--version", action="version", version=f"multinode {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    status.add_status_arguments(sub.add_parser("status", aliases=["describe"],
                                               help="a job's phase, conditions, nodes, restarts, checkpoints"))
    logs.add_arguments(sub.add_parser("logs", help="every rank's trainer log as one stream"))
    status.add_wait_arguments(sub.add_parser("wait", help="wait for a phase or condition, progress on stderr"))
    checkpoint.add_arguments(sub.add_parser("checkpoint", help="ask a job's trainer for a checkpoint now "
                                                               "(--wait: until it is mirrored)"))
    scaling.add_arguments(sub.add_parser("scaling-test", help="run a job at several sizes: throughput, "
                                                             "scaling efficiency, a verdict and a plot"))
    shells = sub.add_parser("completion", help="print a shell completion script: source <(multinode completion bash)")
    shells.add_argument("shell", choices=["bash", "zsh"])
    operator.add_arguments(sub.add_parser("operator", help="run the operator"))
    pod_commands.add_preflight_arguments(sub.add_parser("preflight",
                                                        help="init container: wait until every peer's DNS name "
                                                             "resolves"))
    pod_commands.add_mirror_arguments(sub.add_parser("mirror",
                                                     help="mirror complete checkpoints into the backed-up volume"))
    return parser


def main(argv: list[str] | None = None, prog: str = "multinode") -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["__complete"]:
        # Before argparse: the words being completed are half-typed and would not parse.
        current, words = (argv[1], argv[2:]) if len(argv) > 1 else ("", [])
        print("\n".join(completion.candidates(build_parser(prog), current, words, completion.cluster_job_names)))
        return 0
    args = build_parser(prog).parse_args(argv)
    if args.command in ("status", "describe"):
        return status.run_status(args)
    if args.command == "logs":
        return logs.run(args)
    if args.command == "wait":
        return status.run_wait(args)
    if args.command == "checkpoint":
        return checkpoint.run(args)
    if args.command == "scaling-test":
        return scaling.run(args)
    if args.command == "completion":
        print(completion.script(args.shell), end="")
        return 0
    if args.command == "operator":
        return operator.run(args)
    if args.command == "mirror":
        return pod_commands.run_mirror(args)
    if args.command == "preflight":
        return pod_commands.run_preflight(args)
    raise AssertionError(args.command)


def kubectl_plugin() -> int:
    """`kubectl multinode ...`: kubectl runs `kubectl-multinode` from PATH with the words after its name."""
    return main(sys.argv[1:], prog="kubectl multinode")


def kubectl_complete() -> int:
    """`kubectl_complete-multinode`: kubectl (1.26+) asks it for completions of `kubectl multinode ...`, passing
    the words typed so far, the last being the one being completed, and reads cobra's format: one candidate a
    line, then `:4` (ShellCompDirectiveNoFileComp)."""
    words = sys.argv[1:] or [""]
    found = completion.candidates(build_parser("kubectl multinode"), words[-1], words[:-1],
                                  completion.cluster_job_names)
    print("\n".join([*found, ":4"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
