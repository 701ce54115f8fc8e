"""Many shards exported together: one Spark job writes every stream its shard stores as
it is, each in its own layout, and each export reads back as its shard's updates; a
stream that folds compacted history is consolidated on its own; an export that fails
fails alone."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pyspark.sql import SparkSession
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from cdc_core.app.export import ShardExport, Window, export_together
from cdc_core.cdcv2 import read_stream
from cdc_core.cdcv2.stream_files import Encoding, read_stream_files
from cdc_core.frontier import TimeFrontier
from cdc_core.shard import Shard

UTC = dt.UTC
T = TypeVar("T")
# Every kind of column a stream carries, nulls included.
EVERY_KIND = StructType([
    StructField("flag", BooleanType()), StructField("tiny", ByteType()),
    StructField("small", ShortType()), StructField("n", IntegerType()),
    StructField("big", LongType()), StructField("ratio", FloatType()),
    StructField("amount", DoubleType()), StructField("name", StringType()),
    StructField("raw", BinaryType()), StructField("day", DateType()),
    StructField("at", TimestampType()),
])  # fmt: skip
KEYED = StructType([StructField("id", LongType()), StructField("label", StringType())])
UPDATES = StructType([StructField("time", LongType()), StructField("diff", LongType())])


def _kinds_row(i: int) -> tuple:
    at = dt.datetime(2026, 1, 1, 0, 0, i, 123456, tzinfo=UTC)
    return (i % 2 == 0, i - 3, 300 * i, -70000 * i, 2**40 + i, 0.5 + i, -1e-7 * i, f"name é{i}",
            bytes([i, 255 - i, 0]), dt.date(2026, 1, 1 + i), at)  # fmt: skip


def _naive(row: tuple) -> tuple:
    return tuple(v.replace(tzinfo=None) if isinstance(v, dt.datetime) else v for v in row)


def _shard(
    spark: SparkSession, path: Path, schema: StructType, windows: list[list[tuple]]
) -> Shard:
    """A shard with one append per window of ``windows`` (rows of data, time, diff): the
    first at times ``[0, 11)``, the next ``[11, 21)``."""
    shard = Shard.open(spark, str(path), schema)
    full = StructType([*schema.fields, *UPDATES.fields])
    for k, rows in enumerate(windows):
        frame = spark.createDataFrame(rows, full).repartition(2)
        shard.append(frame, 10 * k + 1 if k else 0, 10 * (k + 1) + 1)
    return shard


def _counting_jobs(spark: SparkSession, group: str, work: Callable[[], T]) -> tuple[int, T]:
    """What ``work`` returns, and how many Spark jobs it ran."""
    spark.sparkContext.setJobGroup(group, group)
    try:
        done = work()
    finally:
        spark.sparkContext.setJobGroup("", "")
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(group)), done


def _read_back(spark: SparkSession, folders: list[Path], schema: StructType, lower: int) -> tuple:
    decoded = read_stream_files(spark, [str(f) for f in folders], schema, Encoding.JSON)
    assert decoded.errors.count() == 0
    stream = read_stream(decoded.updates, decoded.progress, TimeFrontier.at(lower))
    facts = {(tuple(r[:-2]), r["time"], r["diff"]) for r in stream.updates.collect()}
    return stream.frontier, facts


def _stored(shard: Shard, lower: int, upper: int) -> set:
    rows = shard.listen(lower - 1, upper - 1).collect()
    return {(tuple(r[:-2]), r["time"], r["diff"]) for r in rows}


def test_shards_of_every_layout_export_in_one_job_as_they_read_alone(
    spark: SparkSession, tmp_path: Path
) -> None:
    kinds = _shard(spark, tmp_path / "kinds", EVERY_KIND, [
        [(*_kinds_row(1), 5, 1), (*_kinds_row(2), 7, 2), ((None,) * 11 + (9, 1))],
        [(*_kinds_row(1), 12, -1), (*_kinds_row(3), 20, 1)],
    ])  # fmt: skip
    keyed = _shard(spark, tmp_path / "keyed", KEYED, [
        [(1, "a", 3, 1), (2, "b", 3, 1)], [(1, "a", 15, -1), (1, "c", 15, 1)],
    ])  # fmt: skip
    windows = [Window("w0", 0, 10), Window("w1", 10, 20)]
    exports = [ShardExport(kinds, tmp_path / "out-kinds", windows, "cdcv2-export-a"),
               ShardExport(keyed, tmp_path / "out-keyed", windows, "cdcv2-export-a")]  # fmt: skip

    # A group no other test names: the tracker keeps a group's jobs for the session.
    jobs, exported = _counting_jobs(
        spark, "exports together", lambda: export_together(spark, exports)
    )

    assert jobs == 1
    for export, windows_written in zip(exports, exported, strict=True):
        assert not isinstance(windows_written, Exception), windows_written
        schema = export.shard.data_schema
        for window, written in zip(windows, windows_written, strict=True):
            folder = Path(written.folder)
            assert folder == Path(export.root) / window.key
            frontier, facts = _read_back(spark, [folder], schema, window.start + 1)
            assert frontier == TimeFrontier.at(window.end + 1)
            assert facts == _stored(export.shard, window.start + 1, window.end + 1)
            assert written.updates == len(facts)
        # The windows chain into the whole stream.
        folders = [Path(w.folder) for w in windows_written]
        assert _read_back(spark, folders, schema, 1) == (TimeFrontier.at(21), _stored(
            export.shard, 1, 21))  # fmt: skip
    # By hand: what the mixed-kind shard's first window holds, nulls and all (Spark gives
    # a timestamp back as a naive datetime in the session's time zone, UTC).
    first = _read_back(spark, [tmp_path / "out-kinds" / "w0"], EVERY_KIND, 1)[1]
    naive = {(_naive(_kinds_row(1)), 5, 1), (_naive(_kinds_row(2)), 7, 2), ((None,) * 11, 9, 1)}
    assert first == naive


def test_a_stream_from_the_since_folds_history_and_a_failed_export_fails_alone(
    spark: SparkSession, tmp_path: Path
) -> None:
    folded = _shard(spark, tmp_path / "folded", KEYED, [
        [(1, "a", 3, 1), (2, "b", 5, 1)], [(1, "a", 12, -1), (3, "c", 14, 1)],
    ])  # fmt: skip
    folded.downgrade_since(TimeFrontier.at(11))
    plain = _shard(spark, tmp_path / "plain", KEYED, [[(7, "x", 4, 1)], [(8, "y", 18, 1)]])
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the export's folder would go")
    exports = [
        ShardExport(folded, tmp_path / "out-folded", [Window("w1", 10, 20)]),
        ShardExport(plain, blocked, [Window("w1", 10, 20)]),
        ShardExport(plain, tmp_path / "out-plain", [Window("w1", 10, 20)]),
    ]

    exported = export_together(spark, exports)

    assert isinstance(exported[1], Exception)
    folded_windows, plain_windows = exported[0], exported[2]
    assert not isinstance(folded_windows, Exception)
    assert not isinstance(plain_windows, Exception)
    # From the since, the history before it comes folded into time 11 (by hand).
    assert _read_back(spark, [tmp_path / "out-folded" / "w1"], KEYED, 11) == (
        TimeFrontier.at(21),
        {((1, "a"), 11, 1), ((2, "b"), 11, 1), ((1, "a"), 12, -1), ((3, "c"), 14, 1)},
    )
    assert _read_back(spark, [tmp_path / "out-plain" / "w1"], KEYED, 11) == (
        TimeFrontier.at(21), {((8, "y"), 18, 1)})  # fmt: skip
