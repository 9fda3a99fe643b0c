"""S3 listings in time of the prefix, as S3 serves them, instead of the whole bucket's.

moto answers each ListObjects(V2) by walking every key of the bucket through its versioned
store (a copy of the dict, then a Python-level lookup per key: 0.27 s a call at 100,000
keys), so a landing area's reader that lists a page per shard pays for every file ever
landed, 100 times per trigger. S3 reads an index. Here a listing with a prefix hands moto a
view of the bucket that holds only the keys under the prefix, found by one pass of string
comparisons over the key names; everything else (delimiters, delete markers, StartAfter,
continuation, truncation) stays moto's own code, so the answers are moto's.
"""

from __future__ import annotations

from typing import Any


class _PrefixView:
    """What moto's ``list_objects`` reads of a bucket (``keys``), narrowed to one prefix."""

    def __init__(self, keys: Any, prefix: str):
        from moto.s3.utils import _VersionedKeyStore

        self.keys = _VersionedKeyStore()
        # the plain dict's own views (no per-key Python lookup); list() takes a snapshot, as
        # moto's items() does, so a concurrent put cannot change the dict while it is read
        for name, versions in list(dict.items(keys)):
            if name.startswith(prefix):
                dict.__setitem__(self.keys, name, versions)


def install() -> None:
    """Wrap ``S3Backend.list_objects`` (which ``list_objects_v2`` calls) once per process."""
    from moto.s3.models import FakeTableStorageBucket, S3Backend

    original = S3Backend.list_objects
    if getattr(original, "narrowed", False):
        return

    def list_objects(self: Any, bucket: Any, prefix: str | None, *args: Any, **kwargs: Any) -> Any:
        if prefix and not isinstance(bucket, FakeTableStorageBucket):
            bucket = _PrefixView(bucket.keys, prefix)
        return original(self, bucket, prefix, *args, **kwargs)

    list_objects.narrowed = True  # type: ignore[attr-defined]
    S3Backend.list_objects = list_objects  # type: ignore[method-assign]
