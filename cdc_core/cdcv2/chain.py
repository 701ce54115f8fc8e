"""Progress statements chained into a frontier, and the count comparison that decides
through which time a stream is complete.

Pure Python over tiny metadata (one count per time), shared by the reference reader,
the Spark reader and the completeness check so that all three judge counts alike.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cdc_core.cdcv2.model import CountDisagreement, CountExceeded, Progress
from cdc_core.frontier import TimeFrontier


def _inside(time: int, lower: TimeFrontier, upper: TimeFrontier) -> bool:
    return lower.less_equal(time) and not upper.less_equal(time)


class ProgressChain:
    """Progress statements applied contiguously from ``start``: a statement is applied
    only once the chain reaches its ``lower``, so no gap is ever skipped.

    Unlike the seed's reader, which drops counts for already covered times, every
    announced count is kept so that an overlapping statement is checked against it
    (``CountDisagreement``); counts are one integer per time, so this stays small.
    """

    def __init__(self, start: TimeFrontier | None = None) -> None:
        self.start = start if start is not None else TimeFrontier.minimum()
        self.frontier = self.start
        self._announced: dict[int, int] = {}
        # Ascending, because counts are only ever added beyond the current frontier.
        self._announced_times: list[int] = []
        self._queue: list[Progress] = []

    def add(self, statement: Progress) -> list[tuple[int, int]]:
        """Queue ``statement``, apply every statement that now chains, and return the
        counts newly incorporated (their times are now before the frontier)."""
        self._queue.append(statement)
        incorporated: list[tuple[int, int]] = []
        while (ready := self._next_chained()) is not None:
            self._queue.remove(ready)
            incorporated.extend(self._apply(ready))
        return incorporated

    def _next_chained(self) -> Progress | None:
        return next((p for p in self._queue if p.lower <= self.frontier), None)

    def add_all(self, statements: Iterable[Progress]) -> None:
        """Apply a whole set of statements; order does not matter, so chain them by lower."""
        for statement in sorted(statements, key=lambda p: p.lower):
            self.add(statement)

    def announced_between(self, lower: TimeFrontier, upper: TimeFrontier) -> dict[int, int]:
        """Non-zero announced counts at times in ``[lower, upper)``."""
        if lower.time is None:  # the empty frontier: nothing lies at or after it
            return {}
        begin = bisect_left(self._announced_times, lower.time)
        end = len(self._announced_times)
        if upper.time is not None:
            end = bisect_left(self._announced_times, upper.time)
        return {t: self._announced[t] for t in self._announced_times[begin:end]}

    def _apply(self, statement: Progress) -> list[tuple[int, int]]:
        self._check_agreement(statement)
        fresh = [(t, c) for t, c in statement.counts if self.frontier.less_equal(t)]
        for time, count in fresh:
            self._announced[time] = count
            self._announced_times.append(time)
        self.frontier = self.frontier.join(statement.upper)
        return fresh

    def _check_agreement(self, statement: Progress) -> None:
        """Where ``statement`` overlaps what the chain already covers, its counts (an
        omitted time means zero) must equal the ones already announced."""
        lower = statement.lower.join(self.start)
        upper = statement.upper.meet(self.frontier)
        theirs = {t: c for t, c in statement.counts if _inside(t, lower, upper)}
        ours = self.announced_between(lower, upper)
        disagreeing = [t for t in theirs.keys() | ours.keys() if theirs.get(t, 0) != ours.get(t, 0)]
        if disagreeing:
            raise CountDisagreement(
                f"progress [{statement.lower}, {statement.upper}) disagrees with earlier "
                "statements about how many updates some times have",
                disagreeing,
            )


@dataclass(frozen=True)
class CountDiscrepancy:
    """A time whose distinct updates found differ from the count its progress announced."""

    time: int
    announced: int
    found: int


def count_discrepancies(
    chain: ProgressChain, found: Mapping[int, int], lower: TimeFrontier, upper: TimeFrontier
) -> list[CountDiscrepancy]:
    """Times in ``[lower, upper)`` already covered by the chain where the number of
    distinct updates ``found`` differs from the announced count, ordered by time."""
    lower = lower.join(chain.start)
    upper = upper.meet(chain.frontier)
    announced = chain.announced_between(lower, upper)
    seen = {t: n for t, n in found.items() if _inside(t, lower, upper)}
    return [
        CountDiscrepancy(t, announced.get(t, 0), seen.get(t, 0))
        for t in sorted(announced.keys() | seen.keys())
        if announced.get(t, 0) != seen.get(t, 0)
    ]


def complete_frontier(chain: ProgressChain, found: Mapping[int, int]) -> TimeFrontier:
    """The frontier through which a stream with these distinct-update counts is
    complete: the chain's frontier, held back by the first time still missing updates.

    Raises ``CountExceeded`` for covered times with more distinct updates than announced
    (the seed's reader ignores those; reclock treats them as contradictions)."""
    gaps = count_discrepancies(chain, found, chain.start, TimeFrontier.empty())
    exceeded = [gap.time for gap in gaps if gap.found > gap.announced]
    if exceeded:
        raise CountExceeded("more distinct updates than announced", exceeded)
    missing = [gap.time for gap in gaps if gap.found < gap.announced]
    return chain.frontier.meet(TimeFrontier.at(missing[0])) if missing else chain.frontier
