"""Ready, Reconciling and Stalled (what kstatus reads) follow the phase and quote the condition that decided;
tests/integration/controller/test_health_checks.py runs kstatus itself on the operator's jobs."""

from __future__ import annotations

from datetime import timedelta

from multinode.api import Phase
from multinode.reconcile.status_report import mark_failed
from multinode.testing import stored_job
from tests.unit.reconcile.planning import NOW, condition, pod, run


def kstatus_view(status) -> dict[str, tuple[str, str]]:
    return {t: (condition(status, t).status, condition(status, t).reason) for t in ("Ready", "Reconciling", "Stalled")}


def test_a_job_on_its_way_is_reconciling_with_the_running_conditions_words() -> None:
    starting = run(stored_job(2), [pod(0, phase="Pending"), pod(1, phase="Pending")]).status
    running = run(stored_job(2), [pod(0), pod(1)]).status

    for status in (starting, running):
        running_condition = condition(status, "Running")
        assert kstatus_view(status) == {"Ready": ("Unknown", running_condition.reason),
                                        "Reconciling": ("True", running_condition.reason),
                                        "Stalled": ("False", running_condition.reason)}
        assert condition(status, "Reconciling").message == f"{status.phase.value}: {running_condition.message}"
    assert (starting.phase, running.phase) == (Phase.STARTING, Phase.RUNNING)


def test_succeeded_and_suspended_are_ready_and_failed_is_stalled() -> None:
    job = stored_job(2, activeDeadlineSeconds=600)
    running = run(job, [pod(0), pod(1)])
    done = run(job, [pod(0, phase="Succeeded"), pod(1, phase="Succeeded")], previous=running.status).status
    late = run(job, [pod(0), pod(1)], previous=running.status, now=NOW + timedelta(seconds=601)).status
    held = run(stored_job(2, suspend=True), [], service_exists=False).status

    assert done.phase == Phase.SUCCEEDED
    assert kstatus_view(done) == {"Ready": ("True", "AllNodesSucceeded"), "Reconciling": ("False", "AllNodesSucceeded"),
                                  "Stalled": ("False", "AllNodesSucceeded")}
    assert held.phase == Phase.SUSPENDED
    assert kstatus_view(held) == {"Ready": ("True", "Suspended"), "Reconciling": ("False", "Suspended"),
                                  "Stalled": ("False", "Suspended")}
    assert late.phase == Phase.FAILED
    assert kstatus_view(late) == {"Ready": ("False", "DeadlineExceeded"), "Reconciling": ("False", "JobFinished"),
                                  "Stalled": ("True", "DeadlineExceeded")}
    assert condition(late, "Stalled").message == condition(late, "Failed").message
    # The conditions users alert on are unchanged beside them.
    assert condition(late, "Failed").status == "True" and condition(done, "Succeeded").status == "True"


def test_a_failure_written_outside_a_planning_pass_is_stalled_too() -> None:
    status = run(stored_job(2), [pod(0), pod(1)]).status
    mark_failed(status, "InvalidSpec", "spec.image: Required value", now=NOW, generation=3)

    assert kstatus_view(status)["Stalled"] == ("True", "InvalidSpec")
    assert condition(status, "Stalled").observed_generation == 3
    assert condition(status, "Reconciling").status == "False"


def test_the_conditions_carry_the_generation_the_pass_saw() -> None:
    job = stored_job(2)
    job.metadata.generation = 7
    status = run(job, [pod(0), pod(1)]).status

    assert status.observed_generation == 7
    assert {condition(status, t).observed_generation for t in ("Ready", "Reconciling", "Stalled")} == {7}
