"""NONE: an append-only source; every decodable record is one row, ``+1`` at its time.

A record with a null value (a Kafka tombstone) carries no row and is skipped, as in
Materialize. With key columns, a null key gives null key columns; a key or value that does
not decode is an error row (never retracted), and so are included headers that do not.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from cdc_core.envelopes.batch import EnvelopeBatch
from cdc_core.envelopes.columns import output_schema
from cdc_core.envelopes.decode import decode_json, decode_key, unwrap_connect_envelope
from cdc_core.envelopes.metadata import metadata_columns, metadata_problem, with_metadata
from cdc_core.envelopes.reasons import error_rows
from cdc_core.envelopes.result import EnvelopeResult
from cdc_core.envelopes.upsert import key_problem, value_problem
from cdc_core.schemas import ERROR
from cdc_core.updates import consolidate
from cdc_core.vocabulary import Envelope


def apply_none(batch: EnvelopeBatch) -> EnvelopeResult:
    """The NONE envelope for a batch: each record is independent, so it simply lands at
    its own time. Output columns: key columns ++ value columns."""
    key_schema, value_schema = batch.key_schema, batch.value_schema
    output = output_schema(Envelope.NONE, key_schema, value_schema, batch.include)
    staged = unwrap_connect_envelope(
        batch.timed_records(), "payload", value_schema, "value_text"
    )
    staged = decode_json(
        staged.filter(F.col("value_text").isNotNull()), "value_text", value_schema, "value"
    )
    staged = with_metadata(staged, batch.include)
    problem = F.coalesce(value_problem("value", "value"), metadata_problem(batch.include))
    key_fields = []
    if key_schema.fields:
        staged = decode_key(staged, "key", key_schema, "key_value")
        key_fields = [F.col("key_value")[name].alias(name) for name in key_schema.names]
        problem = F.coalesce(F.when(F.col("key").isNotNull(), key_problem()), problem)
    # The row as a struct: included metadata columns may be named like record columns.
    row = F.struct(
        *key_fields,
        *[F.col("value")[name].alias(name) for name in value_schema.names],
        *metadata_columns(staged, batch.include),
    )
    decoded = staged.select(
        "partition", "offset", "key", "time", problem.alias("reason"), row.alias("row")
    ).persist()
    rows = decoded.filter(F.col("reason").isNull()).select(
        *[F.col("row")[name].alias(name) for name in output.names],
        "time",
        F.lit(1).cast("long").alias("diff"),
    )
    erring = decoded.filter(F.col("reason").isNotNull())
    return EnvelopeResult(
        changes=consolidate(rows, output.names),
        errors=consolidate(error_rows(erring, batch.topic), ERROR.names),
        cached=(decoded,),
        error_witness=erring,
    )
