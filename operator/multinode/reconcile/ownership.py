"""Which objects are a job's own: those whose controlling ownerReference names the job's uid.

Every object the operator makes for a job carries that reference (render/names.py owner_reference). Labels
and names are not enough: anyone who may create pods or ConfigMaps in the namespace can give an object the
job's labels, or the name the job's next attempt will use (names are predictable), and a job that took such
an object for its own would run with a co-tenant's environment (MASTER_ADDR, LD_PRELOAD) or count a
co-tenant's pod as one of its ranks. So the controller files a watched object under its job's key by label,
as before, and keeps only those owned by the job's uid (controller/stores.py); and a create refused because
the name is taken (409) counts as done only when the object there is the job's own (controller/ownership.py),
else the job says which object is in the way (`foreign_object_found`) and uses none of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from multinode.api.constants import API_VERSION, KIND


@dataclass(frozen=True)
class OwnedName:
    """A watched object by name, and the uid of the TrainingJob that controls it (None: no TrainingJob does)."""

    name: str
    owner_uid: str | None


def controller_uid(meta: Mapping[str, Any]) -> str | None:
    """The uid of the TrainingJob that controls the object of metadata `meta`, if one does."""
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") == KIND and ref.get("apiVersion") == API_VERSION:
            return str(ref.get("uid") or "") or None
    return None


def describe_owner(meta: Mapping[str, Any]) -> str:
    """Who controls the object of `meta`, in words, for a message."""
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            return f"controlled by {ref.get('kind')} {ref.get('name')} (uid {ref.get('uid')})"
    return "controlled by nothing"


def foreign_object_message(kind: str, namespace: str, name: str, meta: Mapping[str, Any]) -> str:
    """Why the job stops at an object another made under the name it needs."""
    return (f"{kind} {namespace}/{name} exists and is not this job's ({describe_owner(meta)}): the job does not "
            f"use it; it goes on once the object is deleted (or once the garbage collector removed it, for an "
            f"earlier job of the same name)")
