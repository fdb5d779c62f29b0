"""An in-memory index of watched objects, filled by informers (informer.py), read by the reconciler.

Read like a kopf index: `index.get(key)` is the collection of values filed under `key` (one per object),
or None; `key in index`. Each object files itself under any number of keys, by its uid, through the
`keys_of` function the index was made with (a pure function of the object: observe_pod, observe_node).
Only the event loop writes it (informers hand their events over to it), so no lock.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping
from typing import Any

KeysOf = Callable[[dict], dict[Hashable, Any]]  # an object → {key: value} (empty: not indexed)


class WatchIndex(Mapping[Hashable, Collection[Any]]):
    def __init__(self) -> None:
        self._values: dict[Hashable, dict[str, Any]] = {}  # key → {uid: value}
        self._keys: dict[str, tuple[Hashable, ...]] = {}  # uid → the keys it is filed under

    def __getitem__(self, key: Hashable) -> Collection[Any]:
        return self._values[key].values()

    def get(self, key: Hashable, default: Any = None) -> Any:
        values = self._values.get(key)
        return default if values is None else values.values()

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def keys_of_uid(self, uid: str) -> tuple[Hashable, ...]:
        return self._keys.get(uid, ())

    def entries_of(self, uid: str) -> dict[Hashable, Any]:
        """What object `uid` is filed as: {key: value}."""
        return {key: self._values[key][uid] for key in self._keys.get(uid, ())}

    def uids(self, key: Hashable) -> list[str]:
        """The uids of the objects filed under `key`."""
        return list(self._values.get(key) or ())

    def put(self, uid: str, entries: dict[Hashable, Any]) -> None:
        """File object `uid` under exactly `entries` (replacing where it was filed before)."""
        self.remove(uid)
        if not entries:
            return
        for key, value in entries.items():
            self._values.setdefault(key, {})[uid] = value
        self._keys[uid] = tuple(entries)

    def remove(self, uid: str) -> None:
        for key in self._keys.pop(uid, ()):
            values = self._values.get(key)
            if values is not None:
                values.pop(uid, None)
                if not values:
                    del self._values[key]

    def retain(self, uids: Iterable[str], keep: set[str]) -> list[str]:
        """Remove those of `uids` not in `keep` (objects a re-list no longer returned); the uids removed."""
        gone = [uid for uid in uids if uid not in keep]
        for uid in gone:
            self.remove(uid)
        return gone
