"""The user's side: a typed Python client for TrainingJobs and what the `multinode` commands read.

`multinode.client.connection` is the one module here that imports the Kubernetes client library (see the import
contract in pyproject.toml); everything else works on the API's models and plain dicts.

Names are imported on first use (PEP 562): the `multinode` command also runs in every pod as `multinode
preflight`, whose start must not pay the ~0.5 s of importing the Kubernetes library it never calls.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multinode.client.jobs import JobEnded, TrainingJobClient, WaitTimeout, load_yaml, parse_job
    from multinode.client.connection import ClientError
    from multinode.client.logs import LogLine
    from multinode.client.pods import NodePod

_WHERE = {"JobEnded": "jobs", "TrainingJobClient": "jobs", "WaitTimeout": "jobs", "load_yaml": "jobs",
          "parse_job": "jobs", "ClientError": "connection", "LogLine": "logs", "NodePod": "pods"}

__all__ = ["ClientError", "JobEnded", "LogLine", "NodePod", "TrainingJobClient", "WaitTimeout", "load_yaml",
           "parse_job"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"multinode.client.{_WHERE[name]}"), name)
