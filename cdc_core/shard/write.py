"""The write role of a shard handle: appends that move the upper with the data.

Invariant: an append commits updates at times in ``[lower, new upper)`` and the new
upper in one compare-and-set commit, iff the upper is still ``lower``; staged files that
are not committed are deleted (or collected by gc), so no reader ever sees them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from cdc_core.frontier import TimeFrontier
from cdc_core.shard import delta_io, leases
from cdc_core.shard.delta_io import WrittenFile
from cdc_core.shard.handle import UPPER, ShardHandle, ShardUsageError
from cdc_core.shard.log import (
    PROGRESS_KEY,
    ShardStorageError,
    commit_metadata,
    frontier_transactions,
    location_failure,
    merge_files,
)
from cdc_core.updates import TIME, consolidate, consolidate_rows

# Updates to append: a DataFrame (data, on the executors), or a pyarrow Table of a few
# metadata rows built on the driver (bindings), written without a Spark job.
Updates: TypeAlias = DataFrame | pa.Table


@dataclass(frozen=True)
class UpperMismatch:
    """Returned (not raised) by compare_and_append when the shard's upper moved."""

    expected: TimeFrontier
    actual: TimeFrontier


@dataclass(frozen=True)
class StagedBatch:
    """Consolidated updates written as Parquet under the table folder but not committed:
    invisible to readers until ``commit``. gc removes them if nobody ever does: once the
    registered writer's lease ran out, or after the retention for an unregistered one."""

    batch_id: str
    files: tuple[WrittenFile, ...]
    counts: tuple[tuple[int, int], ...]  # distinct updates per time, ascending

    @property
    def is_empty(self) -> bool:
        """Whether the batch holds no update."""
        return not self.files


def check_advance(lower: TimeFrontier, upper: TimeFrontier) -> None:
    """A frontier never moves backwards (ShardUsageError)."""
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


class ShardWriter(ShardHandle):
    """Appends: linearizable (``compare_and_append``) or idempotent (``append``)."""

    def compare_and_append(
        self,
        updates: Updates,
        expected_upper: TimeFrontier,
        new_upper: TimeFrontier,
    ) -> UpperMismatch | None:
        """Linearizable append: commit ``updates`` (data columns + time + diff) and move
        the upper to ``new_upper`` iff the current upper equals ``expected_upper``.
        Updates are consolidated per (data, time) before writing (zero diffs dropped).
        All times must lie in [expected_upper, new_upper) (ShardUsageError otherwise).
        Returns None on success, UpperMismatch(actual upper) when the upper moved."""
        check_advance(expected_upper, new_upper)
        self.refresh()
        if self._upper != expected_upper:
            return UpperMismatch(expected_upper, self._upper)
        staged = self.stage(updates)
        mismatch = self.commit(staged, expected_upper, new_upper)
        if mismatch is None:
            self._merge_after(staged, updates)
        return mismatch

    def append(
        self,
        updates: Updates,
        lower: TimeFrontier | int,
        upper: TimeFrontier | int,
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
        completeness check still recounts it). Plain ints stand for ``[lower]``/``[upper]``."""
        lower, upper = _frontier(lower), _frontier(upper)
        check_advance(lower, upper)
        while True:
            self.refresh()
            current = self._upper
            if upper <= current:
                return None
            if not lower <= current:
                raise ShardUsageError(
                    f"batch [{lower}, {upper}) would leave a gap after the upper {current}"
                )
            # An empty (finished) upper covers every batch: returned above.
            assert current.time is not None
            uncovered = updates if lower == current else _from_time(updates, current.time)
            staged = self.stage(uncovered, consolidated=consolidated)
            if self.commit(staged, current, upper) is None:
                self._merge_after(staged, updates)
                return dict(staged.counts)

    def no_updates(self) -> pa.Table:
        """An empty batch in the shard's layout: appended, it moves the upper and runs no
        Spark job (for a batch the caller has proven empty)."""
        return to_arrow_schema(self._schema, timezone="UTC").empty_table()

    def stage(self, updates: Updates, *, consolidated: bool = False) -> StagedBatch:
        """The first half of compare_and_append: consolidate ``updates`` (unless the caller
        says they are) and write them as Parquet under the table folder (Spark for a
        DataFrame, the driver for a pyarrow Table), then describe them from their footers."""
        batch_id = delta_io.new_batch_id(self.writer)
        try:
            with location_failure(f"writing updates under {self.path}"):
                if isinstance(updates, pa.Table):
                    files, counts = self._write_rows(updates, batch_id)
                else:
                    conformed = self._conform(updates)
                    if not consolidated:
                        conformed = consolidate(conformed, self.data_schema.names)
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
            check_advance(expected_upper, new_upper)
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
        releasing = self.writer if self._releases_with(new_upper) else None
        committed = self._commit(
            [delta_io.add_action(f, data_change=True) for f in staged.files],
            frontier_transactions(UPPER, new_upper),
            commit_metadata(
                "append",
                f"upper {expected_upper} -> {new_upper}, {len(staged.files)} file(s)"
                + (f", releasing writer {releasing}" if releasing else ""),
                {PROGRESS_KEY: progress},
            ),
            still_valid=lambda: self._upper == expected_upper and self._writer_live(),
            also=None if releasing is None else (
                lambda: leases.released_with_commit(self.path, self._table, releasing)
            ),
        )
        if committed:
            if releasing is not None:  # what it stages from now on is anonymous staging
                self.writer = self.releases_at = None
            return None
        self.discard(staged)
        return UpperMismatch(expected_upper, self._upper)

    def _merge_after(self, staged: StagedBatch, updates: Updates) -> None:
        """After a committed append that wrote driver-held rows (metadata: a remap's
        bindings), merge the shard's small files once there are enough
        (``delta_io.files_to_merge``): a shard of metadata appended every window is a few
        files to read between maintenances, not one per window. A data shard's files
        (Spark's, rows that must not pass through the driver) are never merged here: an
        empty batch, the driver's only append to a data shard, writes no file and merges
        nothing. Rows and frontiers stay as they are; a lost race merges nothing (the next
        append tries again); a registered writer whose lease ran out merges nothing."""
        if not (isinstance(updates, pa.Table) and staged.files):
            return
        chosen = delta_io.files_to_merge(self.live_files())
        if not chosen:
            return
        try:
            self._writer_live()
        except leases.LeaseExpired:
            return
        schema = to_arrow_schema(self._schema, timezone="UTC")
        batch_id = delta_io.new_batch_id(self.writer)
        try:
            merge_files(self._table, self.path, chosen, schema, batch_id, sort_by=TIME)
        finally:
            self._load_state()

    def discard(self, staged: StagedBatch) -> None:
        """Delete the files of a batch that will not be committed."""
        delta_io.delete_batches(self.path, [staged.batch_id])

    def _releases_with(self, new_upper: TimeFrontier) -> bool:
        """Whether a commit taking the upper to ``new_upper`` releases the registered
        writer with it: it is the last the writer makes (``leases.writing``)."""
        return (self.writer is not None and self.releases_at is not None
                and self.releases_at <= new_upper)  # fmt: skip

    def _writer_live(self) -> bool:
        """Raises LeaseExpired when this handle's registered writer's lease ran out."""
        if self.writer is not None:
            leases.check_writer(self._table, self.writer)
        return True

    def _write_rows(
        self, rows: pa.Table, batch_id: str
    ) -> tuple[tuple[WrittenFile, ...], dict[int, int]]:
        """Consolidate driver-held ``rows`` and write them as one Parquet file (none when
        nothing is left), with its rows per time: a few rows of metadata, where a Spark
        job would cost far more."""
        schema = to_arrow_schema(self._schema, timezone="UTC")
        if set(rows.column_names) != set(schema.names):
            raise ShardUsageError(
                f"updates have columns {sorted(rows.column_names)}, not {sorted(schema.names)}"
            )
        kept = consolidate_rows(rows, self.data_schema.names)
        if kept.num_rows == 0:
            return (), {}
        written = delta_io.write_arrow(self.path, kept.select(schema.names).cast(schema), batch_id)
        return (written,), dict(Counter(kept[TIME].to_pylist()))

    def _conform(self, updates: DataFrame) -> DataFrame:
        """The updates in the shard's column order and types (safe casts only)."""
        columns = updates.columns  # asked once: over Spark Connect each ask is a round trip
        missing = [c for c in self._schema.names if c not in columns]
        extra = [c for c in columns if c not in self._schema.names]
        if missing or extra:
            raise ShardUsageError(f"updates lack columns {missing} and have extra {extra}")
        try:
            return updates.to(self._schema)
        except PySparkException as failure:
            raise ShardUsageError(f"updates do not fit the shard schema: {failure}") from failure


def _from_time(updates: Updates, time: int) -> Updates:
    """The updates at ``time`` or later."""
    if isinstance(updates, pa.Table):
        return updates.filter(pc.greater_equal(updates[TIME], time))  # a mask: see read.py
    return updates.where(F.col(TIME) >= time)


def _frontier(bound: TimeFrontier | int) -> TimeFrontier:
    return bound if isinstance(bound, TimeFrontier) else TimeFrontier.at(bound)
