"""`multinode scaling-test` on real nodes: a trainer that measures its own throughput (real CPU work) and
prints heartbeat lines, run at 1 and 2 nodes; the report must be the arithmetic of what the logs said."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from localcluster import LocalCluster

from tests.support.realnodes import real_job

BIN = Path(sys.executable).parent

# Each heartbeat reports the samples (fixed-size hashing work) this rank did per second since the last one.
TRAINER = textwrap.dedent("""
    import hashlib, time
    block = b"x" * 4096
    last, done = time.monotonic(), 0
    for step in range(1, 9):
        end = time.monotonic() + 0.4
        while time.monotonic() < end:
            hashlib.sha256(block).digest(); done += 1
        now = time.monotonic()
        print(f"multinode heartbeat step={step} samples_per_second={done / (now - last):.1f}", flush=True)
        last, done = now, 0
""")



def test_scaling_test_reports_what_the_heartbeats_measured(operator_namespace: tuple[LocalCluster, str],
                                                           tmp_path: Path) -> None:
    cluster, namespace = operator_namespace
    job_file = tmp_path / "bench.yaml"
    job_file.write_text(yaml.safe_dump(real_job("bench", 1, TRAINER)))
    svg = tmp_path / "bench.svg"
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig), PATH=f"{BIN}:{os.environ['PATH']}", NO_COLOR="1")
    args = ["multinode", "scaling-test", "-f", str(job_file), "--nodes", "1,2", "-n", namespace, "--svg", str(svg),
            "--timeout", "180"]
    run = subprocess.run([*args, "-o", "json"], check=False, capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode in (0, 2), run.stderr
    report = json.loads(run.stdout)
    one, two = report["sizes"]
    assert (one["nodes"], two["nodes"]) == (1, 2)
    assert one["heartbeats"] == 8 and two["heartbeats"] == 16  # every heartbeat of every rank was read
    assert one["throughput"] > 0 and two["throughput"] > 0
    assert two["efficiency"] == pytest.approx(two["throughput"] / (2 * one["throughput"]))
    assert report["verdict"] == ("PASS" if two["efficiency"] >= 0.8 else "FAIL")
    assert run.returncode == (0 if report["verdict"] == "PASS" else 2)
    assert "bench-n2: creating (2 nodes)" in run.stderr and "bench-n2: Succeeded" in run.stderr
    root = ET.parse(svg).getroot()
    assert len(list(root.iter("{http://www.w3.org/2000/svg}circle"))) == 2
    # Each size's job was deleted once read.
    custom = client.CustomObjectsApi(cluster.api_client())
    assert custom.list_namespaced_custom_object("multinode.dev", "v1alpha1", namespace, "trainingjobs")["items"] == []
    print("\n$ multinode scaling-test -f bench.yaml --nodes 1,2 -o json\n" + run.stderr + run.stdout)
