"""Envelopes: a batch of a source's reclocked Kafka records -> its differential outputs.

Each envelope is a pure Spark transform of a batch of binding times (``records`` in the
RECLOCKED layout, each at the IntoTime in its ``time`` column, or all at one ``time=``)
plus the prior state read back from the source's own output shards, as of before the
batch; it returns an ``EnvelopeResult`` of consolidated updates at their times, exactly
what applying the batch's windows one by one in time order would give. Classic DEBEZIUM
is the exception: one window per call, at ``time=``.
"""

from cdc_core.envelopes.append_only import apply_none
from cdc_core.envelopes.batch import EnvelopeBatch
from cdc_core.envelopes.classic import DEDUP_STATE, POSITION, apply_debezium
from cdc_core.envelopes.columns import output_schema
from cdc_core.envelopes.debezium import apply_debezium_upsert
from cdc_core.envelopes.dispatch import apply_envelope
from cdc_core.envelopes.fingerprint import (
    ConfigDriftError,
    appended_value_columns,
    check_fingerprint,
    describe_drift,
    fingerprint,
)
from cdc_core.envelopes.reasons import (
    EnvelopeConfigError,
    constraint_violations,
    has_constraint_violations,
)
from cdc_core.envelopes.result import EnvelopeResult
from cdc_core.envelopes.upsert import apply_upsert

__all__ = [
    "DEDUP_STATE",
    "POSITION",
    "ConfigDriftError",
    "EnvelopeBatch",
    "EnvelopeConfigError",
    "EnvelopeResult",
    "apply_debezium",
    "appended_value_columns",
    "apply_debezium_upsert",
    "apply_envelope",
    "apply_none",
    "apply_upsert",
    "check_fingerprint",
    "constraint_violations",
    "describe_drift",
    "fingerprint",
    "has_constraint_violations",
    "output_schema",
]
