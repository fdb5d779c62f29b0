"""Benchmark: the operator's memory while hang detection reads many chatty trainers' logs. No cluster needed.

    .venv/bin/python -P tools/bench/progress_memory.py [--ranks 1000] [--rate 1000000] [--line-bytes 4096]
        [--sweeps 2] [--tracemalloc]

Drives the real ProgressProbe (operator/multinode/controller/progress_probe.py) over one job with
spec.hangDetection and `--ranks` Running trainers, each logging `--rate` bytes a second in lines of
`--line-bytes` (every second a heartbeat line with the next step). The log source plays the apiserver's
pods/log: what the trainer wrote since `sinceTime` (whole seconds), the last `tailLines` lines of it, cut at
`limitBytes`; the first read of a rank, which has been logging long before, gets the full tail (4 MiB).
The probe's own loop starts the sweeps (a 10 s timeout: one every 2 s); the run stops after `--sweeps`.

Reports the process's peak RSS (VmHWM, which includes the ~60 MB the imports take) and, with
`--tracemalloc`, the peak of Python allocations during the sweeps (slower: every allocation is traced).
Run it once per version of the code to compare: `PYTHONPATH=<other checkout>/operator` in front runs that
checkout's probe (the script only uses what both have: the constructor, run(), progress()). Writes
.cache/bench/progress_memory.json. Not part of `make bench`: its figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
import tracemalloc
from datetime import datetime, timedelta, timezone
from pathlib import Path

from multinode.api.constants import PROGRESS_MARKER
from multinode.controller.progress_probe import LIMIT_BYTES, ProgressProbe
from multinode.reconcile.observe import ObservedPod

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / ".cache" / "bench" / "progress_memory.json"
JOB = ("bench", "chatty")
UID = "bench-uid"
STAMP_BYTES = len("2026-11-20T12:00:00.000000000Z ")
HANG_TIMEOUT_SECONDS = 10  # a sweep every 2 s (poll_period)


class ChattyTrainers:
    """Every rank has logged `rate` bytes a second in lines of `line_bytes` since long before the first read;
    one line a second is a heartbeat with the step that second. Serves pods/log reads as the kubelet does."""

    def __init__(self, rate: int, line_bytes: int):
        self.lines_per_second = max(1, rate // line_bytes)
        self.payload = "x" * (line_bytes - STAMP_BYTES - 1)
        self.started = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=1)
        self.reads = 0
        self.bytes_served = 0

    async def read_log(self, namespace: str, pod: str, container: str, *, tail_lines: int, limit_bytes: int,
                       since_time: str | None = None) -> str:
        await asyncio.sleep(0)  # answered later, as over the network: the other reads start meanwhile
        now = datetime.now(timezone.utc)
        since = self.started if since_time is None else datetime.fromisoformat(since_time.replace("Z", "+00:00"))
        seconds = max(0, int((now - since).total_seconds()))
        count = min(tail_lines, seconds * self.lines_per_second)
        first = seconds * self.lines_per_second - count  # the tail: the newest `count` lines
        rows, size = [], 0
        for n in range(first, first + count):
            second, within = divmod(n, self.lines_per_second)
            stamp = (since + timedelta(seconds=second, microseconds=within)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            text = f"{PROGRESS_MARKER} step={int((since - self.started).total_seconds()) + second}" if within == 0 \
                else self.payload
            row = f"{stamp} {text}\n"
            if size + len(row) > limit_bytes:
                break  # limitBytes ends the answer: the newest lines are lost
            rows.append(row)
            size += len(row)
        self.reads += 1
        self.bytes_served += size
        return "".join(rows)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def measure(ranks: int, rate: int, line_bytes: int, sweeps: int) -> dict:
    source = ChattyTrainers(rate, line_bytes)
    job = {"metadata": {"name": JOB[1], "namespace": JOB[0], "uid": UID},
           "spec": {"hangDetection": {"timeoutSeconds": HANG_TIMEOUT_SECONDS}},
           "status": {"attempt": 0, "phase": "Running"}}
    # The pods are the job's own (the probe reads only those); a version of the code from before pods were
    # matched to jobs by owner has no such field.
    owned = {"owner_uid": UID} if "owner_uid" in ObservedPod.__dataclass_fields__ else {}
    pods = [ObservedPod(name=f"{JOB[1]}-{i}-a0", job_name=JOB[1], index=i, attempt=0, phase="Running",
                        node=f"node-{i}", ready=True, started_at="2026-11-20T11:00:00Z", **owned)
            for i in range(ranks)]
    done: list[float] = []
    finished = asyncio.Event()

    def swept(key: tuple[str, str]) -> None:
        done.append(time.monotonic())
        if len(done) >= sweeps:
            finished.set()

    probe = ProgressProbe(source, {JOB: [job]}, {JOB: pods}, lambda raw: 0, swept)  # type: ignore[arg-type]
    started = time.monotonic()
    loop = asyncio.create_task(probe.run())
    await finished.wait()
    loop.cancel()
    await asyncio.gather(loop, return_exceptions=True)
    await probe.stop()
    progress = probe.progress(JOB)
    ranks = progress.ranks if progress is not None else ()
    steps = sorted({r.step for r in ranks if r.step is not None})
    return {"sweeps": len(done), "seconds": round(done[-1] - started, 1), "reads": source.reads,
            "mib_served": round(source.bytes_served / 2**20), "ranks_with_a_step": len(ranks),
            "steps_seen": [steps[0], steps[-1]] if steps else []}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=1_000_000, help="bytes a second each rank logs")
    parser.add_argument("--line-bytes", type=int, default=4096)
    parser.add_argument("--sweeps", type=int, default=2)
    parser.add_argument("--tracemalloc", action="store_true", help="also trace Python allocations (slower)")
    parser.add_argument("--label", default="", help="what this run measures (kept in the JSON)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    baseline = peak_rss_mib()
    if args.tracemalloc:
        tracemalloc.start()
    result = asyncio.run(measure(args.ranks, args.rate, args.line_bytes, args.sweeps))
    traced = tracemalloc.get_traced_memory()[1] / 2**20 if args.tracemalloc else None
    result.update({"label": args.label, "ranks": args.ranks, "rate_bytes_per_s": args.rate,
                   "line_bytes": args.line_bytes, "limit_bytes": LIMIT_BYTES, "rss_before_mib": round(baseline),
                   "peak_rss_mib": round(peak_rss_mib()),
                   "tracemalloc_peak_mib": None if traced is None else round(traced, 1)})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
