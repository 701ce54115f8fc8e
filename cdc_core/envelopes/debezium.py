"""Debezium change events, and the DEBEZIUM UPSERT envelope built on them.

An event is ``{"op", "before", "after", "source", ...}`` (optionally wrapped by the JSON
converter). DEBEZIUM UPSERT keys by the Kafka record key and upserts the ``after`` image
(see ``upsert``); ``before`` is not used. The rules for ``op``:
- ``c``, ``r``, ``u``: upsert the after image (a null after deletes);
- ``d``: delete the key; the null-value tombstone Debezium writes after a delete is a
  delete of an absent key, so no output and no error;
- ``t`` (truncate): the table is emptied at the truncate's position. A truncate names no
  rows (the connectors send it with a null key), so every slot's content (row or error)
  is retracted there, and the records after it in Kafka order (``(partition, offset)``
  within a window) apply to the empty table (see ``latest_truncates``);
- anything else, or no op at all: the key's slot becomes an error ``unknown op`` naming it.
The after image's key columns must equal the record key (``key mismatch`` otherwise), as
the state read back from ``changes`` is found by those columns.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdc_core.envelopes.batch import EnvelopeBatch
from cdc_core.envelopes.columns import output_schema
from cdc_core.envelopes.decode import decode_json, unwrap_connect_envelope
from cdc_core.envelopes.metadata import metadata_columns
from cdc_core.envelopes.reasons import KEY_MISMATCH, UNKNOWN_OP, reason
from cdc_core.envelopes.result import EnvelopeResult
from cdc_core.envelopes.upsert import apply_commands, key_problem, value_problem, with_key
from cdc_core.vocabulary import Envelope

UPSERT_OPS = ("c", "r", "u")
DELETE_OP = "d"
TRUNCATE_OP = "t"
KNOWN_OPS = (*UPSERT_OPS, DELETE_OP, TRUNCATE_OP)
# A raw event text whose op is ``t`` (a Java regex; either converter form).
TRUNCATE_PATTERN = r'"op"\s*:\s*"t"'

# The event's parts as raw JSON text; each image is decoded on its own so that a
# mismatch names the offending field.
EVENT_TEXT = StructType(
    [StructField(name, StringType()) for name in ("op", "before", "after", "source")]
)

# The ``source`` fields the classic envelope orders by.
SOURCE = StructType(
    [
        StructField("connector", StringType()),
        StructField("snapshot", StringType()),  # true/false/"last"/"incremental": kept as text
        StructField("sequence", StringType()),  # Postgres: JSON text of [last_commit_lsn, lsn]
        StructField("lsn", LongType()),
        StructField("file", StringType()),
        StructField("pos", LongType()),
        StructField("row", LongType()),
    ]
)


def stage_events(records: DataFrame) -> DataFrame:
    """``records`` plus ``event_text`` (null for a tombstone), ``event`` and its error,
    ``op``, and the raw text of ``before_text``, ``after_text``, ``source_text``."""
    staged = unwrap_connect_envelope(records, "payload", EVENT_TEXT, "event_text")
    staged = decode_json(staged, "event_text", EVENT_TEXT, "event", required=())
    return staged.select(
        "*",
        *[F.col("event")[name].alias(f"{name}_text") for name in ("before", "after", "source")],
        F.col("event")["op"].alias("op"),
    ).drop("event")


def event_problem(image: str) -> Column:
    """The error of an event that does not decode, whose decoded ``image`` column did not
    decode, or that has no usable op; else null."""
    return F.coalesce(
        value_problem("event", "value"),
        value_problem(image, f"{image} image"),
        F.when(
            F.col("op").isNull(),
            reason(UNKNOWN_OP, "the value has no op, so it is not a Debezium change event"),
        ),
        F.when(
            ~F.col("op").isin(*KNOWN_OPS),
            reason(
                UNKNOWN_OP,
                F.concat(F.lit("op '"), F.col("op"), F.lit(f"' is none of {', '.join(KNOWN_OPS)}")),
            ),
        ),
    )


def may_hold_truncates(records: DataFrame) -> bool:
    """Whether some record of ``records`` may be a truncate event: one pass over the raw
    payloads, no decoding (a JSON text holds ``"op":"t"`` outside its strings only as a
    field; inside a string its quotes are escaped). False for nearly every batch, which
    then plans no truncate at all."""
    return not records.filter(F.col("payload").rlike(TRUNCATE_PATTERN)).isEmpty()


def is_truncate() -> Column:
    """An event (``stage_events``) that decodes and truncates its table."""
    return F.col("event_error").isNull() & (F.col("op") == TRUNCATE_OP)


def latest_truncates(records: DataFrame) -> DataFrame:
    """``time``, ``truncate_partition``, ``truncate_offset``: per binding time of
    ``records`` (with ``time``), its latest truncate event in Kafka order. Tiny."""
    truncates = stage_events(records.filter(F.col("payload").rlike(TRUNCATE_PATTERN)))
    latest = F.max(F.struct("partition", "offset"))
    return (
        truncates.filter(is_truncate())
        .groupBy("time")
        .agg(latest.alias("_at"))
        .select(
            "time",
            F.col("_at.partition").alias("truncate_partition"),
            F.col("_at.offset").alias("truncate_offset"),
        )
    )


def after_key_mismatch(key_schema: StructType) -> Column:
    """A ``key mismatch`` error when the decoded ``after`` image's key columns differ
    from the record's key (``key_value``), for an event with an after image; else null."""
    after_key = F.struct(*[F.col("after")[name].alias(name) for name in key_schema.names])
    return F.when(
        F.col("after_text").isNotNull() & ~after_key.eqNullSafe(F.col("key_value")),
        reason(
            KEY_MISMATCH,
            F.concat(
                F.lit("after image key "),
                F.to_json(after_key),
                F.lit(" differs from the record key "),
                F.to_json(F.col("key_value")),
            ),
        ),
    )


def apply_debezium_upsert(batch: EnvelopeBatch) -> EnvelopeResult:
    """The DEBEZIUM UPSERT envelope for a batch (see ``upsert.apply_upsert``). The value
    schema is the after image (it holds the key columns); output = after columns. A batch
    that holds truncates (``may_hold_truncates``) clears every slot at each window's
    latest truncate."""
    key_schema, value_schema = batch.key_schema, batch.value_schema
    output = output_schema(Envelope.DEBEZIUM_UPSERT, key_schema, value_schema, batch.include)
    is_tombstone = F.col("event_text").isNull()
    deletes = (F.col("op") == DELETE_OP) | F.col("after_text").isNull()
    problem = F.when(
        ~is_tombstone,
        F.coalesce(
            key_problem(), event_problem("after"), F.when(~deletes, after_key_mismatch(key_schema))
        ),
    )

    def command(latest: DataFrame) -> DataFrame:
        staged = decode_json(stage_events(latest), "after_text", value_schema, "after")
        image = F.struct(
            *[F.col("after")[name].alias(name) for name in value_schema.names],
            *metadata_columns(staged, batch.include),
        ) if batch.include else F.col("after")
        return staged.withColumn("reason", problem).withColumn(
            "row", F.when(~is_tombstone & F.col("reason").isNull() & ~deletes, image)
        )

    records = batch.timed_records()
    truncates = latest_truncates(records) if may_hold_truncates(records) else None
    return apply_commands(with_key(records, key_schema), command, batch, output, truncates)
