"""S3 listings in time of the prefix, as S3 serves them, instead of the whole bucket's.

moto answers each ListObjects(V2) by walking every key of the bucket through its versioned
store (a copy of the dict, then a Python-level lookup per key: about 0.1 s of CPU a call at
100,000 keys), so a landing area's reader that lists a page per shard pays for every file
ever landed, 100 times per trigger. S3 reads an index. Here each bucket's key store keeps
its names sorted (kept up to date as moto adds and removes keys, built at its first
listing), and a listing with a prefix hands moto a view of the bucket holding only the keys
under the prefix and, for a V2 listing from StartAfter or a continuation token, only those
after it (moto drops every key and common prefix at or before it anyway: a common prefix
sorts before the keys it stands for), found by bisection; with a delimiter, one key of each
common prefix stands for all of them (moto makes the same common prefix of any of them, a
delete marker's too). Everything else (delimiters, delete markers, StartAfter, continuation,
truncation) stays moto's own code, so the answers are moto's. Listing what is new under a
shard, or the shards under a stream, then costs what it returns, as on S3.
"""

from __future__ import annotations

import bisect
import threading
from typing import Any

_NAMES = "_kclmp_sorted_names"  # the index, in the key store's instance dict
_lock = threading.RLock()  # the index and the dict change together


def _sorted_names(store: Any) -> list[str]:
    names = store.__dict__.get(_NAMES)
    if names is None:
        names = store.__dict__[_NAMES] = sorted(dict.keys(store))
    return names


class _PrefixView:
    """What moto's ``list_objects`` reads of a bucket (``keys``), narrowed to one prefix, to
    the names after ``after``, and with a delimiter to one name per common prefix."""

    def __init__(self, store: Any, prefix: str, after: str | None = None, delimiter: str | None = None):
        from moto.s3.utils import _VersionedKeyStore

        self.keys = _VersionedKeyStore()
        with _lock:
            names = _sorted_names(store)
            at = bisect.bisect_right(names, after) if after and after > prefix else bisect.bisect_left(names, prefix)
            while at < len(names) and names[at].startswith(prefix):
                name = names[at]
                dict.__setitem__(self.keys, name, dict.__getitem__(store, name))
                cut = name.find(delimiter, len(prefix)) if delimiter else -1
                if not delimiter or cut < 0:
                    at += 1
                    continue
                folder = name[:cut + len(delimiter)]  # every name under it sorts before its successor
                at = bisect.bisect_left(names, folder[:-1] + chr(ord(folder[-1]) + 1), at + 1)


def install() -> None:
    """Index moto's key stores and narrow ``S3Backend.list_objects`` to the prefix and
    ``list_objects_v2`` (which calls it) also to its StartAfter or continuation; once per
    process."""
    from moto.s3.models import FakeTableStorageBucket, S3Backend
    from moto.s3.utils import _VersionedKeyStore

    listing, listing_v2 = S3Backend.list_objects, S3Backend.list_objects_v2
    if getattr(listing, "narrowed", False):
        return
    set_item, set_list, pop = _VersionedKeyStore.__setitem__, _VersionedKeyStore.setlist, _VersionedKeyStore.pop

    def added(store: Any, key: str, write: Any, *args: Any) -> Any:
        with _lock:
            new = not dict.__contains__(store, key)
            result = write(store, key, *args)
            names = store.__dict__.get(_NAMES)
            if new and names is not None:
                bisect.insort(names, key)
            return result

    def removed(store: Any, key: str) -> None:
        with _lock:
            pop(store, key)
            names = store.__dict__.get(_NAMES)
            if names is not None:
                at = bisect.bisect_left(names, key)
                if at < len(names) and names[at] == key:
                    del names[at]

    def list_objects(self: Any, bucket: Any, prefix: str | None, delimiter: str | None = None, *args: Any,
                     **kwargs: Any) -> Any:
        if (prefix or delimiter) and not isinstance(bucket, (FakeTableStorageBucket, _PrefixView)):
            bucket = _PrefixView(bucket.keys, prefix or "", None, delimiter)
        return listing(self, bucket, prefix, delimiter, *args, **kwargs)

    def list_objects_v2(self: Any, bucket: Any, prefix: str | None, delimiter: str | None,
                        continuation_token: str | None, start_after: str | None, max_keys: int) -> Any:
        after = self._pagination_tokens.get(continuation_token) if continuation_token else start_after
        if (prefix or delimiter or after) and not isinstance(bucket, FakeTableStorageBucket):
            bucket = _PrefixView(bucket.keys, prefix or "", after, delimiter)
        return listing_v2(self, bucket, prefix, delimiter, continuation_token, start_after, max_keys)

    _VersionedKeyStore.__setitem__ = lambda store, key, value: added(store, key, set_item, value)  # type: ignore[method-assign]
    _VersionedKeyStore.setlist = lambda store, key, versions: added(store, key, set_list, versions)  # type: ignore[method-assign,assignment]
    _VersionedKeyStore.pop = removed  # type: ignore[method-assign,assignment]
    list_objects.narrowed = True  # type: ignore[attr-defined]
    S3Backend.list_objects = list_objects  # type: ignore[method-assign]
    S3Backend.list_objects_v2 = list_objects_v2  # type: ignore[method-assign]
