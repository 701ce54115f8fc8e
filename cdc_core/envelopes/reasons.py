"""Error reasons of the envelopes, and the ERROR rows that carry them.

Every reason reads ``"<category>: <detail>"``. The category is what other code relies on:
UPSERT-style envelopes retract only errors whose category they own (an error produced by
dump parsing or reclocking is never touched), and the asset check looks for the
``constraint violated`` category of the classic DEBEZIUM envelope.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdc_core.expressions import built_once

NULL_KEY = "null key"
KEY_DECODE = "key decode error"
VALUE_DECODE = "value decode error"
HEADERS_DECODE = "headers decode error"
UNKNOWN_OP = "unknown op"
UNSUPPORTED_OP = "unsupported op"
KEY_MISMATCH = "key mismatch"
CONSTRAINT = "constraint violated"

ENVELOPE_CATEGORIES: tuple[str, ...] = (
    NULL_KEY,
    KEY_DECODE,
    VALUE_DECODE,
    HEADERS_DECODE,
    UNKNOWN_OP,
    UNSUPPORTED_OP,
    KEY_MISMATCH,
    CONSTRAINT,
)

# Materialize's wording: it also tells the user how the error goes away again.
NULL_KEY_DETAIL = (
    "record with NULL key in UPSERT source; to retract this error, produce a record "
    "upstream with a NULL key and NULL value"
)


class EnvelopeConfigError(ValueError):
    """The envelope's configuration (envelope name, key and value schemas) cannot work."""


def reason(category: str, detail: Column | str) -> Column:
    """The reason text ``"<category>: <detail>"``."""
    detail_column = F.lit(detail) if isinstance(detail, str) else detail
    return F.concat(F.lit(f"{category}: "), detail_column)


def category_of(reason_column: Column) -> Column:
    """The category of an error reason: the text before its first ``": "``."""
    return F.substring_index(reason_column, ": ", 1)


def is_envelope_error(reason_column: Column) -> Column:
    """True for reasons an envelope wrote (and so may retract)."""
    return category_of(reason_column).isin(*ENVELOPE_CATEGORIES)


def error_rows(
    failed: DataFrame, topic: str | Column, diff: int = 1, carry: tuple[str, ...] = ()
) -> DataFrame:
    """ERROR rows (+ ``time`` when ``failed`` has one, so a batch's errors keep their
    binding times, + ``diff``) from records with ``partition``, ``offset``, ``key``,
    ``reason``. ``topic``: the topic, or a column holding each record's (many sources'
    records together); ``carry``: columns kept as they are, after the ERROR columns."""
    timed = "time" in failed.columns
    if isinstance(topic, str):
        return failed.select(*_error_columns(topic, diff, timed), *carry)
    return failed.select(topic.cast("string").alias("topic"),
                         *_error_columns(None, diff, timed)[1:], *carry)  # fmt: skip


@built_once
def _error_columns(topic: str | None, diff: int, timed: bool) -> tuple[Column, ...]:
    """The columns ``error_rows`` selects (``timed``: with the records' ``time``)."""
    return (
        F.lit(topic).cast("string").alias("topic"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        F.col("key").cast("string").alias("key"),
        F.col("reason").cast("string").alias("reason"),
        F.lit(None).cast("string").alias("file"),
        *([F.col("time").cast("long").alias("time")] if timed else []),
        F.lit(diff).cast("long").alias("diff"),
    )


def constraint_violations(errors: DataFrame) -> DataFrame:
    """The rows of ``errors`` (ERROR layout, any extra columns) that report a broken
    constraint of the classic DEBEZIUM envelope."""
    return errors.filter(category_of(F.col("reason")) == CONSTRAINT)


def has_constraint_violations(errors: DataFrame) -> bool:
    """Whether a window's errors report a broken constraint: what the asset check asks.
    Only new errors count (``diff > 0`` when a ``diff`` column is present)."""
    violations = constraint_violations(errors)
    if "diff" in errors.columns:
        violations = violations.filter(F.col("diff") > 0)
    return violations.limit(1).count() > 0
