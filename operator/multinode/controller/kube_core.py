"""Requests about Kubernetes' built-in kinds (pods, ConfigMaps, Events, Leases, PriorityClasses), and the create
and read-back of any kind the operator makes (its custom ones too: kube_calls.COLLECTIONS says where each
lives). Part of KubeApi (kube.py)."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from typing import Any

from multinode.api import GROUP, KIND, VERSION
from multinode.api.constants import NODE_LEASE_NAMESPACE
from multinode.api.timestamps import rfc3339
from multinode.controller.kube_calls import (BACKGROUND, COLLECTIONS, HTTP_NOT_FOUND, MERGE_PATCH, ApiError,
                                             KubeCalls, collection_of, lease_path, path_segment)


class CoreRequests(KubeCalls):
    """KubeApi's requests about built-in kinds, and its create and read-back of any kind."""

    async def create(self, namespace: str, body: dict) -> None:
        """Create a Pod, Service, ConfigMap, ServiceAccount, RoleBinding or PodGroup (the kinds the
        operator makes). A
        refusal, 409 AlreadyExists included, is raised as ApiError: the caller decides what it means."""
        prefix, collection, operation = collection_of(body)
        try:
            await self._call(operation, "POST",
                             f"{prefix}/namespaces/{namespace}/{collection}?fieldValidation=Strict", body)
        except ApiError as e:
            e.api_version = body.get("apiVersion")
            raise

    async def read_metadata(self, namespace: str, body: dict) -> dict:
        """The metadata of the object stored under `body`'s kind and name (after its create got 409: whose
        it is, controller/ownership.py)."""
        prefix, collection, operation = collection_of(body)
        data = await self._call(operation.replace("create_", "read_", 1), "GET",
                                f"{prefix}/namespaces/{namespace}/{collection}/{path_segment(body['metadata']['name'])}",
                                None)
        return json.loads(data).get("metadata") or {}

    async def delete_pod(self, namespace: str, name: str, force: bool = False) -> None:
        """force: grace period 0, the object goes at once, for a pod whose kubelet will never confirm."""
        body: dict[str, Any] = {**BACKGROUND, **({"gracePeriodSeconds": 0} if force else {})}
        await self._call_unless_gone("delete_namespaced_pod", "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}",
                                     body)

    async def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        """Merge `annotations` into the pod's (an in-place restart's attempt, reconcile/in_place.py); nothing else
        of a pod is ever written (the chart's admission policy holds the operator to it)."""
        await self._call_unless_gone("patch_namespaced_pod", "PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}",
                                     {"metadata": {"annotations": annotations}}, MERGE_PATCH)

    async def delete_config_map(self, namespace: str, name: str) -> None:
        await self._call_unless_gone("delete_namespaced_config_map", "DELETE",
                                     f"/api/v1/namespaces/{namespace}/configmaps/{name}", None)

    async def read_log(self, namespace: str, pod: str, container: str, *, tail_lines: int, limit_bytes: int,
                       since_time: str | None = None) -> str:
        """The container's log lines, each prefixed by its RFC3339Nano timestamp: at most the last
        `tail_lines` since `since_time` (whole seconds; the caller drops lines it has read already)."""
        query = f"container={container}&timestamps=true&tailLines={tail_lines}&limitBytes={limit_bytes}"
        if since_time:
            query += f"&sinceTime={since_time}"
        data = await self._call("read_namespaced_pod_log", "GET",
                                f"/api/v1/namespaces/{namespace}/pods/{pod}/log?{query}", None, accept="*/*")
        return data.decode("utf-8", errors="replace")

    async def post_event(self, job_meta: dict, event_type: str, reason: str, message: str) -> None:
        now = rfc3339(datetime.now(timezone.utc))
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{job_meta['name']}.{uuid.uuid4().hex[:12]}", "namespace": job_meta["namespace"]},
            "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": job_meta["name"],
                               "namespace": job_meta["namespace"], "uid": job_meta.get("uid")},
            "reason": reason, "message": message[:1024], "type": event_type,
            "source": {"component": "multinode-operator"}, "reportingComponent": "multinode-operator",
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        prefix, collection, operation = COLLECTIONS["Event"]
        await self._call(operation, "POST", f"{prefix}/namespaces/{job_meta['namespace']}/{collection}", body)

    async def priority_class_value(self, name: str) -> int | None:
        """The value of PriorityClass `name` (a Kueue Workload's spec.priority); None when there is none."""
        try:
            data = await self._call("read_priority_class", "GET",
                                    f"/apis/scheduling.k8s.io/v1/priorityclasses/{path_segment(name)}", None)
        except ApiError as e:
            if e.status == HTTP_NOT_FOUND:
                return None
            raise
        value = json.loads(data).get("value")
        return int(value) if value is not None else None

    async def get_lease(self, namespace: str, name: str) -> dict | None:
        """The leader election Lease (None: there is none)."""
        try:
            data = await self._call("read_namespaced_lease", "GET", lease_path(namespace, name), None)
        except ApiError as e:
            if e.status == HTTP_NOT_FOUND:
                return None
            raise
        lease: dict = json.loads(data)
        return lease

    async def node_leases(self) -> list[dict[str, Any]]:
        """The kubelets' Leases (kube-node-lease), as the apiserver's watch cache has them (resourceVersion 0:
        no read of etcd, whatever the cluster's size)."""
        data = await self._call("list_namespaced_lease", "GET",
                                lease_path(NODE_LEASE_NAMESPACE, "") + "?resourceVersion=0", None)
        items: list[dict[str, Any]] = json.loads(data).get("items") or []
        return items

    async def create_lease(self, namespace: str, name: str, spec: dict) -> None:
        """Create the Lease; 409 (another replica was faster) is raised for the caller."""
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        await self._call("create_namespaced_lease", "POST", lease_path(namespace, ""), body)

    async def replace_lease(self, namespace: str, name: str, resource_version: str, spec: dict) -> None:
        """PUT the Lease's spec, guarded by the resourceVersion read: 409 if another replica wrote it since."""
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace, "resourceVersion": resource_version},
                "spec": spec}
        await self._call("replace_namespaced_lease", "PUT", lease_path(namespace, name), body)

