"""Which gang-scheduler PodGroups of a job are stale (reconcile/stale_groups.py): earlier attempts', the job's
own, not already going; the client only lists and deletes them (tests/unit/controller/test_kube_paths.py)."""

from __future__ import annotations

import pytest

from multinode.reconcile.stale_groups import stale_gang_groups

JOB_UID = "u1"
OWNED = [{"apiVersion": "multinode.dev/v1alpha1", "kind": "TrainingJob", "name": "llama", "uid": JOB_UID,
          "controller": True}]


def group(name: str, attempt: str | None, owners: list[dict] | None = None, **meta: object) -> dict:
    labels = {} if attempt is None else {"multinode.dev/attempt": attempt}
    return {"metadata": {"name": name, "labels": labels, "ownerReferences": owners or [], **meta}}


@pytest.mark.parametrize(("groups", "stale"), [
    ([group("llama-a0", "0", OWNED), group("llama-a1", "1", OWNED)], ["llama-a0"]),
    ([group("look-alike", "0")], []),  # the job's label, not its owner
    ([group("theirs", "0", [{**OWNED[0], "uid": "another"}])], []),
    ([group("going", "0", OWNED, deletionTimestamp="2026-01-01T00:00:00Z")], []),
    ([group("unlabelled", None, OWNED), group("garbled", "x", OWNED)], []),
    ([group("later", "2", OWNED)], []),
    ([], []),
])
def test_only_the_jobs_own_groups_of_earlier_attempts_not_being_deleted_are_stale(groups: list[dict],
                                                                                   stale: list[str]) -> None:
    assert stale_gang_groups(groups, attempt=1, owner_uid=JOB_UID) == stale
