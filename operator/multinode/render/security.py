"""Security contexts of the containers multinode renders: the trainer, the preflight, the mirror.

Every one of them meets Pod Security `restricted` on its own, except what the job asks for: the trainer's
user (the image's unless podTemplate names one) and IPC_LOCK with RDMA. So a job whose pod security context
says runAsNonRoot and seccompProfile RuntimeDefault runs in a namespace enforcing `restricted`
(docs/security.md).
"""

from __future__ import annotations

from typing import Any

from multinode.api import TrainingJob

# The operator image's user (images/operator/Dockerfile, the chart's securityContext.runAsUser): the preflight
# and the mirror run as it, whatever the job's pods run as.
OPERATOR_IMAGE_UID = 65532
IPC_LOCK = "IPC_LOCK"
RUNTIME_DEFAULT_SECCOMP = {"type": "RuntimeDefault"}
# The apiserver refuses allowPrivilegeEscalation: false beside these (they imply escalation).
_ESCALATING_CAPABILITIES = frozenset({"SYS_ADMIN", "CAP_SYS_ADMIN"})


def adds_ipc_lock(job: TrainingJob) -> bool:
    """Whether the trainer gets IPC_LOCK: RDMA pins memory past RLIMIT_MEMLOCK with it."""
    rdma = job.spec.network.rdma
    return rdma is not None and rdma.ipc_lock


def trainer_security_context(job: TrainingJob) -> dict[str, Any]:
    """The job's containerSecurityContext, with multinode's defaults in what it leaves unset: every capability
    dropped (IPC_LOCK added back with RDMA) and no privilege escalation."""
    asked = job.spec.pod_template.container_security_context
    context = asked.model_dump(by_alias=True, exclude_none=True) if asked is not None else {}
    capabilities = context.pop("capabilities", {})
    add = list(capabilities.get("add") or [])
    if adds_ipc_lock(job) and IPC_LOCK not in add:
        add.append(IPC_LOCK)
    drop = capabilities.get("drop", ["ALL"])  # an explicit [] keeps the runtime's default set
    context["capabilities"] = {key: value for key, value in (("add", add), ("drop", drop)) if value}
    if not context["capabilities"]:
        del context["capabilities"]
    escalates = context.get("privileged") or _ESCALATING_CAPABILITIES & set(add)
    if "allowPrivilegeEscalation" not in context and not escalates:
        context["allowPrivilegeEscalation"] = False
    return context


def trainer_ids(job: TrainingJob) -> tuple[int | None, int | None]:
    """(uid, gid) the trainer runs as when the job names them (the container's win over the pod's)."""
    template = job.spec.pod_template
    container, pod = template.container_security_context, template.security_context
    uid = next((c.run_as_user for c in (container, pod) if c is not None and c.run_as_user is not None), None)
    gid = next((c.run_as_group for c in (container, pod) if c is not None and c.run_as_group is not None), None)
    return uid, gid


def preflight_is_the_trainer(job: TrainingJob) -> bool:
    """Whether the preflight runs as the trainer's user: when the job names a non-root one."""
    return bool(trainer_ids(job)[0])


# The job's cache dir, made by a preflight that is not the trainer's user, must still be the trainer's to write:
# it runs as the image's user, maybe root without capabilities (no CAP_DAC_OVERRIDE), so everyone may write it.
SHARED_CACHE_DIR_MODE = "777"


def preflight_security_context(job: TrainingJob, *, ipc_lock: bool) -> dict[str, Any]:
    """Non-root, RuntimeDefault seccomp, nothing but IPC_LOCK (when it judges the trainer's memlock rights).

    It runs as the trainer's user when the job names a non-root one: the job's cache directory it creates
    is then the trainer's to write. Otherwise as the operator image's user.
    """
    uid, gid = trainer_ids(job)
    if not preflight_is_the_trainer(job):  # unnamed, or root: the preflight never runs as root
        uid, gid = OPERATOR_IMAGE_UID, OPERATOR_IMAGE_UID
    context: dict[str, Any] = {"runAsNonRoot": True, "runAsUser": uid}
    if gid is not None:
        context["runAsGroup"] = gid
    capabilities: dict[str, list[str]] = {"drop": ["ALL"]}
    if ipc_lock:
        capabilities["add"] = [IPC_LOCK]
    return {**context, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "capabilities": capabilities, "seccompProfile": dict(RUNTIME_DEFAULT_SECCOMP)}


def mirror_pod_security_context() -> dict[str, Any]:
    """The operator image's user; fsGroup so it may write the checkpoint volume where the volume supports
    ownership (a block volume), applied once (OnRootMismatch: not a walk over every checkpoint per start)."""
    return {"runAsNonRoot": True, "runAsUser": OPERATOR_IMAGE_UID, "runAsGroup": OPERATOR_IMAGE_UID,
            "fsGroup": OPERATOR_IMAGE_UID, "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": dict(RUNTIME_DEFAULT_SECCOMP)}


def mirror_container_security_context() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
