"""Debezium change events, and the DEBEZIUM UPSERT envelope built on them.

An event is ``{"op", "before", "after", "source", ...}`` (optionally wrapped by the JSON
converter). DEBEZIUM UPSERT keys by the Kafka record key and upserts the ``after`` image
(see ``upsert``); ``before`` is not used. The rules for ``op``:
- ``c``, ``r``, ``u``: upsert the after image (a null after deletes);
- ``d``: delete the key; the null-value tombstone Debezium writes after a delete is a
  delete of an absent key, so no output and no error;
- ``t`` (truncate): the key's slot becomes an error ``unsupported op``. A truncate names no
  rows (Postgres sends it with a null key, so it lands in the shared null-key slot); the
  error stays until the slot is cleared or the source is reset and re-read;
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
from cdc_core.envelopes.reasons import (
    KEY_MISMATCH,
    UNKNOWN_OP,
    UNSUPPORTED_OP,
    reason,
)
from cdc_core.envelopes.result import EnvelopeResult
from cdc_core.envelopes.upsert import apply_commands, key_problem, value_problem, with_key
from cdc_core.vocabulary import Envelope

UPSERT_OPS = ("c", "r", "u")
DELETE_OP = "d"
TRUNCATE_OP = "t"
KNOWN_OPS = (*UPSERT_OPS, DELETE_OP, TRUNCATE_OP)

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


def truncate_problem() -> Column:
    """The reason a TRUNCATE event is refused (null for any other op)."""
    return F.when(
        F.col("event_error").isNull() & (F.col("op") == TRUNCATE_OP),
        reason(
            UNSUPPORTED_OP,
            "Debezium truncate (op 't') names no rows to delete; reset the source to re-read it",
        ),
    )


def apply_debezium_upsert(batch: EnvelopeBatch) -> EnvelopeResult:
    """The DEBEZIUM UPSERT envelope for a batch (see ``upsert.apply_upsert``). The value
    schema is the after image (it holds the key columns); output = after columns."""
    key_schema, value_schema = batch.key_schema, batch.value_schema
    output = output_schema(Envelope.DEBEZIUM_UPSERT, key_schema, value_schema, batch.include)
    after_key = F.struct(*[F.col("after")[name].alias(name) for name in key_schema.names])
    is_tombstone = F.col("event_text").isNull()
    deletes = (F.col("op") == DELETE_OP) | F.col("after_text").isNull()
    mismatch = F.when(
        ~deletes & ~after_key.eqNullSafe(F.col("key_value")),
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
    problem = F.when(
        ~is_tombstone,
        F.coalesce(truncate_problem(), key_problem(), event_problem("after"), mismatch),
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

    return apply_commands(with_key(batch.timed_records(), key_schema), command, batch, output)
