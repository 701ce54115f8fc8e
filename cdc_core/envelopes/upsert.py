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
    decode_json,
    decode_key,
    error_column,
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


def key_problem() -> Column:
    """The error of a record whose key identifies no row, else null (needs ``key_value``
    from ``decode_key``)."""
    return F.when(F.col("key").isNull(), reason(NULL_KEY, NULL_KEY_DETAIL)).when(
        F.col("key_value_error").isNotNull(),
        reason(KEY_DECODE, F.concat(F.lit("key is "), F.col("key_value_error"))),
    )


def with_key(records: DataFrame, key_schema: StructType) -> DataFrame:
    """Add ``key_value`` (the decoded key, null when it does not decode), its error, and
    the record's ``slot``."""
    decoded = decode_key(records, "key", key_schema, "key_value")
    return decoded.withColumn("slot", key_slot("key", "key_value")).withColumn(
        "key_value", F.when(F.col("key_value_error").isNull(), F.col("key_value"))
    )


def value_problem(name: str, label: str) -> Column:
    """A ``value decode error`` naming ``label`` when column ``name`` did not decode."""
    error = F.col(error_column(name))
    return F.when(error.isNotNull(), reason(VALUE_DECODE, F.concat(F.lit(f"{label} "), error)))


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
    staged = unwrap_connect_envelope(records, "payload", value_schema, "value_text")
    staged = decode_json(with_key(staged, key_schema), "value_text", value_schema, "value")
    is_tombstone = F.col("value_text").isNull()
    problem = F.when(~is_tombstone, F.coalesce(key_problem(), value_problem("value", "value")))
    fields = [F.col("key_value")[name].alias(name) for name in key_schema.names] + [
        F.col("value")[name].alias(name) for name in value_schema.names
    ]
    commands = staged.withColumn("reason", problem).withColumn(
        "row", F.when(~is_tombstone & F.col("reason").isNull(), F.struct(*fields))
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
    """Replace each touched slot's prior content by its latest command (``commands`` has
    at least the COMMAND_COLUMNS)."""
    spark = commands.sparkSession
    latest = (
        commands.groupBy("slot")
        .agg(
            F.max_by(
                F.struct(*[F.col(c) for c in COMMAND_COLUMNS if c != "slot"]),
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
        .transform(lambda errors: with_key(errors, key_schema))
        .join(F.broadcast(latest.select("slot")), on="slot", how="left_semi")
        .select(*ERROR.names, "diff")
    )
    new_errors = error_rows(latest.filter(F.col("reason").isNotNull()), topic)
    return EnvelopeResult(
        changes=at_time(negated(old_rows).union(new_rows), output.names, time),
        errors=at_time(negated(old_errors).union(new_errors), ERROR.names, time),
    )
