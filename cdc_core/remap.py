"""Remap bindings: IntoTime -> Kafka offset frontier, minted once and reused forever.

The remap shard of a source holds at IntoTime ``t`` the FromTime frontier ``remap[t]``
(``partition -> next offset``) as a differential collection: minting at ``t`` retracts
the changed old elements and adds the new ones. A binding is minted with
compare_and_append, so exactly one process wins; every other run of that window, in
any process, reads the winner's binding back instead of computing its own.

Minting policies (computed in Spark; only per-partition frontiers reach the driver):
- ``event-time``: per partition, the longest offset prefix from the current frontier
  whose running maximum Kafka timestamp is below the window end;
- ``arrival``: the offsets of dump files registered before the window end.
Without ``allow_offset_gaps`` the prefix must be contiguous: a missing offset holds the
partition back (visible as lag), it is never skipped. With ``allow_offset_gaps``
(compacted topics) the frontier moves past gaps to the highest eligible offset + 1.

A partition starts at ``start_offsets[p]`` (default 0); records below it are not part of
the source. A partition whose earliest registered dump starts above its start offset
raises ``UnexpectedStartOffset`` until ``start_offsets`` accepts where it really starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from cdc_core.frontier import OffsetFrontier, TimeFrontier
from cdc_core.registry import RegisteredFile, Registry, read_canonical
from cdc_core.shard import Shard

POLICIES = ("arrival", "event-time")


class ReclockSource(Protocol):
    """The per-source options reclocking needs (``cdc_core.config.SourceConfig`` has them)."""

    @property
    def topic(self) -> str: ...

    @property
    def reclock(self) -> str: ...

    @property
    def allow_offset_gaps(self) -> bool: ...

    @property
    def start_offsets(self) -> OffsetFrontier | Mapping[int, int] | None: ...


class RemapError(ValueError):
    """A binding that would break the remap's invariants."""


class NonMonotoneBinding(RemapError):
    """A binding would move some partition's frontier backwards."""


class UnexpectedStartOffset(RemapError):
    """A partition's earliest dump starts above the offset the source says it starts at."""


class MisalignedWindow(RemapError):
    """The remap shard's upper lies strictly inside the window being bound."""


@dataclass(frozen=True)
class Binding:
    """The remap binding at IntoTime ``time`` and the frontier it advanced from
    (``previous`` is None when that older binding has been compacted away)."""

    time: int
    frontier: OffsetFrontier
    previous: OffsetFrontier | None
    minted: bool


def configured_starts(source: ReclockSource) -> dict[int, int]:
    """The source's ``start_offsets`` as a plain dict (partitions not listed start at 0)."""
    starts = source.start_offsets
    if isinstance(starts, OffsetFrontier):
        return dict(starts.offsets)
    return {int(p): int(o) for p, o in (starts or {}).items()}


def start_offset(source: ReclockSource, partition: int) -> int:
    return configured_starts(source).get(partition, 0)


def effective_starts(source: ReclockSource, previous: OffsetFrontier) -> dict[int, int]:
    """Per known partition, the first offset not yet bound: ``max(previous, start)``."""
    starts = configured_starts(source)
    return {p: max(previous[p], starts.get(p, 0)) for p in set(previous.partitions) | set(starts)}


def starts_column(spark: SparkSession, starts: Mapping[int, int]) -> Column:
    """A column with each record's partition start (0 for partitions not listed)."""
    pairs = [x for p, o in sorted(starts.items()) for x in (F.lit(p), F.lit(o))]
    if not pairs:
        return F.lit(0).cast("bigint")
    lookup = F.create_map(*pairs)
    return F.coalesce(lookup[F.col("partition")], F.lit(0)).cast("bigint")


def check_start_offsets(
    source: ReclockSource, previous: OffsetFrontier, files: Sequence[RegisteredFile]
) -> None:
    """Refuse a partition not yet started whose earliest registered dump begins past its start.

    Uses the whole registry (late-arriving files too), so a head dump that merely
    arrived after another one does not count as missing once it is registered.
    """
    earliest: dict[int, tuple[int, str]] = {}
    for registered in files:
        for s in registered.partitions:
            start = start_offset(source, s.partition)
            if previous[s.partition] > start or s.max_offset < start:
                continue
            seen = earliest.get(s.partition)
            if seen is None or s.min_offset < seen[0]:
                earliest[s.partition] = (s.min_offset, registered.path)
    wrong = {
        p: (o, path) for p, (o, path) in earliest.items() if o > start_offset(source, p)
    }
    if wrong:
        details = "; ".join(
            f"partition {p} starts at offset {o} in {path}, expected {start_offset(source, p)}"
            for p, (o, path) in sorted(wrong.items())
        )
        raise UnexpectedStartOffset(
            f"topic {source.topic}: {details}. Land the missing dumps, or accept the start "
            f"with the source option start_offsets (e.g. {{{min(wrong)}: {wrong[min(wrong)][0]}}})"
        )


def eligible_prefix_ends(
    records: DataFrame, starts: Column, end: int, policy: str, allow_gaps: bool
) -> DataFrame:
    """Per partition, 1 + the last offset of the eligible prefix (columns partition, offset).

    ``records`` are canonical (one per offset) with ``arrival_ms``. A record blocks the
    prefix when its running max ts reaches ``end`` (event-time); under ``arrival`` a record
    that arrived too late is simply absent. Without gaps, the prefix also stops at the
    first offset that is not ``start + rank``.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown reclock policy {policy!r}; expected one of {POLICIES}")
    candidates = records.withColumn("_start", starts).filter(F.col("offset") >= F.col("_start"))
    if policy == "arrival":
        candidates = candidates.filter(F.col("arrival_ms") < end)
        blocked = F.lit(0)
    else:
        blocked = (F.col("ts") >= end).cast("int")
    by_offset = Window.partitionBy("partition").orderBy("offset")
    running = by_offset.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    ranked = candidates.select(
        "partition",
        "offset",
        "_start",
        F.max(blocked).over(running).alias("_blocked"),
        (F.row_number().over(by_offset) - 1).alias("_rank"),
    )
    prefix = ranked.filter(F.col("_blocked") == 0)
    if not allow_gaps:
        prefix = prefix.filter(F.col("offset") == F.col("_start") + F.col("_rank"))
    return prefix.groupBy("partition").agg((F.max("offset") + 1).alias("offset"))


def read_frontier(frame: DataFrame) -> OffsetFrontier:
    """Collect a tiny (partition, offset) DataFrame into a frontier."""
    return OffsetFrontier({r["partition"]: r["offset"] for r in frame.collect()})


def candidate_files(
    files: Sequence[RegisteredFile], starts: Mapping[int, int], end: int, policy: str
) -> list[RegisteredFile]:
    """Files that can hold offsets of the next prefix.

    Event-time: a file whose records for ``p`` include ``ts >= end`` caps the prefix of
    ``p`` at its ``max_offset``, so files starting beyond the smallest such cap are skipped.
    Arrival: only files that arrived before ``end``.
    """
    if policy == "arrival":
        files = [f for f in files if f.arrival_ms < end]
        return [f for f in files if f.overlaps(starts, None)]
    caps: dict[int, int] = {}
    for registered in files:
        for s in registered.partitions:
            if s.max_ts >= end and s.max_offset >= starts.get(s.partition, 0):
                caps[s.partition] = min(caps.get(s.partition, s.max_offset), s.max_offset)
    return [
        f
        for f in files
        if any(
            s.max_offset >= starts.get(s.partition, 0)
            and s.min_offset <= caps.get(s.partition, s.max_offset)
            for s in f.partitions
        )
    ]


def propose_frontier(
    spark: SparkSession,
    source: ReclockSource,
    registry: Registry,
    previous: OffsetFrontier,
    end: int,
) -> OffsetFrontier:
    """The frontier the source's policy binds at ``end``, starting from ``previous``."""
    files = registry.files()
    check_start_offsets(source, previous, files)
    starts = effective_starts(source, previous)
    needed = candidate_files(files, starts, end, source.reclock)
    if not needed:
        return previous
    start_col = starts_column(spark, starts)
    canonical = read_canonical(spark, registry, needed, F.col("offset") >= start_col)
    ends = eligible_prefix_ends(
        canonical.records, start_col, end, source.reclock, source.allow_offset_gaps
    )
    return previous.join(read_frontier(ends))


def binding_updates(
    spark: SparkSession, previous: OffsetFrontier, frontier: OffsetFrontier, time: int
) -> DataFrame:
    """The differential updates that turn ``previous`` into ``frontier`` at ``time``."""
    regressions = previous.regressions(frontier)
    if regressions:
        moved = ", ".join(f"partition {p}: {a} -> {b}" for p, (a, b) in regressions.items())
        raise NonMonotoneBinding(f"binding at {time} would move offsets backwards ({moved})")
    rows = []
    for p in frontier.partitions:
        if frontier[p] != previous[p]:
            if previous[p]:
                rows.append((p, previous[p], time, -1))
            rows.append((p, frontier[p], time, 1))
    schema = pa.schema(
        [("partition", pa.int32()), ("offset", pa.int64()), ("time", pa.int64()),
         ("diff", pa.int64())]
    )
    table = pa.Table.from_pylist(
        [dict(zip(schema.names, row, strict=True)) for row in rows], schema
    )
    return spark.createDataFrame(table)


def frontier_at(remap: Shard, time: int) -> OffsetFrontier:
    """``remap[time]``; before time 0 nothing is bound. Validates the stored antichain."""
    if time < 0:
        return OffsetFrontier()
    rows = remap.snapshot(time).select("partition", "offset", "diff").collect()
    partitions = [r["partition"] for r in rows]
    if any(r["diff"] != 1 for r in rows) or len(set(partitions)) != len(partitions):
        raise RemapError(f"remap at {time} is not one element per partition: {rows}")
    return OffsetFrontier({r["partition"]: r["offset"] for r in rows})


def offsets_for(remap: Shard, frontier: TimeFrontier) -> OffsetFrontier:
    """The FromTime frontier of an IntoTime frontier: ``remap`` at its last complete time.

    The empty IntoTime frontier (finished) maps to the remap's latest complete binding.
    """
    upper = remap.refresh().upper
    time = frontier.meet(upper).time
    return frontier_at(remap, (time if time is not None else 0) - 1)


def visible_at(remap: Shard, partition: int, offset: int) -> int | None:
    """The IntoTime at which record ``(partition, offset)`` became visible; None if not yet.

    Bindings before the remap's since are compacted into it, so the answer for a record
    bound back then is the since itself (the earliest time still distinguishable).
    """
    remap.refresh()
    since, upper = remap.since.time, remap.upper.time
    if since is None or upper is None or upper <= since:
        return None
    covering = remap.snapshot(since).filter(F.col("diff") > 0)
    if upper - 1 > since:
        covering = covering.unionByName(remap.listen(since, upper - 1).filter(F.col("diff") > 0))
    first = (
        covering.filter((F.col("partition") == partition) & (F.col("offset") > offset))
        .agg(F.min("time").alias("time"))
        .first()
    )
    return None if first is None else first["time"]


def mint_binding(
    spark: SparkSession,
    source: ReclockSource,
    registry: Registry,
    remap: Shard,
    start: int,
    end: int,
) -> Binding:
    """The binding of window ``[start, end)`` at IntoTime ``end``: read back when it exists,
    else minted with compare_and_append in the same commit that binds any skipped
    windows (between the remap's upper and ``start``) to the unchanged frontier.

    On an upper mismatch another process won: re-read and adopt or retry.
    """
    while True:
        upper = remap.refresh().upper.time
        if upper is None or upper > end:
            since = remap.since.time or 0
            previous = frontier_at(remap, start) if start >= since else None
            return Binding(end, frontier_at(remap, end), previous, minted=False)
        if upper > start + 1:
            raise MisalignedWindow(
                f"remap upper {upper} lies inside window [{start}, {end}); windows must tile"
            )
        previous = frontier_at(remap, upper - 1)
        frontier = propose_frontier(spark, source, registry, previous, end)
        updates = binding_updates(spark, previous, frontier, end)
        mismatch = remap.compare_and_append(
            updates, TimeFrontier.at(upper), TimeFrontier.at(end + 1)
        )
        if mismatch is None:
            return Binding(end, frontier, previous, minted=True)
