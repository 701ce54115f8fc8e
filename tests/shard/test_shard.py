"""Shard behaviour on real Spark and real Delta tables: frontiers, compare-and-append,
replicated append, reads, compaction, gc, progress, errors, and the Delta layout."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from cdc_core.checks.invariants import CompletenessQuestion, completeness_together
from cdc_core.frontier import TimeFrontier
from cdc_core.shard import (
    ProgressStatement,
    Shard,
    ShardStorageError,
    ShardUsageError,
    UpperMismatch,
    delta_io,
    stored_upper,
)
from cdc_core.shard.leases import reading, writing
from cdc_core.shard.log import (
    KEPT_APP_IDS,
    NO_TABLE,
    app_version,
    log_mark,
    merge_files,
    read_to_newest,
    table_to_read,
)
from cdc_core.storage import files
from tests.judged_alone import completeness

KV = StructType([StructField("k", StringType()), StructField("v", LongType())])
UPDATE_DDL = "k string, v long, time long, diff long"

Row = tuple


def at(time: int) -> TimeFrontier:
    return TimeFrontier.at(time)


def updates(spark: SparkSession, rows: list[Row]) -> DataFrame:
    return spark.createDataFrame(rows, UPDATE_DDL)


def collected(df: DataFrame) -> list[Row]:
    return sorted(tuple(row) for row in df.collect())


def table_rows(path: str) -> list[Row]:
    """The table as delta-rs (not Spark, not the shard) reads it."""
    table = DeltaTable(path).to_pyarrow_table()
    return sorted(tuple(row.values()) for row in table.to_pylist())


def committed_files(path: str) -> set[str]:
    """The files the table's current version references, as delta-rs reports them."""
    return {str(Path(uri).relative_to(path)) for uri in DeltaTable(path).file_uris()}


def data_files(path: str) -> set[str]:
    """Every file under the table's data folder, committed or not."""
    root = Path(path, "data")
    return {str(p.relative_to(path)) for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def shard(spark: SparkSession, tmp_path: Path) -> Shard:
    return Shard.open(spark, str(tmp_path / "shard"), KV)


# ---- open -------------------------------------------------------------------------------


def test_a_new_shard_starts_at_the_minimum_and_reopens_with_its_state(spark, tmp_path):
    path = str(tmp_path / "s")
    created = Shard.open(spark, path, KV)
    assert (created.upper, created.since, created.version) == (at(0), at(0), 0)
    assert created.compare_and_append(updates(spark, [("a", 1, 0, 1)]), at(0), at(3)) is None
    reopened = Shard.open(spark, path, KV)
    assert (reopened.upper, reopened.since, reopened.version) == (at(3), at(0), 1)


def test_a_shard_checkpoints_its_log_so_an_open_replays_fewer_than_ten_commits(spark, shard):
    for t in range(12):
        batch = updates(spark, [("a", t, t, 1)])
        assert shard.compare_and_append(batch, at(t), at(t + 1)) is None
    last = json.loads(Path(shard.path, "_delta_log", "_last_checkpoint").read_text())
    assert shard.version >= 12 and shard.version - last["version"] < 10
    reopened = Shard.open(spark, shard.path, KV)
    assert (reopened.upper, reopened.version) == (at(12), shard.version)


def test_the_newest_commit_answers_for_every_frontier_as_a_replay_of_the_log_does(spark, shard):
    """A shard's upper, since and lease pointer are read from its newest commit alone
    (every commit reclock makes carries them); at every version the answer is delta-rs's
    own replay of the log, also once another writer's commit, which carries nothing, is
    the newest."""
    with writing([shard], "run-1", 3_600_000):
        for t in range(3):
            batch = updates(spark, [("a", t, t, 1)])
            assert shard.compare_and_append(batch, at(t), at(t + 1)) is None
    with reading(shard, "reader-1", 1, 3_600_000):
        shard.downgrade_since(at(1))
    carrying = shard.version
    # Another writer's commit (delta-rs's own append of nothing) carries no frontier.
    DeltaTable(shard.path).create_write_transaction([], "append", DeltaTable(shard.path).schema())
    for version in range(carrying + 2):
        replayed = DeltaTable(shard.path, version=version)
        read = DeltaTable(shard.path, version=version)
        assert {a: app_version(read, a) for a in KEPT_APP_IDS} == {
            a: replayed.transaction_version(a) for a in KEPT_APP_IDS
        }, version
    newest = [json.loads(line) for line in
              Path(shard.path, "_delta_log", f"{carrying:020d}.json").read_text().splitlines()]
    carried = {a["txn"]["appId"]: a["txn"]["version"] for a in newest if "txn" in a}
    assert carried == {"reclock.upper": 3, "reclock.since": 1, "reclock.leases": carrying}
    reopened = Shard.open(spark, shard.path, KV)
    assert (reopened.upper, reopened.since) == (at(3), at(1))


def test_opening_with_another_schema_names_the_differing_columns(spark, tmp_path):
    path = str(tmp_path / "s")
    Shard.open(spark, path, KV)
    other = StructType([StructField("k", IntegerType()), StructField("w", LongType())])
    with pytest.raises(ShardUsageError) as error:
        Shard.open(spark, path, other)
    message = str(error.value)
    assert "'k'" in message and "'w'" in message and "'v'" in message


def test_data_columns_may_not_take_the_shard_column_names(spark, tmp_path):
    with pytest.raises(ShardUsageError, match="time"):
        Shard.open(spark, str(tmp_path / "s"), StructType([StructField("time", LongType())]))


# ---- compare_and_append -----------------------------------------------------------------


def test_compare_and_append_consolidates_and_moves_the_upper(spark, shard):
    batch = [("a", 1, 0, 1), ("a", 1, 0, 1), ("b", 2, 1, 1), ("c", 3, 2, 1), ("c", 3, 2, -1)]
    assert shard.compare_and_append(updates(spark, batch), at(0), at(5)) is None
    assert shard.upper == at(5)
    # One row per (data, time), diffs summed, the cancelled pair gone.
    assert table_rows(shard.path) == [("a", 1, 0, 2), ("b", 2, 1, 1)]


def test_a_mismatched_expected_upper_returns_the_actual_upper_and_writes_nothing(spark, shard):
    shard.compare_and_append(updates(spark, [("a", 1, 0, 1)]), at(0), at(5))
    files, version = data_files(shard.path), shard.version
    result = shard.compare_and_append(updates(spark, [("b", 1, 0, 1)]), at(0), at(9))
    assert result == UpperMismatch(expected=at(0), actual=at(5))
    assert (shard.version, data_files(shard.path)) == (version, files)


@pytest.mark.parametrize(
    ("time", "bound"),
    [(4, "before the lower bound \\[5\\]"), (9, "not before the new upper \\[9\\]")],
)
def test_update_times_outside_the_batch_bounds_are_usage_errors(spark, shard, time, bound):
    shard.compare_and_append(updates(spark, []), at(0), at(5))
    with pytest.raises(ShardUsageError, match=bound):
        shard.compare_and_append(updates(spark, [("a", 1, time, 1)]), at(5), at(9))
    assert shard.refresh().upper == at(5)
    assert data_files(shard.path) == set()  # the rejected batch left no files behind


def driver_rows(rows: list[Row]) -> pa.Table:
    """``rows`` as a pyarrow Table: updates the driver holds (metadata), staged without Spark."""
    names = ("k", "v", "time", "diff")
    types = (pa.string(), pa.int64(), pa.int64(), pa.int64())
    columns = zip(*rows, strict=True)
    return pa.table([pa.array(c, t) for c, t in zip(columns, types, strict=True)], names=names)


@pytest.mark.parametrize("form", ["DataFrame", "pyarrow"])
def test_null_times_and_null_diffs_are_rejected_not_dropped(spark, shard, form):
    """A null diff is rejected even beside a non-null diff of the same record and time
    (which a plain sum would skip)."""
    cases = [[("a", 1, None, 1)], [("a", 1, 1, None)], [("a", 1, 1, None), ("a", 1, 1, 2)]]
    for rows in cases:
        batch = updates(spark, rows) if form == "DataFrame" else driver_rows(rows)
        with pytest.raises(ShardUsageError, match="null"):
            shard.compare_and_append(batch, at(0), at(5))
    assert shard.refresh().upper == at(0)


def test_driver_rows_are_consolidated_and_counted_per_time(spark, shard):
    rows = [("a", 1, 1, 1), ("a", 1, 1, 1), ("b", 2, 1, 1), ("b", 2, 1, -1), ("c", 3, 4, 1)]
    assert shard.append(driver_rows(rows), 0, 5) == {1: 1, 4: 1}
    assert table_rows(shard.path) == [("a", 1, 1, 2), ("c", 3, 4, 1)]


def test_wrong_columns_and_a_regressing_upper_are_usage_errors(spark, shard):
    extra = spark.createDataFrame([("a", 1, 0, 1, "x")], UPDATE_DDL + ", extra string")
    with pytest.raises(ShardUsageError, match="extra"):
        shard.compare_and_append(extra, at(0), at(5))
    with pytest.raises(ShardUsageError, match="before lower"):
        shard.compare_and_append(updates(spark, []), at(5), at(3))


def test_an_empty_batch_advances_the_upper_and_an_empty_upper_finishes(spark, shard):
    assert shard.compare_and_append(updates(spark, []), at(0), at(7)) is None
    assert (shard.upper, shard.version, data_files(shard.path)) == (at(7), 1, set())
    finished = TimeFrontier.empty()
    assert shard.compare_and_append(updates(spark, [("z", 9, 100, 1)]), at(7), finished) is None
    assert shard.refresh().upper.is_empty
    assert shard.compare_and_append(updates(spark, []), at(7), at(8)) == UpperMismatch(
        at(7), finished
    )
    # The shard stays readable up to its end.
    assert collected(shard.snapshot(10**12)) == [("z", 9, 10**12, 1)]


def test_a_heartbeat_commits_nothing(spark, shard):
    assert shard.compare_and_append(updates(spark, []), at(0), at(0)) is None
    assert shard.version == 0


# ---- append (replicated writers) --------------------------------------------------------


def test_the_stored_upper_follows_commits_and_a_table_put_in_its_place(spark, tmp_path):
    """A process keeps the uppers it read (the sensor asks for every source's each tick)
    and opens a table again only once its log moved: a commit since, a table moved into
    the same place at the same version, or no table any more, is seen at once. That an
    unchanged log is not read again is proved by damaging its first commit."""
    path = str(tmp_path / "shard")
    assert stored_upper(path) == at(0)  # no table yet
    shard = Shard.open(spark, path, KV)
    shard.compare_and_append(updates(spark, []), at(0), at(3))
    assert stored_upper(path) == at(3)
    shard.compare_and_append(updates(spark, []), at(3), at(5))
    assert stored_upper(path) == at(5)
    first_commit = Path(path, "_delta_log", f"{0:020d}.json")
    intact = first_commit.read_bytes()
    first_commit.write_bytes(b"not a commit")
    assert stored_upper(path) == at(5)
    first_commit.write_bytes(intact)

    other = Shard.open(spark, str(tmp_path / "other"), KV)
    other.compare_and_append(updates(spark, []), at(0), at(2))
    other.compare_and_append(updates(spark, []), at(2), at(9))
    assert other.version == shard.version
    shutil.rmtree(path)
    shutil.move(tmp_path / "other", path)
    assert stored_upper(path) == at(9)
    shutil.rmtree(path)
    assert stored_upper(path) == at(0)


def test_append_writes_once_and_a_rerun_writes_no_new_version(spark, shard):
    batch = updates(spark, [("a", 1, 0, 1), ("b", 2, 4, 1)])
    assert shard.append(batch, at(0), at(5)) == {0: 1, 4: 1}  # distinct updates per time
    version, files = shard.version, data_files(shard.path)
    assert shard.append(batch, at(0), at(5)) is None
    assert shard.append(updates(spark, []), at(2), at(4)) is None
    assert (shard.refresh().version, data_files(shard.path)) == (version, files)
    assert table_rows(shard.path) == [("a", 1, 0, 1), ("b", 2, 4, 1)]


@pytest.mark.parametrize("on_driver", [False, True], ids=["in Spark", "on the driver"])
def test_an_append_vouched_consolidated_is_written_as_given_and_a_false_vouch_is_caught(
    spark, shard, on_driver
):
    twice = updates(spark, [("a", 1, 3, 1), ("a", 1, 3, 1)])
    assert shard.append(twice, at(0), at(4), consolidated=True) == {3: 2}
    assert table_rows(shard.path) == [("a", 1, 3, 1), ("a", 1, 3, 1)]
    verdict = completeness(shard, 1, 4, on_driver=on_driver)
    assert not verdict.passed and "stored twice" in verdict.description


def test_appending_no_updates_moves_the_upper_without_a_data_file(spark, shard):
    assert shard.append(shard.no_updates(), at(0), at(4)) == {}
    assert (shard.refresh().upper, data_files(shard.path)) == (at(4), set())
    assert shard.append(shard.no_updates(), at(2), at(7)) == {}
    assert shard.refresh().upper == at(7)


def test_a_range_no_stored_file_reaches_is_recounted_as_empty_without_a_spark_job(
    spark, shard
):
    shard.append(updates(spark, [("a", 1, 1, 1)]), at(0), at(3))
    shard.append(updates(spark, [("b", 2, 4, 1)]), at(3), at(5))
    shard.append(updates(spark, []), at(5), at(7))
    DeltaTable(shard.path).delete("time = 4")  # a lost file: its commit announced one row
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("recount", "completeness of ranges without files")
    try:
        empty, lost = completeness(shard.refresh(), 5, 7), completeness(shard, 3, 5)
    finally:
        spark.sparkContext.setJobGroup("", "")
    assert list(tracker.getJobIdsForGroup("recount")) == []
    assert empty.passed
    assert not lost.passed and "count mismatches" in lost.description
    assert lost.figures["mismatches"] == [{"time": 4, "announced": 1, "found": 0}]
    assert completeness(shard, 1, 3).passed  # the file that is left is still recounted


@pytest.mark.parametrize("on_driver", [False, True], ids=["in Spark", "on the driver"])
def test_completeness_recounts_what_is_stored_against_what_was_announced(spark, shard, on_driver):
    shard.append(updates(spark, [("a", 1, 1, 1), ("b", None, 1, 1), ("c", 3, 2, -1)]), 0, 3)
    shard.append(updates(spark, [("a", 1, 4, -1)]), at(3), at(5))
    assert completeness(shard, 1, 5, on_driver=on_driver).passed
    DeltaTable(shard.path).delete("time = 1 and k = 'b'")  # one row of a file is lost
    verdict = completeness(shard.refresh(), 1, 5, on_driver=on_driver)
    assert verdict.figures["mismatches"] == [{"time": 1, "announced": 2, "found": 1}]
    assert completeness(shard, 2, 5, on_driver=on_driver).passed  # the range after it


def test_many_shards_recounted_together_get_each_their_own_verdict(spark, shard, tmp_path):
    """Completeness judged for many shards at once reads them in one job per layout, and
    each verdict is the one judged alone: a shard that lost a row fails alone, a copied
    table (whose files have the same names as another's) is counted under its own name,
    and a shard of another layout or on the driver is judged beside them."""
    shard.append(updates(spark, [("a", 1, 1, 1), ("b", None, 1, 1), ("c", 3, 2, -1)]), 0, 3)
    shard.append(updates(spark, [("a", 1, 4, -1)]), at(3), at(5))
    copied, damaged = tmp_path / "copied", tmp_path / "damaged"
    shutil.copytree(shard.path, copied)
    shutil.copytree(shard.path, damaged)
    DeltaTable(str(damaged)).delete("time = 1 and k = 'b'")  # one row of a file is lost
    other = Shard.open(spark, str(tmp_path / "other"), StructType([StructField("x", LongType())]))
    other.append(spark.createDataFrame([(7, 2, 1)], "x long, time long, diff long"), 0, 3)
    questions = [
        CompletenessQuestion(Shard.open(spark, str(copied), KV), 1, 5),
        CompletenessQuestion(shard, 1, 5),
        CompletenessQuestion(Shard.open(spark, str(damaged), KV), 1, 5),
        CompletenessQuestion(other, 1, 3),
        CompletenessQuestion(Shard.open(spark, str(damaged), KV), 2, 5, on_driver=True),
    ]

    verdicts = completeness_together(spark, questions)

    assert [v.passed for v in verdicts] == [True, True, False, True, True]
    assert verdicts[2].figures["mismatches"] == [{"time": 1, "announced": 2, "found": 1}]
    assert verdicts == [completeness(q.shard, q.lower, q.upper, on_driver=q.on_driver)
                        for q in questions]  # fmt: skip
    # Shards of one layout cost the jobs of one: a read of every file, then the counts.
    alike = Shard.open(spark, str(tmp_path / "alike"), KV)
    alike.append(updates(spark, [("d", 4, 2, 1)]), 0, 5)
    jobs = [
        jobs_of(spark, lambda: completeness(shard, 1, 5)),
        jobs_of(spark, lambda: completeness_together(
            spark, [CompletenessQuestion(alike, 1, 5), CompletenessQuestion(shard, 1, 5)])),
    ]  # fmt: skip
    assert jobs[0] == jobs[1] > 0


def jobs_of(spark: SparkSession, action: Callable[[], object]) -> int:
    """The Spark jobs ``action`` runs."""
    tracker, group = spark.sparkContext.statusTracker(), f"jobs-{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, "counted")
    try:
        action()
    finally:
        spark.sparkContext.setJobGroup("", "")
    return len(tracker.getJobIdsForGroup(group))


def test_append_with_a_gap_is_a_usage_error(spark, shard):
    with pytest.raises(ShardUsageError, match="gap"):
        shard.append(updates(spark, [("a", 1, 3, 1)]), at(2), at(5))


@pytest.mark.parametrize("form", ["DataFrame", "pyarrow"])
def test_append_overlapping_the_upper_writes_only_the_uncovered_times(spark, shard, form):
    shard.append(updates(spark, [("a", 1, 1, 1)]), at(0), at(3))
    rows = [("a", 1, 1, 1), ("b", 2, 3, 1), ("c", 3, 5, 1)]
    overlapping = updates(spark, rows) if form == "DataFrame" else driver_rows(rows)
    assert shard.append(overlapping, at(0), at(6)) == {3: 1, 5: 1}
    assert shard.upper == at(6)
    assert table_rows(shard.path) == [("a", 1, 1, 1), ("b", 2, 3, 1), ("c", 3, 5, 1)]


# ---- reads ------------------------------------------------------------------------------


@pytest.fixture
def history(spark, shard) -> Shard:
    """a: +1@1, -1@4; b: +2@2; c: +1@5 (upper 6)."""
    shard.compare_and_append(updates(spark, [("a", 1, 1, 1), ("b", 2, 2, 2)]), at(0), at(3))
    shard.compare_and_append(updates(spark, [("a", 1, 4, -1), ("c", 3, 5, 1)]), at(3), at(6))
    return shard


def test_snapshot_accumulates_up_to_as_of(history):
    assert collected(history.snapshot(0)) == []
    assert collected(history.snapshot(3)) == [("a", 1, 3, 1), ("b", 2, 3, 2)]
    assert collected(history.snapshot(5)) == [("b", 2, 5, 2), ("c", 3, 5, 1)]


def test_size_counts_the_records_a_snapshot_holds(history):
    for time in range(6):
        assert history.size(time) == sum(row[-1] for row in collected(history.snapshot(time)))
    assert [history.size(t) for t in (0, 3, 5)] == [0, 3, 3]


def test_snapshot_outside_since_and_upper_names_the_violated_bound(history):
    with pytest.raises(ShardUsageError, match="not before upper \\[6\\]"):
        history.snapshot(6)
    history.downgrade_since(at(2))
    with pytest.raises(ShardUsageError, match="before since \\[2\\]"):
        history.snapshot(1)


def test_a_stale_handle_sees_the_upper_another_handle_moved(spark, history):
    stale = Shard.open(spark, history.path, KV)
    history.compare_and_append(updates(spark, [("d", 4, 6, 1)]), at(6), at(8))
    assert ("d", 4, 7, 1) in collected(stale.snapshot(7))


def test_listen_returns_the_updates_in_the_half_open_range(history):
    assert collected(history.listen(2)) == [("a", 1, 4, -1), ("c", 3, 5, 1)]
    assert collected(history.listen(0, 2)) == [("a", 1, 1, 1), ("b", 2, 2, 2)]
    assert collected(history.listen(5)) == []
    with pytest.raises(ShardUsageError, match="until 6"):
        history.listen(0, 6)


def test_updates_through_reads_on_the_driver_what_listen_reads_in_spark(history):
    def driver(until: int, after: int | None = None) -> list[Row]:
        rows = history.updates_through(until, after=after).to_pylist()
        return sorted(tuple(row.values()) for row in rows)

    assert driver(0) == []
    assert driver(4) == collected(history.listen(0, 4))
    assert driver(5) == collected(history.listen(0, 5))
    assert driver(5, after=2) == collected(history.listen(2, 5))
    assert driver(5, after=2) == [("a", 1, 4, -1), ("c", 3, 5, 1)]
    assert driver(5, after=4) == [("c", 3, 5, 1)]  # a file holding times 4 and 5
    with pytest.raises(ShardUsageError, match="not before upper \\[6\\]"):
        history.updates_through(6)
    history.downgrade_since(at(4))
    history.compact()
    assert driver(5) == [("b", 2, 4, 2), ("c", 3, 5, 1)]  # compacted rows come forwarded
    with pytest.raises(ShardUsageError, match="before since \\[4\\]"):
        history.updates_through(3)


# ---- since, compaction, gc --------------------------------------------------------------


def test_since_only_advances(history):
    history.downgrade_since(at(3))
    version = history.version
    history.downgrade_since(at(3))
    assert history.version == version  # no-op, no commit
    with pytest.raises(ShardUsageError, match="only advance"):
        history.downgrade_since(at(2))


def test_logical_compaction_forwards_consolidates_and_keeps_snapshots(history):
    before = {t: collected(history.snapshot(t)) for t in range(4, 6)}
    history.downgrade_since(at(4))
    history.compact()
    # a's +1@1 and -1@4 met at 4 and cancelled; b moved to 4; c untouched.
    assert table_rows(history.path) == [("b", 2, 4, 2), ("c", 3, 5, 1)]
    assert {t: collected(history.snapshot(t)) for t in range(4, 6)} == before
    assert collected(history.listen(4)) == [("c", 3, 5, 1)]


def test_physical_compaction_merges_small_files_once(spark, shard):
    for t in range(4):
        shard.compare_and_append(updates(spark, [(f"k{t}", t, t, 1)]), at(t), at(t + 1))
    assert len(DeltaTable(shard.path).file_uris()) == 4
    shard.compact()
    assert len(DeltaTable(shard.path).file_uris()) == 1
    assert table_rows(shard.path) == [(f"k{t}", t, t, 1) for t in range(4)]
    version = shard.version
    shard.compact()
    assert shard.refresh().version == version  # nothing left to do: no new version


def test_a_shard_appended_from_the_driver_every_window_stays_a_few_files(spark, shard):
    """A remap gains a small file a window; its appends merge them as they go, so a year
    of windows between two maintenances is a few files to read, not one per window. Every
    snapshot, every update and every progress statement stays as appended, and a reader
    still on a version from before a merge reads it whole."""
    appended: list[Row] = []
    windows = 3 * delta_io.MERGE_AT + 2
    pinned = None
    for t in range(windows):
        rows = [(f"k{t % 5}", t, t, 1)] + ([(f"k{(t - 1) % 5}", t - 1, t, -1)] if t else [])
        if t == delta_io.MERGE_AT - 1:
            pinned = Shard.open(spark, shard.path, KV)  # the version just before a merge
        assert shard.compare_and_append(driver_rows(rows), at(t), at(t + 1)) is None
        appended += rows
        assert len(committed_files(shard.path)) < delta_io.MERGE_AT
    # a merge at every MERGE_AT - 1 appends after the first: one merged file and the rest
    assert len(committed_files(shard.path)) == 1 + (windows - 1) % (delta_io.MERGE_AT - 1)
    assert table_rows(shard.path) == sorted(appended)
    stored = shard.updates_through(windows - 1)
    assert sorted(tuple(row.values()) for row in stored.to_pylist()) == sorted(appended)
    for t in (0, delta_io.MERGE_AT, windows - 1):
        live = {r[:2] for r in appended if r[2] <= t and r[3] > 0} - {
            r[:2] for r in appended if r[2] <= t and r[3] < 0
        }
        assert collected(shard.snapshot(t)) == sorted((*row, t, 1) for row in live)
    assert [p.counts for p in shard.progress()] == [
        ((t, 2 if t else 1),) for t in range(windows)
    ]  # one statement per append: a merge records none
    assert collected(pinned.snapshot(delta_io.MERGE_AT - 2)) == [
        (f"k{(delta_io.MERGE_AT - 2) % 5}", delta_io.MERGE_AT - 2, delta_io.MERGE_AT - 2, 1)
    ]


def test_a_shard_appended_by_spark_keeps_its_files_for_maintenance(spark, shard):
    """Data shards (Spark appends) are not merged as they go, not even by the empty
    batches the driver appends to them (a clean window's errors): their rows must not
    pass through the driver; that is compaction's work, on the executors."""
    for t in range(delta_io.MERGE_AT + 1):
        shard.compare_and_append(updates(spark, [(f"k{t}", t, t, 1)]), at(t), at(t + 1))
    end = delta_io.MERGE_AT + 1
    assert shard.compare_and_append(shard.no_updates(), at(end), at(end + 1)) is None
    assert shard.append(shard.no_updates(), end + 1, end + 2) == {}
    assert shard.refresh().upper == at(end + 2)
    assert len(committed_files(shard.path)) == delta_io.MERGE_AT + 1


def test_a_merge_that_loses_the_race_changes_nothing_and_leaves_no_file(spark, shard):
    """A merge commits once at the version it read: after another commit it merges
    nothing, and the file it wrote is gone."""
    for t in range(delta_io.MERGE_AT - 1):
        shard.compare_and_append(driver_rows([(f"k{t}", t, t, 1)]), at(t), at(t + 1))
    stale = DeltaTable(shard.path)
    t = delta_io.MERGE_AT - 1
    shard.compare_and_append(updates(spark, [(f"k{t}", t, t, 1)]), at(t), at(t + 1))
    before = data_files(shard.path)
    schema = pa.schema([("k", pa.string()), ("v", pa.int64()), ("time", pa.int64()),
                        ("diff", pa.int64())])  # fmt: skip
    fresh = DeltaTable(shard.path)
    chosen = delta_io.files_to_merge(delta_io.live_files(fresh))
    assert len(chosen) == delta_io.MERGE_AT
    assert not merge_files(stale, shard.path, chosen, schema, "merge-batch", sort_by="time")
    assert data_files(shard.path) == before
    assert len(committed_files(shard.path)) == delta_io.MERGE_AT
    assert merge_files(fresh, shard.path, chosen, schema, "again", sort_by="time")
    assert table_rows(shard.path) == [(f"k{t}", t, t, 1) for t in range(delta_io.MERGE_AT)]
    assert len(committed_files(shard.path)) == 1


def test_gc_keeps_what_readers_may_still_need_and_then_removes_replaced_files(spark, history):
    old = Shard.open(spark, history.path, KV)  # a reader still on the pre-compaction version
    history.downgrade_since(at(4))
    history.compact()
    assert history.gc(retention_hours=1) == []
    assert collected(old.snapshot(5)) == [("b", 2, 5, 2), ("c", 3, 5, 1)]
    removed = history.gc(retention_hours=0)
    assert len(removed) == 2
    assert data_files(history.path) == committed_files(history.path)
    assert collected(history.snapshot(5)) == [("b", 2, 5, 2), ("c", 3, 5, 1)]


def test_compaction_at_an_empty_since_drops_everything(history):
    history.downgrade_since(TimeFrontier.empty())
    history.compact()
    assert committed_files(history.path) == set()
    with pytest.raises(ShardUsageError, match="since \\[\\]"):
        history.snapshot(5)


# ---- progress ---------------------------------------------------------------------------


def test_progress_statements_tile_the_time_line_with_distinct_update_counts(spark, shard):
    shard.compare_and_append(updates(spark, [("a", 1, 0, 1), ("b", 1, 0, 1)]), at(0), at(2))
    shard.compare_and_append(updates(spark, []), at(2), at(4))
    many_times = [("a", 1, 4, 1), ("a", 1, 4, 1), ("a", 1, 6, 1), ("b", 1, 6, 1), ("c", 1, 6, 1)]
    shard.compare_and_append(updates(spark, many_times), at(4), at(7))
    shard.downgrade_since(at(1))  # commits that do not move the upper record nothing
    shard.compare_and_append(updates(spark, []), at(7), TimeFrontier.empty())
    assert shard.progress() == [
        ProgressStatement(at(0), at(2), ((0, 2),), 1),
        ProgressStatement(at(2), at(4), (), 2),
        ProgressStatement(at(4), at(7), ((4, 1), (6, 3)), 3),
        ProgressStatement(at(7), TimeFrontier.empty(), (), 5),
    ]
    # From a time on: the statements reaching it, the first starting at or before it.
    assert [s.version for s in shard.progress(from_time=5)] == [3, 5]
    assert [s.version for s in shard.progress(from_time=0)] == [1, 2, 3, 5]


def test_a_bounded_progress_read_reads_only_the_commits_its_range_needs(spark, shard):
    """A long history: the statements from a recent time come from the last commits
    alone (delta-rs history with a limit), and still chain from a lower before it."""
    for time in range(40):
        shard.compare_and_append(updates(spark, []), at(time), at(time + 1))
    recent = shard.progress(from_time=38)
    assert [(s.lower.time, s.upper.time) for s in recent] == [(38, 39), (39, 40)]
    assert len(shard.progress(from_time=0)) == len(shard.progress()) == 40
    asked: list[int | None] = []
    history = shard._table.history  # the real read, observed: which limits it is asked
    shard._table.history = lambda limit=None: asked.append(limit) or history(limit)
    shard.progress(from_time=38)
    assert asked == [16], "one read of the newest commits"


# ---- the Delta layout -------------------------------------------------------------------


def test_files_match_the_delta_schema_and_carry_statistics(spark, tmp_path):
    schema = StructType(
        [
            StructField("n", IntegerType()),
            StructField("s", StringType()),
            StructField("at", TimestampType()),
        ]
    )
    shard = Shard.open(spark, str(tmp_path / "typed"), schema)
    moment = datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)
    rows = [(1, "x", moment, 3, 1), (None, None, None, 4, 2)]
    ddl = "n int, s string, at timestamp, time long, diff long"
    shard.compare_and_append(spark.createDataFrame([], ddl), at(0), at(3))
    df = spark.createDataFrame(rows, ddl)
    assert shard.compare_and_append(df, at(3), at(5)) is None

    table = DeltaTable(shard.path)
    assert all(field.nullable for field in table.schema().fields)
    read = table.to_pyarrow_table()
    assert str(read.schema.field("at").type) == "timestamp[us, tz=UTC]"
    assert sorted(read.to_pylist(), key=lambda r: r["time"]) == [
        {"n": 1, "s": "x", "at": moment, "time": 3, "diff": 1},
        {"n": None, "s": None, "at": None, "time": 4, "diff": 2},
    ]
    for rel in committed_files(shard.path):
        physical = pq.read_metadata(os.path.join(shard.path, rel)).schema
        assert "timeUnit=microseconds" in str(physical.column(2).logical_type)
    log = Path(shard.path, "_delta_log", f"{shard.version:020d}.json").read_text()
    adds = [json.loads(line)["add"] for line in log.splitlines() if '"add"' in line]
    stats = [json.loads(add["stats"]) for add in adds]
    assert sum(s["numRecords"] for s in stats) == 2
    assert min(s["minValues"]["time"] for s in stats) == 3
    assert max(s["maxValues"]["time"] for s in stats) == 4
    assert sum(s["nullCount"]["n"] for s in stats) == 1


# ---- errors and commit conflicts ---------------------------------------------------------


def test_a_failed_staging_write_is_a_definite_storage_error(spark, shard):
    Path(shard.path, "data").write_text("not a folder")  # the location refuses the write
    with pytest.raises(ShardStorageError) as error:
        shard.compare_and_append(updates(spark, [("a", 1, 0, 1)]), at(0), at(5))
    assert error.value.definitely_not_written
    assert (shard.refresh().upper, shard.version) == (at(0), 0)


def test_a_commit_that_landed_despite_an_error_is_recognised_not_repeated(spark, shard):
    DeltaTable(shard.path).alter.set_table_properties({"delta.checkpointInterval": "1"})
    shard.refresh()
    # Block the checkpoint that follows the next commit: the commit lands, the call fails.
    blocker = Path(shard.path, "_delta_log", f"{shard.version + 1:020d}.checkpoint.parquet")
    blocker.mkdir()
    assert shard.compare_and_append(updates(spark, [("a", 1, 0, 1)]), at(0), at(5)) is None
    assert shard.upper == at(5)
    assert table_rows(shard.path) == [("a", 1, 0, 1)]


def test_a_commit_that_failed_is_definite_once_the_log_shows_it_absent(spark, shard, monkeypatch):
    staged = shard.stage(updates(spark, [("a", 1, 0, 1)]))

    def refuse(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(DeltaTable, "create_write_transaction", refuse)
    with pytest.raises(ShardStorageError) as error:
        shard.commit(staged, at(0), at(5))
    assert error.value.definitely_not_written


def test_a_commit_failure_with_an_unreadable_log_is_indeterminate(spark, shard, monkeypatch):
    staged = shard.stage(updates(spark, [("a", 1, 0, 1)]))

    def refuse(*args, **kwargs):
        raise OSError("connection reset")

    monkeypatch.setattr(DeltaTable, "create_write_transaction", refuse)
    # The log cannot be read again: neither its next commit looked up nor the log listed.
    monkeypatch.setattr(files, "is_object", refuse)
    monkeypatch.setattr(DeltaTable, "update_incremental", refuse)
    with pytest.raises(ShardStorageError) as error:
        shard.commit(staged, at(0), at(5))
    assert not error.value.definitely_not_written


def test_a_stale_writer_loses_to_a_concurrent_append_and_learns_the_upper(spark, shard):
    other = Shard.open(spark, shard.path, KV)
    staged = other.stage(updates(spark, [("b", 2, 1, 1)]))
    assert shard.compare_and_append(updates(spark, [("a", 1, 1, 1)]), at(0), at(3)) is None
    # ``other`` still holds version 0 with upper [0]: its commit conflicts in the log.
    assert other.commit(staged, at(0), at(4)) == UpperMismatch(at(0), at(3))
    assert table_rows(shard.path) == [("a", 1, 1, 1)]
    assert not Path(shard.path, "data", staged.batch_id).exists()


def test_a_stale_writer_retries_over_a_commit_that_left_the_upper_alone(spark, shard):
    writer = Shard.open(spark, shard.path, KV)
    staged = writer.stage(updates(spark, [("a", 1, 2, 1)]))
    shard.downgrade_since(at(1))
    assert writer.commit(staged, at(0), at(4)) is None
    assert (writer.version, writer.upper, writer.since) == (2, at(4), at(1))
    assert table_rows(shard.path) == [("a", 1, 2, 1)]


def test_an_empty_shard_has_size_zero_without_a_spark_job_and_still_checks_its_bounds(
    spark: SparkSession, shard
) -> None:
    shard.compare_and_append(updates(spark, []), at(0), at(5))  # a heartbeat: no file
    scheduler = spark.sparkContext._jsc.sc().dagScheduler()
    before = scheduler.nextJobId()
    assert shard.size(3) == 0
    assert scheduler.nextJobId() == before
    with pytest.raises(ShardUsageError):
        shard.size(7)  # not complete yet: refused, empty or not


def test_a_log_read_on_from_where_it_stands_lists_nothing_and_a_new_commit_is_found(
    tmp_path, monkeypatch
):
    """While the commit after a table's version is absent, reading its log on looks that
    file up and lists nothing; once another writer committed, the table moves to it."""
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": [0]}))
    table = DeltaTable(path)
    listed: list[int] = []
    update = DeltaTable.update_incremental

    def counted(self: DeltaTable) -> None:
        listed.append(self.version())
        update(self)

    monkeypatch.setattr(DeltaTable, "update_incremental", counted)
    assert read_to_newest(table, path).version() == 0 and listed == []
    write_deltalake(path, pa.table({"id": [1]}), mode="append")
    assert read_to_newest(table, path).version() == 1 and listed == [0]


def test_a_look_after_one_that_found_no_table_lists_the_log_alone_and_finds_it(
    tmp_path, monkeypatch
):
    """Known to hold no table, a location is looked at by one listing of its log folder,
    without reading ``_last_checkpoint``; that finds a table made since, even once a log
    cleanup removed its first commits."""
    path = str(tmp_path / "t")
    read: list[str] = []
    read_bytes = files.read_bytes

    def counted(location: str) -> bytes:
        read.append(location)
        return read_bytes(location)

    monkeypatch.setattr(files, "read_bytes", counted)
    assert log_mark(path) is None and len(read) == 1  # a first look reads the checkpoint's
    assert log_mark(path, NO_TABLE) is None and len(read) == 1
    write_deltalake(path, pa.table({"id": [0]}))
    write_deltalake(path, pa.table({"id": [1]}), mode="append")
    found = log_mark(path, NO_TABLE)
    assert found is not None and found.version == 1 and len(read) == 1
    DeltaTable(path).create_checkpoint()
    os.remove(os.path.join(path, "_delta_log", f"{0:020d}.json"))
    assert log_mark(path, NO_TABLE) == found == log_mark(path)


def test_a_table_to_read_is_opened_again_only_once_its_log_moved(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    read: list[str] = []
    read_bytes = files.read_bytes
    monkeypatch.setattr(files, "read_bytes", lambda at: read.append(at) or read_bytes(at))
    assert table_to_read(path) is None and len(read) == 1  # its _last_checkpoint, looked for
    assert table_to_read(path) is None and len(read) == 1  # known empty: a listing alone
    write_deltalake(path, pa.table({"id": [0]}))
    first = table_to_read(path)
    assert first is not None and first.version() == 0
    assert table_to_read(path) is first  # the same log: no open
    write_deltalake(path, pa.table({"id": [1]}), mode="append")
    second = table_to_read(path)
    assert second is not None and second is not first and second.version() == 1
    assert sorted(second.to_pyarrow_table()["id"].to_pylist()) == [0, 1]
    # A table put in its place (a rebuild's swap) is a new log: opened afresh.
    shutil.rmtree(path)
    write_deltalake(path, pa.table({"id": [7]}))
    swapped = table_to_read(path)
    assert swapped is not None and swapped.to_pyarrow_table()["id"].to_pylist() == [7]
