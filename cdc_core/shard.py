"""Persist shards on Delta Lake: durable, definite time-varying collections.

API CONTRACT (implementation in progress; signatures are fixed, other modules code against them).

A shard is a Delta table holding the data columns plus ``time`` (IntoTime, int64)
and ``diff`` (int64), with two frontiers stored as Delta app-transaction versions
so that they move atomically with the data in the same commit:
- ``upper``: every time not >= upper is complete;
- ``since``: snapshots at times >= since are exact.
Both start at ``TimeFrontier.minimum()`` (time 0).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from cdc_core.frontier import TimeFrontier


class ShardUsageError(ValueError):
    """A caller bug: reading before since / at or after upper, appending below upper, ..."""


class ShardStorageError(RuntimeError):
    """The storage location failed. ``definitely_not_written`` says whether the write is
    known not to have happened (safe to retry blindly) or is indeterminate."""

    def __init__(self, message: str, *, definitely_not_written: bool) -> None:
        super().__init__(message)
        self.definitely_not_written = definitely_not_written


@dataclass(frozen=True)
class UpperMismatch:
    """Returned (not raised) by compare_and_append when the shard's upper moved."""

    expected: TimeFrontier
    actual: TimeFrontier


@dataclass(frozen=True)
class ProgressStatement:
    """CDCv2 progress recorded with every commit: the number of distinct
    ``(data, time)`` updates at each time in ``[lower, upper)`` (zero counts omitted)."""

    lower: TimeFrontier
    upper: TimeFrontier
    counts: tuple[tuple[int, int], ...]
    version: int


class Shard:
    """Handle on one shard; cheap to create, re-reads the Delta log on ``refresh``."""

    @classmethod
    def open(cls, spark: SparkSession, path: str, data_schema: StructType) -> Shard:
        """Open the shard at ``path``, creating it (upper = since = [0]) if missing.
        ``data_schema`` excludes ``time``/``diff``; a mismatch with an existing table
        raises ShardUsageError naming the differing columns."""
        raise NotImplementedError

    @property
    def upper(self) -> TimeFrontier: ...

    @property
    def since(self) -> TimeFrontier: ...

    @property
    def version(self) -> int: ...

    def refresh(self) -> Shard:
        """Re-read the Delta log (another process may have committed)."""
        raise NotImplementedError

    def compare_and_append(
        self,
        updates: DataFrame,
        expected_upper: TimeFrontier,
        new_upper: TimeFrontier,
    ) -> UpperMismatch | None:
        """Linearizable append: commit ``updates`` (data columns + time + diff) and move
        the upper to ``new_upper`` iff the current upper equals ``expected_upper``.
        Updates are consolidated per (data, time) before writing (zero diffs dropped).
        All times must lie in [expected_upper, new_upper) (ShardUsageError otherwise).
        Returns None on success, UpperMismatch(actual upper) when the upper moved."""
        raise NotImplementedError

    def append(self, updates: DataFrame, lower: TimeFrontier, upper: TimeFrontier) -> bool:
        """Append for replicated writers of identical definite data: a batch whose
        [lower, upper) is already covered by the shard's upper is a no-op (False);
        a batch with lower == current upper is committed (True); a gap is a usage error."""
        raise NotImplementedError

    def snapshot(self, as_of: int) -> DataFrame:
        """Consolidated contents at ``as_of``: data columns + ``time`` (= as_of) + ``diff``
        (summed, zeros dropped). Requires since <= as_of < upper (ShardUsageError naming
        the violated bound otherwise)."""
        raise NotImplementedError

    def listen(self, as_of: int, until: int | None = None) -> DataFrame:
        """Updates with as_of < time <= until (until defaults to upper - 1):
        data columns + time + diff."""
        raise NotImplementedError

    def downgrade_since(self, since: TimeFrontier) -> None:
        raise NotImplementedError

    def compact(self) -> None:
        """Logical (advance times < since to since, consolidate, drop zeros) and physical
        (fewer, larger files) compaction; changes no snapshot at or after since."""
        raise NotImplementedError

    def gc(self, retention_hours: float = 1.0) -> list[str]:
        """Remove files no valid snapshot references (Delta vacuum); returns removed paths."""
        raise NotImplementedError

    def progress(self) -> list[ProgressStatement]:
        """The progress statements recorded by every commit, oldest first."""
        raise NotImplementedError
