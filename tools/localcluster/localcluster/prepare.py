"""Build everything a local cluster needs, the slow parts side by side.

    python -m localcluster prepare [--images [--frameworks]] [--peers] [--release]

A cold build is mostly waiting: Go compiles on both cores, but resolving modules, pip downloading torch and
debootstrap fetching Debian are network and disk. Run one after the other they took 17 minutes of the
20-minute cold `make demo`; side by side, each waits while another computes. The lanes:

- `go-kubernetes`: Kubernetes with helm and kwok (one Go build, the largest), the cluster's registry and
  crane (which pushes to it), then the peers when asked for;
- `go-rest`: etcd, and the real nodes' containerd, runc, CNI plugins, CoreDNS, device plugin;
  then with --peers Flux's controllers and kstatus (the GitOps tests), with --release syft (`make release`'s
  SBOM; the test that runs it);
- `torch` (with --images): the trainer env (pip download and unpack of about 5 GB), then with --frameworks
  HF Transformers and DeepSpeed for the real-framework checkpoint tests;
- `images` (with --images): the real nodes' images (debootstrap, pylib).

Everything stays cached by version, as `build.sh`, `images` and `trainerenv` cache it, so a warm run
takes seconds. Each lane's output is printed with its name in front, and kept in full in
<cache>/logs/prepare-<lane>.log; a failed lane fails the whole command, naming its log.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from localcluster import binaries

# Debian packages come first: runc links libseccomp, the images need debootstrap. pause is a one-file gcc
# build the images need. Both take seconds.
FIRST = ("debs", "pause")
# The registry and crane follow Kubernetes: on a cold machine this lane finished before the other one.
KUBERNETES_LANE = ("kubernetes", "registry", "crane")
REST_LANE = ("etcd", "containerd", "runc", "cni", "coredns", "deviceplugin", "gangcrds")
PEERS = ("jobset", "kubeflow", "kueue")
# Flux's controllers and cli-utils' kstatus, for the GitOps tests: with the peers (other projects' controllers).
GITOPS = ("kstatus", "flux")
RELEASE_TOOLS = ("syft",)
GO_CHATTER = ("go: downloading ", "go: added ", "go: upgraded ", "go: finding ")
FAILURE_TAIL_LINES = 20


@dataclass(frozen=True)
class Lane:
    name: str
    command: list[str]


def lanes(images: bool, peers: bool, frameworks: bool = False, release: bool = False) -> list[Lane]:
    build = str(binaries.BUILD_SCRIPT)
    python = [sys.executable, "-m"]
    kubernetes = [*KUBERNETES_LANE, *(PEERS if peers else ())]
    rest = [*REST_LANE, *(GITOPS if peers else ()), *(RELEASE_TOOLS if release else ())]
    result = [Lane("go-kubernetes", [build, *kubernetes]), Lane("go-rest", [build, *rest])]
    if images:
        # Not `-m localcluster.trainerenv`: the package imports it first, and runpy warns about that. The
        # frameworks env is layered on torch's, so it follows it in the same lane.
        envs = ["trainerenv", *(["frameworksenv"] if frameworks else [])]
        code = "import sys; " + "; ".join(f"from localcluster import {m}; {m}.main() and sys.exit(1)" for m in envs)
        result += [Lane("torch", [sys.executable, "-c", code]), Lane("images", [*python, "localcluster", "images"])]
    return result


def run_lanes(todo: list[Lane], log_dir: Path) -> list[str]:
    """Run every lane at once, echoing their output with a prefix; the names of the lanes that failed."""
    log_dir.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    print_lock = threading.Lock()

    def run(lane: Lane) -> None:
        started = time.monotonic()
        with open(log_dir / f"prepare-{lane.name}.log", "w") as log:
            proc = subprocess.Popen(lane.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    bufsize=1)
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                if _worth_showing(line):
                    with print_lock:
                        print(f"[{lane.name}] {line}", end="", file=sys.stderr, flush=True)
            code = proc.wait()
        log_path = log_dir / f"prepare-{lane.name}.log"
        with print_lock:
            if code != 0:  # what was not shown may say why
                for line in log_path.read_text().splitlines()[-FAILURE_TAIL_LINES:]:
                    print(f"[{lane.name}] | {line}", file=sys.stderr)
            verdict = "done" if code == 0 else f"FAILED (exit {code}; log: {log_path})"
            print(f"[{lane.name}] {verdict} in {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
        if code != 0:
            failed.append(lane.name)

    threads = [threading.Thread(target=run, args=(lane,), name=lane.name) for lane in todo]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failed


def _worth_showing(line: str) -> bool:
    # Go prints a line per module it downloads or adds (hundreds); the build script's own lines say what
    # matters, and a failed lane shows the end of its log.
    return not line.startswith(GO_CHATTER)


def prepare(images: bool, peers: bool, frameworks: bool = False, release: bool = False) -> int:
    started = time.monotonic()
    log_dir = binaries.cache_dir() / "logs"
    if run_lanes([Lane("setup", [str(binaries.BUILD_SCRIPT), *FIRST])], log_dir):
        return 1
    failed = run_lanes(lanes(images, peers, frameworks, release), log_dir)
    if failed:
        print(f"prepare: {', '.join(failed)} failed", file=sys.stderr)
        return 1
    print(f"prepare: everything built or cached in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--images", action="store_true",
                        help="also the real nodes' images and torch for their trainers")
    parser.add_argument("--peers", action="store_true",
                        help="also JobSet and Kubeflow (the benchmark peers), Kueue (its integration test), Flux and "
                             "kstatus (the GitOps tests)")
    parser.add_argument("--release", action="store_true",
                        help="also syft, which writes the SBOM of `make release` (and of the test that runs it)")
    parser.add_argument("--frameworks", action="store_true",
                        help="with --images: also HF Transformers and DeepSpeed (the real-framework checkpoint tests)")
