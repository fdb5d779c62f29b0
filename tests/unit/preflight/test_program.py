"""The preflight program: `multinode preflight` as a real process, resolving names through the real libc resolver,
and its health check and termination log called directly.

Each run gets a private mount namespace in which /etc/hosts is a file this test controls (and
resolv.conf points at loopback, so a name not in it fails at once instead of waiting on a network).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from multinode.testing import stored_job
from multinode.preflight import program
from multinode.preflight.node_checks import HealthRequest
from multinode.preflight.bandwidth import BandwidthRequest
from multinode.preflight.program import PreflightRequest, make_dirs, names_to_resolve, peers_from_env
from multinode.api.health_check import parse_health_message
from multinode.render import node_dns_name
from multinode.testing import node_env

ISOLATE = 'mount --bind "$0" /etc/hosts && mount --bind "$1" /etc/resolv.conf && shift && exec "$@"'


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    path = tmp_path / "hosts"
    path.write_text("127.0.0.1 localhost\n")
    (tmp_path / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    return path


def start_preflight(hosts: Path, peers: list[str], timeout: float) -> subprocess.Popen:
    cmd = ["unshare", "-m", "sh", "-c", ISOLATE, str(hosts), str(hosts.parent / "resolv.conf"),
           sys.executable, "-m", "multinode.cli.main", "preflight",
           "--peers", ",".join(peers), "--timeout", str(timeout), "--interval", "0.1"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def add_host(hosts: Path, name: str, ip: str) -> None:
    with hosts.open("a") as f:  # in place: the bind mount points at this inode
        f.write(f"{ip} {name}\n")


def test_exits_0_at_once_when_every_peer_resolves(hosts: Path) -> None:
    peers = [f"job-{i}.job.ns.svc" for i in range(3)]
    for i, name in enumerate(peers):
        add_host(hosts, name, f"127.0.1.{i + 1}")

    proc = start_preflight(hosts, peers, timeout=30)
    out, _ = proc.communicate(timeout=30)

    assert proc.returncode == 0, out
    assert "all 3 peers resolve" in out


def test_waits_for_a_late_peer_then_succeeds(hosts: Path) -> None:
    add_host(hosts, "job-0.job.ns.svc", "127.0.1.1")
    proc = start_preflight(hosts, ["job-0.job.ns.svc", "job-1.job.ns.svc"], timeout=60)
    try:
        # Wait until it says what it waits for (its first round), then let the late peer appear.
        line = proc.stdout.readline()
        while line and "waiting for 1/2 peers" not in line:
            line = proc.stdout.readline()
        assert "job-1.job.ns.svc" in line and "job-0.job.ns.svc" not in line.split(":")[-1]
        assert proc.poll() is None, "must still be waiting"
        add_host(hosts, "job-1.job.ns.svc", "127.0.1.2")
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert "all 2 peers resolve" in out


def test_fails_after_the_deadline_naming_only_the_unresolvable_peers(hosts: Path) -> None:
    add_host(hosts, "job-0.job.ns.svc", "127.0.1.1")

    proc = start_preflight(hosts, ["job-0.job.ns.svc", "job-1.job.ns.svc", "job-2.job.ns.svc"], timeout=1.5)
    out, _ = proc.communicate(timeout=30)

    assert proc.returncode == 1
    [failure] = [line for line in out.splitlines() if "PeerDNSUnresolved" in line]
    assert "2/3 peers did not resolve within 2s" in failure
    assert "job-1.job.ns.svc" in failure and "job-2.job.ns.svc" in failure
    assert "job-0.job.ns.svc" not in failure


def test_sigterm_ends_a_waiting_preflight_at_once_with_143(hosts: Path) -> None:
    """In a pod the preflight is PID 1, which gets no signal it has no handler for: it handles SIGTERM itself,
    so a pod deleted while it waits is not kept for the grace period (a default death would read -15)."""
    proc = start_preflight(hosts, ["job-0.job.ns.svc"], timeout=300)
    try:
        line = proc.stdout.readline()
        while line and "waiting for 1/1 peers" not in line:
            line = proc.stdout.readline()
        assert line, "it never said it waits"
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 143


def test_peers_from_the_env_contract_are_the_rendered_dns_names() -> None:
    # The init container derives names from env; they must be the names the renderer publishes.
    job = stored_job(3, name="llm", namespace="team-a", uid="u1", image="img:1")
    env = {e["name"]: e["value"] for e in node_env(job, 1, 0) if "value" in e}

    assert peers_from_env(env) == [node_dns_name(job, i) for i in range(3)]


def test_an_in_place_gang_resolves_the_attempts_leader_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A spare given rank 0 is <job>-s0: <job>-0 resolved only while the pod it replaced lingered.
    job = stored_job(3, name="llm", namespace="team-a", uid="u1", image="img:1")
    for e in node_env(job, 1, 0):
        if "value" in e:
            monkeypatch.setenv(e["name"], e["value"])
    everyone = [node_dns_name(job, i) for i in range(3)]
    leader = tmp_path / "leader"
    leader.write_text("llm-s0.llm.team-a.svc\n")
    assert names_to_resolve(PreflightRequest(in_place_leader_file=leader)) == ["llm-s0.llm.team-a.svc"]
    ring = BandwidthRequest(min_gbps=1, size_bytes=1, timeout=1, rank=1, port=1, ring_id="r")
    assert names_to_resolve(PreflightRequest(in_place_leader_file=leader, collective=ring)) == everyone, \
        "the collective test dials every node"
    assert names_to_resolve(PreflightRequest()) == everyone, "not in place: every node's stable name"
    assert names_to_resolve(PreflightRequest(in_place_leader_file=tmp_path / "absent")) == everyone
    leader.write_text("")
    assert names_to_resolve(PreflightRequest(in_place_leader_file=leader)) == everyone, "no leader written yet"


def test_make_dir_creates_the_job_cache_dir_and_names_one_it_cannot_create(tmp_path: Path) -> None:
    job_dir = tmp_path / "cache" / "llm"
    ok = subprocess.run([sys.executable, "-m", "multinode.cli.main", "preflight", "--peers", "localhost",
                         "--timeout", "10", "--make-dir", str(job_dir)],
                        capture_output=True, text=True, timeout=30, check=False)
    assert ok.returncode == 0, ok.stderr
    assert job_dir.is_dir()

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    bad = subprocess.run([sys.executable, "-m", "multinode.cli.main", "preflight", "--peers", "localhost",
                          "--timeout", "10", "--make-dir", str(blocker / "llm")],
                         capture_output=True, text=True, timeout=30, check=False)
    assert bad.returncode == 1
    assert f"CacheUnavailable: cannot create {blocker / 'llm'}" in bad.stderr


def test_make_dir_mode_applies_to_a_dir_it_creates_and_leaves_an_existing_one_alone(tmp_path: Path) -> None:
    """The trainer may run as another user, root without capabilities included: the dir must be its to write."""
    made, kept = tmp_path / "cache" / "llm", tmp_path / "cache" / "old"
    kept.mkdir(parents=True, mode=0o700)
    assert make_dirs([str(made), str(kept)], 0o777) is None
    assert made.stat().st_mode & 0o777 == 0o777
    assert kept.stat().st_mode & 0o777 == 0o700


def _request(gpus: int) -> PreflightRequest:
    return PreflightRequest(peers=["localhost"], timeout=10, health=HealthRequest(gpus=gpus))


def test_a_failed_health_check_exits_1_before_any_peer_and_writes_its_verdict(tmp_path: Path, monkeypatch) -> None:
    log = tmp_path / "termination-log"
    log.write_text("")  # the kubelet creates the file in a pod
    monkeypatch.setattr(program, "TERMINATION_LOG", log)
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "fake-0")
    monkeypatch.setattr(program, "wait_for_peers", lambda *a, **k: pytest.fail("health comes first"))

    assert program.run(_request(gpus=2)) == 1
    verdict = parse_health_message(log.read_text())
    assert verdict is not None and (verdict.status, verdict.reason) == ("Failed", "GPUsNotVisible")
    assert verdict.message == "2 GPUs requested, fewer visible: 1 in NVIDIA_VISIBLE_DEVICES=fake-0"


def test_a_passed_health_check_is_written_once_the_peers_resolve(tmp_path: Path, monkeypatch) -> None:
    log = tmp_path / "termination-log"
    log.write_text("")
    monkeypatch.setattr(program, "TERMINATION_LOG", log)
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "fake-0,fake-1")

    assert program.run(_request(gpus=2)) == 0
    verdict = parse_health_message(log.read_text())
    assert verdict is not None and (verdict.status, verdict.message) == ("Passed", "2 GPUs visible")


def test_outside_a_pod_no_termination_log_is_created(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(program, "TERMINATION_LOG", tmp_path / "termination-log")
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "")
    assert program.run(_request(gpus=1)) == 1
    assert not (tmp_path / "termination-log").exists()
