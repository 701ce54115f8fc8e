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

A batch holds many windows (binding times) and gives exactly what applying them one by one
in time order would: the latest record per (slot, time) replaces the slot's content at its
previous time in the batch (``lag`` over the slot's times), and at the slot's first time in
the batch, its content before the batch. That comes from the output shards (``changes`` and
``errors``), read only for the slots the batch touches: their keys (with each one's first
time) are broadcast and joined, so the prior state is filtered where it is read, never
shuffled.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from cdc_core.envelopes.batch import EnvelopeBatch
from cdc_core.envelopes.columns import output_schema
from cdc_core.envelopes.decode import (
    decode_json,
    decode_key,
    error_column,
    key_slot,
    unwrap_connect_envelope,
)
from cdc_core.envelopes.metadata import metadata_columns, metadata_problem, with_metadata
from cdc_core.envelopes.reasons import (
    KEY_DECODE,
    NULL_KEY,
    NULL_KEY_DETAIL,
    VALUE_DECODE,
    error_rows,
    is_envelope_error,
    reason,
)
from cdc_core.envelopes.result import (
    EnvelopeResult,
    column,
    negated,
    prior_updates,
)
from cdc_core.expressions import built_once
from cdc_core.schemas import ERROR
from cdc_core.updates import consolidate
from cdc_core.vocabulary import Envelope

# The columns of an upsert command: one per record, ``row`` null for deletes and errors,
# ``reason`` null unless the record makes its slot an error; ``time`` is its binding time.
COMMAND_COLUMNS = ("partition", "offset", "key", "slot", "key_value", "reason", "row", "time")
# What a slot holds after its latest command: the row, or the error (and its record).
CONTENT = ("partition", "offset", "key", "reason", "row")


def key_problem() -> Column:
    """The error of a record whose key identifies no row, else null (needs ``key_value``
    from ``decode_key``)."""
    return F.when(F.col("key").isNull(), reason(NULL_KEY, NULL_KEY_DETAIL)).when(
        F.col("key_value_error").isNotNull(),
        reason(KEY_DECODE, F.concat(F.lit("key "), F.col("key_value_error"))),
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


def apply_upsert(batch: EnvelopeBatch) -> EnvelopeResult:
    """The UPSERT envelope for a batch; its prior state is the ``changes`` and ``errors``
    updates before the batch. Output columns: key columns ++ value columns."""
    key_schema, value_schema = batch.key_schema, batch.value_schema
    output = output_schema(Envelope.UPSERT, key_schema, value_schema, batch.include)

    def command(latest: DataFrame) -> DataFrame:
        staged = unwrap_connect_envelope(latest, "payload", value_schema, "value_text")
        staged = decode_json(staged, "value_text", value_schema, "value")
        staged = with_metadata(staged, batch.include)
        is_tombstone = F.col("value_text").isNull()
        problem = F.when(
            ~is_tombstone,
            F.coalesce(
                key_problem(), value_problem("value", "value"), metadata_problem(batch.include)
            ),
        )
        fields = [F.col("key_value")[name].alias(name) for name in key_schema.names] + [
            F.col("value")[name].alias(name) for name in value_schema.names
        ] + metadata_columns(staged, batch.include)
        return staged.withColumn("reason", problem).withColumn(
            "row", F.when(~is_tombstone & F.col("reason").isNull(), F.struct(*fields))
        )

    return apply_commands(with_key(batch.timed_records(), key_schema), command, batch, output)


def apply_commands(
    keyed: DataFrame,
    command: Callable[[DataFrame], DataFrame],
    batch: EnvelopeBatch,
    output: StructType,
    truncates: DataFrame | None = None,
    *,
    together: Together | None = None,
) -> EnvelopeResult:
    """At each time, replace each touched slot's content by its latest record's command
    at that time: the old content is the slot's latest command at its previous time in
    the batch, or at its first time, its content in the prior shards (None: empty,
    nothing to replace). ``keyed``: the batch's records with ``slot`` and ``key_value``
    (``with_key``); ``command`` adds ``reason`` and ``row`` (the COMMAND_COLUMNS) to
    records. Which record is latest does not depend on its value, so only the latest
    record per (slot, time) is decoded.

    ``truncates`` (``time``, ``truncate_partition``, ``truncate_offset``: a time's latest
    truncate) empties every slot there: a record at or before its time's truncate is
    superseded, and every slot, the prior shards' too, without a record after it gets a
    clearing command (no row, no error) at that time.

    ``together``: the records are many sources' (see ``Together``)."""
    key_schema, prior_changes, prior_errors = (
        batch.key_schema, batch.prior_changes, batch.prior_errors
    )
    sourced = together.sourced if together is not None else ()
    carry = together.carry if together is not None else ()
    topic: str | Column = F.col(together.topic) if together is not None else batch.topic
    error_schema = StructType([*ERROR.fields, *sourced])
    keying = together.keying if together is not None else (
        lambda errors: with_key(errors, key_schema)
    )
    clears = None
    if truncates is not None:
        keyed, clears = _truncated(keyed, F.broadcast(truncates), batch, output)
    # One shuffle, by slot, of the records with their value still raw text: the latest
    # record per (slot, time) and the lag over a slot's times are both windows within a
    # slot, so they share its partitioning and sort order.
    by_slot = keyed.repartition("slot")
    newest_first = Window.partitionBy("slot", "time").orderBy(
        F.desc("partition"), F.desc("offset")
    )
    latest = (
        by_slot.withColumn("_rank", F.row_number().over(newest_first))
        .filter(F.col("_rank") == 1)
        .drop("_rank")
    )
    commands = command(latest).select(*COMMAND_COLUMNS, *carry)
    if clears is not None:
        at = ["slot", "time"]
        commands = commands.unionByName(clears.join(commands.select(*at), at, "left_anti"))
    by_time = Window.partitionBy("slot").orderBy("time")
    sequenced = commands.select(
        "*",
        F.lag("time").over(by_time).alias("previous_time"),
        *[F.lag(c).over(by_time).alias(f"previous_{c}") for c in CONTENT],
    ).persist()
    # Each slot's first time in the batch: where its content before the batch is replaced.
    first = sequenced.filter(F.col("previous_time").isNull())

    def rows_of(frame: DataFrame, struct: str, diff: int) -> DataFrame:
        return frame.select(*_update_columns(struct, tuple(output.names), diff))

    # Within the batch a slot's -previous/+new rows differ in data or time from every
    # other row (a row holds its key), so they come consolidated once a row replaced by
    # an equal one is left out: no shuffle.
    unchanged = F.col("previous_row").eqNullSafe(F.col("row"))
    later = sequenced.filter(F.col("previous_time").isNotNull() & ~unchanged)
    changes = rows_of(later.filter(F.col("previous_row").isNotNull()), "previous_row", -1)
    changes = changes.unionByName(rows_of(later.filter(F.col("row").isNotNull()), "row", 1))
    first_rows = rows_of(first.filter(F.col("row").isNotNull()), "row", 1)
    if prior_changes is not None:
        # At a slot's first time its prior content (the consolidated history of the keys
        # the batch touches) is replaced: only that part needs consolidating.
        # Key columns may be null (a key is a record, null fields included): null-safe.
        first_keys = first.filter(F.col("key_value").isNotNull()).select("key_value", "time")
        prior = prior_updates(keyed.sparkSession, prior_changes, output)
        same_key = [prior[name].eqNullSafe(F.col("key_value")[name]) for name in key_schema.names]
        replaced = prior.join(
            F.broadcast(first_keys), on=functools.reduce(operator.and_, same_key)
        ).select(*[prior[name] for name in output.names], "time", "diff")
        first_rows = consolidate(negated(replaced).unionByName(first_rows), output.names)
    changes = changes.unionByName(first_rows)
    sourced_names = tuple(field.name for field in sourced)
    previous_errors = error_rows(
        sequenced.filter(F.col("previous_reason").isNotNull()).select(
            *[F.col(f"previous_{c}").alias(c) for c in CONTENT], "time", *carry
        ),
        topic,
        diff=-1,
        carry=sourced_names,
    )
    erring = sequenced.filter(F.col("reason").isNotNull())
    new_errors = error_rows(erring, topic, carry=sourced_names)
    # Every error update is a command's reason, its slot's previous one (the lag of a
    # reason), or the retraction of an error a touched slot still holds from before the
    # batch. Errors carry their record's position, so none of these cancel another: the
    # errors are empty iff no command errs and no touched slot holds a prior error.
    witness = erring.select("time")
    if prior_errors is not None:
        old_errors = (
            prior_updates(keyed.sparkSession, prior_errors, error_schema)
            .filter(is_envelope_error(F.col("reason")))
            .transform(keying)
            .join(F.broadcast(first.select("slot", "time")), on="slot")
            .select(*error_schema.names, "time", "diff")
        )
        previous_errors = negated(old_errors).unionByName(previous_errors)
        held = consolidate(old_errors, error_schema.names).select("time")
        witness = witness.unionByName(held)
    return EnvelopeResult(
        changes=changes,
        errors=consolidate(previous_errors.unionByName(new_errors), error_schema.names),
        cached=(sequenced,),
        error_witness=witness,
    )


@dataclass(frozen=True)
class Together:
    """How ``apply_commands`` tells many sources' records apart: each command keeps the
    ``carry`` columns (its source's, ``sourced``, and ``topic``, the column naming its
    topic), each error row keeps ``sourced``, and ``keying`` adds ``slot`` and
    ``key_value`` to the prior errors (ERROR columns and ``sourced``), as ``with_key``
    does for one source. The slots and key values themselves must hold the source."""

    sourced: tuple[StructField, ...]
    topic: str
    keying: Callable[[DataFrame], DataFrame]

    @property
    def carry(self) -> tuple[str, ...]:
        """The columns every command keeps."""
        return (*(field.name for field in self.sourced), self.topic)


@built_once
def _update_columns(struct: str, names: tuple[str, ...], diff: int) -> tuple[Column, ...]:
    """The output columns ``names`` of the row in column ``struct``, its ``time``, and
    ``diff``: the updates a slot's content gives."""
    return (
        *[F.col(struct)[name].alias(name) for name in names],
        F.col("time"),
        F.lit(diff).cast("long").alias("diff"),
    )


def _truncated(
    keyed: DataFrame, truncates: DataFrame, batch: EnvelopeBatch, output: StructType
) -> tuple[DataFrame, DataFrame]:
    """The records after their time's truncate, and the clearing commands (COMMAND_COLUMNS,
    at each truncate's position) of every slot the batch or the prior shards hold, at
    every truncate's time (``apply_commands`` keeps those of slots without a command
    there)."""
    position = F.struct("partition", "offset")
    truncated_at = F.struct(
        F.col("truncate_partition").alias("partition"), F.col("truncate_offset").alias("offset")
    )
    placed = keyed.join(truncates, "time", "left")
    after = placed.filter(F.col("truncate_partition").isNull() | (position > truncated_at))
    slots = keyed.select("slot", "key_value")
    spark = keyed.sparkSession
    if batch.prior_changes is not None:
        key = F.struct(*[column(name) for name in batch.key_schema.names])
        held = prior_updates(spark, batch.prior_changes, output).select(
            F.concat(F.lit("key:"), F.to_json(key)).alias("slot"), key.alias("key_value")
        )
        slots = slots.unionByName(held)
    if batch.prior_errors is not None:
        erring = prior_updates(spark, batch.prior_errors, ERROR).filter(
            is_envelope_error(F.col("reason"))
        )
        slots = slots.unionByName(with_key(erring, batch.key_schema).select("slot", "key_value"))
    clears = slots.dropDuplicates(["slot"]).crossJoin(truncates).select(
        F.col("truncate_partition").alias("partition"),
        F.col("truncate_offset").alias("offset"),
        F.lit(None).cast("string").alias("key"),
        "slot",
        "key_value",
        F.lit(None).cast("string").alias("reason"),
        F.lit(None).cast(StructType(output.fields)).alias("row"),
        "time",
    )
    return after.drop("truncate_partition", "truncate_offset"), clears
