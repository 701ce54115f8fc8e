"""One entry point for every envelope, chosen by its configured name."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from cdc_core.envelopes.append_only import apply_none
from cdc_core.envelopes.classic import apply_debezium
from cdc_core.envelopes.columns import output_schema
from cdc_core.envelopes.debezium import apply_debezium_upsert
from cdc_core.envelopes.result import EnvelopeResult
from cdc_core.envelopes.upsert import apply_upsert
from cdc_core.vocabulary import Envelope


def apply_envelope(
    envelope: Envelope | str,
    records: DataFrame,
    *,
    time: int | None = None,
    topic: str,
    key_schema: StructType,
    value_schema: StructType,
    prior_changes: DataFrame | None = None,
    prior_errors: DataFrame | None = None,
    prior_dedup_state: DataFrame | None = None,
) -> EnvelopeResult:
    """Apply ``envelope`` (none | upsert | debezium-upsert | debezium) to a batch of
    ``records``: with ``time`` None, each record is at the binding time in its ``time``
    column; with ``time``, all are at that one time (no ``time`` column). Classic DEBEZIUM
    takes one window per call, so it needs ``time`` (ValueError without). Each envelope
    reads only the prior state it needs."""
    output_schema(envelope, key_schema, value_schema)
    if envelope == Envelope.DEBEZIUM and time is None:
        raise ValueError(
            "the classic DEBEZIUM envelope applies one window per call: pass its time= "
            "and records without a time column"
        )
    common = {"time": time, "topic": topic, "key_schema": key_schema, "value_schema": value_schema}
    if envelope == Envelope.NONE:
        return apply_none(records, **common)
    if envelope == Envelope.DEBEZIUM:
        return apply_debezium(records, prior_dedup_state=prior_dedup_state, **common)
    upsert = {Envelope.UPSERT: apply_upsert, Envelope.DEBEZIUM_UPSERT: apply_debezium_upsert}[
        envelope
    ]
    return upsert(records, prior_changes=prior_changes, prior_errors=prior_errors, **common)
