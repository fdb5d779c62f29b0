"""The one format of every time in the status and in the checkpoint manifests: RFC 3339 in UTC, whole seconds.

A stdlib-only leaf so that both writers can import it: the API (api.timestamps reads and writes status times)
and the checkpoint engine, which imports no other multinode package and whose manifest times the mirror copies
into status.checkpoints[].mirroredAt.
"""

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
