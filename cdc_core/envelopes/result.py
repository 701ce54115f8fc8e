"""What an envelope returns for a batch of binding times, and the column helpers its
steps share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from cdc_core.expressions import built_once
from cdc_core.frontier import TimeFrontier
from cdc_core.spark import local_frame


@dataclass(frozen=True)
class EnvelopeResult:
    """A batch's updates, each to be appended to its shard at its own ``time``.

    ``changes``: output columns + ``time`` + ``diff``; ``errors``: ERROR columns + ``time`` +
    ``diff`` (a retraction has diff -1); ``dedup_state``: DEDUP_STATE columns + ``time`` +
    ``diff``, only for the classic DEBEZIUM envelope. All consolidated: one row per
    (data, time), no zero diffs.
    """

    changes: DataFrame
    errors: DataFrame
    dedup_state: DataFrame | None = None
    # ``materialize`` only: per binding time, the frontier through which the CDCv2 stream
    # bound so far is complete (its changes at that time are the updates that newly fell
    # before it).
    completeness: Mapping[int, TimeFrontier] = field(default_factory=dict)
    # Persisted frames the outputs share (decoded records, latest commands), so that
    # writing changes and errors decodes the batch once; ``release`` after writing them.
    cached: tuple[DataFrame, ...] = ()
    # A frame whose emptiness proves ``errors`` empty, cheaper to test than ``errors``
    # (a filter of a frame in ``cached``, and for an upsert with prior errors those the
    # touched keys still hold); None when the envelope has none to offer.
    error_witness: DataFrame | None = None

    def release(self) -> None:
        """Unpersist the frames cached while computing the result (after it is appended)."""
        for frame in self.cached:
            frame.unpersist()


def column(name: str) -> Column:
    """A top-level column by its exact name (dots and spaces included)."""
    return F.col(f"`{name}`")


def stamped(df: DataFrame, time: int) -> DataFrame:
    """``df`` with every row at IntoTime ``time`` (a bigint ``time`` column)."""
    return df.withColumn("time", F.lit(time).cast("long"))


def prior_updates(spark: SparkSession, prior: DataFrame | None, schema: StructType) -> DataFrame:
    """``schema`` columns + ``diff`` of a prior snapshot (or of the raw, unconsolidated
    updates up to the batch's first time: only the rows a batch touches are consolidated).
    None stands for an empty shard."""
    if prior is None:
        return local_frame(
            spark, [], StructType([*schema.fields, StructField("diff", LongType())])
        )
    return prior.select(*_prior_columns(schema))


@built_once
def _prior_columns(schema: StructType) -> tuple[Column, ...]:
    """The columns ``prior_updates`` selects."""
    return (*[column(f.name) for f in schema.fields], F.col("diff").cast("long"))


def negated(updates: DataFrame) -> DataFrame:
    """The same updates with every diff negated (retractions of what was asserted)."""
    return updates.withColumn("diff", -F.col("diff"))
