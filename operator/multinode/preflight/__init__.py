"""The preflight: the program the init container of every node pod runs (`multinode preflight`, rendered by
render/pod.py), before the trainer starts. It checks the node (node_checks), waits until every peer's DNS
name resolves and, when the job asks, measures the ring's collective bandwidth (bandwidth, over
collective_net's sockets and collective's arithmetic); its verdict goes to the termination log, where the
operator reads it (api/health_check.py).

It runs inside the job's pods, not the operator's or a user's: it imports the API's constants and health
formats only, never the controller, the client or the Kubernetes client, and the CLI only parses its
arguments (cli/pod_commands.py).
"""
