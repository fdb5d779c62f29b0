"""How each framework marks a checkpoint complete (docs/checkpoints.md has the table).

Each rule looks at one checkpoint directory and returns `Evidence` (complete or not, and why), or None
when the directory is not of its layout. `auto` asks every rule: any negative evidence wins (a half-
written checkpoint that looks complete is worse than none), then any positive evidence makes it
complete; a directory no rule recognises is not complete. An explicit completion mode asks only its rule.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from multinode.checkpoints.names import METADATA_TMP, UNFINISHED_SUFFIX, parse_step
from multinode.checkpoints.rankfiles import deepspeed_rank_files, hf_rank_files
from multinode.checkpoints.reasons import NotReady, Refusal, RefusedEntry, ranks_text
from multinode.checkpoints.tree import open_regular, walk_files


class Completion(StrEnum):
    """How the mirror decides that a checkpoint directory is complete (docs/checkpoints.md)."""

    AUTO = "auto"
    MARKER = "marker"
    DCP = "dcp"
    MEGATRON = "megatron"
    DEEPSPEED = "deepspeed"
    HF = "hf"
    NEMO = "nemo"
    ORBAX = "orbax"


MEGATRON_TRACKER = "latest_checkpointed_iteration.txt"
DEEPSPEED_TRACKER = "latest"
_MEGATRON_DIR = re.compile(r"^iter_\d+$")
_DEEPSPEED_DIR = re.compile(r"^global_step\d+$")
_HF_DIR = re.compile(r"^checkpoint-\d+$")
_TORCHTITAN_DIR = re.compile(r"^step-\d+$")
_ORBAX_DIR = re.compile(r"^\d+$")
_NEMO_NAME = re.compile(r"step=\d+")
# DCP's .metadata is a pickle naming each shard's file; its names appear verbatim in the bytes.
_RANK_METADATA = re.compile(r"^__(\d+)\.metadata$")
_DISTCP_NAME = re.compile(rb"[A-Za-z0-9_.\-]{1,255}\.distcp(?![A-Za-z0-9_])")
# DCP's .metadata grows with tensors x shards (tens of MB for the largest models): read in chunks, at most this.
METADATA_MAX_BYTES = 1 << 30
_METADATA_CHUNK = 8 << 20
_NAME_OVERLAP = 1024   # > 2 x the longest name the pattern matches: none is cut between two chunks
_ORBAX_TOP_FILES = ("_CHECKPOINT_METADATA", "commit_success.txt")
_ORBAX_ITEM_FILES = ("_METADATA", "manifest.ocdbt", "_sharding", "checkpoint")


@dataclass(frozen=True)
class Evidence:
    complete: bool
    framework: str
    why: str
    reason: NotReady | None = None   # required when not complete: which of reasons.py's codes

    def __post_init__(self) -> None:
        if not self.complete and self.reason is None:
            raise ValueError(f"negative evidence needs a NotReady reason: {self.why}")


@dataclass
class SourceView:
    """What the rules may know about the source directory besides the checkpoint itself."""

    names: set[str]                      # the source's direct children
    megatron_tracker: str | None         # content of latest_checkpointed_iteration.txt
    deepspeed_tag: str | None            # the tag `latest` names
    settled: Callable[[str, Path], tuple[bool, str]]   # the settle rule for one checkpoint
    settle_seconds: float
    final: bool
    world_size: int | None = None        # the job's ranks (numNodes x numProcPerNode), when known
    source: str = ""                     # the source directory (the checkpoint directories' parent)


Rule = Callable[[str, Path, SourceView, bool], "Evidence | None"]


def _settle(framework: str, what: str, name: str, path: Path, src: SourceView) -> Evidence:
    if src.final:
        return Evidence(True, framework, f"{what}; the job has ended")
    ok, words = src.settled(name, path)
    if ok:
        return Evidence(True, framework, f"{what}; files unchanged for >= {src.settle_seconds:g}s ({words})")
    return Evidence(False, framework, f"{what}; waiting until its files are unchanged for "
                                      f"{src.settle_seconds:g}s ({words})", NotReady.NOT_SETTLED)


def rewritten_after(marker: Path, root: Path) -> str | None:
    """A file under `root` changed after `marker` was written: a save is rewriting the checkpoint in place
    (DCP's default overwrite=True, a retried save). The old marker still names every file, so without
    this the mix of old and new files would look complete (and load, with the wrong weights)."""
    written = os.stat(marker).st_mtime_ns
    newer = [f.rel for f in walk_files(root) if f.mtime_ns > written and f.path != marker]
    if not newer:
        return None
    return f"{newer[0]} is newer than {marker.name}: a save is rewriting this checkpoint"


def marker_rule(name: str, path: Path, src: SourceView, explicit: bool) -> Evidence | None:
    marker = path / "COMPLETE"
    if marker.exists():
        rewriting = rewritten_after(marker, path)
        if rewriting:
            return Evidence(False, "marker", rewriting, NotReady.BEING_REWRITTEN)
        return Evidence(True, "marker", "COMPLETE marker")
    return Evidence(False, "marker", "no COMPLETE marker", NotReady.WAITING_FOR_MARKER) if explicit else None


def dcp_rule(name: str, path: Path, src: SourceView, explicit: bool) -> Evidence | None:
    framework = "torchtitan" if _TORCHTITAN_DIR.match(name) else "dcp"
    metadata = path / ".metadata"
    if metadata.is_file():
        present = set(os.listdir(path))
        missing = [n for n in sorted(_expected_shards(metadata)) if n not in present and n[1:] not in present]
        if missing:
            return Evidence(False, framework, f"DCP .metadata names {len(missing)} shard file(s) that are not "
                                              f"there, e.g. {missing[0]}", NotReady.WAITING_FOR_RANK_FILES)
        rewriting = rewritten_after(metadata, path)
        if rewriting:
            return Evidence(False, framework, rewriting, NotReady.BEING_REWRITTEN)
        return Evidence(True, framework, "DCP .metadata")
    if (path / METADATA_TMP).exists():
        return Evidence(False, framework, "DCP save in progress (.metadata.tmp, no .metadata yet)",
                        NotReady.SAVE_IN_PROGRESS)
    ranks = {int(m.group(1)): path / m.group(0) for n in os.listdir(path) if (m := _RANK_METADATA.match(n))}
    if ranks:
        return _rank_local_dcp(framework, path, ranks, src.world_size)
    return Evidence(False, framework, "no DCP .metadata", NotReady.WAITING_FOR_MARKER) if explicit else None


def _rank_local_dcp(framework: str, path: Path, ranks: dict[int, Path], world_size: int | None) -> Evidence:
    """DCP saved with use_collectives=False: each rank writes `__<rank>.metadata` for its own shards and no
    one writes `.metadata` (torch loads it all the same). Complete once every rank of the job wrote its
    metadata after its shards, which only the job's world size can tell."""
    if world_size is None:
        return Evidence(False, framework, f"rank-local DCP metadata ({ranks[min(ranks)].name}) and no .metadata "
                                          "(use_collectives=False): without the job's world size the mirror "
                                          "cannot tell whether every rank saved",
                        NotReady.RANK_LOCAL_METADATA_WITHOUT_WORLD_SIZE)
    missing = [r for r in range(world_size) if r not in ranks]
    if missing:
        return Evidence(False, framework, f"rank-local DCP metadata: waiting for {len(missing)} of {world_size} "
                                          f"ranks (rank {ranks_text(missing)}), e.g. __{missing[0]}.metadata",
                        NotReady.WAITING_FOR_RANK_FILES)
    present = set(os.listdir(path))
    for rank in range(world_size):
        absent = [n for n in sorted(_expected_shards(ranks[rank])) if n not in present and n[1:] not in present]
        if absent:
            return Evidence(False, framework, f"{ranks[rank].name} names shard {absent[0]}, which is not there",
                            NotReady.WAITING_FOR_RANK_FILES)
        written = os.stat(ranks[rank]).st_mtime_ns
        newer = sorted(n for n in present if n.startswith(f"__{rank}_") and os.stat(path / n).st_mtime_ns > written)
        if newer:
            return Evidence(False, framework, f"{newer[0]} is newer than {ranks[rank].name}: a save is rewriting "
                                              "this checkpoint", NotReady.BEING_REWRITTEN)
    return Evidence(True, framework, f"rank-local DCP metadata of all {world_size} ranks")


def _expected_shards(metadata: Path) -> set[str]:
    """The .distcp file names the DCP metadata refers to (read as bytes, in chunks: never unpickled, never
    more than METADATA_MAX_BYTES; a larger file refuses the checkpoint)."""
    names: set[str] = set()
    fd, st = open_regular(metadata)
    try:
        tail, offset = b"", 0
        while True:
            if offset > METADATA_MAX_BYTES or st.st_size > METADATA_MAX_BYTES:
                raise RefusedEntry(Refusal.METADATA_TOO_LARGE, f"{metadata.name} has {max(offset, st.st_size)} "
                                                               f"bytes, more than the {METADATA_MAX_BYTES} the "
                                                               "mirror reads")
            chunk = os.pread(fd, _METADATA_CHUNK, offset)
            offset += len(chunk)
            data, last = tail + chunk, not chunk
            for match in _DISTCP_NAME.finditer(data):
                # One that ends in the tail was taken with the chunk before; one that ends where the data
                # ends may go on in the next chunk, so it waits for it.
                if match.end() >= len(tail) and (last or match.end() < len(data)):
                    # A one-byte pickle length prefix may be printable and glued on: the rule accepts n or n[1:].
                    names.add(match.group(0).decode("ascii"))
            if last:
                return names
            tail = data[-_NAME_OVERLAP:]
    finally:
        os.close(fd)


def megatron_rule(name: str, path: Path, src: SourceView, explicit: bool) -> Evidence | None:
    if not (_MEGATRON_DIR.match(name) or name == "release"):
        return Evidence(False, "megatron", "not a Megatron iter_* directory",
                        NotReady.LAYOUT_MISMATCH) if explicit else None
    tracker = src.megatron_tracker
    if tracker is None:
        return Evidence(False, "megatron", f"{MEGATRON_TRACKER} not written yet", NotReady.WAITING_FOR_TRACKER)
    if tracker == "release" or name == "release":
        done = tracker == name
        return Evidence(done, "megatron", f"{MEGATRON_TRACKER} names {tracker!r}",
                        None if done else NotReady.WAITING_FOR_TRACKER)
    if not tracker.isdigit():
        return Evidence(False, "megatron", f"{MEGATRON_TRACKER} is unreadable: {tracker[:40]!r}",
                        NotReady.TRACKER_UNREADABLE)
    newest, step = int(tracker), parse_step(name)
    if step is not None and step <= newest:
        return Evidence(True, "megatron", f"{MEGATRON_TRACKER} names iteration {newest}")
    return Evidence(False, "megatron", f"newer than iteration {newest}, which {MEGATRON_TRACKER} names",
                    NotReady.WAITING_FOR_TRACKER)


def deepspeed_rule(name: str, path: Path, src: SourceView, explicit: bool) -> Evidence | None:
    tag = src.deepspeed_tag
    if not (_DEEPSPEED_DIR.match(name) or name == tag):
        return Evidence(False, "deepspeed", "not a DeepSpeed global_step* directory",
                        NotReady.LAYOUT_MISMATCH) if explicit else None
    if tag is None:
        return Evidence(False, "deepspeed", "no `latest` file names a tag yet", NotReady.WAITING_FOR_TRACKER)
    if name == tag:
        # `latest` is written before the save's last barrier: other ranks may still be writing.
        waiting = deepspeed_rank_files(path, src.world_size) if src.world_size else None
        if waiting:
            return Evidence(False, "deepspeed", f"`latest` names it; {waiting}", NotReady.WAITING_FOR_RANK_FILES)
        return _settle("deepspeed", "`latest` names it", name, path, src)
    step, tag_step = parse_step(name), parse_step(tag)
    if step is not None and tag_step is not None and step < tag_step:
        return Evidence(True, "deepspeed", f"older than {tag}, which `latest` names")
    return Evidence(False, "deepspeed", f"`latest` names {tag}, not this one", NotReady.WAITING_FOR_TRACKER)


def hf_rule(name: str, path: Path, src: SourceView, explicit: bool) -> Evidence | None:
    if not _HF_DIR.match(name):
        return Evidence(False, "hf", "not an HF checkpoint-<step> directory",
                        NotReady.LAYOUT_MISMATCH) if explicit else None
    if not (path / "trainer_state.json").is_file():
        # Without it the directory may be another layout under an HF-like name; auto then needs other evidence.
        return Evidence(False, "hf", "trainer_state.json not written yet",
                        NotReady.WAITING_FOR_MARKER) if explicit else None
    # Rank 0 writes trainer_state.json with no barrier after the other ranks' files.
    waiting = hf_rank_files(path, src.world_size) if src.world_size else None
    if waiting:
        return Evidence(False, "hf", f"trainer_state.json written; {waiting}", NotReady.WAITING_FOR_RANK_FILES)
    return _settle("hf", "trainer_state.json written", name, path, src)


def nemo_rule(name: str, path: Path, src: SourceView, explicit: bool) -> Evidence | None:
    # An -unfinished marker is checked for every mode (unfinished_marker); here it is known to be absent.
    if explicit or _NEMO_NAME.search(name):
        return Evidence(True, "nemo", "no -unfinished marker")
    return None


def orbax_rule(name: str, path: Path, src: SourceView, explicit: bool) -> Evidence | None:
    if not _ORBAX_DIR.match(name):
        return Evidence(False, "orbax", "not an Orbax <step> directory", NotReady.LAYOUT_MISMATCH) if explicit else None
    # Orbax commits by renaming <step>.orbax-checkpoint-tmp-<ts> to <step>. In auto mode a bare number
    # counts only with Orbax's own files in it: other code may write into a numbered directory in place.
    if explicit or _looks_like_orbax(path):
        return Evidence(True, "orbax", "Orbax committed name (no tmp suffix)")
    return None


def _looks_like_orbax(path: Path) -> bool:
    if any((path / f).exists() for f in _ORBAX_TOP_FILES):
        return True
    with os.scandir(path) as entries:
        items = [e.path for e in entries if e.is_dir()]
    return any(os.path.exists(os.path.join(item, f)) for item in items for f in _ORBAX_ITEM_FILES)


def unfinished_marker(name: str, path: Path, src: SourceView) -> str | None:
    """NeMo's `<ckpt>-unfinished` marker beside the directory or inside it: never take it while it exists."""
    if name + UNFINISHED_SUFFIX in src.names:
        return f"NeMo save in progress: {name}{UNFINISHED_SUFFIX} exists beside it"
    with os.scandir(path) as entries:
        inner = sorted(e.name for e in entries if e.name.endswith(UNFINISHED_SUFFIX))
    return f"save in progress: {inner[0]} marker inside it" if inner else None


# auto asks the layout-specific rules first, so the framework it reports is the most specific one.
RULES: dict[Completion, Rule] = {
    Completion.MEGATRON: megatron_rule,
    Completion.DEEPSPEED: deepspeed_rule,
    Completion.HF: hf_rule,
    Completion.NEMO: nemo_rule,
    Completion.ORBAX: orbax_rule,
    Completion.DCP: dcp_rule,
    Completion.MARKER: marker_rule,
}


def judge(name: str, path: Path, src: SourceView, completion: Completion) -> Evidence:
    """Whether the checkpoint directory `path` (named `name`) is complete under `completion`."""
    marker = unfinished_marker(name, path, src)
    if marker:
        return Evidence(False, "nemo", marker, NotReady.SAVE_IN_PROGRESS)
    if completion != Completion.AUTO:
        found = RULES[completion](name, path, src, True)
        assert found is not None  # explicit rules always answer
        return found
    evidence = [e for rule in RULES.values() if (e := rule(name, path, src, False)) is not None]
    against = [e for e in evidence if not e.complete]
    if against:
        return against[0]
    if evidence:
        return Evidence(True, evidence[0].framework, "; ".join(e.why for e in evidence))
    return Evidence(False, "", "no completion evidence of any known layout", NotReady.NO_COMPLETION_EVIDENCE)
