"""Remap bindings: IntoTime -> Kafka offset frontier, minted once and reused forever.

The remap shard of a source holds at IntoTime ``t`` the FromTime frontier ``remap[t]``
(``partition -> next offset``) as a differential collection: minting at ``t`` retracts
the changed old elements and adds the new ones. A binding is minted with
compare_and_append, so exactly one process wins; every other run of that window, in
any process, reads the winner's binding back instead of computing its own.

Windows are bound in batches: one Spark pass gives every record the first window end
at which the policy lets the frontier pass it, and the frontiers of all windows of the
batch follow from those times (one compare_and_append binds them together). Because the
policies are prefix-monotone, this equals binding the windows one after another.

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

import functools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from cdc_core.calendar import Windows
from cdc_core.frontier import OffsetFrontier, TimeFrontier
from cdc_core.ingest import CanonicalReads, RegisteredFile, Registry
from cdc_core.ingest.canonical import (
    SOURCE,
    CanonicalRecords,
    SharedReads,
    SourceFiles,
    parts_starts_column,
    read_canonical,
)
from cdc_core.shard import Shard, ShardUsageError
from cdc_core.shard.read import ShardReader
from cdc_core.vocabulary import ReclockPolicy

REMAP_UPDATE = ("partition", "offset", "time", "diff")


class ReclockSource(Protocol):
    """The per-source options reclocking needs (``cdc_core.config.SourceConfig`` has them)."""

    @property
    def topic(self) -> str:
        """The Kafka topic whose offsets are bound."""

    @property
    def reclock(self) -> str:
        """The minting policy (``arrival`` or ``event-time``)."""

    @property
    def allow_offset_gaps(self) -> bool:
        """Whether a binding may skip offsets missing from the dumps (compacted topics)."""

    @property
    def start_offsets(self) -> OffsetFrontier | Mapping[int, int] | None:
        """Where each partition starts when no binding exists yet."""


# Bindings imposed from outside the source, from ``previous`` at its remap's upper ``bound``
# through ``windows``: ``(time, frontier)`` per binding time (a transaction group's).
ImposedBindings = Callable[[OffsetFrontier, int, "Windows"], list[tuple[int, "OffsetFrontier"]]]


class RemapError(ValueError):
    """A binding that would break the remap's invariants."""


class NonMonotoneBinding(RemapError):
    """A binding would move some partition's frontier backwards."""


class UnexpectedStartOffset(RemapError):
    """A partition's earliest dump starts above the offset the source says it starts at."""


def configured_starts(source: ReclockSource) -> dict[int, int]:
    """The source's ``start_offsets`` as a plain dict (partitions not listed start at 0)."""
    starts = source.start_offsets
    if isinstance(starts, OffsetFrontier):
        return dict(starts.offsets)
    return {int(p): int(o) for p, o in (starts or {}).items()}


def start_offset(source: ReclockSource, partition: int) -> int:
    """The configured start offset of ``partition`` (0 when not configured)."""
    return configured_starts(source).get(partition, 0)


def effective_starts(source: ReclockSource, previous: OffsetFrontier) -> dict[int, int]:
    """Per known partition, the first offset not yet bound: ``max(previous, start)``."""
    starts = configured_starts(source)
    return {p: max(previous[p], starts.get(p, 0)) for p in set(previous.partitions) | set(starts)}


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
    wrong = {p: (o, path) for p, (o, path) in earliest.items() if o > start_offset(source, p)}
    if wrong:
        details = "; ".join(
            f"partition {p} starts at offset {o} in {path}, expected {start_offset(source, p)}"
            for p, (o, path) in sorted(wrong.items())
        )
        raise UnexpectedStartOffset(
            f"topic {source.topic}: {details}. Land the missing dumps, or accept the start "
            f"with the source option start_offsets (e.g. {{{min(wrong)}: {wrong[min(wrong)][0]}}})"
        )


def first_end_after(windows: Windows, moment: Column) -> Column:
    """The first end of ``windows`` strictly after ``moment`` (the first end when ``moment``
    is earlier), or null when no window of the range ends after it."""
    steps = (
        F.when(moment < windows.start, 0).otherwise(
            F.floor((moment - F.lit(windows.start)) / windows.width).cast("long")
        )
        + 1
    )
    end = F.lit(windows.start) + steps * windows.width
    return F.when(end <= windows.end, end)


def bind_times(
    records: DataFrame,
    starts: Column,
    windows: Windows,
    policy: ReclockPolicy | str,
    allow_gaps: bool,
) -> DataFrame:
    """Canonical positions (``CanonicalRecords.positions``: one per offset, with ``ts``,
    ``arrival_ms`` and ``covers``) at or above their partition's start -> ``SOURCE``,
    ``partition``, ``offset``, ``covers``, ``time``: the first window end whose binding
    covers the position (null when none of ``windows`` does). Each source's partitions
    (``SOURCE``, for a read of many sources' files) are bound on their own. A damaged line
    whose ``ts`` does not read is eligible under event-time as soon as the records before
    it are.

    A record is covered at ``end`` when every record of the prefix up to it is eligible:
    under event-time its running maximum ts is below ``end``; under arrival every record
    up to it arrived before ``end``, or, with gaps allowed, some record at or after it did
    (the frontier jumps to the highest arrived offset). Without gaps the prefix also stops
    at the first offset that is no successor of the offsets the positions before it
    account for (their ``covers``: a position's own offset, or for a sink file's last
    record, the holes before the next file).
    """
    if policy not in tuple(ReclockPolicy):
        expected = ", ".join(ReclockPolicy)
        raise ValueError(f"unknown reclock policy {policy!r}; expected one of {expected}")
    candidates = records.withColumn("_start", starts).filter(F.col("offset") >= F.col("_start"))
    by_offset = Window.partitionBy(SOURCE, "partition").orderBy("offset")
    before = by_offset.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    if policy == ReclockPolicy.EVENT_TIME:
        eligible = F.max(F.coalesce(F.col("ts"), F.lit(-(2**63)))).over(before)
    elif allow_gaps:
        after = by_offset.rowsBetween(Window.currentRow, Window.unboundedFollowing)
        eligible = F.min("arrival_ms").over(after)
    else:
        eligible = F.max("arrival_ms").over(before)
    time = first_end_after(windows, eligible)
    if not allow_gaps:
        reached = F.max("covers").over(by_offset.rowsBetween(Window.unboundedPreceding, -1))
        follows = F.col("offset") <= F.coalesce(reached, F.col("_start") - 1) + 1
        candidates = candidates.withColumn("_follows", follows.cast("int"))
        time = F.when(F.min("_follows").over(before) == 1, time)
    return candidates.select(SOURCE, "partition", "offset", "covers", time.alias("time"))


def candidate_files(
    files: Sequence[RegisteredFile],
    starts: Mapping[int, int],
    end: int,
    policy: ReclockPolicy | str,
) -> list[RegisteredFile]:
    """Files that can hold offsets of the next prefix.

    Event-time: a file whose records for ``p`` include ``ts >= end`` caps the prefix of
    ``p`` at its ``max_offset``, so files starting beyond the smallest such cap are skipped.
    Arrival: only files that arrived before ``end``.
    """
    if policy == ReclockPolicy.ARRIVAL:
        files = [f for f in files if f.arrival_ms < end]
        return [f for f in files if f.overlaps(starts, None)]
    caps: dict[int, int] = {}
    for registered in files:
        for s in registered.partitions:
            late = s.max_ts is not None and s.max_ts >= end
            if late and s.max_offset >= starts.get(s.partition, 0):
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


@dataclass(frozen=True)
class FrontierRequest:
    """What a source's policy is asked to bind: ``windows``, from the frontier
    ``previous``; ``reads``: the dump reads of the source's run (see
    ``propose_frontiers``)."""

    source: ReclockSource
    registry: Registry
    previous: OffsetFrontier
    windows: Windows
    reads: CanonicalReads | None = None


@dataclass(frozen=True)
class Proposals:
    """What ``propose_frontiers`` answers: per request, the frontiers its policy binds at
    each window end, or why it cannot bind; the read of many requests' dumps they were
    bound from (persisted in the caller's ``SharedReads``: None otherwise), and each
    request's part of it (``SOURCE``), by request index."""

    frontiers: list[list[OffsetFrontier] | Exception]
    read: CanonicalRecords | None = None
    parts: Mapping[int, SourceFiles] = field(default_factory=dict)
    part_of: Mapping[int, int] = field(default_factory=dict)


def propose_frontiers(
    spark: SparkSession, requests: Sequence[FrontierRequest], *, shared: SharedReads | None = None
) -> Proposals:
    """Per request, the frontiers its source's policy binds at each end of its windows,
    or why it cannot bind (``UnexpectedStartOffset``): every request's dumps read in one
    scan and bound in one job, each source's partitions on their own, so binding many
    sources costs one job, not one each.

    A lone request with ``reads`` reads through them. Many requests are read together;
    with ``shared``, the read is persisted there and each request's ``reads`` adopt its
    part (so the requests' runs reclock from it), which needs their reads to agree on
    headers."""
    answers: list[list[OffsetFrontier] | Exception] = []
    parts: list[SourceFiles] = []
    asking: dict[int, int] = {}  # request -> its part of the read
    for i, request in enumerate(requests):
        starts = effective_starts(request.source, request.previous)
        files = request.registry.files(reaching=starts)
        try:
            check_start_offsets(request.source, request.previous, files)
        except UnexpectedStartOffset as refused:
            answers.append(refused)
            continue
        answers.append([request.previous for _ in request.windows.ends])
        needed = candidate_files(files, starts, request.windows.end, request.source.reclock)
        if needed:
            asking[i] = len(parts)
            parts.append(SourceFiles(request.registry.topic, needed, starts))
    if not parts:
        return Proposals(answers)
    adopting = {i: reads for i in asking if (reads := requests[i].reads) is not None}
    if len(parts) == 1 and adopting:
        (reads,) = adopting.values()
        canonical = reads.read(parts[0].files, parts[0].starts)
    else:
        headers = {reads.headers for reads in adopting.values()}
        if len(headers) > 1:
            raise ValueError("sources bound together must all keep their headers, or none")
        canonical = read_canonical(spark, parts, headers=headers == {True})
        if shared is not None:
            canonical = shared.persist(canonical)
    # One binding per kind of request (policy, gaps, windows): a few plans, whatever the
    # number of sources.
    kinds: dict[tuple[str, bool, Windows], list[int]] = {}
    for i, k in asking.items():
        source = requests[i].source
        kinds.setdefault((source.reclock, source.allow_offset_gaps, requests[i].windows),
                         []).append(k)  # fmt: skip
    positions = canonical.positions
    starts_col = parts_starts_column(spark, dict(enumerate(p.starts for p in parts)))
    times = [
        bind_times(
            positions if len(kinds) == 1 else positions.where(F.col(SOURCE).isin(ks)),
            starts_col, windows, policy, gaps,
        )
        for (policy, gaps, windows), ks in kinds.items()
    ]  # fmt: skip
    # Only the per-(source, partition, time) maxima reach the driver.
    tops: dict[int, dict[int, dict[int, int]]] = {}  # part -> time -> partition -> offset
    for row in (
        functools.reduce(DataFrame.unionByName, times)
        .filter(F.col("time").isNotNull())
        .groupBy(SOURCE, "partition", "time")
        .agg((F.max("covers") + 1).alias("offset"))
        .toArrow()
        .to_pylist()
    ):
        tops.setdefault(row[SOURCE], {}).setdefault(row["time"], {})[row["partition"]] = row[
            "offset"
        ]
    for i, k in asking.items():
        request, mine = requests[i], tops.get(k, {})
        frontier, frontiers = request.previous, []
        for end in request.windows.ends:  # the previous frontier joined with each binding
            frontier = frontier.join(OffsetFrontier(mine.get(end, {})))
            frontiers.append(frontier)
        answers[i] = frontiers
    if len(parts) == 1 or shared is None:
        return Proposals(answers)
    for i, reads in adopting.items():  # read whole: the runs reclock from it
        k = asking[i]
        reads.adopt(parts[k].files, parts[k].starts, functools.partial(canonical.of_source, k))
    return Proposals(answers, canonical, {i: parts[k] for i, k in asking.items()}, asking)


def binding_updates(
    previous: OffsetFrontier, bound: Sequence[tuple[int, OffsetFrontier]]
) -> pa.Table:
    """The differential updates that turn ``previous`` into each ``(time, frontier)`` of
    ``bound`` in turn (ascending times): a few rows per window, built and committed on the
    driver (a Spark job would cost more than the binding itself)."""
    rows = []
    for time, frontier in bound:
        regressions = previous.regressions(frontier)
        if regressions:
            moved = ", ".join(f"partition {p}: {a} -> {b}" for p, (a, b) in regressions.items())
            raise NonMonotoneBinding(f"binding at {time} would move offsets backwards ({moved})")
        for p in frontier.partitions:
            if frontier[p] != previous[p]:
                if previous[p]:
                    rows.append((p, previous[p], time, -1))
                rows.append((p, frontier[p], time, 1))
        previous = frontier
    schema = pa.schema(
        [
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("time", pa.int64()),
            ("diff", pa.int64()),
        ]
    )
    return pa.Table.from_pylist([dict(zip(schema.names, row, strict=True)) for row in rows], schema)


def remap_updates(remap: ShardReader, until: int) -> list[tuple[int, int, int, int]]:
    """Every remap update ``(partition, offset, time, diff)`` at times ``<= until``, read on
    the driver: the remap is tiny metadata, and a Spark job would cost far more."""
    table = remap.updates_through(until)
    return list(zip(*(table.column(name).to_pylist() for name in REMAP_UPDATE), strict=True))


def frontier_at(remap: ShardReader, time: int) -> OffsetFrontier:
    """``remap[time]``; before time 0 nothing is bound. Validates the stored antichain."""
    if time < 0:
        return OffsetFrontier()
    return frontier_in(remap_updates(remap, time), time)


def frontier_in(updates: Sequence[tuple[int, int, int, int]], time: int) -> OffsetFrontier:
    """``remap[time]`` from remap updates ``(partition, offset, time, diff)`` read already
    (those after ``time`` are left out): one read serves several times."""
    live: Counter[tuple[int, int]] = Counter()
    for partition, offset, at, diff in updates:
        if at <= time:
            live[(partition, offset)] += diff
    return frontier_of(live, time)


def frontier_of(live: Mapping[tuple[int, int], int], time: int) -> OffsetFrontier:
    """The frontier that accumulated ``(partition, offset) -> count`` spells at ``time``:
    RemapError unless it is one element per partition, each counted once."""
    elements = sorted((key, count) for key, count in live.items() if count != 0)
    partitions = [partition for (partition, _), _ in elements]
    if any(count != 1 for _, count in elements) or len(set(partitions)) != len(partitions):
        raise RemapError(f"remap at {time} is not one element per partition: {elements}")
    return OffsetFrontier(dict(key for key, _ in elements))


def offsets_for(remap: ShardReader, frontier: TimeFrontier) -> OffsetFrontier:
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


@dataclass(frozen=True)
class RangeBindings:
    """The remap over binding times ``[lower, upper)``: the frontier before them and the
    bindings minted in them, ``(partition, next offset, time)`` (tiny metadata)."""

    base: OffsetFrontier
    bindings: tuple[tuple[int, int, int], ...]
    minted: frozenset[int] = frozenset()

    @property
    def top(self) -> OffsetFrontier:
        """The frontier bound at the range's last time."""
        return self.at(None)

    def at(self, time: int | None) -> OffsetFrontier:
        """``remap[time]`` inside the range (the top when ``time`` is None)."""
        moved = {
            p: o
            for p, o, t in sorted(self.bindings, key=lambda b: b[2])
            if time is None or t <= time
        }
        return self.base.join(OffsetFrontier(moved))

    @classmethod
    def read(cls, remap: Shard, lower: int, upper: int) -> RangeBindings:
        """The bindings of ``[lower, upper)`` from the remap; usage error when not yet bound."""
        remap_upper = remap.refresh().upper
        if not TimeFrontier.at(upper) <= remap_upper:
            raise ShardUsageError(f"remap is bound only up to {remap_upper}, not to {upper}")
        base = frontier_at(remap, lower - 1)
        if upper - 1 <= max(lower - 1, 0):
            return cls(base, ())
        after = max(lower - 1, 0)
        updates = remap_updates(remap, upper - 1)
        added = [(p, o, t) for p, o, t, d in updates if d > 0 and t > after]
        return cls(base, tuple(sorted(added)))

    @classmethod
    def of(
        cls, previous: OffsetFrontier, bound: Sequence[tuple[int, OffsetFrontier]]
    ) -> RangeBindings:
        """The bindings just minted from ``previous``, without reading the remap again."""
        bindings: list[tuple[int, int, int]] = []
        before = previous
        for time, frontier in bound:
            moved = [p for p in frontier.partitions if frontier[p] != before[p]]
            bindings.extend((p, frontier[p], time) for p in moved)
            before = frontier
        return cls(previous, tuple(sorted(bindings)), frozenset(t for t, _ in bound))


@dataclass(frozen=True)
class UnboundWindows:
    """What a run's ``windows`` leave its remap to bind: the windows after its upper
    ``bound`` (``unbound``), from the frontier ``previous``; ``done``: the bindings of
    the run's windows the remap holds already (None when there are none)."""

    windows: Windows
    unbound: Windows
    bound: int
    previous: OffsetFrontier
    done: RangeBindings | None

    @classmethod
    def of(cls, remap: Shard, windows: Windows) -> UnboundWindows | None:
        """What the remap has yet to bind of ``windows`` (None: it holds them all)."""
        lower = windows.start + 1
        bound = remap.refresh().upper.time
        if bound is None or bound >= windows.end + 1:
            return None
        if bound > lower:
            done = RangeBindings.read(remap, lower, bound)
            return cls(windows, windows.from_end(bound - 1), bound, done.top, done)
        return cls(windows, windows, bound, frontier_at(remap, bound - 1), None)

    def commit(
        self, remap: Shard, minted: Sequence[tuple[int, OffsetFrontier]]
    ) -> RangeBindings | None:
        """Bind ``minted`` (a frontier per binding time, from ``bound`` through the
        windows' end: skipped windows bound to the unchanged frontier) with one
        compare_and_append: the run's bindings, or None when another process bound first."""
        updates = binding_updates(self.previous, minted)
        upper = TimeFrontier.at(self.windows.end + 1)
        if remap.compare_and_append(updates, TimeFrontier.at(self.bound), upper):
            return None
        new = RangeBindings.of(self.previous, minted)
        if self.done is None:
            return new
        return RangeBindings(self.done.base, self.done.bindings + new.bindings, new.minted)


def mint_bindings(
    spark: SparkSession,
    source: ReclockSource,
    registry: Registry,
    remap: Shard,
    windows: Windows,
    reads: CanonicalReads | None = None,
    imposed: ImposedBindings | None = None,
) -> RangeBindings:
    """The bindings of ``windows`` (binding times ``[windows.start + 1, windows.end + 1)``):
    those already in the remap are read back, the others minted with one
    compare_and_append, which also binds any skipped windows (between the remap's upper
    and ``windows.start``) to the unchanged frontier. With ``imposed`` (a transaction
    group's bindings) the source's policy does not decide: the imposed bindings are copied.

    On an upper mismatch another process won: re-read and adopt or retry.
    """
    while True:
        pending = UnboundWindows.of(remap, windows)
        if pending is None:
            return RangeBindings.read(remap, windows.start + 1, windows.end + 1)
        if imposed is None:
            request = FrontierRequest(source, registry, pending.previous, pending.unbound, reads)
            (frontiers,) = propose_frontiers(spark, [request]).frontiers
            if isinstance(frontiers, Exception):
                raise frontiers
            minted = list(zip(pending.unbound.ends, frontiers, strict=True))
        else:
            minted = imposed(pending.previous, pending.bound, windows)
        bound = pending.commit(remap, minted)
        if bound is not None:
            return bound
