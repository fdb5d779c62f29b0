"""Image consistency: every node of an attempt runs the same image digest.

The first digest a node reports is recorded in status.imageDigest (and, with pinDigest, later attempts
run it by digest); an attempt whose running pods report different digests is reported on the
ImageConsistent condition and, with onMismatch FailAttempt, fails.
"""

from __future__ import annotations

from collections.abc import Iterable

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.lifecycle import MismatchAction
from multinode.reconcile.decision import Decision, SetCondition
from multinode.reconcile.failures import Failure
from multinode.reconcile.observe import ObservedPod, PodPhase

_RUNTIME_PREFIXES = ("docker-pullable://", "docker://", "containerd://")


def digest_reference(image_id: str | None) -> str | None:
    """image@sha256:... from a container status imageID, or None when it names no repository digest."""
    if not image_id:
        return None
    for prefix in _RUNTIME_PREFIXES:
        if image_id.startswith(prefix):
            image_id = image_id[len(prefix):]
    return image_id if "@sha256:" in image_id and not image_id.startswith("sha256:") else None


def running_digests(pods: Iterable[ObservedPod]) -> dict[str, list[str]]:
    """Digest → pod names, for the pods of an attempt that report one."""
    by_digest: dict[str, list[str]] = {}
    for p in pods:
        ref = digest_reference(p.image_id)
        if ref is not None:
            by_digest.setdefault(ref.split("@", 1)[1], []).append(p.name)
    return by_digest


def pinned_image(job: TrainingJob, status: TrainingJobStatus) -> str | None:
    """The image the attempt's pods run by digest, when spec.imageConsistency.pinDigest asks for it."""
    return status.image_digest if job.spec.image_consistency.pin_digest and status.image_digest else None


def judge_digests(job: TrainingJob, status: TrainingJobStatus, current: dict[int, ObservedPod]) -> Decision:
    """The first digest, for status.imageDigest; the ImageConsistent condition of an attempt whose pods report
    digests, and (by spec.imageConsistency.onMismatch) the failure of one whose pods run different ones."""
    running = [p for p in current.values() if p.phase in (PodPhase.RUNNING, PodPhase.SUCCEEDED)]
    digests = running_digests(running)
    recorded = Decision()
    if status.image_digest is None:
        first = next((digest_reference(p.image_id) for p in sorted(running, key=lambda p: p.index)
                      if digest_reference(p.image_id)), None)
        recorded = Decision(status={"image_digest": first})
    if len(digests) <= 1:
        if digests:
            return recorded.then(Decision(conditions=(SetCondition(
                ConditionType.IMAGE_CONSISTENT, "True", Reason.SAME_DIGEST,
                f"every running node runs {next(iter(digests))}"),)))
        return recorded
    detail = "; ".join(f"{d}: {', '.join(sorted(names))}" for d, names in sorted(digests.items()))
    message = f"pods of attempt {status.attempt} run different image digests: {detail}"
    mismatch = SetCondition(ConditionType.IMAGE_CONSISTENT, "False", Reason.IMAGE_DIGEST_MISMATCH, message)
    failure = None
    if job.spec.image_consistency.on_mismatch == MismatchAction.FAIL_ATTEMPT:
        failure = Failure(Reason.IMAGE_DIGEST_MISMATCH, message, reasons=frozenset({Reason.IMAGE_DIGEST_MISMATCH}))
    return recorded.then(Decision(conditions=(mismatch,), failure=failure))
