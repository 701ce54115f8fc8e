"""Bounded input reliance: resumption frontiers, the upstream commit, retiring dumps.

The timestamp resumption frontier ``T`` of a source is the meet of the uppers of all its
shards: every shard is complete before ``T``, so a restart never needs anything older.
Mapped through the remap at ``T - 1`` (its last complete time) it gives the offset
resumption frontier: the records a restart can never need again. That frontier is
committed upstream as a durable per-source record; dump files lying entirely below it
are then retired (archived or deleted), and the remap's since advances to ``T - 1``
(the oldest binding a later window still reads: the frontier it advances from).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from deltalake import DeltaTable, Transaction
from deltalake import Schema as DeltaSchema
from deltalake.transaction import AddAction, RemoveAction

from cdc_core.frontier import OffsetFrontier, TimeFrontier
from cdc_core.ingest import RegisteredFile, Registry
from cdc_core.reclock import HeldPartition, held_partitions, offsets_for
from cdc_core.reclock.remap import ReclockSource
from cdc_core.shard import Shard, ShardStorageError, existing_table
from cdc_core.shard.delta_io import (
    add_action,
    delete_batches,
    live_files,
    remove_action,
    write_arrow,
)
from cdc_core.shard.log import (
    UPSTREAM_COMMIT,
    app_version,
    commit_metadata,
    commit_once,
    open_or_create,
)
from cdc_core.shard.read import ShardReader
from cdc_core.storage import LocationLike, located
from cdc_core.storage import files as storage_files
from cdc_core.vocabulary import RetirePolicy

COMMIT_SCHEMA = pa.schema([("partition", pa.int32()), ("offset", pa.int64())])


class ResumptionRegression(RuntimeError):
    """A resumption frontier behind the one already committed upstream: some shard would
    need input that may already be retired."""


@dataclass(frozen=True)
class ResumptionFrontiers:
    """``timestamp``: where every shard of the source is complete up to;
    ``offsets``: the Kafka frontier of everything before it."""

    timestamp: TimeFrontier
    offsets: OffsetFrontier


def timestamp_resumption_frontier(shards: Sequence[ShardReader]) -> TimeFrontier:
    """The meet of the (freshly read) uppers of ``shards``."""
    if not shards:
        raise ValueError("a source has at least one shard")
    frontier = TimeFrontier.empty()
    for shard in shards:
        frontier = frontier.meet(shard.refresh().upper)
    return frontier


def resumption_frontiers(remap: ShardReader, shards: Sequence[ShardReader]) -> ResumptionFrontiers:
    """Both resumption frontiers of a source; ``shards`` are its shards other than remap."""
    timestamp = timestamp_resumption_frontier([remap, *shards])
    return ResumptionFrontiers(timestamp, offsets_for(remap, timestamp))


class UpstreamCommit:
    """The durable record of a source's committed offset resumption frontier.

    A one-file Delta table: rows ``(partition, offset)``; the resumption timestamp is
    the version of the table's ``upstream-commit`` app transaction, so frontier and time
    change in one atomic commit. Commits only move forward.
    """

    def __init__(self, path: LocationLike) -> None:
        self.path = str(path)

    def read(self) -> ResumptionFrontiers | None:
        """The committed frontiers, or None before the first commit."""
        table = existing_table(self.path)
        return None if table is None else self._frontiers(table)

    @staticmethod
    def _frontiers(table: DeltaTable) -> ResumptionFrontiers | None:
        time = app_version(table, UPSTREAM_COMMIT)
        if time is None:
            return None
        rows = table.to_pyarrow_table().to_pylist()
        return ResumptionFrontiers(
            TimeFrontier.at(time), OffsetFrontier({r["partition"]: r["offset"] for r in rows})
        )

    def commit(self, frontiers: ResumptionFrontiers) -> ResumptionFrontiers:
        """Record ``frontiers`` unless already committed; refuse to move backwards.

        A compare-and-set on the Delta log: on a concurrent commit, re-read and re-check.
        """
        time = frontiers.timestamp.time
        if time is None:
            raise ValueError("a finished source has no resumption time to commit")
        table = open_or_create(
            self.path, DeltaSchema.from_arrow(COMMIT_SCHEMA), detail="nothing committed"
        )
        while True:
            current = self._frontiers(table)
            if current is not None:
                behind = not current.offsets <= frontiers.offsets
                if frontiers.timestamp < current.timestamp or behind:
                    raise ResumptionRegression(
                        f"resumption frontier {frontiers.timestamp} {frontiers.offsets} is behind "
                        f"the committed {current.timestamp} {current.offsets}"
                    )
                if current.timestamp == frontiers.timestamp:
                    return current
            rows = pa.Table.from_pylist(
                [{"partition": p, "offset": o} for p, o in frontiers.offsets.offsets.items()],
                COMMIT_SCHEMA,
            )
            batch_id = uuid.uuid4().hex
            written = write_arrow(self.path, rows, batch_id)
            actions: list[AddAction | RemoveAction] = [remove_action(f) for f in live_files(table)]
            actions.append(add_action(written, data_change=True))
            metadata = commit_metadata("upstream commit", f"{frontiers.offsets} at {time}")
            transactions = [Transaction(UPSTREAM_COMMIT, time)]
            try:
                if commit_once(table, self.path, actions, transactions, metadata):
                    return frontiers
            except ShardStorageError as failure:
                if failure.definitely_not_written:
                    delete_batches(self.path, [batch_id])
                raise
            delete_batches(self.path, [batch_id])  # another commit won: decide again


@dataclass(frozen=True)
class RetireReport:
    """What one ``retire`` did."""

    committed: ResumptionFrontiers
    archived: dict[str, str] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    remap_since: TimeFrontier = field(default_factory=TimeFrontier.minimum)

    def __str__(self) -> str:
        return (
            f"committed {self.committed.timestamp.iso()} offsets {self.committed.offsets}; "
            f"archived {len(self.archived)}, deleted {len(self.deleted)} dump file(s); "
            f"remap since {self.remap_since.iso()}"
        )


def retirable(
    files: Sequence[RegisteredFile], committed: ResumptionFrontiers
) -> list[RegisteredFile]:
    """Files no later run can need: every record below the committed offsets, or, for a
    file without valid records, arrived before the last binding the commit covers. A
    Kafka Connect sink's key or header file goes with its value file (alone, as a file
    without records)."""
    time = committed.timestamp.time or 0
    dumps = [f for f in files if not f.retired and f.stored_kind is None]
    chosen = [
        f for f in dumps
        if f.lies_below(committed.offsets) or (not f.partitions and f.arrival_ms < time - 1)
    ]  # fmt: skip
    stored = {p for f in dumps for p in f.stored.values()}
    beside = {p for f in chosen for p in f.stored.values()}
    return chosen + [
        f for f in files
        if not f.retired and f.stored_kind is not None
        and (f.path in beside or (f.path not in stored and f.arrival_ms < time - 1))
    ]  # fmt: skip


def retire(
    remap: Shard,
    shards: Sequence[Shard],
    registry: Registry,
    upstream: UpstreamCommit,
    *,
    mode: RetirePolicy | str,
    landing: LocationLike,
    archive: LocationLike,
    now_ms: int,
) -> RetireReport:
    """Commit the resumption frontiers upstream, retire the dumps below them (moved under
    ``archive`` keeping their path relative to ``landing``, or deleted), and compact the
    remap up to ``T - 1``. Safe to repeat: each step is idempotent."""
    if mode not in tuple(RetirePolicy):
        expected = ", ".join(RetirePolicy)
        raise ValueError(f"unknown retire mode {mode!r}; expected one of {expected}")
    committed = upstream.commit(resumption_frontiers(remap, shards))
    archived, deleted = retire_files(
        registry, retirable(registry.live_files(), committed),
        mode=mode, landing=landing, archive=archive, now_ms=now_ms,
    )  # fmt: skip
    time = committed.timestamp.time or 0
    if remap.refresh().since.less_equal(time - 1) and remap.since.time != time - 1:
        remap.downgrade_since(TimeFrontier.at(time - 1))
        remap.compact()
    return RetireReport(committed, archived, deleted, remap.refresh().since)


def retire_files(
    registry: Registry,
    files: Sequence[RegisteredFile],
    *,
    mode: RetirePolicy | str,
    landing: LocationLike,
    archive: LocationLike,
    now_ms: int,
) -> tuple[dict[str, str], list[str]]:
    """Move ``files`` under ``archive`` (keeping their path relative to ``landing``) or
    delete them, then record them retired in ``registry``; returns what was archived
    where, and what was deleted. A file already gone is recorded all the same.

    Retire moves and deletes inside the landing zone only, and writes inside the archive
    only: every file must lie under ``landing`` and its target under ``archive``, links
    resolved (a link itself is moved or deleted as a link, never what it points at), or
    ``OutsideFolder`` is raised naming it before anything moves. The listing never yields
    a path leading out (``walk_files``): a path that does was changed behind reclock's
    back (a folder swapped for a link), or the archive holds a link leading out."""
    archive_root = str(located(archive))
    landing_root = str(located(landing))
    archived: dict[str, str] = {}
    for registered in files:
        storage_files.require_inside(registered.path, landing_root, follow_last=False)
        if mode != RetirePolicy.DELETE:
            relative = registered.path.removeprefix(landing_root.rstrip("/") + "/")
            target = storage_files.join(archive_root, relative)
            storage_files.require_inside(target, archive_root, follow_last=True)
            archived[registered.path] = target
    deleted = [f.path for f in files] if mode == RetirePolicy.DELETE else []
    for source in deleted:
        storage_files.delete_file(source)
    for source, target in archived.items():
        storage_files.move_file(source, target)
    registry.mark_retired({**archived, **dict.fromkeys(deleted)}, now_ms)
    return archived, deleted


@dataclass(frozen=True)
class SourceInspection:
    """What ``reclock inspect`` and the Dagster metadata show for one source."""

    source: str
    remap_upper: TimeFrontier
    remap_since: TimeFrontier
    frontier: OffsetFrontier
    end_offsets: OffsetFrontier
    lag: dict[int, int]
    resumption: ResumptionFrontiers
    committed: ResumptionFrontiers | None
    damaged: tuple[tuple[str, str], ...] = ()
    # The partitions the binding waits on, each with the offset and the reason.
    held: tuple[HeldPartition, ...] = ()

    @property
    def caught_up(self) -> bool:
        """No registered record is waiting, and no live dump file is damaged or empty:
        a file whose records cannot be read has records no lag figure can count."""
        return not any(self.lag.values()) and not self.damaged

    def describe(self) -> str:
        """What ``reclock inspect`` prints for the remap: frontiers and per-partition lag."""
        lines = [
            f"source {self.source}: remap upper {self.remap_upper.iso()}, "
            f"since {self.remap_since.iso()}",
            f"  {'partition':>9} {'frontier':>12} {'registered end':>15} {'lag':>10}",
        ]
        for p in sorted(set(self.frontier.partitions) | set(self.end_offsets.partitions)):
            lag = self.lag.get(p, 0)
            lines.append(f"  {p:>9} {self.frontier[p]:>12} {self.end_offsets[p]:>15} {lag:>10}")
        lines.append(
            f"  resumption: time {self.resumption.timestamp.iso()}, "
            f"offsets {self.resumption.offsets}"
        )
        if self.committed is not None:
            lines.append(
                f"  committed upstream: time {self.committed.timestamp.iso()}, "
                f"offsets {self.committed.offsets}"
            )
        if self.held:
            lines.append(f"  waiting: {len(self.held)} partition(s) hold registered offsets:")
            lines.extend(f"    {held.describe()}" for held in self.held)
        if self.damaged:
            lines.append(
                f"  NOT caught up: {len(self.damaged)} dump file(s) damaged or without "
                "records (each reported in errors):"
            )
            lines.extend(f"    {path}: {problem}" for path, problem in self.damaged)
        return "\n".join(lines)


def inspect_source(
    source: ReclockSource,
    name: str,
    remap: ShardReader,
    shards: Sequence[ShardReader],
    registry: Registry,
    upstream: UpstreamCommit,
    *,
    group: str | None = None,
) -> SourceInspection:
    """Per partition: remap frontier at its latest binding, registered end, lag
    (registered end minus frontier) and, where it waits, the offset and why
    (``group``: the transaction group binding the source); both resumption frontiers and
    the commit; and the live dump files that are damaged or hold no record (lag cannot
    count those)."""
    frontier = offsets_for(remap, TimeFrontier.empty())
    files = registry.files(reaching=frontier.offsets)
    ends = registry.end_offsets()
    lag = {p: max(ends[p] - frontier[p], 0) for p in ends.partitions}
    held = held_partitions(source, files, frontier, group=group)
    damaged = tuple(
        (f.path, f.problem or f.no_record_reason())
        for f in files
        if not f.retired and (f.problem or not f.has_records)
    )
    return SourceInspection(
        source=name,
        remap_upper=remap.upper,
        remap_since=remap.since,
        frontier=frontier,
        end_offsets=ends,
        lag=lag,
        resumption=resumption_frontiers(remap, shards),
        committed=upstream.read(),
        damaged=damaged,
        held=tuple(held),
    )
