"""Requests about custom resources: discovery of the APIs the operator uses, the TrainingJobs (status,
spec.suspend, deletion, the periodic re-list), and the integrations' objects, of any kind (reconcile/kinds.py:
PodGroups, Workloads). Part of KubeApi (kube.py)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import orjson

from multinode.api import GROUP, PLURAL, VERSION
from multinode.api.constants import LABEL_JOB_NAME
from multinode.controller.kube_calls import (BACKGROUND, HTTP_NOT_FOUND, MERGE_PATCH, ApiError, KubeCalls, job_path,
                                             operation_name)
from multinode.reconcile.kinds import ApiKind, StatusWrite

JOB_LIST_PAGE = 500  # TrainingJobs per page of the periodic re-list


class CustomObjectRequests(KubeCalls):
    """KubeApi's requests about custom resources and the discovery of their APIs."""

    async def serves_jobs(self) -> bool:
        """Whether discovery lists TrainingJobs yet. A CRD is Established a moment before discovery
        serves it; kopf scans discovery once at start and ignores CRDs it already listed, so an operator
        started in that moment would never watch TrainingJobs."""
        try:
            data = await self._call("get_api_resources", "GET", f"/apis/{GROUP}/{VERSION}", None)
        except ApiError as e:
            if e.status == HTTP_NOT_FOUND:
                return False
            raise
        return any(r.get("name") == PLURAL for r in json.loads(data).get("resources", []))

    async def serves(self, kind: ApiKind) -> bool:
        """Whether discovery lists `kind` (an integration's API: native PodGroups, a Kubernetes alpha; Kueue's
        Workloads). Asked once at start; any failure to ask counts as no, and the integration says so on the
        jobs that need it (the native gang falls back to reconcile/gang_fallback.py, instead of pods waiting
        for a group that cannot be created)."""
        try:
            data = await self._call("get_api_resources", "GET", kind.api, None)
        except ApiError:
            return False
        return any(r.get("name") == kind.plural for r in json.loads(data).get("resources", []))

    async def patch_job_status(self, namespace: str, name: str, status: dict) -> str | None:
        """Merge-patch .status through the status subresource (spec is never written); the job's
        resourceVersion after the write (None: the job is gone)."""
        data = await self._call_unless_gone("patch_namespaced_custom_object_status", "PATCH",
                                            job_path(namespace, name) + "/status", {"status": status}, MERGE_PATCH)
        if data is None:
            return None
        version = (orjson.loads(data).get("metadata") or {}).get("resourceVersion")
        return str(version) if version else None

    async def patch_job_suspend(self, namespace: str, name: str, suspend: bool) -> None:
        """Set spec.suspend: the job's Kueue integration starts (false) or stops (true) it, as Kueue's
        jobframework does for the kinds it knows. The only write of a job's spec."""
        await self._call_unless_gone("patch_namespaced_custom_object", "PATCH", job_path(namespace, name),
                                     {"spec": {"suspend": suspend}}, MERGE_PATCH)

    async def delete_job(self, namespace: str, name: str) -> None:
        """ttlSecondsAfterFinished: the job goes, its pods and Service follow by owner reference."""
        await self._call_unless_gone("delete_namespaced_custom_object", "DELETE", job_path(namespace, name),
                                     BACKGROUND)

    async def list_jobs(self, namespace: str | None) -> list[dict]:
        """Every TrainingJob of `namespace` (None: of the cluster), page by page (resync.py)."""
        where = f"/namespaces/{namespace}" if namespace is not None else ""
        jobs: list[dict] = []
        cont = None
        while True:
            query = urlencode({"limit": JOB_LIST_PAGE, **({"continue": cont} if cont else {})})
            page = json.loads(await self._call("list_jobs", "GET", f"/apis/{GROUP}/{VERSION}{where}/{PLURAL}?{query}",
                                               None))
            jobs.extend(page.get("items") or ())
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return jobs

    async def get_job_uid(self, namespace: str, name: str) -> str | None:
        """The uid of TrainingJob `name`, None when there is none. A LIST by name, not a GET: the operator's
        role lists and watches jobs and never reads one by name (charts/multinode-operator RBAC)."""
        query = urlencode({"fieldSelector": f"metadata.name={name}"})
        data = await self._call("list_jobs", "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}?{query}",
                                None)
        items = json.loads(data).get("items") or ()
        return str(items[0]["metadata"]["uid"]) if items else None

    async def delete_object(self, namespace: str, kind: ApiKind, name: str) -> None:
        await self._call_unless_gone(operation_name("delete", kind.kind), "DELETE",
                                     f"{kind.api}/namespaces/{namespace}/{kind.plural}/{name}", BACKGROUND)

    async def patch_object_status(self, namespace: str, write: StatusWrite) -> None:
        """Merge-patch an object's status, guarded by the resourceVersion read (409 when its other writer wrote
        it since: the reconcile is retried with the newer object)."""
        kind = write.kind
        await self._call(operation_name("patch", kind.kind, "_status"), "PATCH",
                         f"{kind.api}/namespaces/{namespace}/{kind.plural}/{write.name}/status",
                         {"metadata": {"resourceVersion": write.resource_version}, "status": write.status},
                         MERGE_PATCH)

    async def list_job_objects(self, namespace: str, kind: ApiKind, job: str) -> list[dict[str, Any]]:
        """Job `job`'s objects of `kind`, listed by the job's label; none when the kind is not served (its CRD
        was uninstalled). Which are stale is reconcile/stale_groups.py's to say."""
        try:
            data = await self._call(operation_name("list", kind.kind), "GET",
                                    f"{kind.api}/namespaces/{namespace}/{kind.plural}"
                                    f"?labelSelector={LABEL_JOB_NAME}%3D{job}", None)
        except ApiError as e:
            if e.status == HTTP_NOT_FOUND:
                return []
            raise
        items: list[dict[str, Any]] = json.loads(data).get("items", [])
        return items
