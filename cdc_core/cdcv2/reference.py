"""The single-threaded reference reader of the seed: a pull iterator over a possibly
duplicated, reordered and re-batched CDCv2 stream, yielding ``(updates, frontier)``
each time the frontier through which the stream is complete advances.

Stricter than the seed's iterator (and differential dataflow's), on purpose:
- duplicates are recognised per ``(data, time)`` one update at a time, so two copies
  inside one batch count once (the seed decrements the count for both);
- a second diff for a ``(data, time)``, disagreeing progress counts and more distinct
  updates than announced raise named contradictions instead of being ignored;
- reported updates are remembered (as the ``(data, time) -> diff`` they settled) so a
  late arrival is judged, not dropped. That costs memory proportional to the stream,
  which is fine for a reference; the Spark reader is the one for large streams.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from cdc_core.cdcv2.chain import ProgressChain
from cdc_core.cdcv2.model import (
    CountExceeded,
    Data,
    DiffContradiction,
    Message,
    Progress,
    Update,
    UpdateBeforeStart,
    Updates,
)
from cdc_core.frontier import TimeFrontier


class ReferenceReader(Iterator[tuple[list[Update], TimeFrontier]]):
    """Pull iterator yielding ``(updates, frontier)``: all updates at times before
    ``frontier`` not reported earlier, once per advance of the complete frontier."""

    def __init__(self, messages: Iterable[Message], start: TimeFrontier | None = None) -> None:
        self._messages = iter(messages)
        self._chain = ProgressChain(start)
        self.frontier = self._chain.start  # reported so far
        # Announced count minus distinct updates received, for unreported times.
        self._outstanding: dict[int, int] = {}
        self._pending: dict[tuple[Data, int], int] = {}
        self._settled: dict[tuple[Data, int], int] = {}

    def __next__(self) -> tuple[list[Update], TimeFrontier]:
        for message in self._messages:
            if isinstance(message, Updates):
                self._receive_updates(message)
            else:
                self._receive_progress(message)
            self._check_not_exceeded()
            advanced = self._advance()
            if advanced is not None:
                return advanced
        raise StopIteration

    def _receive_updates(self, message: Updates) -> None:
        for data, time, diff in message.updates:
            if not self._chain.start.less_equal(time):
                raise UpdateBeforeStart(f"update before the start {self._chain.start}", [time])
            key = (data, time)
            known = self._pending.get(key, self._settled.get(key))
            if known is not None:
                if known != diff:
                    raise DiffContradiction(f"{data!r} has diffs {known} and {diff}", [time])
                continue
            if not self.frontier.less_equal(time):
                raise CountExceeded(f"{data!r} arrived after its time was complete", [time])
            self._pending[key] = diff
            self._outstanding[time] = self._outstanding.get(time, 0) - 1

    def _receive_progress(self, message: Progress) -> None:
        for time, count in self._chain.add(message):
            self._outstanding[time] = self._outstanding.get(time, 0) + count

    def _check_not_exceeded(self) -> None:
        exceeded = [
            time
            for time, outstanding in self._outstanding.items()
            if outstanding < 0 and not self._chain.frontier.less_equal(time)
        ]
        if exceeded:
            raise CountExceeded("more distinct updates than announced", exceeded)

    def _advance(self) -> tuple[list[Update], TimeFrontier] | None:
        frontier = self._chain.frontier
        missing = [time for time, outstanding in self._outstanding.items() if outstanding > 0]
        if missing:
            frontier = frontier.meet(TimeFrontier.at(min(missing)))
        if frontier == self.frontier:
            return None
        ready = [key for key in self._pending if not frontier.less_equal(key[1])]
        updates = [(data, time, self._pending[(data, time)]) for data, time in ready]
        for key in ready:
            self._settled[key] = self._pending.pop(key)
        for time in [t for t in self._outstanding if not frontier.less_equal(t)]:
            del self._outstanding[time]
        self.frontier = frontier
        return updates, frontier


def read_all(
    messages: Iterable[Message], start: TimeFrontier | None = None
) -> tuple[list[Update], TimeFrontier]:
    """Read a whole stream: every reported update and the final complete frontier."""
    reader = ReferenceReader(messages, start)
    updates = [update for batch, _ in reader for update in batch]
    return updates, reader.frontier
