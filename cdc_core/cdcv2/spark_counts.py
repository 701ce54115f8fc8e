"""Counting CDCv2 facts in Spark: the one aggregation shared by the data-parallel
reader, the exporter and the completeness check.

Only per-time tallies (one small row per time) reach the driver; the updates stay
on the executors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdc_core.cdcv2.model import MalformedMessage

_MAX_DIFF = "_cdcv2_max_diff"
_ROWS = "_cdcv2_rows"


def column(name: str) -> Column:
    """A top-level column by name, even when the name holds dots or backticks."""
    return F.col("`" + name.replace("`", "``") + "`")


def data_columns(updates: DataFrame) -> list[str]:
    """The data columns of an updates DataFrame, which must also hold ``time``/``diff``."""
    missing = {"time", "diff"} - set(updates.columns)
    if missing:
        raise MalformedMessage(f"updates lack the columns {sorted(missing)}")
    return [name for name in updates.columns if name not in ("time", "diff")]


def facts_by_key(updates: DataFrame, columns: Sequence[str]) -> DataFrame:
    """One row per ``(data, time)``: its diff, plus what is needed to judge the input
    (the largest diff seen, to spot contradictions, and the number of input rows)."""
    return updates.groupBy(*[column(c) for c in columns], column("time")).agg(
        F.min("diff").alias("diff"),
        F.max("diff").alias(_MAX_DIFF),
        F.count(F.lit(1)).alias(_ROWS),
    )


def fact_columns(facts: DataFrame, columns: Sequence[str]) -> DataFrame:
    """The ``(data..., time, diff)`` view of ``facts_by_key``."""
    return facts.select(*[column(c) for c in columns], "time", "diff")


@dataclass(frozen=True)
class TimeTally:
    """What one time holds: distinct ``(data, time)`` keys, input rows, keys seen with
    two different diffs, and keys seen with a zero diff."""

    distinct: int
    rows: int
    contradicted: int
    zero_diffs: int


def tally_per_time(facts: DataFrame) -> dict[int, TimeTally]:
    """Per-time tallies of ``facts_by_key`` output (one small row per time)."""
    return {time: tally for (time,), tally in tallies_by(facts, []).items()}


def tallies_by(facts: DataFrame, by: Sequence[str]) -> dict[tuple, TimeTally]:
    """Tallies of ``facts_by_key`` output per ``by`` columns and time, keyed by their
    values with the time last: one job for many updates' tallies (``by`` tells them
    apart, and must be among the facts' key columns)."""
    tallies = facts.groupBy(*[column(c) for c in by], "time").agg(
        F.count(F.lit(1)).alias("distinct"),
        F.sum(_ROWS).alias("rows"),
        F.sum((F.col("diff") != F.col(_MAX_DIFF)).cast("long")).alias("contradicted"),
        F.sum(((F.col("diff") == 0) | (F.col(_MAX_DIFF) == 0)).cast("long")).alias("zero_diffs"),
    )
    return {
        (*[row[c] for c in by], row["time"]): TimeTally(
            row["distinct"], row["rows"], row["contradicted"], row["zero_diffs"]
        )
        for row in tallies.collect()
    }


def count_per_time(updates: DataFrame) -> dict[int, int]:
    """Rows per time of a DataFrame already holding one row per ``(data, time)``."""
    return {row["time"]: row["count"] for row in updates.groupBy("time").count().collect()}
