"""Requests about custom resources: discovery of the APIs the operator uses, the TrainingJobs (status,
spec.suspend, deletion, the periodic re-list), native and gang-scheduler PodGroups, and Kueue's Workloads.
Part of KubeApi (kube.py)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from multinode.api import GROUP, PLURAL, VERSION
from multinode.api.constants import (KUEUE_API_GROUP, KUEUE_API_VERSION, KUEUE_WORKLOAD_PLURAL, LABEL_JOB_NAME,
                                     POD_GROUP_API_GROUP, POD_GROUP_API_VERSION, POD_GROUP_PLURAL)
from multinode.controller.kube_calls import (BACKGROUND, COLLECTIONS, HTTP_NOT_FOUND, MERGE_PATCH, ApiError,
                                             KubeCalls, job_path)

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

    async def serves_pod_groups(self) -> bool:
        """Whether the apiserver serves native PodGroups (Kubernetes 1.36 alpha, off unless its feature gates
        and API version are enabled). Any failure to ask counts as no: the job then runs without the native
        gang (reconcile/gang_fallback.py) instead of pods waiting for a group that cannot be created."""
        try:
            data = await self._call("get_api_resources", "GET", f"/apis/{POD_GROUP_API_GROUP}/{POD_GROUP_API_VERSION}",
                                    None)
        except ApiError:
            return False
        return any(r.get("name") == POD_GROUP_PLURAL for r in json.loads(data).get("resources", []))

    async def serves_kueue(self) -> bool:
        """Whether the apiserver serves Kueue's Workloads (Kueue's CRDs are installed). Asked once at start, as
        for native PodGroups: any failure to ask counts as no, and jobs with a queue name say so."""
        try:
            data = await self._call("get_api_resources", "GET", f"/apis/{KUEUE_API_GROUP}/{KUEUE_API_VERSION}", None)
        except ApiError:
            return False
        return any(r.get("name") == KUEUE_WORKLOAD_PLURAL for r in json.loads(data).get("resources", []))

    async def patch_job_status(self, namespace: str, name: str, status: dict) -> None:
        """Merge-patch .status through the status subresource (spec is never written)."""
        await self._call_unless_gone("patch_namespaced_custom_object_status", "PATCH",
                                     job_path(namespace, name) + "/status", {"status": status}, MERGE_PATCH)

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

    async def delete_pod_group(self, namespace: str, name: str) -> None:
        prefix, collection, _ = COLLECTIONS["PodGroup"]
        await self._call_unless_gone("delete_namespaced_pod_group", "DELETE",
                                     f"{prefix}/namespaces/{namespace}/{collection}/{name}", BACKGROUND)

    async def patch_workload_status(self, namespace: str, name: str, resource_version: str, status: dict) -> None:
        """Merge-patch a Kueue Workload's status, guarded by `resource_version` (409 when Kueue wrote it since:
        the reconcile is retried with the newer object)."""
        prefix, collection, _ = COLLECTIONS["Workload"]
        await self._call("patch_namespaced_workload_status", "PATCH",
                         f"{prefix}/namespaces/{namespace}/{collection}/{name}/status",
                         {"metadata": {"resourceVersion": resource_version}, "status": status}, MERGE_PATCH)

    async def delete_workload(self, namespace: str, name: str) -> None:
        prefix, collection, _ = COLLECTIONS["Workload"]
        await self._call_unless_gone("delete_namespaced_workload", "DELETE",
                                     f"{prefix}/namespaces/{namespace}/{collection}/{name}", BACKGROUND)

    async def list_gang_groups(self, namespace: str, api_version: str, job: str) -> list[dict[str, Any]]:
        """Job `job`'s PodGroups of `api_version` (a gang scheduler's), listed by the job's label; none when the
        kind is not served (its CRD was uninstalled). Which are stale is reconcile/stale_groups.py's to say."""
        try:
            data = await self._call("list_namespaced_pod_group", "GET",
                                    f"/apis/{api_version}/namespaces/{namespace}/{POD_GROUP_PLURAL}"
                                    f"?labelSelector={LABEL_JOB_NAME}%3D{job}", None)
        except ApiError as e:
            if e.status == HTTP_NOT_FOUND:
                return []
            raise
        items: list[dict[str, Any]] = json.loads(data).get("items", [])
        return items

    async def delete_gang_group(self, namespace: str, api_version: str, name: str) -> None:
        await self._call_unless_gone("delete_namespaced_pod_group", "DELETE",
                                     f"/apis/{api_version}/namespaces/{namespace}/{POD_GROUP_PLURAL}/{name}",
                                     BACKGROUND)
