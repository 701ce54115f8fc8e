"""What an envelope returns for one window, and the consolidation every output goes through."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType


@dataclass(frozen=True)
class EnvelopeResult:
    """One window's updates, each to be appended to its shard at the window's time.

    ``changes``: output columns + ``time`` + ``diff``; ``errors``: ERROR columns + ``time`` +
    ``diff`` (a retraction has diff -1); ``dedup_state``: DEDUP_STATE columns + ``time`` +
    ``diff``, only for the classic DEBEZIUM envelope. All consolidated: one row per
    (data, time), no zero diffs.
    """

    changes: DataFrame
    errors: DataFrame
    dedup_state: DataFrame | None = None


def column(name: str) -> Column:
    """A top-level column by its exact name (dots and spaces included)."""
    return F.col(f"`{name}`")


def at_time(updates: DataFrame, columns: Sequence[str], time: int) -> DataFrame:
    """Consolidate ``updates`` (``columns`` + ``diff``) into updates at ``time``."""
    return (
        updates.groupBy(*[column(name) for name in columns])
        .agg(F.sum("diff").cast("long").alias("diff"))
        .filter(F.col("diff") != 0)
        .select(*[column(name) for name in columns], F.lit(time).cast("long").alias("time"), "diff")
    )


def prior_updates(spark: SparkSession, prior: DataFrame | None, schema: StructType) -> DataFrame:
    """``schema`` columns + ``diff`` of a prior snapshot (or of the raw, unconsolidated
    updates up to the previous time: only the rows a window touches are consolidated).
    None stands for an empty shard."""
    if prior is None:
        return spark.createDataFrame(
            [], StructType([*schema.fields, StructField("diff", LongType())])
        )
    return prior.select(*[column(f.name) for f in schema.fields], F.col("diff").cast("long"))


def negated(updates: DataFrame) -> DataFrame:
    return updates.withColumn("diff", -F.col("diff"))
