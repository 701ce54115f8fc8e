"""Why a binding holds a Kafka partition back: the offset it waits at, and the reason.

A partition is held when registered dumps hold offsets at or above the remap frontier.
That is ordinary lag while the records' windows have not closed; it is a stall when it
lasts. Judged from the registry's metadata alone (no Spark): which registered ranges
cover the waiting offset, the minting policy, and a transaction group. ``overdue``
names the partitions whose unbound dumps arrived longer ago than a bound (a source's
``stall_after``), which the ``accounted`` check fails on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cdc_core.frontier import OffsetFrontier, iso
from cdc_core.ingest import RegisteredFile
from cdc_core.ingest.registry import PartitionStats
from cdc_core.reclock.remap import ReclockSource, configured_starts
from cdc_core.vocabulary import ReclockPolicy


@dataclass(frozen=True)
class HeldPartition:
    """A partition the binding has not passed: it waits at ``waits_at`` with registered
    offsets up to ``registered_end`` (exclusive), the oldest of their dumps registered at
    ``waiting_since_ms``, for ``reason``."""

    partition: int
    waits_at: int
    registered_end: int
    waiting_since_ms: int
    reason: str

    def describe(self) -> str:
        """One line naming the partition, the offset it waits at and why."""
        return (
            f"partition {self.partition} waits at offset {self.waits_at} "
            f"({self.registered_end - self.waits_at} registered offset(s) from there, "
            f"the oldest dump registered {iso(self.waiting_since_ms)}): {self.reason}"
        )


def held_partitions(
    source: ReclockSource,
    files: Sequence[RegisteredFile],
    frontier: OffsetFrontier,
    *,
    group: str | None = None,
) -> list[HeldPartition]:
    """Every partition with registered offsets at or above ``frontier`` (and its start),
    in partition order, with the reason its binding waits."""
    starts = configured_starts(source)
    ranges: dict[int, list[_Span]] = {}
    for registered in files:
        for s in registered.partitions:
            ranges.setdefault(s.partition, []).append(_Span(registered, s))
    held = []
    for partition, spans in sorted(ranges.items()):
        waits_at = max(frontier[partition], starts.get(partition, 0))
        ahead = [span for span in spans if span.stats.max_offset >= waits_at]
        if not ahead:
            continue
        held.append(
            HeldPartition(
                partition=partition,
                waits_at=waits_at,
                registered_end=max(span.stats.max_offset for span in ahead) + 1,
                waiting_since_ms=min(span.file.arrival_ms for span in ahead),
                reason=_reason(source, waits_at, ahead, group),
            )
        )
    return held


@dataclass(frozen=True)
class _Span:
    """One registered file's range of one partition."""

    file: RegisteredFile
    stats: PartitionStats

    def holds(self, offset: int) -> bool:
        """The range includes ``offset`` and has as many lines as offsets, so no hole."""
        low, high = self.stats.min_offset, self.stats.max_offset
        lines = self.stats.records + self.stats.damaged_lines
        return low <= offset <= high and lines >= high - low + 1

    def covers(self, offset: int) -> bool:
        """The range includes ``offset``."""
        return self.stats.min_offset <= offset <= self.stats.max_offset

    def around(self, offset: int) -> bool:
        """The range includes ``offset`` but misses offsets somewhere."""
        return self.stats.min_offset <= offset <= self.stats.max_offset and not self.holds(offset)


def overdue(held: Sequence[HeldPartition], now_ms: int, after_ms: int) -> list[HeldPartition]:
    """The held partitions whose oldest unbound dump was registered more than
    ``after_ms`` before ``now_ms``: a stall, not lag."""
    return [h for h in held if now_ms - h.waiting_since_ms > after_ms]


def _reason(
    source: ReclockSource, waits_at: int, ahead: Sequence[_Span], group: str | None
) -> str:
    waiting = [span.file for span in ahead if span.file.waiting_for and span.covers(waits_at)]
    if waiting:
        first = waiting[0]
        return (
            f"Kafka Connect sink file {first.path} waits for its "
            f"{' and '.join(first.waiting_for)} file: a value file is read only with the "
            "files the sink stores beside it (sink_stores), which land after it"
        )
    holding = [span for span in ahead if not span.file.waiting_for]
    if not any(span.holds(waits_at) for span in holding) and not source.allow_offset_gaps:
        holed = [span.file.path for span in holding if span.around(waits_at)]
        where = (
            f"it lies inside the range of {', '.join(holed)}, which misses offsets"
            if holed
            else f"the next registered offset is {min(s.stats.min_offset for s in ahead)}"
        )
        return (
            f"offset gap: no registered dump is known to hold offset {waits_at} ({where}); "
            "land the missing dump. A compacted topic, or one written by a transactional "
            "producer (each commit marker takes an offset no consumer sees, and an aborted "
            "transaction's records are skipped), has such gaps: set allow_offset_gaps for it"
        )
    if group is not None:
        return (
            f"transaction group {group}: an open transaction, or a member's own policy, "
            "holds the group's binding (reclock inspect shows pending transactions)"
        )
    if source.reclock == ReclockPolicy.EVENT_TIME:
        return (
            f"event time: the record at offset {waits_at}, or one before it, carries a "
            "timestamp at or after the last bound window's end"
        )
    return "arrival: its dumps were registered after the last bound window closed"
