"""The one way tests and benchmarks build a TrainingJob.

`training_job` is the body a user applies (a dict, sent to the cluster as is); `stored_job` is the same
body as the operator reads it back (named, in a namespace, with a uid), as the model the planner and the
renderers take. Keyword arguments are camelCase spec fields.
"""

from __future__ import annotations

from typing import Any

from multinode.api import GROUP, KIND, VERSION, TrainingJob

IMAGE = "registry.example/train:1.0"
COMMAND = ("torchrun", "train.py")


def training_job(name: str, num_nodes: int, *, gpus: int | None = 8, image: str = IMAGE,
                 command: Any = COMMAND, pod_annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """`gpus` None and `command` None leave resourcesPerNode and command out (the CRD's defaults); any
    other `command` is sent as given, a hostile one (a string, an object) included."""
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {"numNodes": num_nodes, "image": image},
    }
    if command is not None:
        body["spec"]["command"] = list(command) if isinstance(command, tuple) else command
    if gpus is not None:
        body["spec"]["resourcesPerNode"] = {"gpus": gpus}
    body["spec"].update(spec)
    if pod_annotations:
        body["spec"].setdefault("podTemplate", {})["annotations"] = pod_annotations
    return body


def stored_job(num_nodes: int = 2, *, name: str = "llama", namespace: str = "ml", uid: str = "uid-123",
               image: str = "registry/train:1.2", **spec: Any) -> TrainingJob:
    """TrainingJob `name` in `namespace` as the operator reads it: no command, no resources unless given."""
    command = spec.pop("command", None)
    body = training_job(name, num_nodes, gpus=None, image=image, command=command, **spec)
    body["metadata"].update(namespace=namespace, uid=uid)
    return TrainingJob.model_validate(body)
