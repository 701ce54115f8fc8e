"""Differential updates: rows of data columns plus ``time`` (IntoTime) and ``diff``.

Invariant: a collection of updates means the multiset whose count of each record at time
``t`` is the sum of the diffs of its updates at times ``<= t``; consolidation keeps that
meaning while leaving one row per (data, time) and no zero diff.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdc_core.expressions import built_once

TIME = "time"
DIFF = "diff"


def consolidate(
    updates: DataFrame, data_columns: Sequence[str], *, by_time: bool = True
) -> DataFrame:
    """One row per (data, time) with the summed diff, zero sums dropped; ``by_time=False``
    sums across times too (updates without a ``time`` column, e.g. one snapshot).

    A group holding a null diff keeps a null diff, so that a shard's validation rejects
    it instead of the sum silently skipping it. Names are matched exactly (dots and
    spaces included)."""
    keys, summed, nonzero = _consolidation(tuple(data_columns), by_time)
    return updates.groupBy(*keys).agg(summed).where(nonzero)


@built_once
def _consolidation(
    data_columns: tuple[str, ...], by_time: bool
) -> tuple[tuple[Column, ...], Column, Column]:
    """The expressions of ``consolidate``: the group keys, the summed diff, and the filter
    that drops zero sums."""
    keys = [F.col(f"`{name}`") for name in data_columns] + ([F.col(TIME)] if by_time else [])
    diff = F.col(DIFF)
    summed = F.when(F.count(F.lit(1)) == F.count(diff), F.sum(diff)).cast("long").alias(DIFF)
    return tuple(keys), summed, diff.isNull() | (diff != 0)


def consolidate_rows(
    rows: pa.Table, data_columns: Sequence[str], *, by_time: bool = True
) -> pa.Table:
    """``consolidate`` of rows held by Python (a few rows of metadata on the driver, or
    one table's rows in a task), with the same rule for null diffs, and floats grouped as
    Spark groups them (``-0.0`` as ``0.0``, every NaN as one: ``spark_grouped``)."""
    keys = [*data_columns, TIME] if by_time else list(data_columns)
    grouped = spark_grouped(rows.select([*keys, DIFF])).group_by(keys, use_threads=False)
    summed = grouped.aggregate([(DIFF, "sum"), (DIFF, "count", pc.CountOptions(mode="only_null"))])
    diff = pc.if_else(pc.greater(summed[f"{DIFF}_count"], 0), None, summed[f"{DIFF}_sum"])
    consolidated = pa.table([*(summed[k] for k in keys), diff], names=[*keys, DIFF])
    return consolidated.filter(pc.fill_null(pc.not_equal(diff, 0), True))


def spark_grouped(rows: pa.Table) -> pa.Table:
    """``rows`` with every floating-point value as Spark's grouping sees it: ``-0.0`` as
    ``0.0`` and every NaN as the one NaN. pyarrow groups by the values' bits, Spark by
    these normalised values (and returns them), so a consolidation in pyarrow must
    normalise first to group, and return, what Spark's would."""
    columns = []
    for column in rows.columns:
        if pa.types.is_floating(column.type):
            zero, nan = pa.scalar(0.0, column.type), pa.scalar(float("nan"), column.type)
            column = pc.if_else(pc.equal(column, zero), zero, column)
            column = pc.if_else(pc.is_nan(column), nan, column)
        columns.append(column)
    return pa.table(columns, names=rows.column_names)
