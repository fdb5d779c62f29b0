"""Hang detection and stragglers on real nodes, under the operator installed by helm: it reads the real
trainers' logs through the apiserver (pods/log), so what it sees is what a kubelet really recorded.

- a real torch (gloo) gang whose rank 1 stops, so rank 0 blocks in the all-reduce: test_hang_resume.py (Hung
  naming both ranks and nodes, a restart with reason Hung, the next attempt resumes and trains to the end);
- a trainer with no change at all (plain lines, then silence) → Hung from its logs alone;
- a gang whose pods run and never print (never forms its world) → Hung;
- a rank reporting a much longer step time → condition and Event StragglersDetected naming rank and node.
"""

from __future__ import annotations

import re
import textwrap
import time
from datetime import datetime, timezone

from kubernetes import client
from localcluster import LocalCluster

from multinode.api import GROUP, PLURAL, VERSION
from tests.support import jobs
from localcluster.harness.waiting import wait_for
from tests.support.realnodes import clients, real_job

TIMEOUT = 10  # hangDetection.timeoutSeconds: the smallest the API allows
FAIL_ON_HANG = {"maxRestarts": 3, "backoff": {"initialSeconds": 0},
                "rules": [{"action": "FailJob", "onReasons": ["Hung"]}]}



def _create(custom: client.CustomObjectsApi, namespace: str, body: dict) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def _time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def _report_latency(what: str, message: str, decided: str) -> None:
    """How long after the newest progress the hang was decided, and beyond the timeout (seconds precision)."""
    last = [_time(t) for t in re.findall(r"last progress (\S+Z)", message)]
    silent = int(re.search(r"for (\d+)s", message).group(1))
    if last:
        since = (_time(decided) - max(last)).total_seconds()
        print(f"\nhang latency [{what}]: decided {since:.0f}s after the last progress "
              f"(timeout {TIMEOUT}s; silence measured {silent}s)")
    else:
        print(f"\nhang latency [{what}]: silence measured {silent}s at the decision (timeout {TIMEOUT}s)")


ZERO_CHANGE = textwrap.dedent("""
    import time
    for i in range(5):
        print(f"epoch 0 batch {i} loss={1.0 / (i + 1):.3f}", flush=True)
        time.sleep(0.5)
    time.sleep(3600)
""")


def test_a_trainer_without_heartbeats_that_goes_silent_is_hung(operator_namespace: tuple[LocalCluster, str]) -> None:
    cluster, namespace = operator_namespace
    _, custom = clients(cluster)
    _create(custom, namespace, real_job("plain-hang", 2, ZERO_CHANGE, hangDetection={"timeoutSeconds": TIMEOUT},
                                        failurePolicy=FAIL_ON_HANG))
    final = jobs.wait_phase(custom, namespace, "plain-hang", "Failed", timeout=180)
    failed = jobs.condition(final, "Failed")
    assert failed["reason"] == "Hung", failed
    assert "(logs)" in failed["message"] and "rank 0 on node real-node-" in failed["message"], failed
    assert final["status"]["progress"]["source"] == "Logs"
    assert final["status"]["progress"]["stalledCount"] == 2
    assert {r["index"] for r in final["status"]["progress"]["stalledRanks"]} == {0, 1}
    _report_latency("plain logs", failed["message"], failed["lastTransitionTime"])


def test_a_gang_that_never_prints_is_hung(operator_namespace: tuple[LocalCluster, str]) -> None:
    cluster, namespace = operator_namespace
    _, custom = clients(cluster)
    started = time.monotonic()
    _create(custom, namespace, real_job("mute", 2, "import time; time.sleep(3600)",
                                        hangDetection={"timeoutSeconds": TIMEOUT}, failurePolicy=FAIL_ON_HANG))
    final = jobs.wait_phase(custom, namespace, "mute", "Failed", timeout=180)
    took = time.monotonic() - started
    failed = jobs.condition(final, "Failed")
    assert failed["reason"] == "Hung", failed
    for rank in (0, 1):
        assert re.search(rf"rank {rank} on node real-node-\d: no progress since the gang started", failed["message"])
    print(f"\nhang latency [never prints]: job created → Failed/Hung in {took:.1f}s (timeout {TIMEOUT}s); "
          f"{failed['message'][:80]}")


# Both ranks heartbeat every 0.3 s; rank 1 reports a step time ten times rank 0's.
STRAGGLER = textwrap.dedent("""
    import os, time
    from multinode.progress import heartbeat
    rank = int(os.environ["NODE_RANK"])
    for step in range(1, 80):
        heartbeat(step, step_seconds=2.0 if rank == 1 else 0.2, min_interval=0)
        time.sleep(0.3)
    print("done", flush=True)
""")


def test_a_rank_reporting_much_longer_steps_is_a_straggler(operator_namespace: tuple[LocalCluster, str]) -> None:
    cluster, namespace = operator_namespace
    core, custom = clients(cluster)
    _create(custom, namespace, real_job("slow-rank", 2, STRAGGLER, hangDetection={
        "timeoutSeconds": 30, "stragglers": {"factor": 2.0, "forSeconds": 2}}))

    def reported():
        job = jobs.get_job(custom, namespace, "slow-rank")
        c = jobs.condition(job, "Stragglers")
        return job if c and c["status"] == "True" else None

    job = wait_for(reported, timeout=120, what="condition Stragglers=True")
    c = jobs.condition(job, "Stragglers")
    assert c["reason"] == "StragglersDetected"
    node = next(ns["node"] for ns in job["status"]["nodeStatuses"] if ns["index"] == 1)
    assert f"rank 1 on node {node}: 2s a step, the others' median 0.2s" in c["message"], c
    assert "rank 0" not in c["message"]
    progress = job["status"]["progress"]
    assert progress["stragglerCount"] == 1 and [s["index"] for s in progress["stragglers"]] == [1], progress
    events = wait_for(lambda: [e for e in core.list_namespaced_event(namespace).items
                               if e.reason == "StragglersDetected"] or None,
                           timeout=30, what="a StragglersDetected Event")
    assert f"rank 1 on node {node}" in events[0].message
    jobs.wait_phase(custom, namespace, "slow-rank", "Succeeded", timeout=120)
