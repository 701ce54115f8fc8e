"""How a source's Spark queries are planned: as a small run's or a large one's, judged by
what the step reads before it runs.

Why: a scheduled window reads a few hundred rows, and Spark's adaptive plans and code
generation cost more than they save on so little; a backfill reads millions, where they
pay. So a run is sized by the stored bytes it reads (``run_input_bytes``), and a step after
the run (publishing, the checks, the export) by the rows its tables hold
(``rows_to_read``). Both read the Delta logs and the registry only: no Spark job.
Invariant: a plan's size changes how fast a query runs, never its result, and counting
more than is read errs towards large plans only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cdc_core.ingest import Registry
from cdc_core.reclock import frontier_at
from cdc_core.shard import Shard
from cdc_core.shard.delta_io import DataFile, live_files
from cdc_core.shard.log import table_to_read
from cdc_core.shard.read import ShardReader
from cdc_core.storage import Location

# A step after the run that reads at most this many rows plans small (``rows_to_read``):
# a scheduled window's checks and publishing, a small source's; a backfill's checks over a
# million records keep adaptive plans and generated code.
SMALL_STEP_ROWS = 250_000


def run_input_bytes(
    registry: Registry, remap: Shard, lower: int, prior: Iterable[DataFile]
) -> int:
    """What a run from ``lower`` reads, in stored bytes: the registered dumps holding
    offsets the outputs have not reached (the remap's frontier at ``lower - 1``), and the
    ``prior`` outputs its envelope joins."""
    reached = frontier_at(remap, lower - 1).offsets
    dumps = sum(f.size for f in registry.files(reaching=reached))
    return dumps + sum(f.size for f in prior)


def prior_outputs(
    state: Location, changes: Shard, joined: Iterable[Shard | None]
) -> list[DataFile]:
    """The files of the prior outputs a run's envelope joins: the published ``state``,
    else the ``changes``; and each of the ``joined`` shards (a classic DEBEZIUM source's
    dedup state, a CDCv2 stream's records)."""
    table = table_to_read(str(state))
    prior = live_files(table) if table is not None else changes.live_files()
    for shard in joined:
        prior += shard.live_files() if shard is not None else []
    return prior


def rows_to_read(
    tables: Mapping[str, ShardReader | Location], after: Mapping[str, int]
) -> int:
    """The rows a step reads from ``tables`` (a shard, or the location of a published
    table read whole), counted from their logs: of a shard named in ``after``, only the
    files that may hold times after its time. A missing table counts nothing."""
    rows = 0
    for name, table in tables.items():
        if isinstance(table, ShardReader):
            low = after[name] + 1 if name in after else None
            rows += sum(f.num_records for f in table.live_files() if f.may_hold_times(low, None))
        elif (published := table_to_read(str(table))) is not None:
            rows += sum(f.num_records for f in live_files(published))
    return rows


def is_small_step(rows: int) -> bool:
    """Whether a step that reads ``rows`` rows plans as a small run's does."""
    return rows <= SMALL_STEP_ROWS
