"""When a pass's status may wait for the next pass (reconcile/first_status.py): only a new job's first, in the
pass that creates its first attempt's pods, with nothing that has to follow the status."""

from __future__ import annotations

from dataclasses import replace

import pytest

from multinode.api import Phase, TrainingJobStatus
from multinode.reconcile.first_status import first_status_waits
from multinode.reconcile.outcome import Plan

PODS = [{"metadata": {"name": f"llama-{i}-a0"}} for i in range(2)]


def creating() -> Plan:
    """The first pass of a new 2-node job: both pods to create, the job Pending."""
    return Plan(pods_to_create=PODS, status=TrainingJobStatus(phase=Phase.PENDING, attempt=0))


def test_the_pass_that_creates_a_new_jobs_pods_may_wait() -> None:
    assert first_status_waits(creating(), on_server=None, written=False)
    assert first_status_waits(creating(), on_server=TrainingJobStatus(), written=False)  # an empty status


@pytest.mark.parametrize(("why", "result", "on_server", "written"), [
    ("the server has a status", creating(), TrainingJobStatus(phase=Phase.PENDING), False),
    ("this operator wrote one", creating(), None, True),
    ("no pods to create", replace(creating(), pods_to_create=[]), None, False),
    ("a later attempt", replace(creating(), status=TrainingJobStatus(phase=Phase.PENDING, attempt=1)), None, False),
    ("an attempt after uncounted restarts",
     replace(creating(), status=TrainingJobStatus(phase=Phase.PENDING, uncounted_restarts=1)), None, False),
    ("the job failed", replace(creating(), status=TrainingJobStatus(phase=Phase.FAILED)), None, False),
    ("pods to annotate after it", replace(creating(), pods_to_annotate={"llama-0-a0": {"a": "b"}}), None, False),
    ("spec.suspend to write after it", replace(creating(), job_suspend=False), None, False),
    ("the job to delete", replace(creating(), delete_job=True), None, False),
])
def test_a_status_that_must_be_written_now_does_not_wait(why: str, result: Plan, on_server: TrainingJobStatus | None,
                                                         written: bool) -> None:
    assert not first_status_waits(result, on_server=on_server, written=written), why
