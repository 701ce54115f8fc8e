"""Persist shards on Delta Lake: durable, definite time-varying collections.

A shard is a Delta table holding the data columns plus ``time`` (IntoTime, int64)
and ``diff`` (int64), with two frontiers stored as Delta app-transaction versions
so that they move atomically with the data in the same commit:
- ``upper``: every time not >= upper is complete;
- ``since``: snapshots at times >= since are exact; it never passes the since of a
  live registered reader (``cdc_core.shard.leases``).
Both start at ``TimeFrontier.minimum()`` (time 0). The empty frontier ("finished") is
its own app id, so no magic time ever stands for it.

Every change is a compare-and-set on the Delta log: a commit is attempted at the version
the handle read, never blindly retried; on a conflict the log is re-read and the commit
is retried only if what it relied on (e.g. the upper) still holds.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import DeltaError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from cdc_core.frontier import TimeFrontier
from cdc_core.shard import delta_io, leases
from cdc_core.shard.delta_io import DIFF, TIME, DataFile, WrittenFile

UPPER = "reclock.upper"
SINCE = "reclock.since"
EMPTY_SUFFIX = ".empty"

# Commit metadata keys (Delta commitInfo): what a commit did, the id that lets a writer
# recognise its own commit after an ambiguous failure, and the CDCv2 progress statement.
OPERATION_KEY = "reclock.operation"
COMMIT_ID_KEY = "reclock.commit"
PROGRESS_KEY = "reclock.progress"
USER_METADATA_KEY = "userMetadata"

# Progress statements live in the commit history, so the log must never expire.
TABLE_CONFIGURATION = {"delta.enableExpiredLogCleanup": "false"}

# Physical compaction aims at files of about this size; files under half of it are small.
COMPACTED_FILE_BYTES = 128 * 1024 * 1024

_LOCATION_FAILURES = (DeltaError, OSError, PySparkException, Py4JError)


class ShardUsageError(ValueError):
    """A caller bug: reading before since / at or after upper, appending below upper, ..."""


class ShardStorageError(RuntimeError):
    """The storage location failed. ``definitely_not_written`` says whether the write is
    known not to have happened (safe to retry blindly) or is indeterminate."""

    def __init__(self, message: str, *, definitely_not_written: bool) -> None:
        super().__init__(message)
        self.definitely_not_written = definitely_not_written


@dataclass(frozen=True)
class UpperMismatch:
    """Returned (not raised) by compare_and_append when the shard's upper moved."""

    expected: TimeFrontier
    actual: TimeFrontier


@dataclass(frozen=True)
class ProgressStatement:
    """CDCv2 progress recorded with every commit: the number of distinct
    ``(data, time)`` updates at each time in ``[lower, upper)`` (zero counts omitted)."""

    lower: TimeFrontier
    upper: TimeFrontier
    counts: tuple[tuple[int, int], ...]
    version: int


@dataclass(frozen=True)
class StagedBatch:
    """Consolidated updates written as Parquet under the table folder but not committed:
    invisible to readers until ``Shard.commit``. gc removes them if nobody ever does: once
    the registered writer's lease ran out, or after the retention for an unregistered one."""

    batch_id: str
    files: tuple[WrittenFile, ...]
    counts: tuple[tuple[int, int], ...]  # distinct updates per time, ascending

    @property
    def is_empty(self) -> bool:
        return not self.files


@contextmanager
def _location_failure(action: str) -> Iterator[None]:
    """Turn a failure of the storage location during ``action``, which commits nothing,
    into a ShardStorageError that says the write definitely did not happen."""
    try:
        yield
    except _LOCATION_FAILURES as failure:
        raise ShardStorageError(f"{action} failed: {failure}", definitely_not_written=True) from (
            failure
        )


def _frontier_transactions(app_id: str, frontier: TimeFrontier) -> list[Transaction]:
    if frontier.is_empty:
        return [Transaction(app_id + EMPTY_SUFFIX, 1)]
    return [Transaction(app_id, frontier.time)]


def _read_frontier(table: DeltaTable, app_id: str) -> TimeFrontier:
    if table.transaction_version(app_id + EMPTY_SUFFIX):
        return TimeFrontier.empty()
    return TimeFrontier.at(table.transaction_version(app_id) or 0)


def _frontier_from_json(time: int | None) -> TimeFrontier:
    return TimeFrontier.empty() if time is None else TimeFrontier.at(time)


def _check_advance(lower: TimeFrontier, upper: TimeFrontier) -> None:
    if not lower <= upper:
        raise ShardUsageError(f"upper {upper} is before lower {lower}")


def _check_times(staged: StagedBatch, lower: TimeFrontier, upper: TimeFrontier) -> None:
    """Every update time must lie in [lower, upper); checked on the files' footers."""
    if any(f.null_times for f in staged.files):
        raise ShardUsageError("updates contain a null time")
    if any(f.null_diffs for f in staged.files):
        raise ShardUsageError("updates contain a null diff")
    if staged.is_empty:
        return
    earliest = min(f.min_time for f in staged.files if f.min_time is not None)
    latest = max(f.max_time for f in staged.files if f.max_time is not None)
    if not lower.less_equal(earliest):
        raise ShardUsageError(f"update time {earliest} is before the lower bound {lower}")
    if upper.less_equal(latest):
        raise ShardUsageError(f"update time {latest} is not before the new upper {upper}")


def consolidate(updates: DataFrame, data_columns: Sequence[str]) -> DataFrame:
    """One row per (data, time) with the summed diff; zero sums dropped. A group holding a
    null diff keeps a null diff, so that validation rejects it instead of losing it."""
    diff = F.col(DIFF)
    summed = F.when(F.count(F.lit(1)) == F.count(diff), F.sum(diff)).alias(DIFF)
    return (
        updates.groupBy(*data_columns, TIME)
        .agg(summed)
        .where(F.col(DIFF).isNull() | (F.col(DIFF) != 0))
    )


def _compaction_inputs(files: Sequence[DataFile], since: TimeFrontier) -> list[DataFile]:
    """Every file holding times before since, rewritten together so that updates cancelling
    once forwarded meet and vanish (files starting at since are left alone, or compacted
    output would be rewritten forever), plus small files when at least two can be merged."""
    historical = [f for f in files if since.is_empty or f.may_hold_times(None, since.time - 1)]
    taken = {f.path for f in historical}
    small = [f for f in files if f.size < COMPACTED_FILE_BYTES // 2 and f.path not in taken]
    if historical:
        return historical + small
    return small if len(small) >= 2 else []


class Shard:
    """Handle on one shard; cheap to create, re-reads the Delta log on ``refresh``.

    Reads use the version the handle last loaded, so frontiers and contents always come
    from the same version; writes re-read the log as the protocol requires.
    """

    def __init__(
        self, spark: SparkSession, path: str, data_schema: StructType, table: DeltaTable
    ) -> None:
        self.path = path
        self.data_schema = data_schema
        self._spark = spark
        self._schema = delta_io.shard_schema(data_schema)
        self._table = table
        self.writer: str | None = None  # a registered writer's id names its staging
        self._load_state()

    @classmethod
    def open(cls, spark: SparkSession, path: str, data_schema: StructType) -> Shard:
        """Open the shard at ``path``, creating it (upper = since = [0]) if missing.
        ``data_schema`` excludes ``time``/``diff``; a mismatch with an existing table
        raises ShardUsageError naming the differing columns."""
        reserved = sorted({TIME, DIFF} & set(data_schema.names))
        if reserved:
            raise ShardUsageError(f"data columns may not be named {reserved}: the shard adds them")
        location = os.path.abspath(path)
        expected = delta_io.delta_schema(data_schema)
        table = _open_or_create(location, expected)
        problems = delta_io.schema_differences(expected, table.schema())
        if problems:
            raise ShardUsageError(f"shard {location} has another schema: {'; '.join(problems)}")
        return cls(spark, location, data_schema, table)

    @property
    def upper(self) -> TimeFrontier:
        return self._upper

    @property
    def since(self) -> TimeFrontier:
        return self._since

    @property
    def version(self) -> int:
        return self._version

    def refresh(self) -> Shard:
        """Re-read the Delta log (another process may have committed)."""
        with _location_failure(f"reading the log of {self.path}"):
            self._reload()
        return self

    # ---- writing ----------------------------------------------------------------------

    def compare_and_append(
        self,
        updates: DataFrame,
        expected_upper: TimeFrontier,
        new_upper: TimeFrontier,
    ) -> UpperMismatch | None:
        """Linearizable append: commit ``updates`` (data columns + time + diff) and move
        the upper to ``new_upper`` iff the current upper equals ``expected_upper``.
        Updates are consolidated per (data, time) before writing (zero diffs dropped).
        All times must lie in [expected_upper, new_upper) (ShardUsageError otherwise).
        Returns None on success, UpperMismatch(actual upper) when the upper moved."""
        _check_advance(expected_upper, new_upper)
        self.refresh()
        if self._upper != expected_upper:
            return UpperMismatch(expected_upper, self._upper)
        return self.commit(self.stage(updates), expected_upper, new_upper)

    def append(
        self,
        updates: DataFrame,
        lower: TimeFrontier,
        upper: TimeFrontier,
        *,
        consolidated: bool = False,
    ) -> dict[int, int] | None:
        """Append for replicated writers of identical definite data: a batch whose
        [lower, upper) is already covered by the shard's upper is a no-op (None) that
        writes nothing; a batch with lower == current upper is committed and its distinct
        updates per time are returned; a gap is a usage error. When the upper lies inside
        the batch, only the updates at times not yet covered are written: the rest is
        already there, because the data is definite. ``consolidated``: the caller vouches
        for one row per (data, time) without zero diffs, which spares a shuffle (the
        completeness check still recounts it)."""
        _check_advance(lower, upper)
        while True:
            self.refresh()
            current = self._upper
            if upper <= current:
                return None
            if not lower <= current:
                raise ShardUsageError(
                    f"batch [{lower}, {upper}) would leave a gap after the upper {current}"
                )
            uncovered = updates if lower == current else updates.where(F.col(TIME) >= current.time)
            staged = self.stage(uncovered, consolidated=consolidated)
            if self.commit(staged, current, upper) is None:
                return dict(staged.counts)

    def stage(self, updates: DataFrame, *, consolidated: bool = False) -> StagedBatch:
        """The first half of compare_and_append: consolidate ``updates`` (unless the caller
        says they are) and write them as Parquet under the table folder (Spark), then
        describe them from their footers."""
        conformed = self._conform(updates)
        if not consolidated:
            conformed = consolidate(conformed, self.data_schema.names)
        batch_id = delta_io.new_batch_id(self.writer)
        try:
            with _location_failure(f"writing updates under {self.path}"):
                files = delta_io.write_files(conformed, self.path, batch_id)
                counts = delta_io.count_by_time(self._spark, self.path, files, self._schema)
        except ShardStorageError:
            delta_io.delete_batches(self.path, [batch_id])
            raise
        return StagedBatch(batch_id, files, tuple(sorted(counts.items())))

    def commit(
        self, staged: StagedBatch, expected_upper: TimeFrontier, new_upper: TimeFrontier
    ) -> UpperMismatch | None:
        """The second half of compare_and_append (driver only): commit ``staged`` and move
        the upper to ``new_upper`` iff the upper is ``expected_upper``, checked against
        the version this handle last read. Staged files that are not committed are deleted."""
        try:
            _check_advance(expected_upper, new_upper)
            _check_times(staged, expected_upper, new_upper)
        except ShardUsageError:
            self.discard(staged)
            raise
        if self._upper != expected_upper:
            self.refresh()  # the handle may merely be behind
        if self._upper != expected_upper:
            self.discard(staged)
            return UpperMismatch(expected_upper, self._upper)
        if staged.is_empty and new_upper == expected_upper:
            return None  # nothing to record: a heartbeat
        self._writer_live()
        progress = {
            "lower": expected_upper.time,
            "upper": new_upper.time,
            "counts": [list(count) for count in staged.counts],
        }
        committed = self._commit(
            [delta_io.add_action(f, data_change=True) for f in staged.files],
            _frontier_transactions(UPPER, new_upper),
            _commit_metadata(
                "append",
                f"upper {expected_upper} -> {new_upper}, {len(staged.files)} file(s)",
                {PROGRESS_KEY: progress},
            ),
            still_valid=lambda: self._upper == expected_upper and self._writer_live(),
        )
        if committed:
            return None
        self.discard(staged)
        return UpperMismatch(expected_upper, self._upper)

    def _writer_live(self) -> bool:
        """Raises LeaseExpired when this handle's registered writer's lease ran out."""
        if self.writer is not None:
            leases.check_writer(self.path, self._table, self.writer)
        return True

    def discard(self, staged: StagedBatch) -> None:
        """Delete the files of a batch that will not be committed."""
        delta_io.delete_batches(self.path, [staged.batch_id])

    def downgrade_since(self, since: TimeFrontier) -> TimeFrontier:
        """Give up reading at times before ``since`` (monotone; a regression is a usage
        error). Compaction may then forward older updates to the since. The since moves
        only as far as the live readers' holds allow (their meet); returns where it is."""
        self.refresh()
        if not self._since <= since:
            raise ShardUsageError(f"since may only advance: it is {self._since}, not {since}")
        while True:
            holds = leases.read_leases(self.path, self._table)
            target = since.meet(holds.hold())
            if not self._since < target:
                return self._since
            committed = self._commit(
                [],
                _frontier_transactions(SINCE, target),
                _commit_metadata("downgrade_since", f"since {self._since} -> {target}"),
                still_valid=lambda pointer=holds.pointer, target=target: (
                    self._since < target
                    and self._table.transaction_version(leases.LEASES_APP_ID) == pointer
                ),
            )
            if committed:
                return self._since

    def compact(self) -> None:
        """Logical (advance times < since to since, consolidate, drop zeros) and physical
        (fewer, larger files) compaction; changes no snapshot at or after since."""
        self.refresh()
        since = self._since
        inputs = _compaction_inputs(self._files(), since)
        if not inputs:
            return
        batch_id = delta_io.new_batch_id(self.writer)
        outputs: tuple[WrittenFile, ...] = ()
        if not since.is_empty:  # an empty since means nobody may ever read: keep nothing
            outputs = self._rewrite(inputs, since.time, batch_id)
        replaced = {f.path for f in inputs}
        actions: list[AddAction | RemoveAction] = [delta_io.remove_action(f) for f in inputs]
        actions += [delta_io.add_action(f, data_change=False) for f in outputs]
        committed = self._commit(
            actions,
            [],
            _commit_metadata("compact", f"{len(inputs)} file(s) -> {len(outputs)}, since {since}"),
            still_valid=lambda: replaced <= {f.path for f in self._files()},
        )
        if not committed:
            delta_io.delete_batches(self.path, [batch_id])

    def gc(self, retention_hours: float = 1.0) -> list[str]:
        """Remove files no live reader can read and no live writer is staging (Delta
        vacuum, bounded by the holds); returns the removed paths.

        Never removes a file of the current version, nor of any version a live reader
        pins, nor a live registered writer's staging. Beyond that, files removed from the
        table (or staged by an unregistered writer) more than ``retention_hours`` ago go,
        and so does the staging of a registered writer whose lease ran out."""
        if retention_hours < 0:
            raise ShardUsageError(f"retention must not be negative: {retention_hours}")
        with _location_failure(f"garbage-collecting {self.path}"):
            self._reload()  # never judge references by a stale version
            removed = leases.collectable_files(
                self.path, self._table, self._files(), int(retention_hours * 3_600_000)
            )
            for path in removed:
                os.remove(os.path.join(self.path, path))
            delta_io.remove_empty_folders(self.path)
            self._reload()
        return sorted(removed)

    # ---- reading ----------------------------------------------------------------------

    def snapshot(self, as_of: int) -> DataFrame:
        """Consolidated contents at ``as_of``: data columns + ``time`` (= as_of) + ``diff``
        (summed, zeros dropped). Requires since <= as_of < upper (ShardUsageError naming
        the violated bound otherwise)."""
        self._check_since(as_of, "as_of")
        self._check_complete(as_of, "as_of")
        data = self.data_schema.names
        rows = self._read(None, as_of).where(F.col(TIME) <= as_of)
        totals = rows.groupBy(*data).agg(F.sum(DIFF).alias(DIFF)).where(F.col(DIFF) != 0)
        return totals.select(*data, F.lit(as_of).cast("long").alias(TIME), DIFF)

    def size(self, as_of: int) -> int:
        """The number of records at ``as_of`` (the sum of its snapshot's diffs), from the
        ``time`` and ``diff`` columns alone: no consolidation by data is needed, since
        updates that cancel sum to zero anyway."""
        self._check_since(as_of, "as_of")
        self._check_complete(as_of, "as_of")
        rows = self._read(None, as_of).where(F.col(TIME) <= as_of)
        return rows.agg(F.sum(DIFF)).first()[0] or 0

    def listen(self, as_of: int, until: int | None = None) -> DataFrame:
        """Updates with as_of < time <= until (until defaults to upper - 1; to everything
        when the shard is finished): data columns + time + diff. Requires since <= as_of
        and until < upper."""
        self._check_since(as_of, "as_of")
        if until is None:
            until = None if self._upper.is_empty else self._upper.time - 1
        else:
            self._check_complete(until, "until")
        if until is not None and until < as_of:
            raise ShardUsageError(f"until {until} is before as_of {as_of}")
        selected: Column = F.col(TIME) > as_of
        if until is not None:
            selected &= F.col(TIME) <= until
        return self._read(as_of + 1, until).where(selected)

    def updates_through(self, until: int) -> pa.Table:
        """Every stored update at times ``<= until``, read on the driver without a Spark
        job: for shards small enough to be metadata, like the remap, where a job would cost
        far more than the read. Updates before since carry their own time or since, as
        compaction left them. Requires since <= until < upper."""
        self._check_since(until, "until")
        self._check_complete(until, "until")
        schema = to_arrow_schema(self._schema, timezone="UTC")
        files = self._files_holding(None, until)
        with _location_failure(f"reading {self.path}"):
            tables = [
                pq.read_table(os.path.join(self.path, f.path), filters=[(TIME, "<=", until)])
                for f in files
            ]
        return pa.concat_tables(
            [schema.empty_table(), *(t.select(schema.names).cast(schema) for t in tables)]
        )

    def progress(self) -> list[ProgressStatement]:
        """The progress statements recorded by every commit, oldest first."""
        with _location_failure(f"reading the history of {self.path}"):
            history = self._table.history()
        return [
            ProgressStatement(
                lower=_frontier_from_json(statement["lower"]),
                upper=_frontier_from_json(statement["upper"]),
                counts=tuple((time, count) for time, count in statement["counts"]),
                version=entry["version"],
            )
            for entry in reversed(history)
            if (statement := entry.get(PROGRESS_KEY)) is not None
        ]

    # ---- internals --------------------------------------------------------------------

    def _load_state(self) -> None:
        delta_io.check_table_features(self._table, self.path)
        self._version = self._table.version()
        self._upper = _read_frontier(self._table, UPPER)
        self._since = _read_frontier(self._table, SINCE)

    def _reload(self) -> None:
        self._table.update_incremental()
        self._load_state()

    def _files(self) -> list[DataFile]:
        with _location_failure(f"listing the files of {self.path}"):
            return delta_io.live_files(self._table)

    def _files_holding(self, low: int | None, high: int | None) -> list[DataFile]:
        """The files whose ``time`` statistics may hold times in [low, high]."""
        return [f for f in self._files() if f.may_hold_times(low, high)]

    def _read(self, low: int | None, high: int | None) -> DataFrame:
        """The rows of the files that may hold times in [low, high], read by Spark."""
        files = self._files_holding(low, high)
        with _location_failure(f"reading {self.path}"):
            return delta_io.read_files(self._spark, self.path, files, self._schema)

    def _check_since(self, time: int, name: str) -> None:
        if not self._since.less_equal(time):
            raise ShardUsageError(
                f"{name} {time} is before since {self._since}: history there is compacted"
            )

    def _check_complete(self, time: int, name: str) -> None:
        if self._upper.less_equal(time):
            self.refresh()  # the shard may have moved on since this handle last looked
        if self._upper.less_equal(time):
            raise ShardUsageError(
                f"{name} {time} is not before upper {self._upper}: not complete yet"
            )

    def _conform(self, updates: DataFrame) -> DataFrame:
        """The updates in the shard's column order and types (safe casts only)."""
        missing = [c for c in self._schema.names if c not in updates.columns]
        extra = [c for c in updates.columns if c not in self._schema.names]
        if missing or extra:
            raise ShardUsageError(f"updates lack columns {missing} and have extra {extra}")
        try:
            return updates.to(self._schema)
        except PySparkException as failure:
            raise ShardUsageError(f"updates do not fit the shard schema: {failure}") from failure

    def _rewrite(
        self, inputs: Sequence[DataFile], since: int, batch_id: str
    ) -> tuple[WrittenFile, ...]:
        """Forward times before ``since`` to it, consolidate and write about
        COMPACTED_FILE_BYTES per file."""
        rows = delta_io.read_files(self._spark, self.path, inputs, self._schema)
        forwarded = rows.withColumn(TIME, F.greatest(F.col(TIME), F.lit(since).cast("long")))
        files = max(1, sum(f.size for f in inputs) // COMPACTED_FILE_BYTES)
        compacted = consolidate(forwarded, self.data_schema.names).coalesce(files)
        try:
            with _location_failure(f"compacting {self.path}"):
                return delta_io.write_files(compacted, self.path, batch_id)
        except ShardStorageError:
            delta_io.delete_batches(self.path, [batch_id])
            raise

    def _commit(
        self,
        actions: Sequence[AddAction | RemoveAction],
        frontiers: list[Transaction],
        metadata: dict[str, Any],
        still_valid: Callable[[], bool],
    ) -> bool:
        """Commit at the version this handle read, with no blind retry. After a conflict
        the log is re-read; the commit is retried iff ``still_valid()`` holds on the new
        state, else False is returned. A failure that leaves the outcome unknown is settled
        by looking for this commit's id in the log."""
        properties = CommitProperties(
            max_commit_retries=0, app_transactions=frontiers, custom_metadata=metadata
        )
        while True:
            read_version = self._version
            try:
                self._table.create_write_transaction(
                    list(actions), "append", self._table.schema(), commit_properties=properties
                )
            except _LOCATION_FAILURES as failure:
                if self._landed(read_version, metadata[COMMIT_ID_KEY], failure):
                    return True
                if self._version == read_version:
                    raise ShardStorageError(
                        f"commit to {self.path} failed: {failure}", definitely_not_written=True
                    ) from failure
                if not still_valid():
                    return False
                continue
            try:
                self._reload()
            except _LOCATION_FAILURES as failure:
                raise ShardStorageError(
                    f"committed to {self.path} but could not re-read the log: {failure}",
                    definitely_not_written=False,
                ) from failure
            return True

    def _landed(self, read_version: int, commit_id: str, failure: Exception) -> bool:
        """After a failed commit call: re-read the log and report whether the commit is in
        it anyway (e.g. it landed and a later step failed)."""
        try:
            self._reload()
            newer = self._version - read_version
            history = self._table.history(limit=newer) if newer > 0 else []
        except _LOCATION_FAILURES as unreadable:
            raise ShardStorageError(
                f"commit to {self.path} failed ({failure}) and the log could not be re-read "
                f"({unreadable}): the commit may or may not have happened",
                definitely_not_written=False,
            ) from unreadable
        return any(entry.get(COMMIT_ID_KEY) == commit_id for entry in history)


def _commit_metadata(
    operation: str, detail: str, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Commit info: machine-readable keys, plus ``userMetadata``, the column in which
    delta-spark's DESCRIBE HISTORY shows what each reclock commit did."""
    return {
        OPERATION_KEY: operation,
        COMMIT_ID_KEY: uuid.uuid4().hex,
        USER_METADATA_KEY: f"reclock {operation}: {detail}",
        **(extra or {}),
    }


def _open_or_create(location: str, schema: DeltaSchema) -> DeltaTable:
    """Load the table at ``location``, creating it with upper = since = [0] if missing;
    a concurrent creator winning the race is fine."""
    with _location_failure(f"opening shard {location}"):
        if not DeltaTable.is_deltatable(location):
            minimum = TimeFrontier.minimum()
            properties = CommitProperties(
                app_transactions=[
                    *_frontier_transactions(UPPER, minimum),
                    *_frontier_transactions(SINCE, minimum),
                ],
                custom_metadata=_commit_metadata("create", "upper = since = 0"),
            )
            try:
                DeltaTable.create(
                    location,
                    schema,
                    mode="error",
                    configuration=TABLE_CONFIGURATION,
                    commit_properties=properties,
                )
            except DeltaError:
                if not DeltaTable.is_deltatable(location):
                    raise
        return DeltaTable(location)


def stored_upper(path: str) -> TimeFrontier:
    """The upper committed at ``path``, read from its Delta log alone: no Spark, nothing
    created (a sensor's look must change nothing). ``[0]`` where no shard exists yet."""
    if not DeltaTable.is_deltatable(path):
        return TimeFrontier.at(0)
    return _read_frontier(DeltaTable(path), UPPER)
