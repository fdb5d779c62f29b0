"""The Argo CD health check (docs/gitops/argocd/resource_customizations/multinode.dev/TrainingJob, in the shape of
Argo CD's own resource_customizations), executed by a real Lua runtime (lupa): every case of its
health_test.yaml on the operator's own objects, as Argo CD's test runs them, and a few states beside."""

from __future__ import annotations

import pytest
import yaml
from lupa import LuaRuntime

from tests.support.paths import DOCS

CUSTOMIZATION = DOCS / "gitops" / "argocd" / "resource_customizations" / "multinode.dev" / "TrainingJob"
SCRIPT = (CUSTOMIZATION / "health.lua").read_text()
CASES = yaml.safe_load((CUSTOMIZATION / "health_test.yaml").read_text())["tests"]


def health(obj: dict) -> tuple[str, str]:
    lua = LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    # Argo CD runs the script as a chunk with `obj` set; so do we.
    result = lua.execute(SCRIPT)
    return result["status"], result["message"]


@pytest.mark.parametrize("case", CASES, ids=[c["inputPath"] for c in CASES])
def test_each_fixture_gets_the_health_its_test_names(case: dict) -> None:
    obj = yaml.safe_load((CUSTOMIZATION / case["inputPath"]).read_text())
    assert health(obj) == (case["healthStatus"]["status"], case["healthStatus"]["message"])


def test_every_phase_has_a_fixture() -> None:
    phases = {(yaml.safe_load((CUSTOMIZATION / c["inputPath"]).read_text()).get("status") or {}).get("phase")
              for c in CASES}
    assert phases == {None, "Pending", "Starting", "Running", "Restarting", "Suspended", "Succeeded", "Failed"}


def job(phase: str | None = None, conditions: list | None = None, generation: int = 1, observed: int = 1,
        **status) -> dict:
    body: dict = {"apiVersion": "multinode.dev/v1alpha1", "kind": "TrainingJob",
                  "metadata": {"name": "llm", "generation": generation}}
    if phase is not None:
        body["status"] = {"phase": phase, "observedGeneration": observed, "conditions": conditions or [], **status}
    return body


def cond(type_: str, status: str, reason: str, message: str) -> dict:
    return {"type": type_, "status": status, "reason": reason, "message": message}


@pytest.mark.parametrize(("obj", "expected"), [
    (job(), ("Progressing", "Waiting for the multinode operator to pick the job up")),
    (job("Pending", [cond("Running", "False", "Unschedulable", "0/8 nodes are available")]),
     ("Progressing", "0/8 nodes are available")),
    (job("Starting", [cond("Running", "False", "ImagePullFailing", "llm-1-a0: ImagePullBackOff")]),
     ("Progressing", "llm-1-a0: ImagePullBackOff")),
    (job("Running", [cond("Running", "True", "AllNodesRunning", "all 4 nodes running")], ready="4/4"),
     ("Healthy", "Running, 4/4 nodes ready")),
    (job("Running", [cond("CheckpointsSynced", "False", "FinalSyncRequested", "waiting for the final sync")]),
     ("Progressing", "waiting for the final sync")),
    (job("Running", [cond("CheckpointsSynced", "False", "FinalSyncWaitingForPods", "llm-1-a0 not exited yet")]),
     ("Progressing", "llm-1-a0 not exited yet")),
    (job("Restarting", [cond("Running", "False", "PodFailed", "attempt 0 failed: exit code 1")]),
     ("Progressing", "attempt 0 failed: exit code 1")),
    (job("Suspended", [cond("Suspended", "True", "Suspended", "spec.suspend is true; no pods run")]),
     ("Suspended", "spec.suspend is true; no pods run")),
    (job("Succeeded", [cond("Succeeded", "True", "AllNodesSucceeded", "all 4 nodes succeeded")]),
     ("Healthy", "all 4 nodes succeeded")),
    (job("Failed", [cond("Failed", "True", "RestartLimitExceeded", "no restarts left")]),
     ("Degraded", "no restarts left")),
    (job("Running", generation=3, observed=2), ("Progressing", "The operator has not seen the latest spec yet")),
], ids=["no-status", "unschedulable", "image-pull", "running", "final-sync", "final-sync-waiting", "restarting",
        "suspended", "succeeded", "failed", "spec-not-observed"])
def test_health_of_each_phase(obj: dict, expected: tuple[str, str]) -> None:
    assert health(obj) == expected
