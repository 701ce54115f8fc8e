"""One entry point for every envelope, chosen by its configured name."""

from __future__ import annotations

from collections.abc import Callable

from cdc_core.envelopes.append_only import apply_none
from cdc_core.envelopes.batch import EnvelopeBatch
from cdc_core.envelopes.classic import apply_debezium
from cdc_core.envelopes.columns import output_schema
from cdc_core.envelopes.debezium import apply_debezium_upsert
from cdc_core.envelopes.materialize import apply_materialize
from cdc_core.envelopes.result import EnvelopeResult
from cdc_core.envelopes.upsert import apply_upsert
from cdc_core.vocabulary import Envelope

APPLY: dict[Envelope, Callable[[EnvelopeBatch], EnvelopeResult]] = {
    Envelope.NONE: apply_none,
    Envelope.UPSERT: apply_upsert,
    Envelope.DEBEZIUM_UPSERT: apply_debezium_upsert,
    Envelope.DEBEZIUM: apply_debezium,
    Envelope.MATERIALIZE: apply_materialize,
}


def apply_envelope(envelope: Envelope | str, batch: EnvelopeBatch) -> EnvelopeResult:
    """Apply ``envelope`` (none | upsert | debezium-upsert | debezium |
    materialize) to ``batch``; an
    unknown name, or key/value schemas the envelope cannot take, raise
    EnvelopeConfigError before any Spark work. Classic DEBEZIUM takes one window per call,
    so it needs the batch's ``time`` (ValueError without)."""
    output_schema(envelope, batch.key_schema, batch.value_schema, batch.include)
    return APPLY[Envelope(envelope)](batch)
