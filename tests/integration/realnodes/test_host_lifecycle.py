"""A real-node cluster leaves the host as it found it: after `down`, and after a cluster-up killed halfway
and started again. Each test takes the host to itself (real nodes share its network namespace)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from localcluster import ClusterConfig, LocalCluster, publish
from localcluster.hostchanges import HOST_ROOT, cgroup_hierarchies, read_sysctls
from localcluster.images import PAUSE
from localcluster.netplan import API_ADDRESS, REAL_NODE_TOLERATION
from localcluster.realcluster import journal_path

from localcluster.harness.kube import kubectl
from tests.support.realnodes import RealClusterSlot
from localcluster.harness.waiting import wait_for

HOST_PATHS = ("/var/lib/kubelet", "/var/log/containers", "/var/lib/cni", "/run/containerd", str(HOST_ROOT))
NODE_PROCESSES = ("kubelet", "containerd", "containerd-shim", "coredns", "kube-proxy", "fake-device-plu")


def _run(*args: str) -> str:
    return subprocess.run(list(args), capture_output=True, text=True, check=True).stdout


def host_state() -> dict:
    """What a real-node cluster changes on the host, in a form two snapshots can be compared in."""
    mounts = sorted(line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines())
    cgroups = {str(h): sorted(p.name for p in h.iterdir() if p.is_dir()) for h in cgroup_hierarchies()}
    comms = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # A zombie has exited and holds nothing but its pid: a containerd shim, reparented to PID 1, stays
            # one until PID 1 reaps it, which this machine's init does late. Only live processes count.
            if (entry / "stat").read_text().rpartition(")")[2].split()[0] != "Z":
                comms.add((entry / "comm").read_text().strip())
        except OSError:
            pass
    return {
        "addresses": _run("ip", "-o", "addr", "show"),
        "links": _run("ip", "-o", "link", "show"),
        "routes": _run("ip", "route", "show", "table", "all"),
        "rules": _run("nft", "list", "ruleset"),
        "mounts": mounts,
        "hosts": Path("/etc/hosts").read_text(),
        "sysctls": read_sysctls(),
        "cgroups": cgroups,
        "paths": {p: os.path.exists(p) for p in HOST_PATHS},
        "processes": sorted(c for c in comms if c.startswith(NODE_PROCESSES)),
    }


# A stopped node's shims exit once their containers are gone: allow them that long, no longer.
SETTLE_SECONDS = 30


def host_before() -> dict:
    """The host once the session's real cluster, just released, has no node process left."""
    wait_for(lambda: not host_state()["processes"], timeout=SETTLE_SECONDS,
             what="the released real-node cluster's processes to exit")
    return host_state()


def assert_host_is(before: dict) -> None:
    """The host as `before`, once the cluster's last processes have exited (the diff on failure)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while host_state() != before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert host_state() == before


def _localcluster(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "localcluster", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def _run_a_pod(cluster: LocalCluster) -> None:
    """A real container: a bridge, a veth, a network namespace, cgroups and overlay mounts to undo. Its image is
    the one cluster-up puts in the cluster's registry itself (the sandbox image: /pause waits for a signal)."""
    overrides = json.dumps({"spec": {"tolerations": [REAL_NODE_TOLERATION],
                                     "nodeSelector": {"kubernetes.io/hostname": "real-node-0"}}})
    kc = str(cluster.kubeconfig)
    kubectl(kc, "run", "sleeper", f"--image={publish.image_reference(cluster.registry, PAUSE)}",
            f"--overrides={overrides}")
    kubectl(kc, "wait", "--for=condition=Ready", "pod/sleeper", "--timeout=120s")


def test_cluster_down_leaves_the_host_as_it_found_it(real_slot: RealClusterSlot) -> None:
    real_slot.release()
    before = host_before()
    name = f"host-{uuid.uuid4().hex[:6]}"
    up = _localcluster("up", "--name", name, "--nodes", "1", "--real-nodes", "1")
    cluster = LocalCluster(ClusterConfig(name=name))
    try:
        assert up.returncode == 0, up.stderr
        _run_a_pod(cluster)
        during = host_state()
        assert API_ADDRESS in during["addresses"] and during["processes"] != before["processes"]
    finally:
        down = _localcluster("down", "--name", name, timeout=120)
    assert down.returncode == 0, down.stderr
    assert_host_is(before)
    shutil.rmtree(cluster.dir)


def test_cluster_up_after_a_killed_cluster_up_recovers(real_slot: RealClusterSlot) -> None:
    real_slot.release()
    before = host_before()
    name = f"killed-{uuid.uuid4().hex[:6]}"
    first = subprocess.Popen([sys.executable, "-m", "localcluster", "up", "--name", name, "--nodes", "1",
                              "--real-nodes", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = journal_path(name)

    def halfway() -> bool:  # the host is changed and a node's containerd runs
        return journal.exists() and '"cgroup"' in journal.read_text() and "containerd" in host_state()["processes"]

    try:
        wait_for(halfway, timeout=120, what="cluster-up to get halfway")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        again = _localcluster("up", "--name", name, "--nodes", "1", "--real-nodes", "1")
        assert again.returncode == 0, again.stderr
        cluster = LocalCluster(ClusterConfig(name=name))
        assert cluster.is_running()
        _run_a_pod(cluster)
    finally:
        first.kill()
        down = _localcluster("down", "--name", name, timeout=120)
    assert down.returncode == 0, down.stderr
    assert_host_is(before)
    shutil.rmtree(LocalCluster(ClusterConfig(name=name)).dir)
