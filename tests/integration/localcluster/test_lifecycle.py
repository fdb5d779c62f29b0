"""Stopping a cluster leaves no process behind: after `down`, and when its owner is SIGKILLed. The cluster's
registry is one of its processes, and `down` removes its storage too."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
import uuid

import pytest
from localcluster import ClusterConfig, LocalCluster, images, processes, publish
from localcluster.cluster import STOP_ORDER
from localcluster.registry import STORAGE_DIR

from localcluster.harness.waiting import wait_for


def test_cluster_down_leaves_no_process(local_cluster: LocalCluster) -> None:
    # `local_cluster` first: the binaries are built and a second cluster starts warm.
    name = f"down-{uuid.uuid4().hex[:6]}"
    env = dict(os.environ)
    up = subprocess.run([sys.executable, "-m", "localcluster", "up", "--name", name, "--nodes", "1"],
                        capture_output=True, text=True, env=env, timeout=300, check=False)
    assert up.returncode == 0, up.stderr
    cluster = LocalCluster(ClusterConfig(name=name))
    try:
        assert up.stdout.splitlines() == [f"export KUBECONFIG={cluster.kubeconfig}",
                                          f"export MULTINODE_REGISTRY={cluster.registry}"]
        assert cluster.is_running()
        assert len(processes.pids_with_marker(cluster.marker)) >= len(STOP_ORDER)
        registry = cluster.registry
        with urllib.request.urlopen(f"http://{registry}/v2/", timeout=5) as resp:
            assert resp.status == 200  # the OCI distribution API answers, in plain HTTP
        pause = images.build_images((images.PAUSE,))[images.PAUSE]
        publish.push_image(pause, publish.image_reference(registry, images.PAUSE))
        assert any((cluster.dir / STORAGE_DIR).rglob("data"))  # the pushed blobs, in the cluster's folder
    finally:
        down = subprocess.run([sys.executable, "-m", "localcluster", "down", "--name", name],
                              capture_output=True, text=True, env=env, timeout=120, check=False)
    assert down.returncode == 0, down.stderr
    assert processes.pids_with_marker(cluster.marker) == []
    assert not cluster.is_running()
    assert not (cluster.dir / STORAGE_DIR).exists()
    with pytest.raises(urllib.error.URLError):  # nobody listens on the registry's port any more
        urllib.request.urlopen(f"http://{registry}/v2/", timeout=5)
    shutil.rmtree(cluster.dir)


def test_cluster_dies_with_its_sigkilled_owner(local_cluster: LocalCluster) -> None:
    name = f"owned-{uuid.uuid4().hex[:6]}"
    owner_code = textwrap.dedent(f"""
        import sys, time
        from localcluster import ClusterConfig, LocalCluster, NodePoolConfig
        c = LocalCluster(ClusterConfig(name={name!r}, die_with_parent=True, nodes=NodePoolConfig(count=1)))
        c.start()
        print("started", flush=True)
        sys.stdin.read()  # hold the cluster until killed
    """)
    owner = subprocess.Popen([sys.executable, "-c", owner_code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    cluster = LocalCluster(ClusterConfig(name=name))
    try:
        assert owner.stdout.readline().strip() == "started"
        assert len(processes.pids_with_marker(cluster.marker)) >= len(STOP_ORDER)

        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)

        wait_for(lambda: processes.pids_with_marker(cluster.marker) == [], timeout=30,
                 what="every component of the owned cluster to exit")
    finally:
        owner.kill()
        cluster.stop()
        shutil.rmtree(cluster.dir, ignore_errors=True)
