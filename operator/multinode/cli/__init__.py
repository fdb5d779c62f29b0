"""The `multinode` command: what a user runs (status, logs, wait, scaling-test, completion), the operator,
and the arguments of the two commands the job's pods run (pod_commands: preflight and mirror, whose programs
are multinode.preflight and multinode.mirror)."""
