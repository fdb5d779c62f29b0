"""The local cluster's StorageClass `local-shared`: a folder on this host for each claim, shared by every node.

Every real node is this host, so a hostPath folder is what a ReadWriteMany volume is to the pods: the
same files on every node. This process binds each pending claim of the class to a new PersistentVolume
over a fresh folder (mode 0777: a pod's non-root user, the mirror's 65532, may write it), and removes the
folder and the volume when a claim with reclaim policy Delete is gone. It runs beside the real nodes.

    python -m localcluster.provisioner --kubeconfig K --root DIR
"""

from __future__ import annotations

import argparse
import logging
import shutil
import time
from pathlib import Path

STORAGE_CLASS = "local-shared"
PROVISIONER = "localcluster.multinode.dev/shared-hostpath"
log = logging.getLogger("provisioner")


def storage_class() -> dict:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": STORAGE_CLASS,
                         "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"}


def volume_for(claim, root: Path) -> dict:
    """The PersistentVolume for a pending claim, pre-bound to it."""
    folder = root / f"{claim.metadata.namespace}-{claim.metadata.name}-{claim.metadata.uid[:8]}"
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"pvc-{claim.metadata.uid}",
                     "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
        "spec": {"capacity": {"storage": claim.spec.resources.requests["storage"]},
                 "accessModes": claim.spec.access_modes, "storageClassName": STORAGE_CLASS,
                 "persistentVolumeReclaimPolicy": "Delete",
                 "hostPath": {"path": str(folder), "type": "DirectoryOrCreate"},
                 "claimRef": {"namespace": claim.metadata.namespace, "name": claim.metadata.name,
                              "uid": claim.metadata.uid}},
    }


def reconcile(core, root: Path) -> None:
    """One pass: provision what is pending, delete what was released."""
    from kubernetes import client

    volumes = {pv.metadata.name: pv for pv in core.list_persistent_volume().items}
    for claim in core.list_persistent_volume_claim_for_all_namespaces().items:
        if claim.spec.storage_class_name != STORAGE_CLASS or claim.status.phase != "Pending":
            continue
        body = volume_for(claim, root)
        if body["metadata"]["name"] in volumes:
            continue
        folder = Path(body["spec"]["hostPath"]["path"])
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o777)
        try:
            core.create_persistent_volume(body)
            log.info("provisioned %s for %s/%s", folder, claim.metadata.namespace, claim.metadata.name)
        except client.ApiException as e:
            if e.status != 409:
                raise
    for pv in volumes.values():
        if (pv.spec.storage_class_name == STORAGE_CLASS and pv.status.phase == "Released"
                and pv.spec.persistent_volume_reclaim_policy == "Delete"):
            folder = Path(pv.spec.host_path.path)
            if folder.parent == root:  # never outside our root
                shutil.rmtree(folder, ignore_errors=True)
            core.delete_persistent_volume(pv.metadata.name)
            log.info("deleted %s", folder)


def main(argv: list[str] | None = None) -> int:
    from kubernetes import client, config

    p = argparse.ArgumentParser(prog="localcluster.provisioner", description=__doc__)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--root", required=True, type=Path)
    p.add_argument("--interval", type=float, default=0.5)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    core = client.CoreV1Api(config.new_client_from_config(config_file=args.kubeconfig))
    while True:
        try:
            reconcile(core, args.root)
        except Exception:  # logged, not blind: a failed pass (apiserver restarting) is retried
            log.exception("pass failed")
        time.sleep(args.interval)


if __name__ == "__main__":
    raise SystemExit(main())
