"""Many UPSERT (or DEBEZIUM UPSERT) sources' envelopes applied by one plan, their
``changes`` and ``errors`` written by one job each.

Why: once their records are reclocked together (``source.together``), each source
would still plan its envelope over its own columns and write each output with a job of
its own, and those plans and jobs cost far more than the few records a source adds in a
window. Here ``apply_upsert_together`` applies every source's UPSERT envelope in one
plan, the prior contents of the keys they touch come from one job reading every
source's published ``state`` files in the tasks, and ``append_together`` writes every
``changes`` table by one job and every ``errors`` table by another, each table
committing its own files.

Only the plain case is served here: the UPSERT or DEBEZIUM UPSERT envelope (one of
them per call), JSON keys and values, no metadata columns, a DEBEZIUM UPSERT source
whose batch holds no truncate (``truncating``), and a source whose prior contents are
its published ``state`` (or nothing at all). The errors its keys held before are read
from every source's ``errors`` by one scan (``read_together``). Any other source
applies its envelope on its own, as it always did.

Invariant: a source's ``changes`` and ``errors`` hold what its own envelope would write
(``apply_upsert_together`` equals ``apply_upsert`` per source, and
``apply_debezium_upsert_together`` ``apply_debezium_upsert``), at the same times and with
the same counts per time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StructField, StructType

from cdc_core.envelopes.debezium import TRUNCATE_PATTERN
from cdc_core.envelopes.upsert_together import (
    SOURCE,
    UpsertSource,
    UpsertsTogether,
    apply_debezium_upsert_together,
    apply_upsert_together,
)
from cdc_core.phases import ALL_SOURCES, phase
from cdc_core.schemas import ERROR
from cdc_core.shard.read import ShardReader
from cdc_core.shard.read_together import KEY, RangeRead, read_together
from cdc_core.shard.together import TARGET, Batch, append_together
from cdc_core.spark import index_frame
from cdc_core.storage import files, on_workers
from cdc_core.updates import DIFF, TIME
from cdc_core.vocabulary import Envelope

_TIME_DIFF = (StructField(TIME, LongType()), StructField(DIFF, LongType()))


@dataclass(frozen=True)
class UpsertRun:
    """One source's part of the joint envelope: its number in the joint records, its
    shape, the shards it writes, its range ``[lower, upper)``, the ``state`` files
    holding its contents at ``lower - 1`` (``state``'s folder and the files' paths in
    it; none when its ``changes`` hold nothing yet), and whether its ``errors`` hold
    any update before ``lower``."""

    number: int
    source: UpsertSource
    changes: Batch
    errors: Batch
    state: str
    prior: tuple[str, ...]
    erred: bool

    @property
    def errors_read(self) -> ShardReader:
        """The ``errors`` shard, as read."""
        shard = self.errors.shard
        assert isinstance(shard, ShardReader)  # a source's shards read and write
        return shard


def upserts_together(
    spark: SparkSession, runs: Sequence[UpsertRun], records: DataFrame, errors: DataFrame
) -> dict[int, tuple[dict[int, int], dict[int, int]]]:
    """Apply every run's envelope (one of UPSERT or DEBEZIUM UPSERT for all, none of them
    ``truncating``) to its reclocked ``records`` (``_source`` and
    RECLOCKED columns, ``time``, ``diff``) and append its ``changes`` and ``errors`` (its
    reclocking ``errors``, ``_source`` + ERROR + ``time`` + ``diff``, with the
    envelope's); per run's number, the distinct changes and errors written per time."""
    if not runs:
        return {}
    together = UpsertsTogether.of({run.number: run.source for run in runs})
    numbers = [run.number for run in runs]
    mine = F.col(SOURCE).isin(numbers)
    apply = (
        apply_debezium_upsert_together
        if together.envelope == Envelope.DEBEZIUM_UPSERT
        else apply_upsert_together
    )
    with phase(ALL_SOURCES, "plan envelope"):
        result = apply(
            records.where(mine).drop(DIFF), together, _prior_rows(spark, runs, together),
            _prior_errors(spark, runs),
        )
    try:
        with phase(ALL_SOURCES, "append changes") as figures:
            changes = append_together(
                _targeted(result.changes),
                {str(run.number): run.changes for run in runs},
                _OwnColumns({str(n): together.own(n) for n in numbers}),
            )
            figures["rows"] = sum(sum((c or {}).values()) for c in changes.values())
        with phase(ALL_SOURCES, "append errors") as figures:
            written = append_together(
                _targeted(errors.where(mine).unionByName(result.errors)),
                {str(run.number): run.errors for run in runs},
                _as_stored,
            )
            figures["rows"] = sum(sum((w or {}).values()) for w in written.values())
    finally:
        result.release()
    return {
        run.number: (changes.get(str(run.number)) or {}, written.get(str(run.number)) or {})
        for run in runs
    }


def truncating(records: DataFrame, runs: Sequence[UpsertRun]) -> set[int]:
    """The numbers of the DEBEZIUM UPSERT ``runs`` whose reclocked ``records`` may hold a
    truncate event (``debezium.may_hold_truncates``, for all of them by one job): each
    applies its own envelope, which empties its table there."""
    numbers = [run.number for run in runs if run.source.envelope == Envelope.DEBEZIUM_UPSERT]
    if not numbers:
        return set()
    maybe = F.col(SOURCE).isin(numbers) & F.col("payload").rlike(TRUNCATE_PATTERN)
    return {row[SOURCE] for row in records.where(maybe).select(SOURCE).distinct().collect()}


def _targeted(rows: DataFrame) -> DataFrame:
    """Rows with the ``target`` naming their source's tables."""
    return rows.withColumn(TARGET, F.col(SOURCE).cast("string"))


def _as_stored(_target: str, rows: pa.Table) -> pa.Table:
    """Error rows are stored as they are (the append selects the table's columns)."""
    return rows


@dataclass(frozen=True)
class _OwnColumns:
    """A joint output row in its source's own columns (``UpsertsTogether.own`` per
    target), ``time`` and ``diff`` kept: what each task writes into ``changes``."""

    own: Mapping[str, Sequence[tuple[str, str]]]

    def __call__(self, target: str, rows: pa.Table) -> pa.Table:
        named = self.own[target]
        return pa.table(
            [*(rows.column(joint) for joint, _ in named), rows.column(TIME), rows.column(DIFF)],
            names=[*(own for _, own in named), TIME, DIFF],
        )


def _prior_rows(
    spark: SparkSession, runs: Sequence[UpsertRun], together: UpsertsTogether
) -> DataFrame | None:
    """Every run's contents at its ``lower - 1``, read from its ``state`` files by one
    job (each task reads one source's files with pyarrow, in that source's columns), as
    joint output rows at that time with diff 1; None when no run has any."""
    units = [(run, path) for run in runs for path in run.prior]
    if not units:
        return None
    schema = StructType([*together.output.fields, *_TIME_DIFF])
    reader = _StateReader(
        [(run.number, run.changes.lower - 1, files.join(run.state, path)) for run, path in units],
        {run.number: together.placing(run.number) for run in runs},
        to_arrow_schema(schema, timezone="UTC"),
    )
    states = [run.state for run in runs if run.prior]
    return index_frame(spark, len(units)).mapInArrow(on_workers(reader, states), schema)


def _prior_errors(spark: SparkSession, runs: Sequence[UpsertRun]) -> DataFrame | None:
    """The updates of every run's ``errors`` before its ``lower`` (ERROR columns,
    ``_source``, ``diff``), read by one scan; None when no run has any."""
    reads = {
        str(run.number): RangeRead(run.errors_read, None, run.errors.lower - 1)
        for run in runs
        if run.erred
    }
    if not reads:
        return None
    stored = StructType([*ERROR.fields, *_TIME_DIFF])
    return read_together(spark, reads, stored).withColumn(SOURCE, F.col(KEY).cast("int"))


@dataclass(frozen=True)
class _StateReader:
    """The task of ``_prior_rows``: per unit its ``id`` rows name, the file's rows as
    joint output rows (its columns in their slots, the others null)."""

    units: Sequence[tuple[int, int, str]]
    own: Mapping[int, Sequence[tuple[str, str]]]
    layout: pa.Schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for unit in batch.column("id").to_pylist():
                number, time, path = self.units[unit]
                stored = files.read_parquet(path)
                yield from _joint(stored, number, time, self.own[number], self.layout)


def _joint(
    stored: pa.Table, number: int, time: int, own: Sequence[tuple[str, str]], layout: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """A source's state rows as joint output rows at ``time``, diff 1."""
    placed = dict(own)
    rows = stored.num_rows
    columns: list[pa.Array | pa.ChunkedArray] = []
    for field in layout:
        if field.name == SOURCE:
            columns.append(pa.array([number] * rows, field.type))
        elif field.name == TIME:
            columns.append(pa.array([time] * rows, field.type))
        elif field.name == DIFF:
            columns.append(pa.array([1] * rows, field.type))
        elif field.name in placed and placed[field.name] in stored.column_names:
            columns.append(stored.column(placed[field.name]).cast(field.type))
        else:
            columns.append(pa.nulls(rows, field.type))
    yield from pa.table(columns, schema=layout).to_batches()
