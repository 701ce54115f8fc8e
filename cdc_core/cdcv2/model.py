"""The CDCv2 message model: update batches and progress statements, and the named
errors of the protocol.

Both message kinds are irrevocable facts, so they may be duplicated, reordered and
re-batched freely; validation here only rejects messages that cannot be facts at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from cdc_core.frontier import TimeFrontier

# A row of the collection: its column values in the data schema's order.
Data = tuple[object, ...]
# ``(data, time, diff)``: data's multiplicity changes by ``diff`` (never 0) at ``time``.
Update = tuple[Data, int, int]


class CdcError(ValueError):
    """A CDCv2 stream that cannot be read as written; ``times`` are the offending times."""

    def __init__(self, message: str, times: Iterable[int] = ()) -> None:
        self.times: tuple[int, ...] = tuple(sorted(set(times)))
        suffix = f" (times {list(self.times)})" if self.times else ""
        super().__init__(message + suffix)


class MalformedMessage(CdcError):
    """A message that breaks the protocol's shape (zero diff, negative time, a count
    outside its statement's interval, a value of the wrong type, ...)."""


class UpdateBeforeStart(CdcError):
    """An update at a time before the frontier the reader was asked to start from."""


class CdcContradiction(CdcError):
    """Facts that cannot all be true; reclock never picks a winner."""


class DiffContradiction(CdcContradiction):
    """The same ``(data, time)`` carries two different diffs."""


class CountDisagreement(CdcContradiction):
    """Two progress statements announce different counts for the same time."""


class CountExceeded(CdcContradiction):
    """More distinct updates arrived at a time than its announced count."""


@dataclass(frozen=True)
class Updates:
    """A batch of update statements (any batching of the stream's facts)."""

    updates: tuple[Update, ...]

    def __post_init__(self) -> None:
        updates = tuple((tuple(data), int(time), int(diff)) for data, time, diff in self.updates)
        negative = [time for _, time, _ in updates if time < 0]
        if negative:
            raise MalformedMessage("update times must be non-negative", negative)
        zero = [time for _, time, diff in updates if diff == 0]
        if zero:
            raise MalformedMessage("update diffs must be non-zero", zero)
        object.__setattr__(self, "updates", updates)


class ProgressLike(Protocol):
    """Anything shaped like a progress statement (e.g. the shard's ``ProgressStatement``)."""

    @property
    def lower(self) -> TimeFrontier:
        """Times before this are not described by the message."""

    @property
    def upper(self) -> TimeFrontier:
        """Times at or after this are not described by the message."""

    @property
    def counts(self) -> tuple[tuple[int, int], ...]:
        """Distinct updates per time, as ``(time, count)`` pairs."""


@dataclass(frozen=True)
class Progress:
    """The number of distinct updates at every time in ``[lower, upper)``; times not
    listed in ``counts`` have none. An empty ``upper`` closes the stream forever.

    Counts are stored sorted by time, without zeros (a listed zero says the same as
    an omitted time).
    """

    lower: TimeFrontier
    upper: TimeFrontier
    counts: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        if self.lower.is_empty:
            raise MalformedMessage("progress lower must be a time, not the empty frontier")
        if self.lower.time < 0 or not self.lower <= self.upper:  # type: ignore[operator]
            raise MalformedMessage(f"progress interval [{self.lower}, {self.upper}) is invalid")
        counts = sorted((int(time), int(count)) for time, count in self.counts)
        times = [time for time, _ in counts]
        repeated = [time for time, seen in Counter(times).items() if seen > 1]
        if repeated:
            raise MalformedMessage("progress lists a time more than once", repeated)
        outside = [t for t in times if self.upper.less_equal(t) or not self.lower.less_equal(t)]
        if outside:
            raise MalformedMessage(
                f"progress counts outside their interval [{self.lower}, {self.upper})", outside
            )
        negative = [time for time, count in counts if count < 0]
        if negative:
            raise MalformedMessage("progress counts must be non-negative", negative)
        object.__setattr__(self, "counts", tuple((t, c) for t, c in counts if c))

    @classmethod
    def of(cls, statement: ProgressLike) -> Progress:
        """Validate any progress-shaped statement (e.g. one recorded by a shard commit)."""
        return cls(statement.lower, statement.upper, tuple(statement.counts))


Message = Updates | Progress
