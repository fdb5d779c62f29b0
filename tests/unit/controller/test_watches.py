"""Where the operator's own pod watches look, and what they keep (controller/watches.py)."""

from __future__ import annotations

from multinode.controller.watches import namespace_filter, node_pod_keys


def test_named_namespaces_get_a_watch_each_and_patterns_one_cluster_wide_watch_filtered_here() -> None:
    prefixes, keep = namespace_filter(("a", "b"))
    assert prefixes == ["/api/v1/namespaces/a", "/api/v1/namespaces/b"] and keep("anything")
    prefixes, keep = namespace_filter(("t-*", "!t-skip*"))
    assert prefixes == ["/api/v1"]
    assert keep("t-1") and not keep("t-skip-1") and not keep("other")
    prefixes, keep = namespace_filter(())
    assert prefixes == ["/api/v1"] and keep("any")


def test_a_node_pod_is_filed_under_its_job_and_its_node() -> None:
    pod = {"metadata": {"name": "llm-1-a0", "namespace": "ns", "uid": "u",
                        "labels": {"multinode.dev/job-name": "llm", "multinode.dev/node-index": "1",
                                   "multinode.dev/attempt": "0"}},
           "spec": {"nodeName": "kwok-3"}, "status": {"phase": "Running"}}
    keys = node_pod_keys(pod)
    assert keys[("ns", "llm")].name == "llm-1-a0" and keys[("", "node", "kwok-3")] == ("ns", "llm")
