"""Count-based completeness of a shard: the distinct ``(data, time)`` updates at each
time must equal the count its progress statements announced.

This is what the completeness asset check runs; it counts with the Spark reader's
aggregation and judges with the readers' chain, so the check and the import agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_core.cdcv2.chain import CountDiscrepancy, ProgressChain, count_discrepancies
from cdc_core.cdcv2.model import Progress, ProgressLike
from cdc_core.cdcv2.spark_counts import TimeTally, data_columns, facts_by_key, tally_per_time
from cdc_core.frontier import TimeFrontier


@dataclass(frozen=True)
class CompletenessReport:
    """The verdict on ``[lower, upper)``.

    ``covered``: how far into the range the progress statements chain (times at or
    after it were not checked); ``discrepancies``: times whose distinct updates differ
    from the announced count; ``duplicated_times``: times where a ``(data, time)`` is
    stored in more than one row (a double write that distinct counts cannot see)."""

    lower: int
    upper: TimeFrontier
    covered: TimeFrontier
    discrepancies: tuple[CountDiscrepancy, ...]
    duplicated_times: tuple[int, ...]

    @property
    def complete(self) -> bool:
        """True iff every time below ``upper`` is covered and its updates match their counts."""
        return self.upper <= self.covered and not self.discrepancies and not self.duplicated_times


def check_completeness(
    updates: DataFrame | None,
    progress: Iterable[ProgressLike],
    lower: int,
    upper: TimeFrontier,
) -> CompletenessReport:
    """Recount ``updates`` (data columns + ``time`` + ``diff``) at times in
    ``[lower, upper)`` against ``progress`` (chained from the earliest statement's lower:
    a caller may pass only the statements from one reaching back to ``lower`` on; times
    before where they start are reported uncovered by the count discrepancies).
    ``updates`` None: the storage proves none stored in the range (no file's statistics
    reach it), so every time counts zero without a Spark job.

    Disagreeing progress statements raise ``CountDisagreement``."""
    tallies = {} if updates is None else _tallies(updates, lower, upper)
    statements = [Progress.of(statement) for statement in progress]
    chain = ProgressChain(min((s.lower for s in statements), key=lambda f: f.time or 0,
                              default=None))
    chain.add_all(statements)
    found = {time: tally.distinct for time, tally in tallies.items()}
    duplicated = sorted(time for time, tally in tallies.items() if tally.rows > tally.distinct)
    return CompletenessReport(
        lower=lower,
        upper=upper,
        covered=chain.frontier.meet(upper),
        discrepancies=tuple(count_discrepancies(chain, found, TimeFrontier.at(lower), upper)),
        duplicated_times=tuple(duplicated),
    )


def _tallies(updates: DataFrame, lower: int, upper: TimeFrontier) -> dict[int, TimeTally]:
    """The per-time tallies of ``updates`` at times in ``[lower, upper)``."""
    in_range = updates.filter(F.col("time") >= lower)
    if not upper.is_empty:
        in_range = in_range.filter(F.col("time") < upper.time)
    return tally_per_time(facts_by_key(in_range, data_columns(updates)))
