"""UPSERT: the value of key k at time t is the latest record written for k at or before t.

"Latest" is the greatest Kafka position ``(partition, offset)``, compared
lexicographically as Materialize does: a key that shows up in two partitions within one
window takes its value from the higher partition (keyed topics keep a key in one
partition, so this rarely matters). A null value deletes.

Every record belongs to a *slot* (see ``decode.key_slot``) whose current content is a row,
an error, or nothing. A window collapses its records to the latest per slot and replaces
the slot's prior content: ``-old``/``+new`` on ``changes`` and on ``errors``, so a key whose
latest record is an error shows that error (its row retracted) until a valid value or a
delete supersedes it. Null keys share one slot, cleared by a null-key null-value record;
an undecodable key has the slot of its raw text, cleared by a null value with the same text.

The prior content comes from the output shards (``changes`` and ``errors``), read only for
the keys the window touches: the touched keys are broadcast and semi-joined, so the prior
state is filtered where it is read, never shuffled.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from cdc_core.envelopes.columns import UPSERT, output_schema
from cdc_core.envelopes.decode import (
    Decoded,
    decode_key,
    decode_object,
    key_slot,
    unwrap_connect_envelope,
)
from cdc_core.envelopes.reasons import (
    KEY_DECODE,
    NULL_KEY,
    NULL_KEY_DETAIL,
    VALUE_DECODE,
    error_rows,
    is_envelope_error,
    reason,
)
from cdc_core.envelopes.result import EnvelopeResult, at_time, negated, prior_updates
from cdc_core.schemas import ERROR

# The columns of an upsert command: one per record, ``row`` null for deletes and errors,
# ``reason`` null unless the record makes its slot an error.
COMMAND_COLUMNS = ("partition", "offset", "key", "slot", "key_value", "reason", "row")


def key_problem(key: Decoded) -> Column:
    """The error of a record whose key identifies no row, else null."""
    return F.when(F.col("key").isNull(), reason(NULL_KEY, NULL_KEY_DETAIL)).when(
        key.error.isNotNull(), reason(KEY_DECODE, F.concat(F.lit("key is "), key.error))
    )


def slot_columns(key: Decoded) -> tuple[Column, Column]:
    """``slot`` and ``key_value`` (the decoded key, null when it did not decode)."""
    slot = key_slot(F.col("key"), key).alias("slot")
    return slot, F.when(key.error.isNull(), key.value).alias("key_value")


def apply_upsert(
    records: DataFrame,
    *,
    time: int,
    topic: str,
    key_schema: StructType,
    value_schema: StructType,
    prior_changes: DataFrame | None = None,
    prior_errors: DataFrame | None = None,
) -> EnvelopeResult:
    """The UPSERT envelope for one window of RECLOCKED ``records`` at IntoTime ``time``.
    Output columns: key columns ++ value columns."""
    output = output_schema(UPSERT, key_schema, value_schema)
    staged = records.select(
        "partition",
        "offset",
        "key",
        unwrap_connect_envelope(F.col("payload"), value_schema).alias("value_text"),
    )
    key = decode_key(F.col("key"), key_schema)
    value = decode_object(F.col("value_text"), value_schema)
    is_tombstone = F.col("value_text").isNull()
    problem = F.when(
        ~is_tombstone,
        F.coalesce(
            key_problem(key),
            F.when(
                value.error.isNotNull(),
                reason(VALUE_DECODE, F.concat(F.lit("value "), value.error)),
            ),
        ),
    )
    fields = [key.value[name].alias(name) for name in key_schema.names] + [
        value.value[name].alias(name) for name in value_schema.names
    ]
    commands = staged.select(
        "partition",
        "offset",
        "key",
        *slot_columns(key),
        problem.alias("reason"),
        F.when(~is_tombstone & problem.isNull(), F.struct(*fields)).alias("row"),
    )
    return apply_commands(
        commands,
        time=time,
        topic=topic,
        key_schema=key_schema,
        output=output,
        prior_changes=prior_changes,
        prior_errors=prior_errors,
    )


def apply_commands(
    commands: DataFrame,
    *,
    time: int,
    topic: str,
    key_schema: StructType,
    output: StructType,
    prior_changes: DataFrame | None,
    prior_errors: DataFrame | None,
) -> EnvelopeResult:
    """Replace each touched slot's prior content by its latest command."""
    spark = commands.sparkSession
    latest = (
        commands.groupBy("slot")
        .agg(
            F.max_by(
                F.struct(*[c for c in COMMAND_COLUMNS if c != "slot"]),
                F.struct("partition", "offset"),
            ).alias("latest")
        )
        .select("slot", "latest.*")
    )
    touched_keys = latest.filter(F.col("key_value").isNotNull()).select("key_value.*")
    old_rows = prior_updates(spark, prior_changes, output).join(
        F.broadcast(touched_keys), on=key_schema.names, how="left_semi"
    )
    new_rows = latest.filter(F.col("row").isNotNull()).select(
        *[F.col("row")[name].alias(name) for name in output.names],
        F.lit(1).cast("long").alias("diff"),
    )
    old_errors = (
        prior_updates(spark, prior_errors, ERROR)
        .filter(is_envelope_error(F.col("reason")))
        .withColumn("slot", key_slot(F.col("key"), decode_key(F.col("key"), key_schema)))
        .join(F.broadcast(latest.select("slot")), on="slot", how="left_semi")
        .drop("slot")
    )
    new_errors = error_rows(latest.filter(F.col("reason").isNotNull()), topic)
    return EnvelopeResult(
        changes=at_time(negated(old_rows).unionByName(new_rows), output.names, time),
        errors=at_time(negated(old_errors).unionByName(new_errors), ERROR.names, time),
    )
