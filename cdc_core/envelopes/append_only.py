"""NONE: an append-only source; every decodable record is one row, ``+1`` at its time.

A record with a null value (a Kafka tombstone) carries no row and is skipped, as in
Materialize. With key columns, a null key gives null key columns; a key or value that does
not decode is an error row (never retracted).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from cdc_core.envelopes.columns import NONE, output_schema
from cdc_core.envelopes.decode import decode_key, decode_object, unwrap_connect_envelope
from cdc_core.envelopes.reasons import KEY_DECODE, VALUE_DECODE, error_rows, reason
from cdc_core.envelopes.result import EnvelopeResult, at_time
from cdc_core.schemas import ERROR


def apply_none(
    records: DataFrame,
    *,
    time: int,
    topic: str,
    key_schema: StructType,
    value_schema: StructType,
) -> EnvelopeResult:
    """The NONE envelope for one window of RECLOCKED ``records`` at ``time``.
    Output columns: key columns ++ value columns."""
    output = output_schema(NONE, key_schema, value_schema)
    staged = records.select(
        "partition",
        "offset",
        "key",
        unwrap_connect_envelope(F.col("payload"), value_schema).alias("value_text"),
    ).filter(F.col("value_text").isNotNull())
    value = decode_object(F.col("value_text"), value_schema)
    key_fields = []
    problem = F.when(
        value.error.isNotNull(), reason(VALUE_DECODE, F.concat(F.lit("value "), value.error))
    )
    if key_schema.fields:
        key = decode_key(F.col("key"), key_schema)
        key_fields = [key.value[name].alias(name) for name in key_schema.names]
        key_error = reason(KEY_DECODE, F.concat(F.lit("key is "), key.error))
        problem = F.coalesce(F.when(F.col("key").isNotNull(), key_error), problem)
    decoded = staged.select(
        "partition",
        "offset",
        "key",
        problem.alias("reason"),
        *key_fields,
        *[value.value[name].alias(name) for name in value_schema.names],
    )
    rows = decoded.filter(F.col("reason").isNull()).select(
        *output.names, F.lit(1).cast("long").alias("diff")
    )
    return EnvelopeResult(
        changes=at_time(rows, output.names, time),
        errors=at_time(
            error_rows(decoded.filter(F.col("reason").isNotNull()), topic), ERROR.names, time
        ),
    )
