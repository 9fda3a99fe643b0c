"""Where landed files live: a local directory or an S3 prefix. It carries reads, lists and
commits out and decides nothing (the decisions are in :mod:`kcl_mp.spark.layout`).

- Commit is atomic. In a directory: a hidden temporary name (``.name.tmp``, which readers and
  Spark's file source skip), fsync, rename, fsync of the directory (the rename survives a
  power cut). On S3: the one PutObject (an object is visible whole or not at all).
- A shard is listed from a name on (``StartAfter`` on S3), so listing what is new costs a page
  per shard, not a page per thousand files ever landed.
- Cleaning deletes a file, or moves it under ``<archive>/<stream>/<shard>/``.

A ``Storage`` is picklable (the S3 client is made on first use in each process), so Spark's
executors read with the same object the planner listed with.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kcl_mp.spark.layout import SUFFIX

FOOTER_READ = 64 * 1024  # one ranged GET holds the footer of any file the sink writes


def _fsync_directory(path: str) -> None:
    directory = os.open(path, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _written_beside(final: str, body: bytes, name: str) -> str:
    """``body`` in the hidden file ``name`` beside ``final`` (its directory made), synced."""
    parent = os.path.dirname(final)
    os.makedirs(parent, exist_ok=True)
    temporary = os.path.join(parent, name)
    with open(temporary, "wb") as out:
        out.write(body)
        out.flush()
        os.fsync(out.fileno())
    return temporary


@dataclass
class Storage:
    """``url``: a directory, ``file:///dir`` or ``s3://bucket/prefix``; ``endpoint``: an S3
    endpoint URL (a local emulator such as moto)."""

    url: str
    endpoint: str | None = None
    _client: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.url.startswith("s3://") or self.url.startswith("s3a://"):
            bucket, _, prefix = self.url.split("://", 1)[1].partition("/")
            self.bucket: str | None = bucket
            self.prefix = prefix.strip("/")
            self.directory = ""
        else:
            self.bucket = None
            self.prefix = ""
            self.directory = self.url[len("file://"):] if self.url.startswith("file://") else self.url

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    @property
    def s3(self) -> Any:
        if self._client is None:
            import boto3

            self._client = boto3.client("s3", endpoint_url=self.endpoint)
        return self._client

    def _key(self, relative: str) -> str:
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def location(self, relative: str) -> str:
        """Where ``relative`` is, for log lines and errors."""
        if self.bucket is None:
            return os.path.join(self.directory, relative)
        return f"s3://{self.bucket}/{self._key(relative)}"

    # -- writing -----------------------------------------------------------------------

    def commit(self, relative: str, table: pa.Table, compression: str = "zstd") -> str:
        """Write ``table`` as Parquet at ``relative``, atomically; returns where it went."""
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression=compression)
        return self.commit_bytes(relative, sink.getvalue().to_pybytes())

    def commit_bytes(self, relative: str, body: bytes) -> str:
        """Write ``body`` at ``relative``, atomically (module docstring); returns where it went."""
        if self.bucket is not None:
            self.s3.put_object(Bucket=self.bucket, Key=self._key(relative), Body=body)
            return self.location(relative)
        final = os.path.join(self.directory, relative)
        temporary = _written_beside(final, body, f".{os.path.basename(final)}.tmp")
        os.replace(temporary, final)
        _fsync_directory(os.path.dirname(final))
        return final

    def create_bytes(self, relative: str, body: bytes) -> bool:
        """Write ``body`` at ``relative`` only if nothing is there: True if this call wrote it,
        False if it was there already (whoever wrote it first wins, whole). In a directory: a
        temporary file hard-linked to the name (``link`` fails on an existing name); on S3:
        PutObject with ``If-None-Match: *``."""
        if self.bucket is not None:
            from botocore.exceptions import ClientError

            try:
                self.s3.put_object(Bucket=self.bucket, Key=self._key(relative), Body=body, IfNoneMatch="*")
                return True
            except ClientError as exc:  # 412: there already; 409: a concurrent conditional put won
                if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
                    return False
                raise
        final = os.path.join(self.directory, relative)
        temporary = _written_beside(final, body, f".{os.path.basename(final)}.{os.getpid()}.{id(body)}.tmp")
        try:
            os.link(temporary, final)
        except FileExistsError:
            return False
        finally:
            os.remove(temporary)
        _fsync_directory(os.path.dirname(final))
        return True

    def read_if_there(self, relative: str) -> bytes | None:
        """The bytes at ``relative``, or None if there is nothing."""
        if self.bucket is None:
            try:
                return self.read_bytes(relative)
            except FileNotFoundError:
                return None
        try:
            return bytes(self.s3.get_object(Bucket=self.bucket, Key=self._key(relative))["Body"].read())
        except self.s3.exceptions.NoSuchKey:
            return None

    # -- listing -----------------------------------------------------------------------

    def names(self, relative: str) -> list[str]:
        """The names of the files right under the directory ``relative`` (temporary ones skipped)."""
        if self.bucket is None:
            try:
                return sorted(n for n in os.listdir(os.path.join(self.directory, relative)) if not n.startswith("."))
            except FileNotFoundError:
                return []
        prefix = self._key(relative).rstrip("/") + "/"
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/")
        return sorted(o["Key"][len(prefix):] for page in pages for o in page.get("Contents", ()))

    def children(self, relative: str) -> list[str]:
        """The directory names right under ``relative`` (``""``: the root, or ``"<stream>/"``)."""
        if self.bucket is None:
            path = os.path.join(self.directory, relative)
            try:
                return sorted(e.name for e in os.scandir(path) if e.is_dir() and not e.name.startswith("."))
            except FileNotFoundError:
                return []
        prefix = self._key(relative) if relative else (f"{self.prefix}/" if self.prefix else "")
        names: list[str] = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/"):
            names.extend(p["Prefix"][len(prefix):].rstrip("/") for p in page.get("CommonPrefixes", ()))
        return sorted(names)

    def list_files(self, shard_prefix: str, start_after: str = "") -> list[str]:
        """The landed files' names under ``shard_prefix`` that sort after ``start_after``."""
        if self.bucket is None:
            try:
                names = os.listdir(os.path.join(self.directory, shard_prefix))
            except FileNotFoundError:
                return []
            return sorted(n for n in names if n.endswith(SUFFIX) and not n.startswith(".") and n > start_after)
        prefix = self._key(shard_prefix)
        pages = self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix, **({"StartAfter": prefix + start_after} if start_after else {}))
        return [o["Key"][len(prefix):] for page in pages for o in page.get("Contents", ())
                if o["Key"].endswith(SUFFIX)]

    # -- reading -----------------------------------------------------------------------

    def footer(self, relative: str) -> pq.FileMetaData:
        """A file's Parquet footer (row count and key-value metadata), without its data."""
        if self.bucket is None:
            return pq.read_metadata(os.path.join(self.directory, relative))
        body = self.s3.get_object(Bucket=self.bucket, Key=self._key(relative),
                                  Range=f"bytes=-{FOOTER_READ}")["Body"].read()
        length = int.from_bytes(body[-8:-4], "little")
        if length + 8 > len(body):  # a footer larger than the ranged read: read the file
            return pq.read_metadata(io.BytesIO(self.read_bytes(relative)))
        return pq.read_metadata(io.BytesIO(b"PAR1" + body[-8 - length:]))

    def read_bytes(self, relative: str) -> bytes:
        if self.bucket is None:
            with open(os.path.join(self.directory, relative), "rb") as f:
                return f.read()
        return bytes(self.s3.get_object(Bucket=self.bucket, Key=self._key(relative))["Body"].read())

    def read_table(self, relative: str) -> pa.Table:
        if self.bucket is None:
            return pq.read_table(os.path.join(self.directory, relative))
        return pq.read_table(pa.BufferReader(self.read_bytes(relative)))

    # -- cleaning ----------------------------------------------------------------------

    def remove(self, relative: str) -> None:
        if self.bucket is not None:
            self.s3.delete_object(Bucket=self.bucket, Key=self._key(relative))
            return
        try:
            os.remove(os.path.join(self.directory, relative))
        except FileNotFoundError:
            pass  # another reader's clean, or this one's before a restart

    def archive(self, relative: str, archive: Storage) -> None:
        """Copy the file to ``archive`` at the same relative name, then remove it here."""
        if self.bucket is not None and archive.bucket is not None:
            archive.s3.copy_object(Bucket=archive.bucket, Key=archive._key(relative),
                                   CopySource={"Bucket": self.bucket, "Key": self._key(relative)})
        elif self.bucket is None and archive.bucket is None:
            target = os.path.join(archive.directory, relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            try:
                os.replace(os.path.join(self.directory, relative), target)
            except FileNotFoundError:
                pass  # archived already (a commit replayed after a restart)
            return
        else:
            archive.commit_bytes(relative, self.read_bytes(relative))
        self.remove(relative)
