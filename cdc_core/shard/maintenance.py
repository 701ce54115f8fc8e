"""The maintenance role of a shard handle: since, compaction and garbage collection.

Invariant: maintenance changes no snapshot a reader may still take. The since moves only
as far as live readers' holds allow; compaction rewrites only what is before since
(forwarded to it) or merges small files; gc removes only files no live reader pins and
no live writer is staging.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from deltalake import DeltaTable
from deltalake.transaction import AddAction, RemoveAction
from pyspark.sql import functions as F

from cdc_core.frontier import TimeFrontier
from cdc_core.shard import delta_io, leases
from cdc_core.shard.delta_io import DataFile, WrittenFile
from cdc_core.shard.handle import SINCE, ShardHandle, ShardUsageError
from cdc_core.shard.log import (
    LEASES_APP_ID,
    ShardStorageError,
    app_version,
    commit_metadata,
    frontier_transactions,
    location_failure,
    newest_table,
)
from cdc_core.updates import TIME, consolidate

# Physical compaction aims at files of about this size; files under half of it are small.
COMPACTED_FILE_BYTES = 128 * 1024 * 1024


class ShardMaintainer(ShardHandle):
    """Bounds history: ``downgrade_since``, ``compact``, ``gc``, ``trim_log``."""

    def downgrade_since(self, since: TimeFrontier) -> TimeFrontier:
        """Give up reading at times before ``since`` (monotone; a regression is a usage
        error). Compaction may then forward older updates to the since. The since moves
        only as far as the live readers' holds allow (their meet); returns where it is."""
        self.refresh()
        if not self._since <= since:
            raise ShardUsageError(f"since may only advance: it is {self._since}, not {since}")
        while True:
            holds = leases.read_leases(self._table)
            target = since.meet(holds.hold())
            if not self._since < target:
                return self._since
            # The values of this turn of the loop, bound now (a closure would see later ones).
            def still_valid(
                pointer: int | None = holds.pointer, target: TimeFrontier = target
            ) -> bool:
                return (
                    self._since < target
                    and app_version(self._table, LEASES_APP_ID) == pointer
                )

            committed = self._commit(
                [],
                frontier_transactions(SINCE, target),
                commit_metadata("downgrade_since", f"since {self._since} -> {target}"),
                still_valid=still_valid,
            )
            if committed:
                return self._since

    def compact(self) -> None:
        """Logical (advance times < since to since, consolidate, drop zeros) and physical
        (fewer, larger files) compaction; changes no snapshot at or after since."""
        self.refresh()
        since = self._since
        inputs = _compaction_inputs(self.live_files(), since)
        if not inputs:
            return
        batch_id = delta_io.new_batch_id(self.writer)
        outputs: tuple[WrittenFile, ...] = ()
        if since.time is not None:  # an empty since means nobody may ever read: keep nothing
            outputs = self._rewrite(inputs, since.time, batch_id)
        replaced = {f.path for f in inputs}
        actions: list[AddAction | RemoveAction] = [delta_io.remove_action(f) for f in inputs]
        actions += [delta_io.add_action(f, data_change=False) for f in outputs]
        committed = self._commit(
            actions,
            [],
            commit_metadata("compact", f"{len(inputs)} file(s) -> {len(outputs)}, since {since}"),
            still_valid=lambda: replaced <= {f.path for f in self.live_files()},
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
        with location_failure(f"garbage-collecting {self.path}"):
            self._reload()  # never judge references by a stale version
            removed = collect_garbage(self.path, self._table, int(retention_hours * 3_600_000))
            self._reload()
        return removed

    def trim_log(self, keep_ms: int) -> list[str]:
        """Checkpoint the log and delete its files before the newest checkpoint that keeps
        every commit a live registration refers to, when older than ``keep_ms``; returns
        their names. A run loads the table from the checkpoint, and the log holds about
        ``keep_ms`` of commits however long the shard has run (Delta time travel by
        version reaches that far; reads at an IntoTime reach back to the since)."""
        with location_failure(f"trimming the log of {self.path}"):
            self._reload()
            self._table.create_checkpoint()
            holds = leases.read_leases(self._table)
            keep_from = min({self._table.version(), *holds.referenced_versions()})
            older_than_ms = int(time.time() * 1000) - keep_ms
            return delta_io.trim_log(self.path, keep_from, older_than_ms)

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
            with location_failure(f"compacting {self.path}"):
                return delta_io.write_files(compacted, self.path, batch_id)
        except ShardStorageError:
            delta_io.delete_batches(self.path, [batch_id])
            raise


def collect_garbage(path: str, table: DeltaTable, retention_ms: int) -> list[str]:
    """Delete the files of the Delta table at ``path`` (at ``table``'s loaded version)
    that ``leases.collectable_files`` allows, without a commit; returns them sorted."""
    removed = leases.collectable_files(path, table, delta_io.live_files(table), retention_ms)
    delta_io.remove_files(path, removed)
    return sorted(removed)


def tidy_table(path: str, keep_ms: int) -> tuple[list[str], list[str]]:
    """For a Delta table reclock writes that is no shard (``state``, ``history``, a
    registry): collect the files removed more than ``keep_ms`` ago, checkpoint the log
    and trim it to ``keep_ms`` of commits, all without a commit of its own (so a
    published ``state`` stays the table's newest commit). Returns the data files and the
    log files deleted."""
    with location_failure(f"tidying {path}"):
        table = newest_table(path)
        collected = collect_garbage(path, table, keep_ms)
        table.create_checkpoint()
        trimmed = delta_io.trim_log(path, table.version(), int(time.time() * 1000) - keep_ms)
    return collected, trimmed


def _compaction_inputs(files: Sequence[DataFile], since: TimeFrontier) -> list[DataFile]:
    """Every file holding times before since, rewritten together so that updates cancelling
    once forwarded meet and vanish (files starting at since are left alone, or compacted
    output would be rewritten forever), plus small files when at least two can be merged."""
    historical = [
        f for f in files if since.time is None or f.may_hold_times(None, since.time - 1)
    ]
    taken = {f.path for f in historical}
    small = [f for f in files if f.size < COMPACTED_FILE_BYTES // 2 and f.path not in taken]
    if historical:
        return historical + small
    return small if len(small) >= 2 else []
