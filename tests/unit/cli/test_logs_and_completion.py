"""`multinode logs` flags and prefixes, `multinode wait` goals, and the completion engine."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from multinode.cli import completion
from multinode.cli.logs import Prefixer, parse_duration, parse_ranks
from multinode.cli.main import build_parser
from multinode.cli.status import parse_goal
from multinode.client.logs import LogLine
from tests.support.binaries import pinned


def test_durations_and_ranks_parse_as_kubectl_users_type_them() -> None:
    assert [parse_duration(t) for t in ("30s", "5m", "2h", "1h30m", "90")] == [30, 300, 7200, 5400, 90]
    assert parse_ranks("0,3") == [0, 3] and parse_ranks("4-7") == [4, 5, 6, 7]
    for bad in ("", "5x", "m"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_duration(bad)
    with pytest.raises(argparse.ArgumentTypeError):
        parse_ranks("a")
    args = build_parser().parse_args(["logs", "j", "--rank", "0,3", "--rank", "5-6", "--since", "5m", "-f"])
    assert args.rank == [[0, 3], [5, 6]] and args.since == 300 and args.follow
    with pytest.raises(SystemExit):
        build_parser().parse_args(["logs", "j", "--attempt", "1", "--all-attempts"])


def test_lines_carry_the_rank_and_the_attempt_once_two_attempts_are_shown() -> None:
    prefix = Prefixer(all_attempts=False, colour=False)
    assert prefix(LogLine(0, 0, "j-0-a0", "loss 1.0")) == "[rank 0] loss 1.0"
    assert prefix(LogLine(1, 1, "j-1-a1", "resumed")) == "[rank 1 attempt 1] resumed"  # a restart seen
    assert prefix(LogLine(0, 1, "j-0-a1", "x")) == "[rank 0 attempt 1] x"
    assert Prefixer(all_attempts=True, colour=False)(LogLine(2, 0, "p", "y")) == "[rank 2 attempt 0] y"
    assert Prefixer(all_attempts=False, colour=False, enabled=False)(LogLine(2, 0, "p", "y")) == "y"
    assert Prefixer(all_attempts=False, colour=True)(LogLine(0, 0, "p", "z")) == "\033[32m[rank 0]\033[0m z"
    as_json = Prefixer(all_attempts=False, colour=True, as_json=True)(LogLine(3, 1, "j-3-a1", 'say "hi"'))
    assert json.loads(as_json) == {"rank": 3, "attempt": 1, "pod": "j-3-a1", "text": 'say "hi"'}


def test_wait_goals() -> None:
    assert parse_goal("phase=Succeeded") == (("Succeeded",), None)
    assert parse_goal("phase=Running,Succeeded") == (("Running", "Succeeded"), None)
    assert parse_goal("condition=CheckpointsSynced") == ((), "CheckpointsSynced")
    with pytest.raises(ValueError):
        parse_goal("Succeeded")


def names(namespace: str | None, kubeconfig: str | None, context: str | None) -> list[str]:
    return [f"job-{namespace or 'default'}", "llama"]


@pytest.mark.parametrize(("current", "words", "expected"), [
    ("", [], ["status", "describe", "logs", "wait", "checkpoint", "scaling-test", "completion", "operator",
              "preflight", "mirror"]),
    ("st", [], ["status"]),
    ("", ["status"], ["job-default", "llama"]),
    ("l", ["logs", "-n", "ml"], ["llama"]),
    ("", ["logs", "--namespace=ml"], ["job-ml", "llama"]),
    ("", ["logs", "llama"], []),
    ("--a", ["logs", "llama"], ["--attempt", "--all-attempts"]),
    ("", ["status", "llama", "-o"], ["json", "yaml"]),
    ("", ["completion"], ["bash", "zsh"]),
    ("", ["status", "-n"], []),
])
def test_completion_follows_the_parser(current: str, words: list[str], expected: list[str]) -> None:
    assert completion.candidates(build_parser(), current, words, names) == expected


def test_the_installed_commands_complete_and_print_scripts() -> None:
    bin_dir = Path(sys.executable).parent
    script = subprocess.run([bin_dir / "multinode", "completion", "bash"], capture_output=True, text=True, check=True)
    assert "complete -o default -F _multinode multinode" in script.stdout
    zsh = subprocess.run([bin_dir / "multinode", "completion", "zsh"], capture_output=True, text=True, check=True)
    assert zsh.stdout.startswith("# multinode zsh completion") and "bashcompinit" in zsh.stdout
    done = subprocess.run([bin_dir / "multinode", "__complete", "lo"], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["logs"]
    plugin = subprocess.run([bin_dir / "kubectl_complete-multinode", "st"], capture_output=True, text=True, check=True)
    assert plugin.stdout.split() == ["status", ":4"]
    usage = subprocess.run([bin_dir / "kubectl-multinode", "--help"], capture_output=True, text=True, check=True)
    assert usage.stdout.startswith("usage: kubectl multinode")


def test_a_bash_shell_completes_with_the_printed_script() -> None:
    """The script as bash runs it: COMP_WORDS in, COMPREPLY out."""
    bin_dir = Path(sys.executable).parent
    probe = ('source <(multinode completion bash); COMP_WORDS=(multinode logs llama --max); COMP_CWORD=3; '
             '_multinode; printf "%s\\n" "${COMPREPLY[@]}"')
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True,
                         env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert out.stdout.split() == ["--max-streams"]


def test_kubectl_completes_the_plugin_through_kubectl_complete_multinode() -> None:
    """kubectl's own `__complete` (what its shell completion calls) finds `kubectl_complete-multinode` on PATH."""
    kubectl = pinned("kubectl")
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "KUBECONFIG": "/nonexistent", "HOME": "/nonexistent"}
    out = subprocess.run([str(kubectl), "__complete", "multinode", "logs", "--max"], capture_output=True, text=True,
                         env=env, timeout=60, check=True)
    assert out.stdout.split() == ["--max-streams", ":4"]
