"""The `multinode` command: operator, preflight (init container), and later the checkpoint mirror."""
