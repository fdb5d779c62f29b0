"""Benchmark: the checkpoint mirror against `cp -r` + `sync` and `rsync -a` + `sync`, and what a re-mirror reads.

    .venv/bin/python -P tools/bench/mirror.py [--scales 1 6] [--small-files 2000] [--rounds 5]

For each scale, writes a job's cache of mixed layouts (tools/bench/mirror_trees.py: HF Trainer, DeepSpeed,
DCP and a checkpoint of 2,000 small files; scale 1 is about 550 MB, scale 6 about 3 GB) under the repo's
.cache/bench/ (same disk as the destinations). Then, `--rounds` times, runs the three in a rotating order
into fresh destinations, each timed until durable (`sync` after it) and started after a clean `sync`:
`Mirror.sync_once()`, `cp -r` and `rsync -a`. Reports the median throughput of each, their ratios (goal:
mirror/cp >= 0.9 at every size) and the CPU seconds each used. Then re-mirrors the largest tree's
checkpoints under new names, renamed (same files) and copied (new files, same bytes), and reports the
bytes copied and the bytes read as a share of the total (goal: < 1% read for the renamed one; a copy
must be read to be recognised, but is not copied). Prints a table and writes .cache/bench/mirror.json.
Installs rsync with apt-get when it is missing. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "bench"))
from mirror_trees import TEXT, make_tree, tree_files

from multinode.checkpoints import Mirror, verify_mirrored

MB = 1_000_000
TOOLS = ("mirror", "cp", "rsync")
STEP, NEW_STEP = "1000", "2000"


def ensure_rsync() -> None:
    """rsync is a peer of the benchmark: install it the way the machines here get packages."""
    if shutil.which("rsync"):
        return
    if os.geteuid() != 0:
        sys.exit("rsync is missing and only root can install it: apt-get install -y rsync")
    subprocess.run(["apt-get", "update", "-q"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", "-q", "rsync"], check=True, stdout=subprocess.DEVNULL)


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def timed(tool: str, job: Path, dest: Path, workers: int, expected: int) -> tuple[float, float]:
    """(wall seconds until durable, CPU seconds) of one copy of `job` to `dest`."""
    subprocess.run(["sync"], check=True)
    cpu_self, cpu_children = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    if tool == "cp":
        subprocess.run(["cp", "-r", str(job), str(dest)], check=True)
    elif tool == "rsync":
        subprocess.run(["rsync", "-a", f"{job}/", f"{dest}/"], check=True)
    else:
        report = Mirror(job, dest, keep=100, workers=workers, settle_seconds=0).sync_once(final=True)
        if report.problems or report.bytes_copied < expected:
            sys.exit(f"mirror pass failed: {report.problems}, copied {report.bytes_copied} of {expected}")
    subprocess.run(["sync"], check=True)
    seconds = time.monotonic() - started
    return seconds, _cpu(resource.RUSAGE_SELF) - cpu_self + _cpu(resource.RUSAGE_CHILDREN) - cpu_children


def bytes_read() -> int:
    """Bytes this process has read through read(2)/pread(2) so far, page cache hits included."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def _present(job: Path, how: str) -> list[str]:
    """The job's checkpoints again under new step names (renamed or copied); returns the new names."""
    names = sorted(p.name for p in job.iterdir() if p.is_dir())
    for name in names:
        new = job / name.replace(STEP, NEW_STEP)
        if how == "renamed":
            os.rename(job / name, new)
        else:
            shutil.copytree(job / name, new, copy_function=shutil.copyfile)
            os.utime(new / "COMPLETE")   # written last, as a writer marks a checkpoint done
    for rel, text in TEXT.items():
        (job / rel).write_bytes(text.replace(STEP.encode(), NEW_STEP.encode()))
    return names


def _restore(job: Path, how: str, names: list[str]) -> None:
    for name in names:
        new = job / name.replace(STEP, NEW_STEP)
        if how == "renamed":
            os.rename(new, job / name)
        else:
            shutil.rmtree(new)
    for rel, text in TEXT.items():
        (job / rel).write_bytes(text)


def remirror(job: Path, dest: Path, how: str, workers: int) -> dict:
    """Present the published checkpoints again under new names and mirror them: what is copied, what read?"""
    names = _present(job, how)
    try:
        read_before, started = bytes_read(), time.monotonic()
        report = Mirror(job, dest, keep=100, workers=workers, settle_seconds=0).sync_once(final=True)
        seconds, read = time.monotonic() - started, bytes_read() - read_before
        if report.problems or len(report.mirrored) != len(names):
            sys.exit(f"re-mirror ({how}) failed: {report.problems}, mirrored {report.mirrored}")
        for published in report.mirrored:
            verify_mirrored(published.path, full=False)
    finally:
        _restore(job, how, names)
    total = sum(c.total_bytes for c in report.mirrored)
    return {"how": how, "copied_bytes": report.bytes_copied, "linked_bytes": report.bytes_linked,
            "read_bytes": read, "total_bytes": total, "copied_pct": 100 * report.bytes_copied / total,
            "read_pct": 100 * read / total, "seconds": seconds}


def bench_tree(root: Path, scale: int, small_files: int, rounds: int, workers: int) -> tuple[dict, Path]:
    job = root / "cache" / f"scale-{scale}" / "job"
    total, files = make_tree(job, scale, small_files)
    runs = root / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    runs.mkdir()
    seconds: dict[str, list[float]] = {t: [] for t in TOOLS}
    cpu: dict[str, list[float]] = {t: [] for t in TOOLS}
    for i in range(rounds):
        order = TOOLS[i % len(TOOLS):] + TOOLS[:i % len(TOOLS)]   # rotate: none always goes first
        for tool in order:
            dest = runs / f"{tool}-{i}" / "job"
            dest.parent.mkdir()
            wall, used = timed(tool, job, dest, workers, total - sum(len(t) for t in TEXT.values()))
            seconds[tool].append(wall)
            cpu[tool].append(used)
            if i < rounds - 1 or tool != "mirror":
                shutil.rmtree(dest.parent)
        print(f"scale {scale}, round {i + 1}: " + ", ".join(f"{t} {total / MB / seconds[t][-1]:.0f} MB/s"
                                                           for t in TOOLS), flush=True)
    mb_s = {t: statistics.median(total / MB / s for s in seconds[t]) for t in TOOLS}
    result = {"scale": scale, "bytes": total, "files": files, "checkpoints": len(list(job.iterdir())) - len(TEXT),
              "seconds": seconds, "cpu_seconds": cpu, "median_mb_s": mb_s,
              "median_cpu_s": {t: statistics.median(cpu[t]) for t in TOOLS},
              "ratio_mirror_to": {t: mb_s["mirror"] / mb_s[t] for t in TOOLS if t != "mirror"}}
    return result, runs / f"mirror-{rounds - 1}" / "job"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 6],
                        help="tree sizes: 1 is about 550 MB, 6 about 3 GB (default 1 6)")
    parser.add_argument("--small-files", type=int, default=2000, help="files of the small-files checkpoint")
    parser.add_argument("--rounds", type=int, default=5, help="timed runs of each tool per scale (default 5)")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--dir", type=Path, default=REPO / ".cache" / "bench")
    parser.add_argument("--keep-trees", action="store_true", help="keep the source trees for the next run")
    args = parser.parse_args()
    ensure_rsync()

    root = args.dir
    root.mkdir(parents=True, exist_ok=True)
    # The sources, and at most two copies of the largest (the kept mirror and the one being timed).
    sizes = [sum(tree_files(s, args.small_files).values()) for s in args.scales]
    need = sum(sizes) + 2 * max(sizes) + (256 << 20)
    free = shutil.disk_usage(root).free
    if free < need:
        sys.exit(f"{root}: {free >> 20} MiB free, the benchmark needs {need >> 20} MiB; use smaller --scales")

    trees = []
    for scale in sorted(args.scales):
        if trees:
            shutil.rmtree(root / "runs")
        result, kept = bench_tree(root, scale, args.small_files, args.rounds, args.workers)
        trees.append(result)
    job = root / "cache" / f"scale-{max(args.scales)}" / "job"
    remirrors = [remirror(job, kept, how, args.workers) for how in ("renamed", "copied")]
    shutil.rmtree(root / "runs")
    if not args.keep_trees:
        shutil.rmtree(root / "cache")

    result = {"rounds": args.rounds, "workers": args.workers, "small_files": args.small_files, "trees": trees,
              "remirror": remirrors, "machine": f"{os.cpu_count()} cores",
              "goals": {"ratio_mirror_to_cp": ">= 0.9", "remirror_renamed_read_pct": "< 1"}}
    (root / "mirror.json").write_text(json.dumps(result, indent=2) + "\n")

    print(f"\n{args.rounds} rounds, median; durable (sync) after each")
    print(f"{'tree':>24}{'mirror MB/s':>13}{'cp MB/s':>10}{'rsync MB/s':>12}{'mirror/cp':>11}{'mirror/rsync':>14}"
          f"{'CPU s m/cp/rsync':>20}")
    for t in trees:
        m, c = t["median_mb_s"], t["median_cpu_s"]
        print(f"{t['bytes'] / MB:>10.0f} MB, {t['files']:>5} files"
              f"{m['mirror']:>13.0f}{m['cp']:>10.0f}{m['rsync']:>12.0f}"
              f"{t['ratio_mirror_to']['cp']:>11.2f}{t['ratio_mirror_to']['rsync']:>14.2f}"
              f"{c['mirror']:>8.2f}/{c['cp']:.2f}/{c['rsync']:.2f}")
    for r in remirrors:
        print(f"re-mirror, {r['how']}: {r['copied_pct']:.3f}% of the bytes copied, {r['read_pct']:.3f}% read, "
              f"{r['seconds']:.2f} s")
    print(f"\nwrote {root / 'mirror.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
