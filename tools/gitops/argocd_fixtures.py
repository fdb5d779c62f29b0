"""Writes the testdata of the Argo CD health check (docs/gitops/argocd/.../TrainingJob/testdata) from jobs the
operator reconciled on a local cluster, one per phase, so the fixtures are what the operator really writes.

    .venv/bin/python -m localcluster up --real-nodes 0
    KUBECONFIG=.cache/localcluster/clusters/default/kubeconfig .venv/bin/python -P tools/gitops/argocd_fixtures.py

health_test.yaml, beside them, is written by hand: what Argo CD should show for each.
tests/integration/controller/test_health_checks.py checks the health check on live jobs of the same phases.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import yaml
from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tools" / "localcluster")]

from localcluster.harness.kube import new_namespace  # noqa: E402
from localcluster.harness.operator import OperatorProcess  # noqa: E402
from multinode.testing import training_job  # noqa: E402
from tests.support import jobs  # noqa: E402
from tests.support.jobs import EXIT_CODE, FINISH_AFTER, START_AFTER  # noqa: E402
from tests.support.storage import bound_claim  # noqa: E402

OUT = ROOT / "docs" / "gitops" / "argocd" / "resource_customizations" / "multinode.dev" / "TrainingJob" / "testdata"
# fixture → (the job, the phase to capture it in, the reason of its Running condition to wait for or None)
CASES = {
    "pending": (training_job("llm", 4, podTemplate={"nodeSelector": {"example.com/pool": "h100"}}), "Pending",
                "NotEnoughNodes"),
    "starting": (training_job("llm", 2, pod_annotations={START_AFTER: "3600s"}), "Starting", "PodsStarting"),
    "running": (training_job("llm", 2), "Running", None),
    "final-sync": (training_job("llm", 2, pod_annotations={FINISH_AFTER: "1s"},
                                cache={"claimName": "cache", "mountPath": "/cache"},
                                checkpointing={"claimName": "ckpt", "mountPath": "/checkpoints",
                                               "finalSyncTimeoutSeconds": 3600}), "Running", None),
    "restarting": (training_job("llm", 2, pod_annotations={FINISH_AFTER: "1s", EXIT_CODE: "1"},
                                failurePolicy={"maxRestarts": 3, "backoff": {"initialSeconds": 3600}}),
                   "Restarting", None),
    "suspended": (training_job("llm", 2, suspend=True), "Suspended", None),
    "succeeded": (training_job("llm", 2, pod_annotations={FINISH_AFTER: "1s"}), "Succeeded", None),
    "failed": (training_job("llm", 2, activeDeadlineSeconds=2), "Failed", None),
}
DROPPED_METADATA = ("managedFields", "uid", "resourceVersion", "creationTimestamp", "namespace")


def _cleaned(obj: dict) -> dict:
    metadata = {k: v for k, v in obj["metadata"].items() if k not in DROPPED_METADATA}
    metadata.get("annotations", {}).pop("kubectl.kubernetes.io/last-applied-configuration", None)
    if not metadata.get("annotations"):
        metadata.pop("annotations", None)
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": metadata, "spec": obj["spec"],
            **({"status": obj["status"]} if "status" in obj else {})}


def _dump(name: str, obj: dict) -> None:
    (OUT / f"{name}.yaml").write_text(yaml.safe_dump(obj, sort_keys=False, width=120))


def capture(api: client.ApiClient, kubeconfig: str, name: str) -> dict:
    body, phase, reason = CASES[name]
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = new_namespace(core, prefix="fixtures")
    pvs = [bound_claim(core, ns, claim) for claim in ("cache", "ckpt")] if name == "final-sync" else []
    operator = OperatorProcess(kubeconfig, [ns], Path(tempfile.mkdtemp()) / "operator.log")
    operator.start()
    try:
        jobs.apply(kubeconfig, ns, body)
        job = jobs.wait_phase(custom, ns, "llm", phase, timeout=120)
        if name == "final-sync":
            job = wait_condition(custom, ns, "CheckpointsSynced", ("FinalSyncRequested", "FinalSyncWaitingForPods"))
        elif reason is not None:
            job = wait_condition(custom, ns, "Running", (reason,))
        return _cleaned(job)
    finally:
        operator.stop()
        core.delete_namespace(ns)
        for pv in pvs:
            core.delete_persistent_volume(pv)


def unreconciled(api: client.ApiClient, kubeconfig: str) -> dict:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = new_namespace(core, prefix="fixtures")
    try:
        jobs.apply(kubeconfig, ns, training_job("llm", 2))
        return _cleaned(jobs.get_job(custom, ns, "llm"))
    finally:
        core.delete_namespace(ns)


def wait_condition(custom: client.CustomObjectsApi, ns: str, type_: str, reasons: tuple[str, ...]) -> dict:
    from localcluster.harness.waiting import wait_for

    def seen() -> dict | None:
        job = jobs.get_job(custom, ns, "llm")
        c = jobs.condition(job, type_)
        return job if c and c["reason"] in reasons else None
    return wait_for(seen, timeout=120, what=f"{type_} {reasons}")


def main() -> int:
    kubeconfig = os.environ["KUBECONFIG"]
    api = config.new_client_from_config(kubeconfig)
    OUT.mkdir(parents=True, exist_ok=True)
    captured = {name: capture(api, kubeconfig, name) for name in CASES}
    for name, obj in captured.items():
        _dump(name, obj)
    # Two states no job stays in long enough to capture with an operator watching: just applied, before the
    # operator's first status (read in a namespace no operator watches: the status the CRD's defaults give);
    # and a spec change the operator has not seen yet (Argo CD may read the job between the two).
    _dump("no-status", unreconciled(api, kubeconfig))
    running = captured["running"]
    _dump("spec-not-observed", running | {"metadata": {**running["metadata"], "generation": 2},
                                          "spec": {**running["spec"], "activeDeadlineSeconds": 86400}})
    print(f"wrote {len(captured) + 2} fixtures to {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
