"""Envelope names and the output columns they produce, with the checks that make them work."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql.types import StructType

from cdc_core.envelopes.metadata import metadata_fields
from cdc_core.envelopes.reasons import EnvelopeConfigError
from cdc_core.vocabulary import Envelope, IncludeField

SHARD_COLUMNS = ("time", "diff")


def output_schema(
    envelope: Envelope | str,
    key_schema: StructType,
    value_schema: StructType,
    include: Sequence[IncludeField] = (),
) -> StructType:
    """The ``changes`` columns of a source (shards add ``time`` and ``diff``): key columns ++
    value columns for none/upsert, the after-image columns for the Debezium envelopes,
    then the ``include``d metadata columns. Raises EnvelopeConfigError naming what cannot
    work."""
    try:
        envelope = Envelope(envelope)
    except ValueError:
        raise EnvelopeConfigError(
            f"envelope must be one of {', '.join(Envelope)} (got {envelope!r})"
        ) from None
    if envelope.keyed and not key_schema.fields:
        raise EnvelopeConfigError(
            f"envelope {envelope} needs key columns (the key schema is empty)"
        )
    if not envelope.after_image:
        overlap = sorted(set(key_schema.names) & set(value_schema.names))
        if overlap:
            raise EnvelopeConfigError(
                f"envelope {envelope}: key and value columns must differ, both have {overlap}"
            )
        output = StructType([*key_schema.fields, *value_schema.fields])
    else:
        value_types = {f.name: f.dataType for f in value_schema.fields}
        for key_field in key_schema.fields:
            if value_types.get(key_field.name) != key_field.dataType:
                raise EnvelopeConfigError(
                    f"envelope {envelope}: key column {key_field.name!r} "
                    f"({key_field.dataType.simpleString()}) must be a column of the after "
                    f"image with the same type"
                )
        output = value_schema
    output = StructType([*output.fields, *metadata_fields(include)])
    reserved = sorted(set(output.names) & set(SHARD_COLUMNS))
    if reserved:
        raise EnvelopeConfigError(f"column names {reserved} are reserved for shards")
    if len(set(output.names)) != len(output.names):
        raise EnvelopeConfigError(f"duplicate column names in {output.names}")
    return output
