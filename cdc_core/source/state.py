"""The ``state`` table: current rows of a source, for readers that want a plain table.

``state`` is derived, not a shard: it is the snapshot of ``changes`` at the newest
complete time, written as an ordinary Delta table (one row per copy of a record)
so that any Delta reader sees the current rows without knowing about diffs. The time
it reflects is stored as an app-transaction version, in the same commit as the rows,
so a refresh that has nothing new to show writes no new version.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from deltalake import DeltaTable, Transaction
from deltalake.transaction import AddAction, RemoveAction
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from cdc_core.shard import Shard
from cdc_core.shard.delta_io import (
    DataFile,
    WrittenFile,
    add_action,
    live_files,
    nullable_delta_schema,
    read_files,
    remove_action,
    write_files,
)
from cdc_core.shard.log import (
    STATE_AS_OF,
    TableDescription,
    app_version,
    app_version_at,
    commit_batches_once,
    commit_metadata,
    log_mark,
    open_or_create,
    table_to_read,
)
from cdc_core.shard.read import ShardReader
from cdc_core.updates import DIFF, TIME, consolidate

# Commit info of a publish: the rows it left in the table.
ROWS_KEY = "reclock.state_rows"


def published_as_of(path: str) -> int | None:
    """The time ``state`` at ``path`` was last published as of (None: never), from its
    Delta log alone: its newest commit, when that carries it."""
    mark = log_mark(path)
    return None if mark is None else app_version_at(path, mark.version, STATE_AS_OF)


def current_rows(snapshot: DataFrame, schema: StructType) -> DataFrame:
    """A consolidated snapshot as plain rows, one row per copy of a record: what any
    reader expects of a table, no ``time``/``diff`` to interpret."""
    copies = F.explode(F.array_repeat(F.lit(1), F.col(DIFF).cast("int")))
    return snapshot.where(F.col(DIFF) > 0).select(*schema.fieldNames(), copies.alias("_")).drop("_")


@dataclass(frozen=True)
class StateToPublish:
    """A ``state`` table about to be published: its loaded log, folder, the time it is
    published as of, the time its rows were published at (None: never), its live files,
    and whether they are the rows published then, which the new snapshot may start from
    (reclock's own publish, untouched since, before ``as_of``, at a time ``changes``
    still holds)."""

    table: DeltaTable
    path: str
    as_of: int
    published: int | None
    files: list[DataFile]
    incremental: bool

    @property
    def current(self) -> bool:
        """Whether the table reflects ``as_of`` already: nothing to publish."""
        return self.published == self.as_of


def state_to_publish(
    changes: ShardReader, path: str, schema: StructType, described: TableDescription | None
) -> StateToPublish | None:
    """The ``state`` at ``path`` (created ``described`` when missing) as it stands before
    publishing the snapshot of ``changes`` at their newest complete time; None when
    ``changes`` has no complete time yet."""
    upper, since = changes.upper, changes.since
    if upper.time is None or upper.time == 0 or since.time is None:
        return None
    as_of = upper.time - 1
    table = open_or_create(
        path, nullable_delta_schema(schema), detail="state, not published", described=described
    )
    published = app_version(table, STATE_AS_OF)
    files = live_files(table)
    incremental = (
        published is not None
        and since.less_equal(published)
        and published < as_of
        and untouched_since_published(table, files)
    )
    return StateToPublish(table, path, as_of, published, files, incremental)


def commit_publish(
    state: StateToPublish, written: Sequence[WrittenFile], batch_id: str
) -> bool:
    """Commit ``written`` (the new snapshot's files, staged under ``batch_id``) in place
    of the table's live files, as of ``state.as_of``; False when a concurrent publish
    won (it published this snapshot or a newer one), the staged files then deleted."""
    actions: list[AddAction | RemoveAction] = [remove_action(f) for f in state.files]
    actions += [add_action(f, data_change=True) for f in written]
    metadata = commit_metadata(
        "publish state", f"as of time {state.as_of}",
        {ROWS_KEY: sum(f.num_records for f in written)},
    )  # fmt: skip
    return commit_batches_once(
        state.table, state.path, actions, [Transaction(STATE_AS_OF, state.as_of)], metadata,
        [batch_id],
    )  # fmt: skip


def refresh_state(
    changes: Shard, path: str, schema: StructType, described: TableDescription | None = None
) -> bool:
    """Rewrite ``state`` as the snapshot of ``changes`` at its newest complete time (the
    table created ``described`` when missing).

    The new contents are the published rows plus the changes since they were published,
    so a refresh costs the state and the new changes, not the whole history; when the
    newest commit is not reclock's own publish (someone wrote to the table), or the rows
    were published before ``since``, the snapshot is rebuilt from ``changes``.
    Returns False (and writes nothing) when the table already reflects that time or
    when ``changes`` has no complete time yet.
    """
    state = state_to_publish(changes, path, schema, described)
    if state is None or state.current:
        return False
    snapshot = (
        _published_plus_changes(changes, path, schema, state.published, state.files,
                                state.as_of)
        if state.incremental and state.published is not None
        else changes.snapshot(state.as_of)
    )  # fmt: skip
    batch_id = uuid.uuid4().hex
    return commit_publish(state, write_files(current_rows(snapshot, schema), path, batch_id),
                          batch_id)  # fmt: skip


def published_updates(
    spark: SparkSession, path: str, schema: StructType, as_of: int
) -> DataFrame | None:
    """The rows published in ``state`` as updates at ``as_of`` (one per copy, diff 1),
    when the table holds exactly the snapshot at ``as_of`` that reclock published (its
    newest commit is that publish); None otherwise. An envelope reads the prior contents
    of its keys here instead of the history of ``changes``, which grows with every window
    while ``state`` grows only with the keys."""
    files = published_files(path, as_of)
    if files is None:
        return None
    return _as_updates(read_files(spark, path, files, schema), schema, as_of)


def published_files(path: str, as_of: int) -> list[DataFile] | None:
    """The files of ``state`` when it holds exactly the snapshot at ``as_of`` that reclock
    published (see ``published_updates``); None otherwise."""
    table = table_to_read(path)
    if table is None:
        return None
    files = live_files(table)
    if app_version(table, STATE_AS_OF) != as_of or not untouched_since_published(
        table, files
    ):
        return None
    return files


def _as_updates(rows: DataFrame, schema: StructType, as_of: int) -> DataFrame:
    """Plain rows (one per copy) as updates at ``as_of``."""
    return rows.select(
        *schema.fieldNames(),
        F.lit(as_of).cast("long").alias(TIME),
        F.lit(1).cast("long").alias(DIFF),
    )


def untouched_since_published(table: DeltaTable, files: list[DataFile]) -> bool:
    """Whether the table's newest commit is a publish of reclock's whose rows its live
    files still number: any other writer's commit (a DELETE, an overwrite, an OPTIMIZE)
    makes the next refresh rebuild the snapshot from ``changes``. Read from the log alone,
    so a refresh never pays for counting the history of ``changes``."""
    newest = table.history(1)
    recorded = newest[0].get(ROWS_KEY) if newest else None
    return recorded is not None and recorded == sum(f.num_records for f in files)


def _published_plus_changes(
    changes: Shard,
    path: str,
    schema: StructType,
    published: int,
    files: list[DataFile],
    as_of: int,
) -> DataFrame:
    """The snapshot at ``as_of`` from the rows published at ``published`` (one update per
    copy) and the changes after it, all forwarded to ``as_of`` and consolidated."""
    later = changes.listen(published, as_of).withColumn(TIME, F.lit(as_of).cast("long"))
    prior = _as_updates(read_files(later.sparkSession, path, files, schema), schema, as_of)
    return consolidate(prior.unionByName(later), schema.fieldNames())
