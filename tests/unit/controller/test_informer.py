"""The pod and node informer: LIST into the index, then WATCH from the list's resourceVersion, re-LIST
after a 410; against a fake of KubeApi's two blocking calls."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

from multinode.controller.informer import HAND_OVER_BATCH, Informer, wait_synced
from multinode.controller.watch_index import WatchIndex


def pod(uid: str, job: str, rv: str = "1") -> dict:
    return {"metadata": {"uid": uid, "name": f"p-{uid}", "namespace": "ns", "resourceVersion": rv,
                         "labels": {"job": job}}}


def by_job(obj: dict) -> dict:
    return {("ns", obj["metadata"]["labels"]["job"]): obj["metadata"]["name"]}


class FakeKube:
    """Serves scripted list pages (by continue token) and watch streams (one script per watch call); a
    watch whose script is used up waits until the test ends."""

    def __init__(self, lists: list[list[dict]], watches: list[list[dict]]):
        self.lists, self.watches = lists, watches
        self.list_calls: list[str] = []
        self.pages: list[dict] = []
        self.watch_calls: list[str] = []
        self.done = threading.Event()

    def list_sync(self, path: str) -> dict:
        self.list_calls.append(path)
        page = 1 if "continue=" in path else 0
        if page == 0:  # a new LIST: the next script, the last one repeating
            self.pages = self.lists[0] if len(self.lists) == 1 else self.lists.pop(0)
        pages = self.pages
        if len(pages) > 1 and page == 0:
            return {"metadata": {"continue": "next", "resourceVersion": "10"}, "items": [pages[0]]}
        return {"metadata": {"resourceVersion": "10"}, "items": pages[page:] if page else pages}

    def watch_lines(self, path: str, read_timeout: float) -> Iterator[bytes]:
        self.watch_calls.append(path)
        script = self.watches.pop(0) if self.watches else []
        for event in script:
            yield json.dumps(event).encode()
        if not script:
            self.done.wait()


async def until(predicate, what: str) -> None:
    async def poll() -> None:
        # The informer's thread hands events to the loop; there is nothing to await but their effect.
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    try:
        await asyncio.wait_for(poll(), timeout=10)
    except TimeoutError:
        raise AssertionError(f"never: {what}") from None


def run(kube: FakeKube, index: WatchIndex, events: list, relisted: list) -> tuple[Informer, asyncio.Task]:
    informer = Informer(kube, "/api/v1/namespaces/ns/pods", index, by_job, label_selector="job",  # type: ignore[arg-type]  # a fake KubeApi
                        on_event=lambda kind, obj, entries: events.append((kind, obj["metadata"]["uid"], entries)),
                        on_relisted=lambda: relisted.append(True))
    informer.start()
    return informer, asyncio.current_task()  # type: ignore[return-value]


def test_list_then_watch_from_its_version() -> None:
    async def main() -> None:
        kube = FakeKube([[pod("a", "j1"), pod("b", "j1")]],
                        [[{"type": "ADDED", "object": pod("c", "j2", "11")},
                          {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
                          {"type": "DELETED", "object": pod("a", "j1", "13")}]])
        index, events, relisted = WatchIndex(), [], []
        informer, _ = run(kube, index, events, relisted)
        await wait_synced([informer])
        assert [e[0] for e in events[:2]] == ["LISTED", "LISTED"]
        assert len(kube.list_calls) == 2 and "continue=next" in kube.list_calls[1]  # both pages
        await until(lambda: len(events) == 4, "the watch's events")
        assert sorted(index.get(("ns", "j1")) or ()) == ["p-b"]
        assert list(index.get(("ns", "j2")) or ()) == ["p-c"]
        assert events[3] == ("DELETED", "a", {("ns", "j1"): "p-a"})  # a deleted pod's entries still told
        assert "resourceVersion=10" in kube.watch_calls[0] and "labelSelector=job" in kube.watch_calls[0]
        await until(lambda: len(kube.watch_calls) == 2, "the next watch")
        assert "resourceVersion=13" in kube.watch_calls[1]  # resumed after the last version seen
        assert not relisted
        informer.stop()
        kube.done.set()
    asyncio.run(main())


def test_a_burst_of_events_reaches_the_loop_in_order_in_batches_and_one_failing_handler_stops_none() -> None:
    # The thread wakes the loop once per batch of hand-overs (HAND_OVER_BATCH at a time on the loop), not
    # once per event; an event whose handler raises is logged and the events after it still arrive.
    burst = [{"type": "ADDED", "object": pod(f"u{i}", f"j{i % 7}", str(11 + i))}
             for i in range(2 * HAND_OVER_BATCH + 3)]

    class GatedKube(FakeKube):
        """The watch's events come only once the test says go; `handed` is set once all were handed over."""
        go, handed = threading.Event(), threading.Event()

        def watch_lines(self, path: str, read_timeout: float) -> Iterator[bytes]:
            self.go.wait(10)
            for line in super().watch_lines(path, read_timeout):
                yield line
                if len(self.watch_calls) == 1 and line == json.dumps(burst[-1]).encode():
                    self.handed.set()  # the generator resumes only after the last line's hand-over

    async def main() -> None:
        kube = GatedKube([[]], [burst])
        index, events = WatchIndex(), []

        def on_event(kind: str, obj: dict, entries: dict) -> None:
            if obj["metadata"]["uid"] == "u5":
                raise RuntimeError("a handler's bug")
            events.append(obj["metadata"]["uid"])
        informer = Informer(kube, "/api/v1/namespaces/ns/pods", index, by_job,  # type: ignore[arg-type]  # a fake KubeApi
                            on_event=on_event)
        informer.start()
        await wait_synced([informer])
        loop, wakeups = asyncio.get_running_loop(), []
        threadsafe = loop.call_soon_threadsafe
        loop.call_soon_threadsafe = lambda *a: wakeups.append(a) or threadsafe(*a)  # type: ignore[method-assign]
        kube.go.set()
        assert kube.handed.wait(10)  # blocks the loop on purpose: the whole burst is queued before any drain
        await until(lambda: len(events) == len(burst) - 1, "every event but the failing one's")
        assert events == [e["object"]["metadata"]["uid"] for e in burst if e["object"]["metadata"]["uid"] != "u5"]
        assert "p-u5" in (index.get(("ns", "j5")) or ())  # filed before its handler failed
        assert len(wakeups) == 1  # one wake-up for the whole burst, drained in three turns of the loop
        informer.stop()
        kube.done.set()
    asyncio.run(main())


def test_a_410_lists_again_and_the_new_list_replaces_the_index() -> None:
    async def main() -> None:
        kube = FakeKube([[pod("a", "j1"), pod("b", "j1")], [pod("b", "j1"), pod("d", "j3")]],
                        [[{"type": "ERROR", "object": {"code": 410, "message": "too old"}}]])
        index, events, relisted = WatchIndex(), [], []
        informer, _ = run(kube, index, events, relisted)
        await until(lambda: relisted, "the re-list")
        assert sorted(index.get(("ns", "j1")) or ()) == ["p-b"]  # a is gone: missed while not watching
        assert list(index.get(("ns", "j3")) or ()) == ["p-d"]
        # ...and told as deleted, with what it was filed as (a job's deletion must reach the reconciler).
        assert ("DELETED", "a", {("ns", "j1"): "p-a"}) in events
        informer.stop()
        kube.done.set()
    asyncio.run(main())


def test_an_unexpected_failure_in_the_watch_lists_again_instead_of_ending_the_thread() -> None:
    class GarbledKube(FakeKube):
        def watch_lines(self, path: str, read_timeout: float) -> Iterator[bytes]:
            if not self.watch_calls:
                self.watch_calls.append(path)
                yield b"{not json"  # a bug or a proxy's garbage: not an ApiError
                return
            yield from super().watch_lines(path, read_timeout)

    async def main() -> None:
        kube = GarbledKube([[pod("a", "j1")], [pod("a", "j1"), pod("e", "j4")]], [])
        index, events, relisted = WatchIndex(), [], []
        informer, _ = run(kube, index, events, relisted)
        await until(lambda: relisted, "the re-list after the garbled line")
        assert list(index.get(("ns", "j4")) or ()) == ["p-e"]
        informer.stop()
        kube.done.set()
    asyncio.run(main())


def test_a_collection_not_served_counts_as_listed_and_empty_until_it_is_served_again(monkeypatch) -> None:
    # A CRD removed while the operator runs (Kueue uninstalled): its informer must not keep a namespace from
    # being planned for ever, and what it held is gone with the CRD.
    from multinode.controller import informer as informer_module
    from multinode.controller.kube import ApiError

    class UninstalledKube(FakeKube):
        """Serves one pod until `uninstall()`, which ends the watch (as a deleted CRD does) and 404s LISTs."""

        def __init__(self) -> None:
            super().__init__([[pod("a", "j1")]], [])
            self.served, self.uninstalled = True, threading.Event()

        def uninstall(self) -> None:
            self.served = False
            self.uninstalled.set()

        def reinstall(self) -> None:
            self.uninstalled.clear()
            self.served = True

        def list_sync(self, path: str) -> dict:
            if not self.served:
                self.list_calls.append(path)
                raise ApiError("list", 404, "Not Found", "the server could not find the requested resource")
            return super().list_sync(path)

        def watch_lines(self, path: str, read_timeout: float) -> Iterator[bytes]:
            # A watch lasts until the collection goes (whenever the watch began), or the test ends.
            while not self.uninstalled.wait(0.05):
                if self.done.is_set():
                    return
            yield json.dumps({"type": "ERROR", "object": {"code": 410, "message": "gone"}}).encode()

    monkeypatch.setattr(informer_module, "NOT_SERVED_RETRY_SECONDS", 0.05)

    async def main() -> None:
        kube = UninstalledKube()
        index, events, relisted = WatchIndex(), [], []
        informer, _ = run(kube, index, events, relisted)
        await until(lambda: informer.synced.is_set() and ("ns", "j1") in index, "the first list")
        kube.uninstall()  # the watch ends; the re-list meets the 404
        await until(lambda: relisted and ("ns", "j1") not in index, "the objects gone with the collection")
        assert informer.synced.is_set()
        calls = len(kube.list_calls)
        await until(lambda: len(kube.list_calls) >= calls + 2, "asked again, and again")
        kube.reinstall()
        await until(lambda: ("ns", "j1") in index, "listed again once served")
        informer.stop()
        kube.done.set()
    asyncio.run(main())


def test_watch_index_files_an_object_under_its_current_keys_only() -> None:
    index = WatchIndex()
    index.put("u1", {"a": 1, "b": 1})
    index.put("u2", {"a": 2})
    index.put("u1", {"c": 1})  # moved: no longer under a or b
    assert sorted(index.get("a") or ()) == [2] and "b" not in index and list(index["c"]) == [1]
    assert index.retain(["u1", "u2"], keep={"u2"}) == ["u1"]
    assert "c" not in index and len(index) == 1


def test_managed_fields_are_dropped_and_a_listed_object_is_told_without_its_status() -> None:
    """keys_of files the whole object; what is held until the list is in, and told, is metadata and spec."""
    def node(uid: str, rv: str) -> dict:
        return {"metadata": {"uid": uid, "name": f"n-{uid}", "resourceVersion": rv, "labels": {"job": "j"},
                             "managedFields": [{"manager": "kwok", "fieldsV1": {"f:status": {}}}]},
                "spec": {"podCIDR": "10.0.0.0/24"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}

    filed: list[dict] = []

    def keys_of(obj: dict) -> dict:
        filed.append(obj)
        return by_job(obj)

    async def main() -> None:
        kube = FakeKube([[node("a", "1")]], [[{"type": "MODIFIED", "object": node("a", "2")}]])
        told: list[tuple[str, dict]] = []
        informer = Informer(kube, "/api/v1/nodes", WatchIndex(), keys_of,  # type: ignore[arg-type]  # a fake KubeApi
                            on_event=lambda kind, obj, entries: told.append((kind, obj)))
        informer.start()
        await wait_synced([informer])
        await until(lambda: len(told) == 2, "the watch's event")
        informer.stop()
        kube.done.set()
        assert [kind for kind, _ in told] == ["LISTED", "MODIFIED"]
        assert set(told[0][1]) == {"metadata", "spec"} and told[0][1]["spec"] == {"podCIDR": "10.0.0.0/24"}
        assert "status" in told[1][1]
        assert all("managedFields" not in obj["metadata"] for _, obj in told)
        assert [obj["status"]["conditions"][0]["type"] for obj in filed] == ["Ready", "Ready"]
        assert all("managedFields" not in obj["metadata"] for obj in filed)
    asyncio.run(main())
