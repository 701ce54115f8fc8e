"""The data-parallel side of CDCv2: the Spark reader agrees with the reference reader,
names contradictions, and the stream files, dump formats, completeness check and
shard export all read back to what was written."""

from __future__ import annotations

import base64
import random
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdc_core.cdcv2 import DataColumns, check_completeness, codec_json, read_stream
from cdc_core.cdcv2.chain import CountDiscrepancy
from cdc_core.cdcv2.codec_avro import AvroCodec
from cdc_core.cdcv2.export import export_shard, export_updates
from cdc_core.cdcv2.model import (
    CountDisagreement,
    CountExceeded,
    DiffContradiction,
    MalformedMessage,
    Progress,
    UpdateBeforeStart,
    Updates,
)
from cdc_core.cdcv2.reference import read_all
from cdc_core.cdcv2.source_format import decode_cdcv2_dumps
from cdc_core.cdcv2.stream_files import Encoding, read_stream_files, write_parts, write_stream
from cdc_core.frontier import TimeFrontier
from cdc_core.schemas import DUMP_RECORD
from cdc_core.shard import ProgressStatement, Shard, ShardUsageError
from cdc_core.spark import planned_as
from tests.cdcv2.test_cdcv2_scramble import retile, scramble
from tests.spark_examples import SPARK_EXAMPLES

T = TimeFrontier.at
CLOSED = TimeFrontier.empty()
DDL = "k long, v string, time long, diff long"
DATA = StructType([StructField("k", LongType()), StructField("v", StringType())])
COLUMNS = DataColumns(DATA)
ROWS = st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", None]))


def update_rows(messages: list) -> list[tuple]:
    return [(*d, t, diff) for m in messages if isinstance(m, Updates) for d, t, diff in m.updates]


def facts_of(df: DataFrame) -> dict:
    rows = df.collect()
    facts = {((r.k, r.v), r.time): r.diff for r in rows}
    assert len(facts) == len(rows), "a (data, time) appears twice"
    return facts


def reference_facts(updates: list) -> dict:
    return {(data, time): diff for data, time, diff in updates}


@settings(SPARK_EXAMPLES, max_examples=5)
@given(
    facts=st.dictionaries(st.tuples(ROWS, st.integers(0, 8)), st.sampled_from([-2, -1, 1, 3])),
    closed=st.booleans(),
    rng=st.randoms(use_true_random=False),
)
def test_spark_reader_agrees_with_the_reference_reader(
    spark: SparkSession, facts: dict, closed: bool, rng: random.Random
) -> None:
    counts = Counter(time for _, time in facts)
    whole = Progress(T(0), CLOSED if closed else T(10), tuple(counts.items()))
    updates = [(d, t, diff) for (d, t), diff in facts.items()]
    mangled = scramble(updates, retile([whole], rng), rng)
    # Lose some messages (each a true fact) so that the frontier can stop anywhere.
    messages = [message for message in mangled if rng.random() > 0.2]

    expected_updates, expected_frontier = read_all(messages)
    received = [m for m in messages if isinstance(m, Progress)]
    imported = read_stream(spark.createDataFrame(update_rows(messages), DDL), received)
    assert imported.frontier == expected_frontier
    assert facts_of(imported.updates) == reference_facts(expected_updates)


def test_spark_reader_names_each_contradiction_with_its_times(spark: SparkSession) -> None:
    def read(rows: list[tuple], *statements: Progress, start: TimeFrontier | None = None):
        return read_stream(spark.createDataFrame(rows, DDL), statements, start)

    with pytest.raises(DiffContradiction) as diff_error:
        read([(1, "a", 4, 1), (1, "a", 4, 1), (1, "a", 4, -1), (2, "a", 5, 1)])
    assert diff_error.value.times == (4,)
    with pytest.raises(CountExceeded) as exceeded:
        read([(1, "a", 2, 1), (2, "a", 2, 1), (3, "a", 6, 1)], Progress(T(0), T(5), ((2, 1),)))
    assert exceeded.value.times == (2,)
    with pytest.raises(CountDisagreement) as disagreement:
        read([], Progress(T(0), T(5), ((3, 1),)), Progress(T(2), T(4), ((3, 2),)))
    assert disagreement.value.times == (3,)
    with pytest.raises(MalformedMessage) as zero:
        read([(1, "a", 7, 0)])
    assert zero.value.times == (7,)
    with pytest.raises(UpdateBeforeStart) as early:
        read([(1, "a", 3, 1)], start=T(5))
    assert early.value.times == (3,)


@pytest.mark.parametrize("encoding", list(Encoding))
def test_stream_files_read_back_even_when_written_twice(
    spark: SparkSession, tmp_path: Path, encoding: Encoding
) -> None:
    rows = [(1, "a", 0, 1), (1, "a", 0, 1), (2, None, 3, -1), (3, "c", 5, 2), (3, "c", 5, -2)]
    stream = export_updates(spark.createDataFrame(rows, DDL).repartition(2), 0, T(7), 1)
    first = write_stream(stream, tmp_path, encoding, batch_size=1)
    write_stream(stream, tmp_path, encoding, batch_size=2)  # a re-run: every fact twice

    assert (first.updates, first.update_messages) == (2, 2)
    assert all(Path(f).name.endswith(encoding.value) for f in first.update_files)
    decoded = read_stream_files(spark, str(tmp_path), DATA, encoding)
    assert decoded.errors.count() == 0
    imported = read_stream(decoded.updates, decoded.progress)
    assert imported.frontier == T(7)
    assert facts_of(imported.updates) == {((1, "a"), 0): 2, ((2, None), 3): -1}


@settings(SPARK_EXAMPLES, max_examples=4)
@given(
    facts=st.dictionaries(st.tuples(ROWS, st.integers(0, 11)), st.sampled_from([-1, 1, 2])),
    cuts=st.sets(st.integers(1, 11), max_size=3),
)
def test_a_stream_split_into_parts_reads_back_part_by_part_and_whole(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, facts: dict, cuts: set[int]
) -> None:
    rows = [(*data, time, diff) for (data, time), diff in facts.items()]
    stream = export_updates(spark.createDataFrame(rows, DDL).repartition(3), 0, T(12), 2)
    bounds = [0, *sorted(cuts), 12]
    root = tmp_path_factory.mktemp("parts")
    parts = [(lo, T(hi), root / f"part-{lo}") for lo, hi in zip(bounds, bounds[1:], strict=False)]

    # Tasks see their rows in Arrow batches of 2: a part's rows span several batches.
    batch_rows = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(batch_rows)
    spark.conf.set(batch_rows, "2")
    try:
        written = write_parts(stream, parts, Encoding.JSON, batch_size=2)
    finally:
        spark.conf.set(batch_rows, before)

    expected = {((k, v), t): d for (k, v, t, d) in rows}
    tasks = stream.updates.rdd.getNumPartitions()
    for (lo, hi, folder), files in zip(parts, written, strict=True):
        decoded = read_stream_files(spark, str(folder), DATA, Encoding.JSON)
        part = read_stream(decoded.updates, decoded.progress, T(lo))
        mine = {fact: d for fact, d in expected.items() if lo <= fact[1] < hi.time}
        assert (part.frontier, facts_of(part.updates)) == (hi, mine)
        assert files.updates == len(mine)
        assert files.progress_statements == len(decoded.progress)
        assert len(files.update_files) <= tasks  # at most one file per task
    decoded = read_stream_files(spark, [str(f) for _, _, f in parts], DATA, Encoding.JSON)
    whole = read_stream(decoded.updates, decoded.progress)
    assert (whole.frontier, facts_of(whole.updates)) == (T(12), expected)


def test_the_tasks_writing_a_stream_count_its_progress_in_the_one_job_that_writes_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    """No counting job before the writing one: each part's progress statements come from
    the counts of the tasks that wrote its updates, and say exactly what its files hold.
    Planned as a small run's export is (statically: adaptive execution would run each
    shuffle's map stage as a job of its own)."""
    rows = [(1, "a", 1, 1), (2, "b", 1, 1), (2, "b", 1, 1), (3, "c", 2, -1), (3, "c", 5, 1),
            (3, "c", 5, -1), (1, "a", 5, -1), (4, None, 7, 2)]  # fmt: skip
    updates = spark.createDataFrame(rows, DDL).repartition(3)
    parts = [(0, T(3), tmp_path / "early"), (3, T(9), tmp_path / "late")]
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("export", "a stream written in two parts")
    try:
        with planned_as(spark, True, {}):
            written = write_parts(export_updates(updates, 0, T(9)), parts, Encoding.JSON)
    finally:
        spark.sparkContext.setJobGroup("", "")
    assert len(tracker.getJobIdsForGroup("export")) == 1
    counted = {"early": [(1, 2), (2, 1)], "late": [(5, 1), (7, 1)]}  # (3, "c", 5) sums to 0
    for (_, _, folder), files in zip(parts, written, strict=True):
        decoded = read_stream_files(spark, str(folder), DATA, Encoding.JSON)
        assert [c for p in decoded.progress for c in p.counts] == counted[folder.name]
        assert files.updates == sum(n for _, n in counted[folder.name])


def _dump_frame(spark: SparkSession, rows: list[tuple[int, str | None]]) -> DataFrame:
    """Dump records of partition 0 with the given offsets and payloads."""
    records = [("topic", 0, offset, 1000 + offset, None, text, "d.json") for offset, text in rows]
    return spark.createDataFrame(records, DUMP_RECORD)


def test_cdcv2_json_dumps_keep_bad_messages_as_errors_with_their_position(
    spark: SparkSession,
) -> None:
    messages = [
        Progress(T(0), T(4), ((1, 1), (2, 1))),
        Updates((((1, "a"), 1, 1),)),
        Updates((((1, "a"), 1, 1), ((2, "b"), 2, 1))),  # a re-batched copy
    ]
    payloads = [codec_json.encode(m, COLUMNS) for m in messages]
    dumps = [(0, payloads[0]), (1, payloads[1]), (2, '{"updates": [{"data": 1}]}'), (3, None)]
    decoded = decode_cdcv2_dumps(_dump_frame(spark, dumps), DATA, "cdcv2-json")

    errors = sorted((r.partition, r.offset, r.topic, r.file) for r in decoded.errors.collect())
    assert errors == [(0, 2, "topic", "d.json"), (0, 3, "topic", "d.json")]
    imported = read_stream(decoded.updates, decoded.progress)
    assert imported.frontier == T(2)  # the update at time 2 was only in the bad message
    assert facts_of(imported.updates) == {((1, "a"), 1): 1}

    dumps[2] = (2, payloads[2])
    decoded = decode_cdcv2_dumps(_dump_frame(spark, dumps), DATA, "cdcv2-json")
    assert read_stream(decoded.updates, decoded.progress).frontier == T(4)


def test_cdcv2_avro_dumps_carry_confluent_messages_as_base64(spark: SparkSession) -> None:
    codec = AvroCodec(DATA)
    messages = [Progress(T(0), CLOSED, ((5, 1),)), Updates((((7, None), 5, -1),))]
    payloads = [base64.b64encode(codec.encode(m, schema_id=42)).decode() for m in messages]
    dumps = [*enumerate(payloads), (2, "%%%"), (3, base64.b64encode(b"\x07junk").decode())]
    decoded = decode_cdcv2_dumps(_dump_frame(spark, dumps), DATA, "cdcv2-avro")

    assert sorted(r.offset for r in decoded.errors.collect()) == [2, 3]
    imported = read_stream(decoded.updates, decoded.progress)
    assert imported.frontier == CLOSED
    assert facts_of(imported.updates) == {((7, None), 5): -1}


def test_completeness_reports_each_time_whose_count_is_off(spark: SparkSession) -> None:
    rows = [(1, "a", 1, 1), (1, "a", 1, 1), (2, "a", 3, 1), (3, "a", 6, 1), (4, "a", 9, 1)]
    progress = [
        ProgressStatement(T(0), T(4), ((1, 1), (3, 2)), version=1),
        ProgressStatement(T(4), T(8), ((6, 1),), version=2),
    ]
    report = check_completeness(spark.createDataFrame(rows, DDL), progress, 0, T(12))
    assert report.discrepancies == (CountDiscrepancy(time=3, announced=2, found=1),)
    assert report.duplicated_times == (1,)  # one (data, time) stored twice
    assert report.covered == T(8)  # time 9 is not covered by any statement
    assert not report.complete

    clean = check_completeness(spark.createDataFrame(rows[1:], DDL), progress, 4, T(8))
    assert clean.complete


def test_shard_windows_export_as_streams_that_chain(spark: SparkSession, tmp_path: Path) -> None:
    shard = Shard.open(spark, str(tmp_path / "changes"), DATA)
    first = [(1, "a", 0, 1), (2, "b", 3, 1), (2, "b", 4, -1)]
    second = [(1, "a", 6, -1), (1, "c", 6, 1)]
    assert shard.compare_and_append(spark.createDataFrame(first, DDL), T(0), T(5)) is None
    assert shard.compare_and_append(spark.createDataFrame(second, DDL), T(5), T(9)) is None

    windows = [export_shard(shard, 0, T(5)), export_shard(shard, 5)]
    assert windows[1].upper == T(9)
    messages: list = [p for w in windows for p in w.progress]
    for window in windows:
        rows = window.updates.collect()
        messages.append(Updates(tuple(((r.k, r.v), r.time, r.diff) for r in rows)))
    updates, frontier = read_all(messages)
    assert frontier == T(9)
    assert reference_facts(updates) == {((d[0], d[1]), d[2]): d[3] for d in first + second}

    with pytest.raises(ShardUsageError):
        export_shard(shard, 0, T(10))

    # From the since on, the history before it is folded into the since.
    shard.downgrade_since(T(4))
    folded = export_shard(shard, 4)
    batch = Updates(tuple(((r.k, r.v), r.time, r.diff) for r in folded.updates.collect()))
    updates, frontier = read_all([*folded.progress, batch], T(4))
    assert frontier == T(9)
    assert reference_facts(updates) == {((1, "a"), 4): 1, ((1, "a"), 6): -1, ((1, "c"), 6): 1}
    with pytest.raises(ShardUsageError):
        export_shard(shard, 3)
