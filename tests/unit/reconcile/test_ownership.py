"""Which objects are a job's own: the TrainingJob that controls them, by uid; labels and names do not count."""

from __future__ import annotations

from multinode.controller.stores import observe_service
from multinode.reconcile import observe_mirror_pod, observe_pod
from multinode.integrations.podgroup import observe_pod_group
from multinode.integrations.kueue import observe_workload
from multinode.reconcile.ownership import OwnedName, controller_uid, describe_owner, foreign_object_message

LABELS = {"multinode.dev/job-name": "llama", "multinode.dev/node-index": "0", "multinode.dev/attempt": "1"}
OURS = {"apiVersion": "multinode.dev/v1alpha1", "kind": "TrainingJob", "name": "llama", "uid": "u1",
        "controller": True}


def meta(*refs: dict, **extra: object) -> dict:
    return {"name": "llama-0-a1", "namespace": "ml", "labels": LABELS, "ownerReferences": list(refs), **extra}


def test_only_the_controlling_trainingjob_reference_counts() -> None:
    assert controller_uid(meta(OURS)) == "u1"
    assert controller_uid(meta({**OURS, "controller": False})) is None  # owned, not controlled
    assert controller_uid(meta({**OURS, "kind": "ReplicaSet"})) is None
    assert controller_uid(meta({**OURS, "apiVersion": "other.dev/v1"})) is None  # another CRD of that kind name
    assert controller_uid(meta()) is None and controller_uid({}) is None


def test_every_watched_record_carries_its_owner() -> None:
    assert observe_pod({"metadata": meta(OURS)}).owner_uid == "u1"
    assert observe_pod({"metadata": meta()}).owner_uid is None  # the job's labels, nobody's pod
    mirror = {"metadata": {**meta(OURS), "labels": {"multinode.dev/mirror-of": "llama"}}}
    assert observe_mirror_pod(mirror).owner_uid == "u1"
    assert observe_pod_group({"metadata": meta({**OURS, "uid": "u2"})}).owner_uid == "u2"
    assert observe_workload({"metadata": meta(OURS)}).owner_uid == "u1"
    assert observe_service({"metadata": meta()}) == ("llama", OwnedName("llama-0-a1", None))


def test_the_message_names_the_object_and_who_controls_it() -> None:
    stranger = {"kind": "ReplicaSet", "name": "web", "uid": "u9", "controller": True}
    assert describe_owner(meta(stranger)) == "controlled by ReplicaSet web (uid u9)"
    message = foreign_object_message("ConfigMap", "ml", "llama-a1-0123abcd", meta())
    assert message.startswith("ConfigMap ml/llama-a1-0123abcd exists and is not this job's (controlled by nothing)")
