"""Shards (or any DataFrame of updates) as CDCv2 streams between two times.

A stream of ``[lower, upper)`` holds the collection's updates at those times, one per
``(data, time)``, and progress statements that tile ``[lower, upper)`` contiguously.
Streams of adjacent windows therefore chain: read together (from the first window's
lower) they are one stream, which is what downstream consumers of per-window files do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from cdc_core.cdcv2.model import Progress
from cdc_core.cdcv2.spark_counts import column, count_per_time, data_columns
from cdc_core.frontier import TimeFrontier
from cdc_core.shard import Shard, ShardUsageError

DEFAULT_TIMES_PER_STATEMENT = 1000


@dataclass(frozen=True)
class StreamInterval:
    """What a stream's progress statements are made of: its data columns, its interval
    ``[lower, upper)``, and at most how many times one statement lists."""

    data_schema: StructType
    lower: int
    upper: TimeFrontier
    times_per_statement: int = DEFAULT_TIMES_PER_STATEMENT


@dataclass(frozen=True)
class CdcStream:
    """A CDCv2 stream of ``[lower, upper)``: ``updates`` (data columns + ``time`` +
    ``diff``, consolidated, lazy on the executors) and its progress statements, each
    listing at most ``times_per_statement`` times."""

    data_schema: StructType
    updates: DataFrame
    lower: int
    upper: TimeFrontier
    times_per_statement: int = DEFAULT_TIMES_PER_STATEMENT

    @property
    def interval(self) -> StreamInterval:
        """The stream without its updates: what its progress statements need."""
        return StreamInterval(self.data_schema, self.lower, self.upper, self.times_per_statement)

    @cached_property
    def progress(self) -> tuple[Progress, ...]:
        """The statements of the whole stream, counted by a Spark job of their own (on the
        driver once counted). Writing the stream needs none: its writers count what they
        write (``part_progress``)."""
        counts = count_per_time(self.updates)
        return tile_progress(counts, self.lower, self.upper, self.times_per_statement)


def tile_progress(
    counts: Mapping[int, int], lower: int, upper: TimeFrontier, times_per_statement: int
) -> tuple[Progress, ...]:
    """Progress statements tiling ``[lower, upper)``, each listing at most
    ``times_per_statement`` non-zero counts; the last one reaches ``upper``."""
    if times_per_statement < 1:
        raise ValueError("times_per_statement must be positive")
    times = sorted(t for t, c in counts.items() if c)
    statements = []
    start = TimeFrontier.at(lower)
    for first in range(0, len(times), times_per_statement):
        chunk = times[first : first + times_per_statement]
        is_last = first + times_per_statement >= len(times)
        end = upper if is_last else TimeFrontier.at(chunk[-1] + 1)
        statements.append(Progress(start, end, tuple((t, counts[t]) for t in chunk)))
        start = end
    if not statements:
        statements.append(Progress(start, upper))
    return tuple(statements)


def export_updates(
    updates: DataFrame,
    lower: int,
    upper: TimeFrontier,
    times_per_statement: int = DEFAULT_TIMES_PER_STATEMENT,
) -> CdcStream:
    """The stream of a differential collection (data columns + ``time`` + ``diff``,
    any number of rows per ``(data, time)``) restricted to ``[lower, upper)``: diffs
    are summed per ``(data, time)`` and zero sums dropped, as the protocol requires."""
    if not TimeFrontier.at(lower) < upper:
        raise ValueError(f"export interval [{lower}, {upper}) is empty")
    columns = data_columns(updates)
    in_window = updates.filter(F.col("time") >= lower)
    if upper.time is not None:
        in_window = in_window.filter(F.col("time") < upper.time)
    consolidated = (
        in_window.groupBy(*[column(c) for c in columns], column("time"))
        .agg(F.sum("diff").alias("diff"))
        .filter(F.col("diff") != 0)
    )
    schema = StructType([updates.schema[c] for c in columns])
    return CdcStream(schema, consolidated, lower, upper, times_per_statement)


def part_progress(
    stream: StreamInterval, lower: int, upper: TimeFrontier, counts: Mapping[int, int]
) -> tuple[Progress, ...]:
    """Progress statements tiling ``[lower, upper)``, a part of the stream's interval (or
    all of it), from ``counts``: the updates per time written there, as the tasks that
    wrote them counted. A part is a stream of its own and chains with the parts beside it;
    the whole stream is tiled as it was asked (``times_per_statement``)."""
    if not (stream.lower <= lower and TimeFrontier.at(lower) < upper <= stream.upper):
        raise ValueError(f"[{lower}, {upper}) is not a part of [{stream.lower}, {stream.upper})")
    whole = lower == stream.lower and upper == stream.upper
    per_statement = stream.times_per_statement if whole else DEFAULT_TIMES_PER_STATEMENT
    return tile_progress(counts, lower, upper, per_statement)


def export_shard(
    shard: Shard,
    lower: int,
    upper: TimeFrontier | None = None,
    times_per_statement: int = DEFAULT_TIMES_PER_STATEMENT,
) -> CdcStream:
    """The stream of ``shard`` over ``[lower, upper)`` (``upper`` defaults to the
    shard's). Only complete, exact times can be exported: ``since <= lower`` and
    ``upper <= shard.upper``. Exporting from ``lower == since`` folds the compacted
    history into time ``since``, as a snapshot there would."""
    upper = _exportable(shard, lower, upper)
    return export_updates(_shard_updates(shard, lower, upper), lower, upper, times_per_statement)


def stored_updates(
    shard: Shard, lower: int, upper: TimeFrontier
) -> list[tuple[str, int]] | None:
    """The shard's data files (path relative to its folder, size) that may hold its updates
    over ``[lower, upper)``, when those are the stream of ``export_shard`` as stored: past
    the since, each commit's updates are consolidated and no two commits share a time.
    None from ``lower == since``, where the stream folds the compacted history (a
    consolidating read), and for a stream without end. The same bounds hold as for
    ``export_shard``."""
    upper = _exportable(shard, lower, upper)
    if shard.since == TimeFrontier.at(lower) or upper.time is None:
        return None
    return [(f.path, f.size) for f in shard.files_between(lower - 1, upper.time - 1)]


def _exportable(shard: Shard, lower: int, upper: TimeFrontier | None) -> TimeFrontier:
    """``upper`` (the shard's when None), once ``[lower, upper)`` is known exportable."""
    upper = shard.upper if upper is None else upper
    if not TimeFrontier.at(lower) < upper <= shard.upper:
        raise ShardUsageError(
            f"cannot export [{lower}, {upper}): it must be non-empty and end by {shard.upper}"
        )
    if not shard.since <= TimeFrontier.at(lower):
        raise ShardUsageError(f"cannot export from {lower}: the shard's since is {shard.since}")
    return upper


def _shard_updates(shard: Shard, lower: int, upper: TimeFrontier) -> DataFrame:
    """The shard's updates at times in ``[lower, upper)`` through its read API."""
    until = None if upper.time is None else upper.time - 1
    if shard.since == TimeFrontier.at(lower):
        return shard.snapshot(lower).unionByName(shard.listen(lower, until))
    return shard.listen(lower - 1, until)
