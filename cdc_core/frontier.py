"""Frontiers of the two time gauges.

IntoTime (int64 epoch milliseconds, UTC) is totally ordered, so an IntoTime
antichain is either one time or empty; the empty antichain means "finished"
and is spelled explicitly as ``TimeFrontier.empty()``, never as a magic number.

FromTime for Kafka is ``(partition, offset)``; a frontier maps each partition
to its next offset (a missing partition means 0) and is ordered per partition.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime


def iso(time: int) -> str:
    """An IntoTime as people read it: ISO-8601 UTC, to the millisecond when needed."""
    moment = datetime.fromtimestamp(time / 1000, UTC)
    text = moment.isoformat(timespec="milliseconds" if time % 1000 else "seconds")
    return text.replace("+00:00", "Z")


@dataclass(frozen=True)
class TimeFrontier:
    """An antichain over IntoTime: ``{time}`` or the empty antichain (``time is None``)."""

    time: int | None

    @classmethod
    def minimum(cls) -> TimeFrontier:
        """The frontier before any time: nothing is complete."""
        return cls(0)

    @classmethod
    def at(cls, time: int) -> TimeFrontier:
        """The frontier ``[time]``: every time before ``time`` is complete."""
        return cls(int(time))

    @classmethod
    def empty(cls) -> TimeFrontier:
        """The empty frontier: every time is complete (the collection is finished)."""
        return cls(None)

    @property
    def is_empty(self) -> bool:
        """True iff the frontier is empty (finished)."""
        return self.time is None

    def less_equal(self, time: int) -> bool:
        """True iff ``time`` is beyond the frontier (not yet complete / readable)."""
        return self.time is not None and self.time <= time

    def __le__(self, other: TimeFrontier) -> bool:
        if other.time is None:
            return True
        return self.time is not None and self.time <= other.time

    def __lt__(self, other: TimeFrontier) -> bool:
        return self <= other and self != other

    def join(self, other: TimeFrontier) -> TimeFrontier:
        """The later of the two frontiers (least upper bound)."""
        return other if self <= other else self

    def meet(self, other: TimeFrontier) -> TimeFrontier:
        """The earlier of the two frontiers (greatest lower bound)."""
        return self if self <= other else other

    def __str__(self) -> str:
        return "[]" if self.time is None else f"[{self.time}]"

    def iso(self) -> str:
        """As people read it: ``[2026-01-01T00:01:00Z]``, ``[]`` once finished."""
        return "[]" if self.time is None else f"[{iso(self.time)}]"


@dataclass(frozen=True)
class OffsetFrontier:
    """A Kafka FromTime frontier: partition -> next offset not yet included.

    Record ``(p, o)`` is before the frontier iff ``o < frontier[p]``; a missing
    partition means offset 0, so new partitions start from the beginning.
    """

    offsets: Mapping[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        clean = {int(p): int(o) for p, o in self.offsets.items() if int(o) != 0}
        if any(o < 0 for o in clean.values()):
            raise ValueError(f"offsets must be non-negative: {dict(self.offsets)}")
        object.__setattr__(self, "offsets", dict(sorted(clean.items())))

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[int, int]]) -> OffsetFrontier:
        """The frontier of ``(partition, next offset)`` pairs."""
        return cls(dict(pairs))

    def __getitem__(self, partition: int) -> int:
        return self.offsets.get(partition, 0)

    @property
    def partitions(self) -> list[int]:
        """The partitions the frontier names (others are at offset 0)."""
        return list(self.offsets)

    def contains(self, partition: int, offset: int) -> bool:
        """True iff record ``(partition, offset)`` is before (covered by) the frontier."""
        return offset < self[partition]

    def __le__(self, other: OffsetFrontier) -> bool:
        return all(o <= other[p] for p, o in self.offsets.items())

    def __lt__(self, other: OffsetFrontier) -> bool:
        return self <= other and self != other

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OffsetFrontier) and self.offsets == other.offsets

    def __hash__(self) -> int:
        return hash(tuple(self.offsets.items()))

    def join(self, other: OffsetFrontier) -> OffsetFrontier:
        """Per partition the larger next offset (least upper bound)."""
        keys = set(self.offsets) | set(other.offsets)
        return OffsetFrontier({p: max(self[p], other[p]) for p in keys})

    def meet(self, other: OffsetFrontier) -> OffsetFrontier:
        """Per partition the smaller next offset (greatest lower bound)."""
        keys = set(self.offsets) | set(other.offsets)
        return OffsetFrontier({p: min(self[p], other[p]) for p in keys})

    def regressions(self, later: OffsetFrontier) -> dict[int, tuple[int, int]]:
        """Partitions where ``later`` is behind ``self``: ``p -> (self[p], later[p])``."""
        return {p: (o, later[p]) for p, o in self.offsets.items() if later[p] < o}

    def __str__(self) -> str:
        return "{" + ", ".join(f"{p}: {o}" for p, o in self.offsets.items()) + "}"
