"""Shell completion: one engine (`multinode __complete`) behind bash, zsh and kubectl's plugin completion.

The engine reads the argparse parser itself, so a new command or flag completes without a change here;
job names come from the cluster (one LIST of TrainingJobs, with a short timeout: a completion must never
hang a shell).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from multinode.cli.output import first_kubeconfig

# Commands whose first positional is a TrainingJob's name.
JOB_COMMANDS = ("status", "describe", "logs", "wait")
HIDDEN = ("__complete",)
LIST_TIMEOUT_SECONDS = 3

BASH = r"""# multinode bash completion: source <(multinode completion bash)
_multinode() {
  local cur="${COMP_WORDS[COMP_CWORD]}" IFS=$'\n'
  COMPREPLY=($(multinode __complete "$cur" "${COMP_WORDS[@]:1:COMP_CWORD-1}" 2>/dev/null))
}
complete -o default -F _multinode multinode
"""
# zsh runs the same function through its bash compatibility layer.
ZSH = "# multinode zsh completion: source <(multinode completion zsh)\n" \
      "autoload -U +X bashcompinit && bashcompinit\n" + BASH.split("\n", 1)[1]


def script(shell: str) -> str:
    return {"bash": BASH, "zsh": ZSH}[shell]


JobLister = Callable[[str | None, str | None, str | None], list[str]]


def cluster_job_names(namespace: str | None, kubeconfig: str | None, context: str | None) -> list[str]:
    """Names of the TrainingJobs in the namespace; none when the cluster is not reachable in time."""
    from multinode.client import ClientError
    from multinode.client.connection import Kube

    try:
        kube = Kube(kubeconfig=first_kubeconfig(kubeconfig), context=context)
        items = kube.list_jobs(namespace or kube.default_namespace, timeout=LIST_TIMEOUT_SECONDS)
    except ClientError:
        return []
    return sorted(item["metadata"]["name"] for item in items)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse has no public accessor for its subcommands
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _value_flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions if action.option_strings and action.nargs != 0
            for flag in action.option_strings}


def _flag_value(words: list[str], flags: tuple[str, ...]) -> str | None:
    for i, word in enumerate(words):
        if word in flags and i + 1 < len(words):
            return words[i + 1]
        for flag in flags:
            if flag.startswith("--") and word.startswith(flag + "="):
                return word.split("=", 1)[1]
    return None


def candidates(parser: argparse.ArgumentParser, current: str, words: list[str], list_jobs: JobLister) -> list[str]:
    """What may come next, given the words before the one being typed (`current`), filtered by it."""
    commands = _subparsers(parser)
    command = next((w for w in words if w in commands), None)
    if command is None:
        options = [s for a in parser._actions for s in a.option_strings] if current.startswith("-") \
            else [name for name in commands if name not in HIDDEN]
        return [o for o in options if o.startswith(current)]
    sub = commands[command]
    after = words[words.index(command) + 1:]
    flags = _value_flags(sub)
    if after and after[-1] in flags:  # completing a flag's value
        choices = flags[after[-1]].choices
        return [str(c) for c in choices or [] if str(c).startswith(current)]
    if current.startswith("-"):
        return [s for a in sub._actions for s in a.option_strings if s.startswith(current)]
    positionals, skip = [], False
    for word in after:
        if skip:
            skip = False
        elif word in flags:
            skip = True
        elif not word.startswith("-"):
            positionals.append(word)
    if positionals:
        return []
    if command in JOB_COMMANDS:
        names = list_jobs(_flag_value(after, ("-n", "--namespace")), _flag_value(after, ("--kubeconfig",)),
                          _flag_value(after, ("--context",)))
        return [n for n in names if n.startswith(current)]
    positional = next((a for a in sub._actions if not a.option_strings and a.choices), None)
    return [str(c) for c in (positional.choices if positional else []) or [] if str(c).startswith(current)]
