"""LIST then WATCH one kind of object into a WatchIndex, in a thread of its own: our informer for pods and
nodes, instead of kopf's indices.

Why not kopf's: kopf holds every object of its initial LIST until all indices are filled, and each object's
turn wakes every object waiting (kopf `ToggleSet.drop_toggle` → `notify_all`, awaited in
`process_resource_event`): O(objects²) at every operator start, 501 304 wake-ups for 1000 nodes
(docs/benchmarks.md, "operator restart"). Kopf's per-event machinery (memories, loggers, causes, a Body
per event) was also most of the operator's CPU during a large start; pods and nodes are the objects of
which there are thousands. Here an event costs one JSON decode and the index's `keys_of`, both in this
thread, and a hand-over to the event loop, where the index is written and `on_event` is told. Hand-overs
are queued and the loop is woken once per batch, not once per event: in a burst of pod events each wake-up
(a write to the loop's self-pipe, a read and a callback there) cost more than the event's own work.

`synced` is set once the first LIST is in the index: the reconciler waits for it, so after a restart its
first reconcile already sees every pod that exists (nothing is created twice). A watch that ends is
resumed from the last resourceVersion seen; one the apiserver refuses as too old (410) or that fails
otherwise is followed by a fresh LIST, whose result replaces what the index holds, and `on_relisted` is
told (the events between the two were not seen: a caller re-reconciles what it has).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import orjson

from multinode.controller.kube import ApiError, KubeApi
from multinode.controller.kube_calls import HTTP_NOT_FOUND
from multinode.controller.watch_index import KeysOf, WatchIndex

log = logging.getLogger("multinode.controller")

LIST_PAGE = 500
WATCH_SECONDS = 300  # the server ends a watch after this; the read timeout is a little longer
READ_TIMEOUT_SECONDS = WATCH_SECONDS + 30
RETRY_SECONDS = (0.5, 1.0, 2.0, 5.0, 10.0)  # after consecutive failures; the last repeats
# A collection the apiserver does not serve (404: a CRD removed after the operator started, as when Kueue is
# uninstalled) holds no objects: the informer counts as listed, empty, and asks again this often.
NOT_SERVED_RETRY_SECONDS = 30.0
# Hand-overs run on the loop at most this many per callback, so a long batch never holds the loop for long.
HAND_OVER_BATCH = 256

# (type ADDED/MODIFIED/DELETED, or LISTED for the first LIST's objects; the object; its keys_of, which a
# DELETED object keeps for this call: the index has already dropped it). An object a re-list no longer
# returns is told as DELETED with only its uid in metadata. A LISTED object is told with its metadata and
# spec only (its keys_of was filed from the whole object): the LIST's objects are held until the whole
# list is in, and the status is most of a node's. With 10 000 nodes held whole the operator peaked at
# 287 MB; without their status and managedFields, 133 MB (docs/benchmarks.md, "Huge jobs").
OnEvent = Callable[[str, dict, dict], None]


def without_managed_fields(obj: dict) -> dict:
    """`obj` less metadata.managedFields (which manager wrote which field): nothing the operator reads, and
    about half of a node's JSON; dropped as each object is decoded, before it is filed or held."""
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


class Informer:
    def __init__(self, kube: KubeApi, path: str, index: WatchIndex, keys_of: KeysOf, *,
                 label_selector: str | None = None, on_event: OnEvent | None = None,
                 on_relisted: Callable[[], None] | None = None):
        self.kube, self.path, self.index, self.keys_of = kube, path, index, keys_of
        self.label_selector = label_selector
        self.on_event = on_event or (lambda kind, obj, entries: None)
        self.on_relisted = on_relisted or (lambda: None)
        self.synced = asyncio.Event()
        self._uids: set[str] = set()  # the objects this informer filed (several may share one index)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._handed: deque[tuple[Callable[..., None], tuple]] = deque()
        self._handed_lock = threading.Lock()
        self._drain_scheduled = False  # under _handed_lock: a _drain is due on the loop

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name=f"informer {self.path}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """The thread ends at its next event or bookmark (it is a daemon: it never holds the process up)."""
        self._stopping.set()

    def forget(self) -> None:
        """Stop, and take what this informer filed out of the index (its namespace is gone). On the loop;
        events the thread hands over after this are dropped."""
        self.stop()
        self.index.retain(list(self._uids), set())
        self._uids = set()

    def _query(self, **params: Any) -> str:
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        return f"{self.path}?{urlencode(params)}"

    def _run(self) -> None:
        failures, version = 0, None
        while not self._stopping.is_set():
            try:
                if version is None:
                    version = self._list()
                version = self._watch(version)
                failures = 0
            except ApiError as e:
                if e.status != HTTP_NOT_FOUND:
                    failures = self._failed(e, failures)
                else:
                    # Not served: nothing of it exists, so it is listed (empty); nothing waits on it for ever.
                    log.warning("%s is not served (404); holding none of it, asking again in %.0fs", self.path,
                                NOT_SERVED_RETRY_SECONDS)
                    self._hand_over(self._apply_list, {}, {})
                    self._stopping.wait(NOT_SERVED_RETRY_SECONDS)
                version = None
            except Exception as e:  # noqa: BLE001 - the thread must outlive any one failure, or the operator
                # would stop seeing pods for good; an ApiError is expected, anything else is a bug (logged with
                # its traceback)
                failures = self._failed(e, failures)
                version = None

    def _failed(self, e: Exception, failures: int) -> int:
        """Say so, wait the backoff; the new count of failures in a row."""
        delay = RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)]
        log.log(logging.WARNING if isinstance(e, ApiError) else logging.ERROR,
                "watch of %s failed (%d in a row), listing again in %.1fs: %s", self.path, failures + 1, delay,
                e, exc_info=not isinstance(e, ApiError))
        self._stopping.wait(delay)
        return failures + 1

    def _list(self) -> str:
        """LIST every page into one snapshot and hand it to the loop; its resourceVersion."""
        entries: dict[str, dict] = {}
        objects: dict[str, dict] = {}
        cont = None
        while True:
            page = self.kube.list_sync(self._query(limit=LIST_PAGE, **({"continue": cont} if cont else {})))
            for obj in page.get("items") or ():
                uid = without_managed_fields(obj)["metadata"]["uid"]
                entries[uid] = self.keys_of(obj)
                objects[uid] = {"metadata": obj["metadata"], "spec": obj.get("spec") or {}}
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                break
        version = str((page.get("metadata") or {}).get("resourceVersion") or "")
        self._hand_over(self._apply_list, entries, objects)
        log.info("listed %d objects of %s%s at resourceVersion %s", len(objects), self.path,
                 f" ({self.label_selector})" if self.label_selector else "", version)
        return version

    def _watch(self, version: str) -> str | None:
        """Follow the watch from `version`; the last version seen when the server ends it, None when it
        says the version is too old (then the caller lists again)."""
        query = self._query(watch=1, resourceVersion=version, allowWatchBookmarks="true",
                            timeoutSeconds=WATCH_SECONDS)
        for line in self.kube.watch_lines(query, READ_TIMEOUT_SECONDS):
            if self._stopping.is_set():
                return version
            event = orjson.loads(line)
            kind, obj = event.get("type"), without_managed_fields(event.get("object") or {})
            if kind == "ERROR":  # 410 Gone (expired), or another failure: list again
                log.info("watch of %s ended: %s", self.path, obj.get("message"))
                return None
            version = (obj.get("metadata") or {}).get("resourceVersion") or version
            if kind == "BOOKMARK":
                continue
            self._hand_over(self._apply_event, kind, obj, self.keys_of(obj))
        return version

    def _hand_over(self, fn: Callable[..., None], *args: Any) -> None:
        """Queue `fn(*args)` for the loop, in order; wake the loop only when no drain is due already."""
        assert self._loop is not None
        with self._handed_lock:
            self._handed.append((fn, args))
            if self._drain_scheduled:
                return
            self._drain_scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: the operator is exiting
            self._stopping.set()

    # On the event loop:

    def _drain(self) -> None:
        """Run up to HAND_OVER_BATCH queued hand-overs; if more wait, run again after the loop's other work."""
        for _ in range(HAND_OVER_BATCH):
            with self._handed_lock:
                if not self._handed:
                    self._drain_scheduled = False
                    return
                fn, args = self._handed.popleft()
            try:
                fn(*args)
            except Exception:  # as the loop would log a failed callback; the rest still run
                log.exception("handing an event of %s to the loop failed", self.path)
        assert self._loop is not None
        self._loop.call_soon(self._drain)

    def _apply_list(self, entries: dict[str, dict], objects: dict[str, dict]) -> None:
        if self._stopping.is_set():
            return
        relisted = self.synced.is_set()
        gone = {uid: self.index.entries_of(uid) for uid in self._uids if uid not in entries}
        self.index.retain(list(gone), set())
        for uid, filed in entries.items():
            self.index.put(uid, filed)
        self._uids = set(entries)
        if not relisted:
            for uid, obj in objects.items():
                self.on_event("LISTED", obj, entries[uid])
            self.synced.set()
        else:
            # Deleted while not watched: only their uid and what they were filed as are known.
            for uid, filed in gone.items():
                self.on_event("DELETED", {"metadata": {"uid": uid}}, filed)
            self.on_relisted()

    def _apply_event(self, kind: str, obj: dict, entries: dict) -> None:
        if self._stopping.is_set():
            return
        uid = (obj.get("metadata") or {}).get("uid") or ""
        if kind == "DELETED":
            self.index.remove(uid)
            self._uids.discard(uid)
        else:
            self.index.put(uid, entries)
            self._uids.add(uid)
        self.on_event(kind, obj, entries)


async def wait_synced(informers: list[Informer], log_every: float = 10.0) -> None:
    """Until every informer has its first LIST in its index; says which it still waits for, now and then."""
    started = time.monotonic()
    for informer in informers:
        while not informer.synced.is_set():
            try:
                await asyncio.wait_for(informer.synced.wait(), timeout=log_every)
            except TimeoutError:
                log.warning("still listing %s after %.0fs", informer.path, time.monotonic() - started)
