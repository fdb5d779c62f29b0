"""A randomized writer of checkpoints against a running Mirror: the "nothing lost, nothing torn" check.

One run: a writer thread, driven by a seeded RNG, saves checkpoints in the layouts whose completeness rule
is exact (COMPLETE marker, DCP `.metadata`, rank-local DCP with the world size, Megatron's tracker, Orbax's
tmp-dir rename, NeMo's `-unfinished` marker) and, at random points, rewrites them in place, appends a file,
renames them, deletes them, and crashes (stops mid-save, mid-file even, leaving partial state that a later
save retries). Meanwhile the calling thread runs `Mirror.sync_once()` passes; after every pass, every
published checkpoint must verify (`verify_mirrored(full=True)`) and hold exactly one complete state the
writer produced for that name. The writer records each state (content hashes, read back from disk)
just before the step that completes it, so nothing published can be complete without a record.

Layouts whose rule is a heuristic are left out on purpose: DeepSpeed and HF Trainer (settle rule: a save
that crashed after its marker looks complete once it stops changing, by design).

Used by tests/unit/checkpoints/test_mirror_chaos.py (a few seeds) and tools/bench/mirror_chaos.py (hundreds).
"""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from multinode.checkpoints import CorruptCheckpoint, Mirror, verify_mirrored
from multinode.checkpoints.manifest import read_manifest
from multinode.checkpoints.hashing import DEFAULT_HASH, new_hash
from multinode.checkpoints.names import is_temporary_file, parse_step


def content_digest(data: bytes) -> str:
    h = new_hash(DEFAULT_HASH)
    h.update(data)
    return h.hexdigest()


State = dict[str, str]   # relative path -> content digest, with the mirror's hash (what manifests record)
WORLD_SIZE = 3
MEGATRON_TRACKER = "latest_checkpointed_iteration.txt"


class Crash(Exception):
    """The writer "dies" here: whatever it wrote so far stays as it is."""


def disk_state(root: Path) -> State:
    """What the mirror would publish of `root` now: every file but temporary ones, by content."""
    state = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            if not is_temporary_file(name):
                path = Path(dirpath) / name
                state[path.relative_to(root).as_posix()] = content_digest(path.read_bytes())
    return state


def pickled_names(names: list[str]) -> bytes:
    """DCP .metadata as the mirror reads it: the shard names appear verbatim (it never unpickles)."""
    return b"\x80\x04\x95" + b"".join(b"\x8c" + bytes([len(n)]) + n.encode() + b"\x94" for n in names) + b"."


@dataclass
class Writer:
    rng: random.Random
    source: Path
    crash_p: float = 0.08
    # Reopen files with O_TRUNC and delete with a plain rmtree, as most trainers do. Both open a window
    # the mirror cannot see into (docs/checkpoints.md, "Not handled"): off for the seeds of `make test`,
    # which then write through a temporary name and delete by renaming aside first.
    open_windows: bool = True
    states: dict[str, list[State]] = field(default_factory=dict)    # every complete state, per name
    complete: dict[str, State] = field(default_factory=dict)        # names complete now (untouched since)
    layout_of: dict[str, str] = field(default_factory=dict)
    crashed: set[str] = field(default_factory=set)
    counts: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    step: int = 0
    tracker: int = 0   # the iteration Megatron's tracker names

    # -- primitives --------------------------------------------------------------------------------------
    def pause(self) -> None:
        time.sleep(self.rng.random() * 0.002)   # pacing, so that passes interleave with the writes

    def point(self) -> None:
        """A point where the writer may crash."""
        self.pause()
        if self.rng.random() < self.crash_p:
            raise Crash()

    def write(self, path: Path, data: bytes) -> None:
        """Written in two halves: a crash may leave a file half-written, as a killed save does."""
        path.parent.mkdir(parents=True, exist_ok=True)
        target = path if self.open_windows else path.with_name(path.name + ".tmp")
        with open(target, "wb") as f:
            f.write(data[: len(data) // 2])
            f.flush()
            self.point()
            f.write(data[len(data) // 2:])
        if target != path:
            os.replace(target, path)

    def blob(self) -> bytes:
        return self.rng.randbytes(self.rng.randint(1, 6) * 1024)

    def commit(self, name: str, state: State, action: Callable[[], object]) -> None:
        """Record `state` as complete for `name`, then do the one step that makes it complete."""
        with self.lock:
            self.states.setdefault(name, []).append(state)
        action()
        self.complete[name] = state
        self.crashed.discard(name)

    def touching(self, name: str) -> None:
        self.complete.pop(name, None)

    def wait_past(self, ckpt: Path) -> None:
        """Until the filesystem's clock is past every mtime in `ckpt`, before a save rewrites it: a file
        rewritten in the timestamp tick of the save before has the same mtime, and no mtime rule can see
        that rewrite (real saves are seconds apart; docs/checkpoints.md, "Rewritten in place")."""
        probe = self.source.parent / ".clock-probe"
        floor = max((p.stat().st_mtime_ns for p in ckpt.rglob("*")), default=0) if ckpt.exists() else 0
        while True:
            probe.write_bytes(b"")
            if probe.stat().st_mtime_ns > floor:
                return

    # -- layouts: each save may be called again on a directory a crashed save left ------------------------
    def save_marker(self, name: str, extra: bool = False) -> None:
        ckpt = self.source / name
        marker = ckpt / "COMPLETE"
        shards = sorted(p.name for p in ckpt.glob("rank_*.pt")) if extra else [f"rank_{r}.pt" for r in range(3)]
        for shard in shards + ([f"rank_extra{self.rng.randint(0, 99)}.pt"] if extra else []):
            self.write(ckpt / shard, self.blob())
        self.commit(name, {**disk_state(ckpt), "COMPLETE": content_digest(b"")},
                    lambda: marker.write_bytes(b""))

    def save_dcp(self, name: str, extra: bool = False) -> None:
        ckpt = self.source / name
        count = len(list(ckpt.glob("*.distcp"))) + 1 if extra else 3
        shards = [f"__{r}_0.distcp" for r in range(count)]
        for shard in shards:
            self.write(ckpt / shard, self.blob())
        self.write(ckpt / ".metadata.tmp", pickled_names(shards))
        body = (ckpt / ".metadata.tmp").read_bytes()
        self.commit(name, {**disk_state(ckpt), ".metadata": content_digest(body)},
                    lambda: os.replace(ckpt / ".metadata.tmp", ckpt / ".metadata"))

    def save_rank_local(self, name: str, extra: bool = False) -> None:
        """use_collectives=False: rank r writes its shard, then `__r.metadata`; the last rank completes it."""
        ckpt = self.source / name
        for rank in range(WORLD_SIZE):
            self.write(ckpt / f"__{rank}_0.distcp", self.blob())
            meta = pickled_names([f"__{rank}_0.distcp"])
            if rank < WORLD_SIZE - 1:
                self.write(ckpt / f"__{rank}.metadata", meta)
        self.commit(name, {**disk_state(ckpt), f"__{WORLD_SIZE - 1}.metadata": content_digest(meta)},
                    lambda: (ckpt / f"__{WORLD_SIZE - 1}.metadata").write_bytes(meta))

    def save_megatron(self, name: str, extra: bool = False) -> None:
        ckpt, iteration = self.source / name, int(name.removeprefix("iter_"))
        for tp in range(2):
            self.write(ckpt / f"mp_rank_{tp:02d}" / "model_optim_rng.pt", self.blob())

        def tracker() -> None:
            (self.source / MEGATRON_TRACKER).write_text(str(iteration))
            self.tracker = iteration
        self.commit(name, disk_state(ckpt), tracker)

    def save_orbax(self, name: str, extra: bool = False) -> None:
        for old in self.source.glob(f"{name}.orbax-checkpoint-tmp-*"):   # Orbax removes stale tmp dirs
            shutil.rmtree(old)
        tmp = self.source / f"{name}.orbax-checkpoint-tmp-{self.rng.randint(0, 10**9)}"
        for rel in ("_CHECKPOINT_METADATA", "default/_METADATA", "default/manifest.ocdbt", "default/d/0"):
            self.write(tmp / rel, self.blob())
        if (self.source / name).exists():   # overwrite: the old step goes first, then the new one is renamed in
            shutil.rmtree(self.source / name)
        self.commit(name, disk_state(tmp), lambda: os.rename(tmp, self.source / name))

    def save_nemo(self, name: str, extra: bool = False) -> None:
        ckpt, unfinished = self.source / name, self.source / f"{name}-unfinished"
        unfinished.write_bytes(b"")
        self.point()
        for rel in ["weights/__0_0.distcp", "weights/metadata.json"] + (["extra_state.pt"] if extra else []):
            self.write(ckpt / rel, self.blob())
        self.commit(name, disk_state(ckpt), unfinished.unlink)

    SAVES: ClassVar[dict[str, tuple[Callable[..., None], str]]] = {
        "marker": (save_marker, "checkpoint_{:07d}"), "dcp": (save_dcp, "step-{}"),
        "rank_local": (save_rank_local, "ranklocal-step-{}"), "megatron": (save_megatron, "iter_{:07d}"),
        "orbax": (save_orbax, "{}"), "nemo": (save_nemo, "model--step={}-last")}
    IN_PLACE = ("marker", "dcp", "nemo")   # layouts whose frameworks rewrite or extend a directory in place

    # -- operations --------------------------------------------------------------------------------------
    def save(self, name: str, extra: bool = False) -> None:
        self.touching(name)
        self.wait_past(self.source / name)
        try:
            self.SAVES[self.layout_of[name]][0](self, name, extra)
        except Crash:
            self.counts["crashes"] += 1
            self.crashed.add(name)

    def new_name(self, layout: str) -> str:
        self.step += self.rng.randint(1, 50)
        name = self.SAVES[layout][1].format(self.step)
        self.layout_of[name] = layout
        return name

    def one_op(self) -> None:
        megatron_crashed = [n for n in self.crashed if self.layout_of[n] == "megatron"]
        if megatron_crashed:   # Megatron resumes and saves that iteration again before any later one
            self.counts["retry"] += 1
            return self.save(megatron_crashed[0])
        in_place = sorted(n for n in self.complete if self.layout_of[n] in self.IN_PLACE)
        ops = {"save": 5, "retry": 3 if self.crashed else 0, "rewrite": 2 if in_place else 0,
               "append": 1 if in_place else 0, "rename": 1 if in_place else 0, "delete": 1 if self.complete else 0}
        op = self.rng.choices(list(ops), weights=list(ops.values()))[0]
        self.counts[op] += 1
        if op == "save":
            self.save(self.new_name(self.rng.choice(list(self.SAVES))))
        elif op == "retry":
            self.save(self.rng.choice(sorted(self.crashed)))
        elif op in ("rewrite", "append"):
            self.save(self.rng.choice(in_place), extra=op == "append")
        elif op == "rename":
            old = self.rng.choice(in_place)
            new = self.new_name(self.layout_of[old])
            state = self.complete.pop(old)
            self.commit(new, state, lambda: os.rename(self.source / old, self.source / new))
        else:
            name = self.rng.choice(sorted(self.complete))
            self.touching(name)
            doomed = self.source / name
            if not self.open_windows:
                doomed = doomed.rename(self.source / f".deleting-{name}")
            shutil.rmtree(doomed)


@dataclass
class RunResult:
    seed: int
    passes: int = 0
    checked: int = 0                 # published checkpoints verified, summed over passes
    violations: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)     # the writer's operations
    problems: Counter[str] = field(default_factory=Counter)   # the mirror's problems, by reason: races it met


def check_published(dest: Path, writer: Writer) -> tuple[int, list[str]]:
    """Every published checkpoint verifies and holds exactly one complete state the writer produced."""
    problems, checked = [], 0
    for path in sorted(p for p in dest.iterdir() if p.is_dir() and not p.name.startswith(".")):
        checked += 1
        try:
            verify_mirrored(path, full=True)
            _, files = read_manifest(path)
        except CorruptCheckpoint as e:
            problems.append(f"{path.name}: does not verify: {e}")
            continue
        published = {f.path: f.digest for f in files}
        with writer.lock:
            produced = list(writer.states.get(path.name, []))
        if published not in produced:
            problems.append(f"{path.name}: published content is no complete state the writer produced: "
                            f"{_short(published)}; the states: {'; '.join(_short(p) for p in produced)}")
    return checked, problems


def _short(state: State) -> str:
    return ", ".join(f"{rel}={digest[:6]}" for rel, digest in sorted(state.items()))


def run_once(seed: int, root: Path, *, ops: int = 40, keep: int | None = None,
             open_windows: bool = True) -> RunResult:
    """One run: the writer's `ops` operations against passes of a Mirror, then a final pass."""
    rng = random.Random(seed)
    source, dest = root / "cache" / "job", root / "checkpoints" / "job"
    source.mkdir(parents=True)
    writer = Writer(random.Random(rng.random()), source, open_windows=open_windows)
    mirror = Mirror(source, dest, keep=keep or rng.randint(2, 4), workers=2, settle_seconds=0,
                    world_size=WORLD_SIZE)
    result = RunResult(seed)
    done = threading.Event()
    failure: list[BaseException] = []

    def write_all() -> None:
        try:
            for _ in range(ops):
                writer.one_op()
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            failure.append(e)
        finally:
            done.set()

    thread = threading.Thread(target=write_all, name=f"chaos-writer-{seed}")
    thread.start()
    while True:
        last = done.is_set()
        report = mirror.sync_once(final=last)
        result.problems.update(p.reason for p in report.problems)
        result.passes += 1
        checked, problems = check_published(dest, writer)
        result.checked += checked
        result.violations += [f"seed {seed} pass {result.passes}: {p}" for p in problems]
        if last:
            break
    thread.join()
    if failure:
        raise failure[0]
    result.violations += [f"seed {seed}: {p}" for p in newest_not_published(writer, mirror, dest)]
    result.counts = writer.counts
    return result


def newest_not_published(writer: Writer, mirror: Mirror, dest: Path) -> list[str]:
    """Liveness after the final pass: the newest complete checkpoint is published, with its last state
    (unless `keep` newer ones are published: ones the writer deleted or renamed since)."""
    if not writer.complete:
        return []
    newest = max(writer.complete, key=lambda n: parse_step(n) or 0)
    published = {p.name for p in dest.iterdir() if p.is_dir() and not p.name.startswith(".")}
    if newest in published:
        _, files = read_manifest(dest / newest)
        if {f.path: f.digest for f in files} == writer.complete[newest]:
            return []
        return [f"{newest}: published, but not its last complete state"]
    newer = [n for n in published if (parse_step(n) or 0) > (parse_step(newest) or 0)]
    return [] if len(newer) >= mirror.keep else [f"{newest}: the newest complete checkpoint is not published"]
