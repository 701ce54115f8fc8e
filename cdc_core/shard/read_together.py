"""Reading many shards with one Spark job: each shard's updates in its own time range,
tagged with the shard's key.

Why: a run's checks judge every source's tables, and a Spark job costs far more than the
few rows a window adds to each. A union of per-shard reads is a plan whose shape grows
with the number of shards, which Catalyst analyzes branch by branch. One read of every
shard's files, told apart by file name, is the same plan for one shard or two hundred.

Invariant: each key gets exactly the rows its shard's ``listen`` (or ``updates_until``)
gives for its range: the files its statistics say may hold the range, filtered by
``time``. A file name seen under two keys (a table copied with its files) is read in a
second round, so no row is ever counted under the wrong key.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdc_core.shard.log import location_failure
from cdc_core.shard.read import ShardReader
from cdc_core.spark import local_frame
from cdc_core.storage import spark_path
from cdc_core.updates import TIME

# The rows' column naming the read (a key of the ranges) they belong to; named so that no
# table's own column can be mistaken for it (nor for the columns that join each file to
# its read).
KEY = "__reclock_read"
_FILE = "__reclock_file"
_AFTER, _THROUGH = "__reclock_after", "__reclock_through"


@dataclass(frozen=True)
class RangeRead:
    """One shard's part of a joint read: its updates at times in ``(after, through]``
    (from the beginning when ``after`` is None)."""

    shard: ShardReader
    after: int | None
    through: int


def read_together(
    spark: SparkSession, reads: Mapping[str, RangeRead], schema: StructType
) -> DataFrame:
    """The updates of every read in ``reads``, with a ``KEY`` column naming its key:
    ``schema``'s columns (which must include ``time``; a column a file lacks reads as
    null, as in a one-shard read), by one Parquet scan per round of distinct file names
    (one round, unless tables share file names)."""
    rounds: list[dict[str, tuple[str, str, RangeRead]]] = []
    for key, read in reads.items():
        for data_file in read.shard.files_between(read.after, read.through):
            name = posixpath.basename(data_file.path)
            path = spark_path(posixpath.join(read.shard.path, data_file.path))
            free = next((r for r in rounds if name not in r), None)
            if free is None:
                free = {}
                rounds.append(free)
            free[name] = (key, path, read)
    columns = [KEY, *schema.names]
    frames = [_read_round(spark, round_, schema).select(*columns) for round_ in rounds]
    if not frames:
        empty = StructType([StructField(KEY, StringType()), *schema.fields])
        return local_frame(spark, [], empty)
    return functools.reduce(DataFrame.unionByName, frames)


def _read_round(
    spark: SparkSession, round_: Mapping[str, tuple[str, str, RangeRead]], schema: StructType
) -> DataFrame:
    """One scan of files with distinct names, each row tagged by its file's key and kept
    when its time is in that key's range."""
    ranges = local_frame(
        spark,
        [(name, key, read.after, read.through) for name, (key, _, read) in round_.items()],
        StructType([StructField(_FILE, StringType()), StructField(KEY, StringType()),
                    StructField(_AFTER, LongType()), StructField(_THROUGH, LongType())]),
    )  # fmt: skip
    paths = [path for _, path, _ in round_.values()]
    tables = len({key for key, _, _ in round_.values()})
    with location_failure(f"reading {len(paths)} file(s) of {tables} table(s)"):
        scanned = spark.read.schema(schema).parquet(*paths)
    rows = scanned.select("*", F.col("_metadata.file_name").alias(_FILE))
    tagged = rows.join(F.broadcast(ranges), _FILE)
    in_range = (F.col(TIME) <= F.col(_THROUGH)) & (
        F.col(_AFTER).isNull() | (F.col(TIME) > F.col(_AFTER))
    )
    return tagged.where(in_range)
