"""A query's checkpoint that a kill left before its first batch was logged.

Spark writes each offset-log entry (``<checkpoint>/offsets/<batch>``) through a hidden temporary
file renamed into place (``.0.<uuid>.tmp``, with a ``..0.<uuid>.tmp.crc`` beside it on a local
or HDFS path). A job killed between the two leaves the temporary file behind. From Spark 4.3 on,
a query that finds no batch in its offset log checks that ``offsets`` and ``commits`` are empty
(``MicroBatchExecution.verifyNewCheckpointDirectory``) and fails with
STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY on every start after: a kill at the wrong moment of
the first batch stops the query for good. A temporary file is never a log entry, so
``clear_interrupted_start`` removes such leftovers before the query starts, and only while the
offset log holds no batch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

log = logging.getLogger("kcl_mp.spark.checkpoint")

LOGS = ("offsets", "commits")


def leftovers(listing: Mapping[str, Iterable[str]]) -> list[str]:
    """The files (``<log>/<name>``) to remove from ``listing`` (each log directory's file names):
    the hidden ones, when the offset log holds no batch (no file named by a batch number).

    >>> leftovers({"offsets": [".0.7f.tmp", "..0.7f.tmp.crc"], "commits": []})
    ['offsets/..0.7f.tmp.crc', 'offsets/.0.7f.tmp']
    >>> leftovers({"offsets": ["0", ".0.crc", ".1.7f.tmp"], "commits": []})
    []
    """
    if any(name.isdigit() for name in listing.get("offsets", ())):
        return []
    return [f"{directory}/{name}" for directory in LOGS for name in sorted(listing.get(directory, ()))
            if name.startswith(".")]


def clear_interrupted_start(spark: Any, checkpoint: str) -> list[str]:
    """Remove ``leftovers`` from ``checkpoint`` (any path Spark's Hadoop file systems reach:
    local, ``s3a://``, HDFS) through the session's JVM; what was removed. A session without a
    JVM (Spark Connect) is left alone."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return []
    hadoop_path = jvm.org.apache.hadoop.fs.Path
    root = hadoop_path(checkpoint)
    fs = root.getFileSystem(spark._jsc.hadoopConfiguration())
    listing = {}
    for directory in LOGS:
        path = hadoop_path(root, directory)
        listing[directory] = [status.getPath().getName() for status in fs.listStatus(path)] if fs.exists(path) else []
    removed = leftovers(listing)
    for name in removed:
        fs.delete(hadoop_path(root, name), False)
    if removed:
        log.warning("checkpoint %s: removed %s, left by a run killed before its first batch was logged (Spark "
                    "4.3+ would not start the query on them)", checkpoint, ", ".join(removed))
    return removed
