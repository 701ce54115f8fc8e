"""The calendar: IntoTime windows, how far back they are kept and launched, and their cron.

A deployment's windows tile the UTC day from ``start``; a window ``[start, end)`` binds at
``end`` and is named by the partition key of its start. Two horizons move with the clock:
the *retention* horizon (where a source's tables still read back exactly, a UTC midnight)
and the *launchable* horizon (where Dagster's partitions begin, an hour). Everything here is
arithmetic on epoch milliseconds (UTC): every answer that depends on the clock takes ``now``
from its caller, so one moment gives one answer wherever it is asked.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

MS_PER_MINUTE = 60_000
MS_PER_HOUR = 60 * MS_PER_MINUTE
MS_PER_DAY = 24 * MS_PER_HOUR
DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": MS_PER_MINUTE, "h": MS_PER_HOUR, "d": MS_PER_DAY}
DURATION = re.compile(r"(\d+)\s*(ms|s|m|h|d)")
# A window's partition key: its start, UTC, to the second.
PARTITION_FORMAT = "%Y-%m-%dT%H:%M:%S"


def duration_ms(text: str) -> int:
    """Milliseconds of a duration such as ``90s`` or ``5m``; ValueError when it is not one."""
    match = DURATION.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a duration: {text!r}")
    return int(match[1]) * DURATION_UNITS_MS[match[2]]


def to_datetime(ms: int) -> datetime:
    """Epoch milliseconds as an aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def to_ms(moment: datetime) -> int:
    """An aware datetime as epoch milliseconds (IntoTime)."""
    return int(moment.timestamp() * 1000)


def key_start(key: str) -> int:
    """The start (epoch milliseconds) of the window a partition key names."""
    return to_ms(datetime.strptime(key, PARTITION_FORMAT).replace(tzinfo=UTC))


def window_cron(window_ms: int) -> str:
    """The cron schedule ticking at every window boundary, aligned to UTC midnight.

    Raises ValueError when no five-field cron schedule can express the window.
    """
    minutes, rest = divmod(window_ms, MS_PER_MINUTE)
    if rest or minutes == 0:
        raise ValueError("must be a whole number of minutes: cron schedules cannot tick faster")
    if minutes < 60 and 60 % minutes == 0:
        return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"
    hours, rest = divmod(minutes, 60)
    if not rest and hours < 24 and 24 % hours == 0:
        return "0 * * * *" if hours == 1 else f"0 */{hours} * * *"
    if minutes == 24 * 60:
        return "0 0 * * *"
    raise ValueError(
        "no cron schedule can express it: use minutes dividing an hour (1m, 5m, 15m, ...), "
        "hours dividing a day (1h, 2h, 6h, ...) or 1d"
    )


def launch_step_ms(window_ms: int) -> int:
    """The steps the launchable horizon moves in: the hour, or the window when that is
    longer (both tile the day, so every step starts a window)."""
    return math.lcm(window_ms, MS_PER_HOUR)


class MisalignedWindow(ValueError):
    """A window end that does not lie on the windows' grid."""


@dataclass(frozen=True)
class Windows:
    """Windows of ``width`` tiling ``[start, end)``; their binding times are their ends."""

    start: int
    end: int
    width: int

    def __post_init__(self) -> None:
        if self.width <= 0 or self.end <= self.start or (self.end - self.start) % self.width:
            raise ValueError(
                f"windows of width {self.width} do not tile [{self.start}, {self.end})"
            )

    @classmethod
    def one(cls, start: int, end: int) -> Windows:
        """The single window ``[start, end)``."""
        return cls(start, end, end - start)

    @property
    def ends(self) -> list[int]:
        """Each window's end, in time order (its binding time is ``end``)."""
        return list(range(self.start + self.width, self.end + 1, self.width))

    def from_end(self, end: int) -> Windows:
        """The windows after the one ending at ``end`` (a window end inside the range)."""
        if (end - self.start) % self.width or not self.start <= end < self.end:
            raise MisalignedWindow(
                f"{end} is not a window end inside [{self.start}, {self.end}); windows must tile"
            )
        return Windows(end, self.end, self.width)


def contiguous(bounds: Iterable[tuple[int, int]], width: int) -> list[Windows]:
    """Windows ``(start, end)`` grouped into runs of adjacent windows, in order: each run is
    reclocked in one pass (a backfill range is one run; a hand-picked set may be several)."""
    runs: list[Windows] = []
    for start, end in sorted(bounds):
        if runs and runs[-1].end == start:
            runs[-1] = Windows(runs[-1].start, end, width)
        else:
            runs.append(Windows(start, end, width))
    return runs


@dataclass(frozen=True)
class Calendar:
    """A deployment's windows and horizons: ``start``, the width, a finite config's ``end``,
    the launchable span and each source's retention (None: every window from ``start``).

    Invariant: ``start`` and ``end`` lie on window boundaries and windows tile the day, so
    every horizon (a midnight, an hour or a window boundary) starts a window.
    """

    start_ms: int
    window_ms: int
    end_ms: int | None
    launchable_ms: int | None
    retentions_ms: Mapping[str, int | None]

    @property
    def cron(self) -> str:
        """The cron schedule whose ticks are the window boundaries."""
        return window_cron(self.window_ms)

    def source_horizon(self, name: str, now_ms: int) -> int:
        """Where the windows of source ``name`` that its tables still read back exactly
        begin at ``now_ms``: its since's place after maintenance.

        A horizon is ``start``, or the UTC midnight at or before ``now - retention`` when
        that is later; flooring to midnight moves it once a day. A finite config whose end
        lies before the horizon keeps its last window.
        """
        retention = self.retentions_ms[name]
        if retention is None:
            return self.start_ms
        return self._floored_start(now_ms - retention, MS_PER_DAY)

    def retention_start(self, now_ms: int) -> int:
        """Where the windows some source still keeps begin at ``now_ms``: the earliest
        source horizon (Dagster keeps the windows' runs from there on)."""
        return min(self.source_horizon(name, now_ms) for name in self.retentions_ms)

    def first_window_start(self, now_ms: int) -> int:
        """Where Dagster's partitions begin at ``now_ms``: the hour at or before ``now -
        launchable`` (with a launchable span), never before ``retention_start``, so the
        UI lists and launches about the same number of windows at any age.

        Flooring to the hour moves the start, and the partition status Dagster caches for
        it, once an hour rather than every window. A finite config whose end lies before
        it keeps its last window, so the set is never empty.
        """
        first = self.retention_start(now_ms)
        if self.launchable_ms is None:
            return first
        step = launch_step_ms(self.window_ms)
        return max(first, self._floored_start(now_ms - self.launchable_ms, step))

    def _floored_start(self, moment_ms: int, step_ms: int) -> int:
        """``moment_ms`` floored to ``step_ms`` (a window boundary: steps tile the day),
        never before ``start``, and never after a finite config's last window."""
        first = max(self.start_ms, moment_ms // step_ms * step_ms)
        if self.end_ms is not None:
            first = min(first, self.end_ms - self.window_ms)
        return first

    def window_key(self, end_ms: int) -> str:
        """The partition key of the window that binds at ``end_ms`` (keys name starts)."""
        return to_datetime(end_ms - self.window_ms).strftime(PARTITION_FORMAT)

    def key_window(self, key: str) -> tuple[int, int]:
        """``(start, end)`` of the window partition key ``key`` names."""
        start = key_start(key)
        return start, start + self.window_ms

    def closed_windows(self, after_ms: int, through_ms: int) -> list[tuple[str, int]]:
        """``(key, end)`` of the windows whose end lies in ``(after_ms, through_ms]``, in
        order.

        Computed from the fixed window width, not by listing every partition key: a sensor
        tick must stay cheap however many windows lie behind it.
        """
        first, last = self._closed_indexes(after_ms, through_ms)
        return [(self.window_key(end), end) for end in self._ends(range(first, last + 1))]

    def closed_span(
        self, after_ms: int, through_ms: int
    ) -> tuple[tuple[str, int], tuple[str, int]] | None:
        """The first and the last of ``closed_windows(after_ms, through_ms)`` (None when
        there is none), without the windows between: a range is named by its ends."""
        first, last = self._closed_indexes(after_ms, through_ms)
        if last < first:
            return None
        start, end = self._ends((first, last))
        return (self.window_key(start), start), (self.window_key(end), end)

    def _closed_indexes(self, after_ms: int, through_ms: int) -> tuple[int, int]:
        """The first and last index ``i`` (window end ``start + i * width``) of the windows
        whose end lies in ``(after_ms, through_ms]``; last < first when there is none."""
        width = self.window_ms
        last_end = through_ms if self.end_ms is None else min(through_ms, self.end_ms)
        first = max(1, (after_ms - self.start_ms) // width + 1)
        return first, (last_end - self.start_ms) // width

    def _ends(self, indexes: Iterable[int]) -> list[int]:
        return [self.start_ms + index * self.window_ms for index in indexes]
