"""The read role of a shard handle: snapshots, listens and the progress record.

Invariant: a read at ``t`` requires ``since <= t < upper``: it is then exact (compaction
never changes a snapshot at or after since) and final (no later append writes at ``t``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Self

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from cdc_core.frontier import TimeFrontier
from cdc_core.shard import delta_io
from cdc_core.shard.handle import ShardHandle, ShardUsageError
from cdc_core.shard.log import PROGRESS_KEY, existing_table, location_failure
from cdc_core.storage import files
from cdc_core.updates import DIFF, TIME

# How many commits a bounded progress read looks at first (then four times more each step).
PROGRESS_STEP = 16


@dataclass(frozen=True)
class ProgressStatement:
    """CDCv2 progress recorded with every commit: the number of distinct
    ``(data, time)`` updates at each time in ``[lower, upper)`` (zero counts omitted)."""

    lower: TimeFrontier
    upper: TimeFrontier
    counts: tuple[tuple[int, int], ...]
    version: int


class ShardReader(ShardHandle):
    """Reads at complete, uncompacted times; Spark for data, the driver for metadata."""

    @classmethod
    def open_to_read(cls, spark: SparkSession, path: str, absent: StructType) -> ShardReader:
        """The shard at ``path`` opened to read, writing nothing: the table as stored, with
        its own columns (a config's columns not added yet are no business of a read), or
        an ``AbsentShard`` with the columns ``absent`` where no table exists yet."""
        location = files.normalize(path)
        with location_failure(f"opening {location}"):
            table = existing_table(location)
        if table is None:
            return AbsentShard(spark, location, absent)
        stored = StructType.fromJson(json.loads(table.schema().to_json()))
        data = StructType([f for f in stored.fields if f.name not in (TIME, DIFF)])
        return cls(spark, location, data, table)

    def snapshot(self, as_of: int) -> DataFrame:
        """Consolidated contents at ``as_of``: data columns + ``time`` (= as_of) + ``diff``
        (summed, zeros dropped). Requires since <= as_of < upper (ShardUsageError naming
        the violated bound otherwise)."""
        data = self.data_schema.names
        rows = self.updates_until(as_of)
        totals = rows.groupBy(*data).agg(F.sum(DIFF).alias(DIFF)).where(F.col(DIFF) != 0)
        return totals.select(*data, F.lit(as_of).cast("long").alias(TIME), DIFF)

    def updates_until(self, as_of: int) -> DataFrame:
        """Every stored update at times ``<= as_of``, unconsolidated: data columns + time +
        diff. Summing its diffs over any subset of the columns gives what the snapshot at
        ``as_of`` would, without consolidating by every data column first (updates that
        cancel sum to zero anyway). Requires since <= as_of < upper."""
        self._check_readable(as_of)
        return self._read(None, as_of).where(F.col(TIME) <= as_of)

    def size(self, as_of: int) -> int:
        """The number of records at ``as_of`` (the sum of its snapshot's diffs), from the
        ``time`` and ``diff`` columns alone; no Spark job when no file holds an update."""
        self._check_readable(as_of)
        if not self._files_holding(None, as_of):
            return 0
        total = self.updates_until(as_of).agg(F.sum(DIFF)).first()
        return (total[0] if total is not None else None) or 0

    def listen(self, as_of: int, until: int | None = None) -> DataFrame:
        """Updates with as_of < time <= until (until defaults to upper - 1; to everything
        when the shard is finished): data columns + time + diff. Requires since <= as_of
        and until < upper."""
        self._check_since(as_of, "as_of")
        if until is None:
            upper_time = self._upper.time
            until = None if upper_time is None else upper_time - 1
        else:
            self._check_complete(until, "until")
        if until is not None and until < as_of:
            raise ShardUsageError(f"until {until} is before as_of {as_of}")
        selected: Column = F.col(TIME) > as_of
        if until is not None:
            selected &= F.col(TIME) <= until
        return self._read(as_of + 1, until).where(selected)

    def updates_through(self, until: int, *, after: int | None = None) -> pa.Table:
        """Every stored update at times ``<= until`` (and ``> after``, when given: only the
        files reaching that range are read), read on the driver without a Spark job: for
        shards small enough to be metadata, like the remap, where a job would cost far
        more than the read. Updates before since carry their own time or since, as
        compaction left them. Requires since <= until < upper."""
        self._check_since(until, "until")
        self._check_complete(until, "until")
        schema = to_arrow_schema(self._schema, timezone="UTC")
        holding = self._files_holding(None if after is None else after + 1, until)
        with location_failure(f"reading {self.path}"):
            stored = delta_io.read_arrow(self.path, holding, schema)  # cast before filtering
        # A mask, not an expression: an expression runs on Arrow's thread pool, which waits
        # on a run's busy cores for what takes microseconds here.
        kept = pc.less_equal(stored[TIME], until)
        if after is not None:
            kept = pc.and_(kept, pc.greater(stored[TIME], after))
        return stored.filter(kept)

    def files_between(self, after: int | None, through: int) -> list[delta_io.DataFile]:
        """The live files that may hold updates at times in ``(after, through]`` (from the
        beginning when ``after`` is None), for a read that other shards share
        (``read_together``). Requires since <= after (when given) and through < upper, as
        ``listen`` and ``updates_until`` do."""
        if after is not None:
            self._check_since(after, "after")
        else:
            self._check_since(through, "through")
        self._check_complete(through, "through")
        return self._files_holding(None if after is None else after + 1, through)

    def holds_updates(self, after: int | None = None, through: int | None = None) -> bool:
        """Whether any live file may hold updates (at times in ``(after, through]``, when
        given), from the log's file statistics alone: a reader of a shard, or of a range,
        that never received any can skip reading (and joining against) it altogether."""
        return bool(self._files_holding(None if after is None else after + 1, through))

    def progress(self, from_time: int | None = None) -> list[ProgressStatement]:
        """The progress statements recorded by the commits, oldest first; ``from_time``:
        only those reaching it or later, starting with one whose ``lower`` is at or
        before it (or the first ever). Read from the newest commit back, in growing
        steps: a run's recent range costs what it spans, not the shard's whole history
        (uppers only move forward, so older commits end before the statements kept)."""
        limit = None if from_time is None else PROGRESS_STEP
        while True:
            with location_failure(f"reading the history of {self.path}"):
                history = self._table.history(limit=limit)
            statements = [
                ProgressStatement(
                    lower=_frontier_from_json(statement["lower"]),
                    upper=_frontier_from_json(statement["upper"]),
                    counts=tuple((time, count) for time, count in statement["counts"]),
                    version=entry["version"],
                )
                for entry in reversed(history)
                if (statement := entry.get(PROGRESS_KEY)) is not None
            ]
            if limit is None or from_time is None or len(history) < limit:
                break
            if statements and statements[0].lower.less_equal(from_time):
                break
            limit *= 4
        if from_time is None:
            return statements
        return [s for s in statements if not s.upper.less_equal(from_time)]

    def _check_readable(self, as_of: int) -> None:
        """``since <= as_of < upper``: the snapshot at ``as_of`` is exact and complete."""
        self._check_since(as_of, "as_of")
        self._check_complete(as_of, "as_of")

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


def _frontier_from_json(time: int | None) -> TimeFrontier:
    return TimeFrontier.empty() if time is None else TimeFrontier.at(time)


class AbsentShard(ShardReader):
    """A shard no run has created yet, as a reader sees it: empty, ``upper = since = [0]``
    and version -1 (what creating it would commit first), so nothing is readable; seeing
    it creates nothing. ``refresh`` keeps it absent: a reader's look is one moment's."""

    def __init__(self, spark: SparkSession, path: str, data_schema: StructType) -> None:
        self.path = path
        self.data_schema = data_schema
        self.writer = None
        self._spark = spark
        self._schema = delta_io.shard_schema(data_schema)
        self._version = -1
        self._upper = self._since = TimeFrontier.minimum()

    def refresh(self) -> Self:
        """Absent it stays: reopen with ``open_to_read`` to see a table created since."""
        return self

    def live_files(self) -> list[delta_io.DataFile]:
        """No table, no file."""
        return []

    def progress(self, from_time: int | None = None) -> list[ProgressStatement]:
        """No commit, no progress statement."""
        return []
