"""Many sources' ``state`` tables published by one Spark job, each table committing its
own new snapshot.

Why: a run that serves many sources would otherwise publish each ``state`` with its own
Spark plan and write job (``refresh_state``), and that job costs far more than the few
rows a window changes. Here the driver plans each table from its Delta logs alone (which
files hold the published rows, which ``changes`` files hold the updates since), one job
runs one task per table that reads those files with pyarrow, consolidates them and
writes the new snapshot as one Parquet file, and each table commits its own files from
a pool of threads, with the same compare-and-set as ``refresh_state``.

Only the common case is served: a ``state`` that is reclock's own publish, untouched
since, at a time ``changes`` still holds (or a ``state`` never published, from the whole
of ``changes``). Any other table is left to ``refresh_state`` when its source finishes,
which then finds the tables published here up to date and writes nothing.

Invariant: a table published here holds what ``refresh_state`` would publish, row for
row (floats grouped as Spark groups them: ``-0.0`` as ``0.0``, every NaN as one), at the
same time and with the same app transaction and commit metadata.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from cdc_core.shard import delta_io
from cdc_core.shard.log import TableDescription
from cdc_core.shard.read import ShardReader
from cdc_core.source.state import StateToPublish, commit_publish, state_to_publish
from cdc_core.spark import index_frame
from cdc_core.storage import files, on_workers
from cdc_core.updates import DIFF, TIME, consolidate_rows

_WRITTEN = "unit long, path string, rows long"


@dataclass(frozen=True)
class StatePublish:
    """One source's ``state`` to publish: its ``changes`` (as loaded: the snapshot is
    taken at their newest complete time), the table's folder, its columns, and the
    description a new table is created with."""

    changes: ShardReader
    path: str
    schema: StructType
    described: TableDescription


@dataclass(frozen=True)
class _Unit:
    """A table's part of the job: what it reads (``state`` files as rows at ``as_of``,
    ``changes`` files for their updates at times in ``(after, as_of]``) and where it
    writes (the batch folder of its new files)."""

    key: str
    path: str
    state_files: tuple[str, ...]
    changes_path: str
    changes_files: tuple[str, ...]
    after: int | None
    as_of: int
    batch_id: str


@dataclass(frozen=True)
class _Planned:
    """A table to publish: its unit, and the table as it stands."""

    unit: _Unit
    state: StateToPublish


def publish_together(
    spark: SparkSession, publishes: Mapping[str, StatePublish], *, threads: int = 4
) -> set[str]:
    """Publish every ``state`` of ``publishes`` at the newest complete time of its
    ``changes``, by one Spark job; the keys whose tables reflect that time now (published
    here, or already). The others (no complete time yet, a table another writer touched,
    a publish that lost its race or failed) are left to ``refresh_state``."""
    with ThreadPoolExecutor(threads, thread_name_prefix="reclock-state") as pool:
        planned = dict(zip(publishes, pool.map(_plan, publishes, publishes.values()),
                           strict=True))  # fmt: skip
        current = {key for key, plan in planned.items() if plan is True}
        todo = [plan for plan in planned.values() if isinstance(plan, _Planned)]
        if not todo:
            return current
        units = [plan.unit for plan in todo]
        layouts = {
            unit.key: to_arrow_schema(publishes[unit.key].schema, timezone="UTC") for unit in units
        }
        task = _Consolidation(units, layouts)
        places = [unit.path for unit in units] + [unit.changes_path for unit in units]
        written = (
            index_frame(spark, len(units))
            .mapInArrow(on_workers(task, places), _WRITTEN)
            .toArrow()
            .to_pylist()
        )
        paths = {row["unit"]: row["path"] for row in written}
        committed = pool.map(lambda i: _commit(todo[i], paths.get(i)), range(len(todo)))
        return current | {plan.unit.key for plan, done in zip(todo, committed, strict=True)
                          if done}  # fmt: skip


def _plan(key: str, publish: StatePublish) -> _Planned | bool:
    """What publishing one table takes: True when it reflects the time already, False
    when it is left to ``refresh_state``."""
    state = state_to_publish(publish.changes, publish.path, publish.schema, publish.described)
    if state is None:
        return False
    if state.current:
        return True
    if state.published is None:
        after = None  # the first publish: the whole of ``changes``
    elif state.incremental:
        after = state.published
    else:
        return False
    changes = publish.changes
    reads = changes.files_between(after, state.as_of)
    unit = _Unit(
        key, publish.path, tuple(f.path for f in state.files if after is not None),
        changes.path, tuple(f.path for f in reads), after, state.as_of, uuid.uuid4().hex,
    )  # fmt: skip
    return _Planned(unit, state)


def _commit(plan: _Planned, written: str | None) -> bool:
    """Commit a table's new snapshot (``written``: its one file, None when it holds no
    row) in place of the published files; whether it is in the log."""
    unit = plan.unit
    new = [] if written is None else [delta_io.describe_file(unit.path, written)]
    try:
        return commit_publish(plan.state, new, unit.batch_id)
    except Exception:  # noqa: BLE001 - ``refresh_state`` meets it when the source finishes
        return False


@dataclass(frozen=True)
class _Consolidation:
    """The job's task: per unit its ``id`` rows name, the table's new snapshot, written
    as one Parquet file; yields ``unit, path, rows`` (path null: no row)."""

    units: Sequence[_Unit]
    layouts: Mapping[str, pa.Schema]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = pa.schema([("unit", pa.int64()), ("path", pa.string()), ("rows", pa.int64())])
        for batch in batches:
            for index in batch.column("id").to_pylist():
                unit = self.units[index]
                rows = snapshot_rows(unit, self.layouts[unit.key])
                path = None
                if rows.num_rows:
                    path = f"{delta_io.DATA_DIR}/{unit.batch_id}/part-{uuid.uuid4().hex}.parquet"
                    files.write_parquet(files.join(unit.path, path), rows)
                yield pa.RecordBatch.from_pylist(
                    [{"unit": index, "path": path, "rows": rows.num_rows}], schema=schema
                )


def snapshot_rows(unit: _Unit, layout: pa.Schema) -> pa.Table:
    """The table's rows at ``unit.as_of``, one per copy: its published rows (each an
    update of diff 1) and the updates of ``changes`` since, consolidated."""
    updates = pa.schema([*layout, pa.field(DIFF, pa.int64())])
    stored = pa.schema([*layout, pa.field(TIME, pa.int64()), pa.field(DIFF, pa.int64())])
    parts = [updates.empty_table()]
    for path in unit.state_files:
        rows = delta_io.conformed(files.read_parquet(files.join(unit.path, path)), layout)
        parts.append(rows.append_column(DIFF, pa.array(np.ones(rows.num_rows, np.int64))))
    for path in unit.changes_files:
        rows = delta_io.conformed(files.read_parquet(files.join(unit.changes_path, path)), stored)
        times = rows.column(TIME)
        kept = pc.less_equal(times, unit.as_of)
        if unit.after is not None:
            kept = pc.and_(kept, pc.greater(times, unit.after))
        parts.append(rows.filter(kept).select(updates.names))
    snapshot = consolidate_rows(pa.concat_tables(parts), layout.names, by_time=False)
    diffs = pc.fill_null(snapshot.column(DIFF), 0).to_numpy()
    copies = np.repeat(np.arange(snapshot.num_rows), np.maximum(diffs, 0))
    return snapshot.select(layout.names).take(pa.array(copies))
