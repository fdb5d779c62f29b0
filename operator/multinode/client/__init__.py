"""The user's side: a typed Python client for TrainingJobs and what the `multinode` commands read.

`multinode.client.kube` is the one module here that imports the Kubernetes client library (see the import
contract in pyproject.toml); everything else works on the API's models and plain dicts.
"""

from multinode.client.jobs import JobFinished, TrainingJobClient, WaitTimeout, load_yaml, parse_job
from multinode.client.kube import ClientError
from multinode.client.logs import LogLine
from multinode.client.pods import NodePod

__all__ = ["ClientError", "JobFinished", "LogLine", "NodePod", "TrainingJobClient", "WaitTimeout", "load_yaml",
           "parse_job"]
