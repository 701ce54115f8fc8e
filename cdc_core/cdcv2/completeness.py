"""Count-based completeness of a shard: the distinct ``(data, time)`` updates at each
time must equal the count its progress statements announced.

This is what the completeness asset check runs; it counts with the Spark reader's
aggregation and judges with the readers' chain, so the check and the import agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_core.cdcv2.chain import CountDiscrepancy, ProgressChain, count_discrepancies
from cdc_core.cdcv2.model import Progress, ProgressLike
from cdc_core.cdcv2.spark_counts import data_columns, facts_by_key, tallies_by
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


_ONE = "_cdcv2_one"  # the grouping column of updates recounted alone

# Per time: the distinct ``(data, time)`` updates stored, and the rows storing them.
Tallies = Mapping[int, tuple[int, int]]


def check_completeness(
    updates: DataFrame | pa.Table | Tallies | None,
    progress: Iterable[ProgressLike],
    lower: int,
    upper: TimeFrontier,
) -> CompletenessReport:
    """Recount ``updates`` (data columns + ``time`` + ``diff``) at times in
    ``[lower, upper)`` against ``progress`` (chained from the earliest statement's lower:
    a caller may pass only the statements from one reaching back to ``lower`` on; times
    before where they start are reported uncovered by the count discrepancies).
    ``updates`` None: the storage proves none stored in the range (no file's statistics
    reach it), so every time counts zero without a Spark job; a pyarrow Table: updates
    small enough to be metadata (a remap's bindings), counted on the driver; a mapping:
    the tallies already counted (``tallies_together``, one job for many shards).

    Disagreeing progress statements raise ``CountDisagreement``."""
    tallies: Tallies
    if updates is None:
        tallies = {}
    elif isinstance(updates, pa.Table):
        tallies = _driver_tallies(updates, lower, upper)
    elif isinstance(updates, Mapping):
        tallies = updates
    else:
        one = updates.withColumn(_ONE, F.lit(0))
        tallies = tallies_together(one, _ONE, lower, upper).get(0, {})
    statements = [Progress.of(statement) for statement in progress]
    chain = ProgressChain(min((s.lower for s in statements), key=lambda f: f.time or 0,
                              default=None))
    chain.add_all(statements)
    found = {time: distinct for time, (distinct, _) in tallies.items()}
    duplicated = sorted(time for time, (distinct, rows) in tallies.items() if rows > distinct)
    return CompletenessReport(
        lower=lower,
        upper=upper,
        covered=chain.frontier.meet(upper),
        discrepancies=tuple(count_discrepancies(chain, found, TimeFrontier.at(lower), upper)),
        duplicated_times=tuple(duplicated),
    )


def tallies_together(
    updates: DataFrame, by: str, lower: int, upper: TimeFrontier
) -> dict[object, dict[int, tuple[int, int]]]:
    """What ``check_completeness`` recounts, for many updates at once: per value of the
    ``by`` column (which tells them apart), per time in ``[lower, upper)``, its distinct
    ``(data, time)`` updates and its rows. One Spark job, whatever the number of values;
    ``lower`` and ``upper`` bound every value's times (a caller with a range per value
    bounds its rows before)."""
    in_range = updates.filter(F.col("time") >= lower)
    if upper.time is not None:
        in_range = in_range.filter(F.col("time") < upper.time)
    columns = [by, *[name for name in data_columns(updates) if name != by]]
    grouped: dict[object, dict[int, tuple[int, int]]] = {}
    for (value, time), tally in tallies_by(facts_by_key(in_range, columns), [by]).items():
        grouped.setdefault(value, {})[time] = (tally.distinct, tally.rows)
    return grouped


def _driver_tallies(
    updates: pa.Table, lower: int, upper: TimeFrontier
) -> dict[int, tuple[int, int]]:
    """What ``_tallies`` counts in Spark, counted with pyarrow on the driver."""
    time = pc.field("time")
    kept = time >= lower if upper.is_empty else (time >= lower) & (time < upper.time)
    rows = updates.filter(kept)
    keys = [name for name in rows.column_names if name != "diff"]
    facts = rows.group_by(keys).aggregate([("diff", "count")])
    per_time = facts.group_by("time").aggregate([("diff_count", "count"), ("diff_count", "sum")])
    return {
        row["time"]: (row["diff_count_count"], row["diff_count_sum"])
        for row in per_time.to_pylist()
    }
