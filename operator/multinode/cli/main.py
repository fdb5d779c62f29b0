"""The `multinode` command."""

from __future__ import annotations

import argparse
import sys

from multinode import __version__
from multinode.cli import mirror, operator, preflight


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="multinode", description="Multi-node GPU training jobs on Kubernetes.")
    parser.add_argument("--version", action="version", version=f"multinode {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    operator.add_arguments(sub.add_parser("operator", help="run the operator"))
    preflight.add_arguments(sub.add_parser("preflight",
                                           help="init container: wait until every peer's DNS name resolves"))
    mirror.add_arguments(sub.add_parser("mirror", help="mirror complete checkpoints into the backed-up volume"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "operator":
        return operator.run(args)
    if args.command == "mirror":
        return mirror.run(args)
    if args.command == "preflight":
        preflight.configure_logging()
        return preflight.run(args)
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
