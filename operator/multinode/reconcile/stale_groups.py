"""Which of a job's gang-scheduler PodGroups (Volcano's, coscheduling's) are stale: the policy behind
Plan.objects_to_prune, which the controller applies to what it lists by the job's label (the operator
does not watch those kinds: their CRDs may come and go)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from multinode.api.constants import LABEL_ATTEMPT
from multinode.reconcile.ownership import controller_uid


def stale_gang_groups(groups: Iterable[Mapping[str, Any]], attempt: int, owner_uid: str) -> list[str]:
    """The names of `groups` from attempts before `attempt` that the job `owner_uid` controls and that are not
    being deleted already. One with the job's label and another owner is not the job's to delete; one
    without a readable attempt label is left alone."""
    stale = []
    for group in groups:
        meta = group.get("metadata") or {}
        seen = (meta.get("labels") or {}).get(LABEL_ATTEMPT, "")
        if (seen.isdigit() and int(seen) < attempt and not meta.get("deletionTimestamp")
                and controller_uid(meta) == owner_uid):
            stale.append(meta["name"])
    return stale
