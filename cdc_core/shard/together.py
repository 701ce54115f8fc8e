"""Appending to many shards with one Spark job: each task writes each shard's rows into
that shard's own staging folder, then every shard commits its own files.

Why: a run that serves hundreds of sources would otherwise run a write job per shard,
and a Spark job costs far more than the few rows a source adds in a window. A plan whose
shape depends on the number of shards (a union of per-shard plans) also costs in that
number, because Catalyst analyzes every branch. One generic plan does not. So the rows
arrive generic, with a ``target`` column naming their shard, and inside the tasks the
caller's ``decode`` turns each target's rows into that shard's layout.

Invariants: every shard keeps its own Delta log, compare-and-set, since and upper. A shard
commits what ``ShardWriter.append(..., consolidated=True)`` commits for its rows: nothing
when its upper already covers its batch, the updates at times its upper has not reached
when the upper lies inside the batch, a usage error for a gap. Staged folders carry the
shard's registered writer, so gc collects what a crash leaves. A shard whose upper moves
between its staging and its commit discards its files, and its batch is staged again.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema

from cdc_core.frontier import TimeFrontier
from cdc_core.shard import delta_io
from cdc_core.shard.handle import ShardUsageError
from cdc_core.shard.write import ShardWriter, StagedBatch, UpperMismatch
from cdc_core.storage import files
from cdc_core.updates import TIME

TARGET = "target"  # the rows' column naming the shard (a key of the batches) they go to

# What a task calls for each target in each of its Arrow batches: the target's key and its
# rows (every column of the job's input) -> the same updates in the shard's layout (its
# data columns, ``time`` and ``diff``, by name). It runs on the executors: it must pickle.
Decode = Callable[[str, pa.Table], pa.Table]

_WRITTEN = "target string, path string, time long, rows long"


@dataclass(frozen=True)
class Batch:
    """One shard's part of a joint append: its updates at times ``[lower, upper)``."""

    shard: ShardWriter
    lower: int
    upper: int


@dataclass(frozen=True)
class _Target:
    """What a task needs to stage a shard's rows: where, under which batch, from which
    time, in which Arrow layout."""

    path: str
    batch_id: str
    from_time: int
    layout: pa.Schema


def append_together(
    rows: DataFrame, batches: Mapping[str, Batch], decode: Decode, *, threads: int = 4
) -> dict[str, dict[int, int] | None]:
    """Append ``rows`` to the shards of ``batches``, each as its own idempotent append, by
    one Spark job: per key, None when the shard's upper already covered the batch (nothing
    written), else the distinct updates per time it committed.

    ``rows`` has a ``target`` column naming a key of ``batches`` (rows naming no key are
    dropped) and what ``decode`` reads. The caller vouches, per shard, for one row per
    (data, time), no zero diff, and times inside the batch: the commit checks the times on
    the files' footers and refuses the batch otherwise (ShardUsageError). Commits and the
    refreshes before them run from ``threads`` threads."""
    results: dict[str, dict[int, int] | None] = {}
    pending = dict(batches)
    with ThreadPoolExecutor(threads) as pool:
        while pending:
            uppers = dict(zip(pending, pool.map(lambda b: b.shard.refresh().upper,
                                                pending.values()), strict=True))  # fmt: skip
            froms = {}
            for key, batch in pending.items():
                current = uppers[key]
                if TimeFrontier.at(batch.upper) <= current:
                    results[key] = None
                elif not TimeFrontier.at(batch.lower) <= current:
                    raise ShardUsageError(
                        f"{batch.shard.path}: batch [{batch.lower}, {batch.upper}) would leave "
                        f"a gap after the upper {current}"
                    )
                else:
                    assert current.time is not None  # an empty upper covers every batch
                    froms[key] = current.time
            staged = _stage(rows, {key: pending[key] for key in froms}, froms, decode)
            committed = pool.map(_commit, [pending[key] for key in froms],
                                 [staged[key] for key in froms], froms.values())  # fmt: skip
            outcomes = dict(zip(froms, committed, strict=True))
            results.update({k: v for k, v in outcomes.items() if isinstance(v, dict)})
            pending = {k: pending[k] for k, v in outcomes.items() if not isinstance(v, dict)}
    return results


def _commit(batch: Batch, staged: StagedBatch, from_time: int) -> dict[int, int] | UpperMismatch:
    """Commit one shard's staged files from ``from_time`` to the batch's upper: its
    distinct updates per time, or the mismatch when its upper moved (files discarded)."""
    upper = TimeFrontier.at(batch.upper)
    mismatch = batch.shard.commit(staged, TimeFrontier.at(from_time), upper)
    return dict(staged.counts) if mismatch is None else mismatch


def _stage(
    rows: DataFrame, batches: Mapping[str, Batch], froms: Mapping[str, int], decode: Decode
) -> dict[str, StagedBatch]:
    """Write every batch's rows at or after its ``froms`` time into its shard's staging
    folder, by one job; the batches as staged (files described from their footers)."""
    if not batches:
        return {}
    targets = {
        key: _Target(
            batch.shard.path,
            delta_io.new_batch_id(batch.shard.writer),
            froms[key],
            to_arrow_schema(delta_io.shard_schema(batch.shard.data_schema), timezone="UTC"),
        )
        for key, batch in batches.items()
    }
    # One row per file and time: tiny metadata, the only thing that reaches the driver.
    written = rows.mapInArrow(_stager(targets, decode), _WRITTEN).toArrow().to_pylist()
    paths: dict[str, set[str]] = {key: set() for key in targets}
    counts: dict[str, Counter[int]] = {key: Counter() for key in targets}
    for row in written:
        paths[row["target"]].add(row["path"])  # a file holding several times: one row each
        counts[row["target"]][row["time"]] += row["rows"]
    return {
        key: StagedBatch(
            target.batch_id,
            tuple(delta_io.describe_file(target.path, path) for path in sorted(paths[key])),
            tuple(sorted(counts[key].items())),
        )
        for key, target in targets.items()
    }


def _stager(
    targets: Mapping[str, _Target], decode: Decode
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The job's task: per target in each Arrow batch, its rows decoded into its shard's
    layout, those at or after its from-time written as one Parquet file into its staging
    folder; yields ``target, path, time, rows`` per file and time."""

    def stage(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            table = pa.Table.from_batches([batch])
            out: dict[str, list] = {"target": [], "path": [], "time": [], "rows": []}
            for key in pc.unique(table.column(TARGET)).to_pylist():
                target = targets.get(key)
                if target is None:
                    continue  # a shard that holds this batch already, or no shard at all
                mine = table.filter(pc.equal(table.column(TARGET), key))
                typed = decode(key, mine).select(target.layout.names).cast(target.layout)
                typed = typed.filter(pc.greater_equal(typed.column(TIME), target.from_time))
                if typed.num_rows == 0:
                    continue
                path = f"{delta_io.DATA_DIR}/{target.batch_id}/part-{uuid.uuid4().hex}.parquet"
                files.write_parquet(files.join(target.path, path), typed)
                for pair in pc.value_counts(typed.column(TIME)).to_pylist():
                    for column, value in zip(out, (key, path, *pair.values()), strict=True):
                        out[column].append(value)
            yield pa.RecordBatch.from_pydict(
                out, schema=pa.schema([("target", pa.string()), ("path", pa.string()),
                                       ("time", pa.int64()), ("rows", pa.int64())])  # fmt: skip
            )

    return stage
