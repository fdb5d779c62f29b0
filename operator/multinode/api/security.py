"""Security contexts a TrainingJob may set on its pods (podTemplate.securityContext) and on the trainer
container (podTemplate.containerSecurityContext).

Typed subsets of core/v1 PodSecurityContext and SecurityContext, not pass-through maps: a misspelt key is
refused at admission with its path, and the chart's admission policy (docs/security.md) can read the fields
that give a pod more than Pod Security `baseline` allows (privileged, added capabilities, Unconfined
profiles). Fields multinode has no use for (procMount, windowsOptions, seLinuxOptions, sysctls) are left out:
each would be one more way around that policy.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from multinode.api.base import MAX_NAME_LENGTH, ApiModel
from multinode.api.cel import cel_rule

# A Linux capability as Kubernetes spells it (IPC_LOCK, SYS_PTRACE; the CAP_ prefix is accepted by runtimes).
CapabilityName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Z][A-Z0-9_]*$")]
# uids and gids: what the kubelet accepts (int64, not negative); 2^31-1 keeps clear of the runtimes' limits.
MAX_ID = 2147483647
Id = Annotated[int, Field(ge=0, le=MAX_ID)]


def _profile_rules(field: str) -> ConfigDict:
    # The model sits under both security contexts: the apiserver puts the full path in front (fieldPath).
    return ConfigDict(json_schema_extra={"x-kubernetes-validations": [cel_rule(
        "has(self.localhostProfile) == (self.type == 'Localhost')",
        f"spec.podTemplate: a {field}'s localhostProfile is required with type Localhost, and allowed only with it",
        field_path=".localhostProfile")]})


class SeccompProfile(ApiModel):
    """A core/v1 SeccompProfile."""

    model_config = _profile_rules("seccompProfile")

    type: Literal["RuntimeDefault", "Localhost", "Unconfined"] = Field(
        description="RuntimeDefault (the container runtime's profile; Pod Security `restricted` requires it or "
                    "Localhost), Localhost (a profile file on the node), or Unconfined (none).")
    localhost_profile: str | None = Field(
        None, min_length=1, max_length=MAX_NAME_LENGTH,
        description="With type Localhost: the profile's path under the kubelet's seccomp folder.")


class AppArmorProfile(ApiModel):
    """A core/v1 AppArmorProfile."""

    model_config = _profile_rules("appArmorProfile")

    type: Literal["RuntimeDefault", "Localhost", "Unconfined"] = Field(
        description="RuntimeDefault, Localhost (a profile loaded on the node) or Unconfined.")
    localhost_profile: str | None = Field(
        None, min_length=1, max_length=MAX_NAME_LENGTH, description="With type Localhost: the profile's name.")


class Capabilities(ApiModel):
    """Capabilities added to and dropped from the trainer container."""

    add: list[CapabilityName] | None = Field(
        None, max_length=64,
        description="Capabilities to add. multinode adds IPC_LOCK itself with network.rdma (unless ipcLock is "
                    "false); one outside Pod Security baseline's list needs the namespace's "
                    "multinode.dev/allow-privileged label (docs/security.md).")
    drop: list[CapabilityName] | None = Field(
        None, max_length=64, description="Capabilities to drop; unset: ALL (multinode's default).")


class ContainerSecurityContext(ApiModel):
    """The trainer container's security context. multinode's defaults fill the fields left unset: no privilege
    escalation, every capability dropped (IPC_LOCK added back with RDMA)."""

    run_as_user: Id | None = Field(None, description="uid of the trainer process (wins over the pod's).")
    run_as_group: Id | None = Field(None, description="Primary gid of the trainer process.")
    run_as_non_root: bool | None = Field(None, description="Refuse to start the container as uid 0.")
    read_only_root_filesystem: bool | None = Field(None, description="Mount the image's filesystem read-only.")
    allow_privilege_escalation: bool | None = Field(
        None, description="Let a process gain more privileges than its parent (setuid binaries). Default false "
                          "(true only with privileged or an added SYS_ADMIN, which need it).")
    privileged: bool | None = Field(
        None, description="Run the container privileged. Needs the namespace's multinode.dev/allow-privileged label.")
    capabilities: Capabilities | None = Field(None, description="Capabilities to add and drop.")
    seccomp_profile: SeccompProfile | None = Field(None, description="The container's seccomp profile.")
    app_armor_profile: AppArmorProfile | None = Field(None, description="The container's AppArmor profile.")


class PodSecurityContext(ApiModel):
    """The node pods' security context. To meet Pod Security `restricted`: runAsNonRoot true (with runAsUser
    when the image's user is not numeric) and seccompProfile RuntimeDefault."""

    run_as_user: Id | None = Field(None, description="uid of every container without one of its own.")
    run_as_group: Id | None = Field(None, description="Primary gid of every container without one of its own.")
    run_as_non_root: bool | None = Field(None, description="Refuse to start any container as uid 0.")
    fs_group: Id | None = Field(
        None, description="Supplementary gid of every container; volumes that support it are made group-writable "
                          "by it (not NFS or hostPath).")
    fs_group_change_policy: Literal["OnRootMismatch", "Always"] | None = Field(
        None, description="When fsGroup ownership is applied: OnRootMismatch skips volumes whose root already "
                          "matches (fast for large checkpoints), Always walks the whole volume.")
    supplemental_groups: list[Id] | None = Field(None, max_length=32, description="More supplementary gids.")
    seccomp_profile: SeccompProfile | None = Field(None, description="Seccomp profile of every container.")
    app_armor_profile: AppArmorProfile | None = Field(None, description="AppArmor profile of every container.")
