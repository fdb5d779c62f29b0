"""What a GitOps tool sees: the operator never writes spec, re-applying changes nothing, diff is clean."""

from __future__ import annotations

import yaml
from kubernetes import client

from multinode.testing import training_job
from tests.support import jobs
from localcluster.harness.kube import kubectl


def test_server_side_apply_twice_is_a_no_op_and_diff_is_clean_after_reconcile(
    api: client.ApiClient, kubeconfig: str, job_namespace: str
) -> None:
    ns, custom = job_namespace, client.CustomObjectsApi(api)
    manifest = yaml.safe_dump(training_job("synced", 2))
    kubectl(kubeconfig, "apply", "--server-side", "--field-manager=argocd-controller", "-n", ns, "-f", "-",
            input=manifest)
    running = jobs.wait_phase(custom, ns, "synced", "Running")

    again = kubectl(kubeconfig, "apply", "--server-side", "--field-manager=argocd-controller", "-n", ns, "-f", "-",
                    input=manifest)
    after = jobs.get_job(custom, ns, "synced")
    diff = kubectl(kubeconfig, "diff", "--server-side", "--field-manager=argocd-controller", "-n", ns, "-f", "-",
                   input=manifest, check=False)

    assert "serverside-applied" in again.stdout
    assert after["metadata"]["generation"] == running["metadata"]["generation"] == 1
    assert after["spec"] == running["spec"]
    assert diff.returncode == 0, f"kubectl diff shows changes:\n{diff.stdout}{diff.stderr}"
    # Whoever else writes the object touches only the status subresource, never spec or metadata.
    for entry in after["metadata"]["managedFields"]:
        if entry["manager"] != "argocd-controller":
            assert entry.get("subresource") == "status", entry
            assert set(entry["fieldsV1"]) == {"f:status"}, entry
