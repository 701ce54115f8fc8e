"""A shard under an s3:// prefix behaves as the same shard in a local folder: appends,
reads, leases, since, compaction, gc and log trimming, through the public Shard API and
against the tests' S3 server."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdc_core.frontier import TimeFrontier
from cdc_core.shard import Shard, UpperMismatch, stored_upper
from cdc_core.shard.leases import LeaseBook, holds
from cdc_core.spark import get_spark
from cdc_core.storage import Location, delta_options, files

KV = StructType([StructField("k", StringType()), StructField("v", LongType())])
ARROW = pa.schema([("k", pa.string()), ("v", pa.int64()), ("time", pa.int64()),
                   ("diff", pa.int64())])  # fmt: skip
FIRST = [("a", 1, 0, 1), ("b", 2, 1, 1), ("a", 1, 2, -1), ("a", 3, 2, 1), ("c", 4, 2, 1)]
SECOND = [("b", 2, 3, -1), ("d", 5, 4, 1), ("d", 5, 4, 1), ("c", 4, 5, -1)]


def at(time: int) -> TimeFrontier:
    return TimeFrontier.at(time)


def rows(frame: DataFrame | pa.Table) -> list[tuple]:
    if isinstance(frame, pa.Table):
        return sorted(tuple(row.values()) for row in frame.to_pylist())
    return sorted(tuple(row) for row in frame.collect())


def driver_rows(data: list[tuple]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(ARROW.names, row, strict=True)) for row in data], ARROW)


def committed(path: str) -> set[str]:
    """The data files the table's current version references (delta-rs's view)."""
    table = DeltaTable(path, storage_options=delta_options(path))
    return {uri.removeprefix(f"{path}/") for uri in table.file_uris()}


def on_storage(path: str) -> set[str]:
    """Every file under the table's data folder, committed or not."""
    return {f"data/{entry.path}" for entry in files.list_relative(files.join(path, "data"))}


@pytest.fixture
def lake(s3_bucket: str) -> str:
    return f"s3://{s3_bucket}/lake"


@pytest.fixture
def spark(lake: str) -> SparkSession:
    """The suite's session, with the s3a settings of the test's server."""
    return get_spark("local[2]", {"spark.sql.shuffle.partitions": "4"},
                     places=[Location.parse(lake)])  # fmt: skip


@pytest.fixture
def pair(spark: SparkSession, lake: str, tmp_path: Path) -> tuple[Shard, Shard]:
    """The same shard on S3 and in a local folder."""
    return (Shard.open(spark, f"{lake}/users/changes", KV),
            Shard.open(spark, str(tmp_path / "users" / "changes"), KV))  # fmt: skip


def both(pair: tuple[Shard, Shard], action: Callable[[Shard], object]) -> tuple:
    remote, local = pair
    return action(remote), action(local)


def written(spark: SparkSession, pair: tuple[Shard, Shard]) -> None:
    """Two batches on both shards: one staged by Spark, one by the driver."""
    first = spark.createDataFrame(FIRST, "k string, v long, time long, diff long")
    for shard in pair:
        assert shard.compare_and_append(first, at(0), at(3)) is None
        assert shard.compare_and_append(driver_rows(SECOND), at(3), at(6)) is None


def test_appends_on_s3_read_back_exactly_what_a_local_shard_gives(
    spark: SparkSession, pair: tuple[Shard, Shard], tmp_path: Path
) -> None:
    remote, local = pair
    assert remote.path.startswith("s3://") and (remote.upper, remote.since) == (at(0), at(0))
    written(spark, pair)
    assert remote.upper == local.upper == at(6)
    assert not list(Path.cwd().glob("s3:*")) and not list(tmp_path.glob("**/s3:*"))

    for as_of in range(6):
        remote_rows, local_rows = both(pair, lambda s, t=as_of: rows(s.snapshot(t)))
        assert remote_rows == local_rows
    assert rows(remote.snapshot(5)) == [("a", 3, 5, 1), ("d", 5, 5, 2)]
    remote_rows, local_rows = both(pair, lambda s: rows(s.updates_through(5)))
    assert remote_rows == local_rows and len(remote_rows) == 8  # the duplicate consolidated
    remote_rows, local_rows = both(pair, lambda s: rows(s.listen(1, 4)))
    assert remote_rows == local_rows
    assert both(pair, lambda s: s.size(4)) == (4, 4)
    remote_progress, local_progress = both(
        pair, lambda s: [(p.lower, p.upper, p.counts) for p in s.progress()]
    )
    assert remote_progress == local_progress and len(remote_progress) == 2
    # A fresh handle (another process) reads the same frontiers; so does the sensor's look.
    reopened = Shard.open(spark, remote.path, KV)
    assert (reopened.upper, reopened.version) == (at(6), remote.version)
    assert stored_upper(remote.path) == at(6)
    assert committed(remote.path) == on_storage(remote.path)


def test_a_lost_compare_and_append_on_s3_writes_nothing_visible(
    spark: SparkSession, pair: tuple[Shard, Shard]
) -> None:
    remote, _ = pair
    written(spark, pair)
    version, stored = remote.version, on_storage(remote.path)
    late = spark.createDataFrame([("z", 9, 6, 1)], "k string, v long, time long, diff long")
    assert remote.compare_and_append(late, at(3), at(7)) == UpperMismatch(at(3), at(6))
    # A stale handle stages its batch, then loses the commit: the staging goes too.
    stale = Shard.open(spark, remote.path, KV)
    assert remote.compare_and_append(driver_rows([("y", 8, 6, 1)]), at(6), at(7)) is None
    staged = stale.stage(driver_rows([("z", 9, 6, 1)]))
    assert not staged.is_empty and on_storage(remote.path) > stored
    assert stale.commit(staged, at(6), at(7)) == UpperMismatch(at(6), at(7))
    assert remote.refresh().version == version + 1
    assert on_storage(remote.path) == committed(remote.path)
    assert rows(remote.updates_through(6)) == sorted(
        [*rows(pair[1].updates_through(5)), ("y", 8, 6, 1)]
    )


def test_a_reader_lease_on_s3_holds_the_since_until_it_expires(
    spark: SparkSession, pair: tuple[Shard, Shard]
) -> None:
    remote, _ = pair
    written(spark, pair)
    book = LeaseBook.of(remote)
    capability = book.register("reader-1", since=2, lease_ms=1_000)
    assert capability.since == 2 and capability.version == remote.version
    assert [r.holder for r in book.read().live()] == ["reader-1"]
    assert [h.registration.holder for h in holds(remote.path)] == ["reader-1"]
    assert remote.downgrade_since(at(4)) == at(2)  # held by the reader
    time.sleep(1.2)
    assert book.expire() == ["reader-1"]
    assert book.read().registrations == {}
    assert remote.downgrade_since(at(4)) == at(4)


def test_since_and_compaction_on_s3_keep_the_snapshot_and_gc_removes_only_garbage(
    spark: SparkSession, pair: tuple[Shard, Shard]
) -> None:
    remote, local = pair
    written(spark, pair)
    before = rows(remote.snapshot(4))
    replaced = committed(remote.path)
    assert both(pair, lambda s: s.downgrade_since(at(4))) == (at(4), at(4))
    both(pair, lambda s: s.compact())
    assert rows(remote.snapshot(4)) == before == rows(local.snapshot(4))
    assert rows(remote.updates_through(5)) == rows(local.updates_through(5))
    assert len(committed(remote.path)) == 1 and not committed(remote.path) & replaced

    # A stage nobody commits, and one of a live registered writer.
    abandoned = remote.stage(driver_rows([("x", 1, 6, 1)]))
    writer = Shard.open(spark, remote.path, KV)
    LeaseBook.of(writer).register_writer("writer-1", lease_ms=600_000)
    live_stage = writer.stage(driver_rows([("w", 1, 6, 1)]))
    kept = committed(remote.path) | {f.path for f in live_stage.files}
    assert {f.path for f in abandoned.files} <= on_storage(remote.path)

    removed = remote.gc(retention_hours=0)
    assert set(removed) == replaced | {f.path for f in abandoned.files}
    assert on_storage(remote.path) == kept
    assert rows(remote.snapshot(5)) == rows(local.snapshot(5))


def test_trim_log_on_s3_after_a_checkpoint_leaves_a_readable_table(
    spark: SparkSession, lake: str
) -> None:
    path = f"{lake}/users/remap"
    shard = Shard.open(spark, path, KV)
    for t in range(8):
        assert shard.compare_and_append(driver_rows([("k", t, t, 1)]), at(t), at(t + 1)) is None
    log = files.join(path, "_delta_log")
    # the creation, 8 appends and the merge of their 8 small files
    assert len([n for n in files.list_names(log) if n.endswith(".json")]) == 10

    trimmed = shard.trim_log(keep_ms=0)
    names = files.list_names(log)
    assert "00000000000000000000.json" in trimmed and "00000000000000000008.json" in trimmed
    assert not set(trimmed) & set(names)
    assert "00000000000000000009.checkpoint.parquet" in names
    reopened = Shard.open(spark, path, KV)
    assert (reopened.upper, reopened.version) == (at(8), 9)
    assert rows(reopened.updates_through(7)) == [("k", t, t, 1) for t in range(8)]
    assert stored_upper(path) == at(8)
    assert reopened.compare_and_append(driver_rows([("k", 8, 8, 1)]), at(8), at(9)) is None
