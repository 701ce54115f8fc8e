"""The ``history`` table: SCD type 2 versions of an upsert source, derived from ``changes``.

One row per version of a key: the source's output columns, the IntoTime interval
``[valid_from, valid_to)`` in which it was its key's row (``valid_to`` null while it still
is), and the Kafka position ``(partition, offset)`` of the record that wrote it. ``changes``
carries no positions, so the position is looked up in ``reclocked``: the greatest
``(partition, offset)`` among the records of the key bound at ``valid_from``, which is the
record the upsert envelope took the version from.

Invariant: the table holds exactly the versions that ``changes`` defines at times below its
upper, an app-transaction version committed with its rows (``reclock.upper``, as a shard's),
so a refresh that has nothing new writes nothing and a refresh cut short leaves nothing
visible. A refresh appends the versions of the changes since its upper and closes (sets
``valid_to`` of) the open versions those changes end; no other row changes. Open and closed
versions are written to separate files, so a refresh rewrites only files of open versions
whose keys it closes, and a closed version's file is never rewritten.

It relies on set semantics (every key holds at most one row at a time), which the upsert
envelopes give and the ``state_is_set`` check (``state_counts``) verifies.
"""

from __future__ import annotations

import functools
import operator
import uuid

from deltalake.transaction import AddAction, RemoveAction
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from cdc_core.envelopes.upsert import with_key
from cdc_core.frontier import TimeFrontier
from cdc_core.schemas import VALID_FROM, VALID_TO, history_schema
from cdc_core.shard import Shard, ShardUsageError, existing_table
from cdc_core.shard.delta_io import (
    DataFile,
    add_action,
    delete_batches,
    live_files,
    nullable_delta_schema,
    read_files,
    remove_action,
    write_files,
)
from cdc_core.shard.handle import UPPER
from cdc_core.shard.log import (
    TableDescription,
    commit_batches_once,
    commit_metadata,
    frontier_transactions,
    open_or_create,
    read_frontier,
)
from cdc_core.storage import files as storage_files
from cdc_core.storage import from_spark_path
from cdc_core.updates import DIFF, TIME, consolidate


def history_upper(path: str) -> TimeFrontier:
    """Where the history at ``path`` stands (``[0]``: nothing yet), from its Delta log alone."""
    table = existing_table(path)
    return TimeFrontier.minimum() if table is None else read_frontier(table, UPPER)


def refresh_history(
    changes: Shard,
    reclocked: Shard,
    path: str,
    output: StructType,
    key_schema: StructType,
    described: TableDescription | None = None,
) -> bool:
    """Bring the history at ``path`` (created ``described`` when missing) up to the upper
    of ``changes``: append the versions of
    the changes since its own upper and close the versions they end, in one commit with the
    new upper. ``reclocked`` must be complete as far as ``changes`` (it is written first).
    Returns False (and writes nothing) when there is nothing new, or when a concurrent
    refresh committed first (it published the same versions)."""
    target = changes.refresh().upper
    if target.time is None:
        return False
    schema = history_schema(output)
    table = open_or_create(
        path,
        nullable_delta_schema(schema),
        detail="history, upper = 0",
        app_transactions=frontier_transactions(UPPER, TimeFrontier.minimum()),
        described=described,
    )
    lower = read_frontier(table, UPPER)
    if lower == target:
        return False
    if not lower <= target:
        raise ShardUsageError(
            f"history {path} stands at {lower}, beyond its changes ({target}): it was built "
            "from other changes; remove it and the next run rebuilds it"
        )
    keys = key_schema.names
    steps = _steps(consolidate(_between(changes, lower, target), output.names), output, keys)
    closings = steps.where("retracted").groupBy(*keys).agg(F.min(TIME).alias("closed_at"))
    files = live_files(table)
    reopened = _files_with_open_versions_of(path, files, schema, closings, keys)
    kept_open = read_files(steps.sparkSession, path, reopened, schema)
    closed = _join_on_keys(kept_open, closings, keys, "left").select(
        *[F.col(f"`{name}`") for name in schema.names if name != VALID_TO],
        F.coalesce(F.col(VALID_TO), F.col("closed_at")).alias(VALID_TO),
    )
    versions = _versions(steps, _positions(reclocked, lower, target, key_schema), output, keys)
    rows = closed.select(*schema.names).unionByName(versions.select(*schema.names)).persist()
    batch = uuid.uuid4().hex
    batches = [f"{batch}-open", f"{batch}-closed"]
    try:
        written = write_files(rows.where(F.col(VALID_TO).isNull()), path, batches[0])
        written += write_files(rows.where(F.col(VALID_TO).isNotNull()), path, batches[1])
    except BaseException:
        delete_batches(path, batches)
        raise
    finally:
        rows.unpersist()
    actions: list[AddAction | RemoveAction] = [
        remove_action(f, data_change=True) for f in reopened
    ]
    actions += [add_action(f, data_change=True) for f in written]
    metadata = commit_metadata(
        "append history",
        f"upper {lower} -> {target}, {len(written)} file(s) added, {len(reopened)} rewritten",
    )
    return commit_batches_once(
        table, path, actions, frontier_transactions(UPPER, target), metadata, batches
    )


def _between(shard: Shard, lower: TimeFrontier, upper: TimeFrontier) -> DataFrame:
    """The shard's updates at times in ``[lower, upper)`` (both frontiers at a time)."""
    low, high = lower.time, upper.time
    if low is None or high is None:
        raise ValueError(f"updates between {lower} and {upper}: both must be at a time")
    if low == 0:
        first = shard.snapshot(0)
        return first if high == 1 else first.unionByName(shard.listen(0, high - 1))
    return shard.listen(low - 1, high - 1)


def _steps(updates: DataFrame, output: StructType, keys: list[str]) -> DataFrame:
    """Per key and time: the row it takes then (``row``, null if none) and whether its
    previous row ends then (``retracted``). With set semantics a key has at most one
    retraction and one insertion at a time."""
    row = F.struct(*[F.col(f"`{name}`") for name in output.names])
    return updates.groupBy(*keys, TIME).agg(
        F.first(F.when(F.col(DIFF) > 0, row), ignorenulls=True).alias("row"),
        F.max(F.col(DIFF) < 0).alias("retracted"),
    )


def _positions(
    reclocked: Shard, lower: TimeFrontier, upper: TimeFrontier, key_schema: StructType
) -> DataFrame:
    """Per decoded key and binding time, the greatest Kafka position of its records: the
    record an upsert envelope takes the key's row from (``position``: partition, offset)."""
    records = with_key(_between(reclocked, lower, upper), key_schema)
    return (
        records.where(F.col("key_value").isNotNull())
        .select(
            *[F.col("key_value")[name].alias(name) for name in key_schema.names],
            TIME,
            F.struct("partition", "offset").alias("position"),
        )
        .groupBy(*key_schema.names, TIME)
        .agg(F.max("position").alias("position"))
    )


def _versions(
    steps: DataFrame, positions: DataFrame, output: StructType, keys: list[str]
) -> DataFrame:
    """The versions the steps begin: from their time to the key's next retraction (null:
    still open), with the position of the record that wrote them."""
    following = (
        Window.partitionBy(*keys).orderBy(TIME).rowsBetween(1, Window.unboundedFollowing)
    )
    ends = F.min(F.when(F.col("retracted"), F.col(TIME))).over(following)
    return (
        steps.select("*", ends.alias(VALID_TO))
        .where(F.col("row").isNotNull())
        .transform(lambda versions: _join_on_keys(versions, positions, [*keys, TIME], "left"))
        .select(
            *[F.col("row")[name].alias(name) for name in output.names],
            F.col(TIME).alias(VALID_FROM),
            VALID_TO,
            F.col("position.partition").alias("partition"),
            F.col("position.offset").alias("offset"),
        )
    )


def _files_with_open_versions_of(
    path: str,
    files: list[DataFile],
    schema: StructType,
    closings: DataFrame,
    keys: list[str],
) -> list[DataFile]:
    """The live files holding an open version of a key in ``closings``: one Spark job over
    the key and ``valid_to`` columns; only file names reach the driver."""
    if not files:
        return []
    by_location = {storage_files.join(path, f.path): f for f in files}
    open_versions = read_files(closings.sparkSession, path, files, schema).where(
        F.col(VALID_TO).isNull()
    )
    located = (
        open_versions.select(*keys, F.col("_metadata.file_path").alias("_file"))
        .transform(lambda frame: _join_on_keys(frame, closings.select(*keys), keys, "left_semi"))
        .select("_file")
        .distinct()
        .collect()
    )
    return [by_location[from_spark_path(row["_file"])] for row in located]


def _join_on_keys(left: DataFrame, right: DataFrame, keys: list[str], how: str) -> DataFrame:
    """``left.join(right, keys, how)`` with null-safe equality: a key is a record, and a key
    with a null field is a key like any other (a plain equi-join never matches it)."""
    renamed = {name: f"_right_{index}" for index, name in enumerate(keys)}
    right = right.select(
        *[F.col(f"`{name}`").alias(renamed.get(name, name)) for name in right.columns]
    )
    pairs = [left[f"`{name}`"].eqNullSafe(right[alias]) for name, alias in renamed.items()]
    same = functools.reduce(operator.and_, pairs)
    return left.join(right, same, how).drop(*renamed.values())

