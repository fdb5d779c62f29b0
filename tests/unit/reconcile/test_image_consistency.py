"""Same code on every node (image_consistency.py): the first digest is recorded and pinned; different
digests are reported or fail the attempt."""

from __future__ import annotations

import pytest

from multinode.api import TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.reconcile.image_consistency import judge_digests
from multinode.api import Phase
from multinode.reconcile.image_consistency import digest_reference
from tests.unit.reconcile.planning import condition, pod, run
from multinode.testing import stored_job


DIGEST_A = "registry/train@sha256:" + "a" * 64
DIGEST_B = "registry/train@sha256:" + "b" * 64


def test_first_digest_is_recorded_and_pinned_for_the_next_attempt() -> None:
    job = stored_job(2, failurePolicy={"backoff": {"initialSeconds": 0}})
    running = run(job, [pod(0, image_id=f"docker-pullable://{DIGEST_A}"), pod(1, image_id=DIGEST_A)])
    assert running.status.image_digest == DIGEST_A
    assert condition(running.status, "ImageConsistent").status == "True"

    failed = run(job, [pod(0, image_id=DIGEST_A), pod(1, "Failed", exit_code=1, image_id=DIGEST_A)],
                 previous=running.status)
    next_attempt = run(job, [], previous=failed.status)

    assert {p["spec"]["containers"][0]["image"] for p in next_attempt.pods_to_create} == {DIGEST_A}


def test_different_digests_in_one_attempt_fail_it_or_are_reported() -> None:
    mixed = [pod(0, image_id=DIGEST_A), pod(1, image_id=DIGEST_B)]

    failed = run(stored_job(2), mixed)
    assert failed.status.phase == Phase.RESTARTING
    assert failed.status.restart_history[-1].reason == "ImageDigestMismatch"
    assert condition(failed.status, "ImageConsistent").status == "False"

    reported = run(stored_job(2, imageConsistency={"onMismatch": "Report"}), mixed)
    assert reported.status.phase == Phase.RUNNING
    message = condition(reported.status, "ImageConsistent").message
    assert "llama-0-a0" in message and "llama-1-a0" in message


def test_digest_reference_strips_the_runtime_prefix_and_needs_a_repository() -> None:
    assert digest_reference(f"docker-pullable://{DIGEST_A}") == DIGEST_A
    assert digest_reference(f"containerd://{DIGEST_A}") == DIGEST_A
    assert digest_reference("sha256:" + "a" * 64) is None, "an image ID names no repository to pull by digest"
    assert digest_reference(None) is None


# The policy called directly.

A, B = "r/train@sha256:aa", "r/train@sha256:bb"


@pytest.mark.parametrize(("recorded", "ids", "on_mismatch", "digest", "condition_", "failed"), [
    (None, [None, None], "FailAttempt", None, None, False),                            # nothing reported yet
    (None, [A, A], "FailAttempt", A, ("True", Reason.SAME_DIGEST), False),              # the first is recorded
    ("r/train@sha256:old", [A, A], "FailAttempt", "r/train@sha256:old", ("True", Reason.SAME_DIGEST), False),
    (A, [A, B], "FailAttempt", A, ("False", Reason.IMAGE_DIGEST_MISMATCH), True),
    (A, [A, B], "Report", A, ("False", Reason.IMAGE_DIGEST_MISMATCH), False),
])
def test_different_digests_are_reported_and_by_policy_fail_the_attempt(recorded, ids, on_mismatch, digest,
                                                                        condition_, failed) -> None:
    job = stored_job(2, imageConsistency={"onMismatch": on_mismatch})
    current = {i: pod(i, image_id=image_id) for i, image_id in enumerate(ids)}
    decided = judge_digests(job, TrainingJobStatus(image_digest=recorded), current)
    assert decided.status.get("image_digest", recorded) == digest
    assert [(c.status, c.reason) for c in decided.conditions] == ([condition_] if condition_ else [])
    assert (decided.failure is not None) == failed
