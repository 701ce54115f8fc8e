"""Raw JSON text of a dump record -> typed columns, with a reason when that fails.

What "does not match the declared schema" means (Spark's JSON reader, made explicit):
- the text is not a JSON object: malformed JSON, an array, a scalar, the literal ``null``;
- a present field's JSON value cannot be read as the field's declared type, e.g. a string
  or ``1.5`` for an ``int`` column, an out-of-range number, a string for a struct
  (a ``string`` column takes any JSON value, as its JSON text);
- a required field is missing or null: a non-nullable field of the schema, and every key
  column (a key with a missing column identifies nothing).
Missing optional fields become null and unknown fields are ignored.

Kafka Connect's JSON converter with schemas enabled wraps every message as
``{"schema": ..., "payload": ...}``; both that and the bare form are accepted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

CORRUPT_FIELD = "__reclock_corrupt_record__"
CONNECT_WRAPPER_FIELDS = ("schema", "payload")
NOT_AN_OBJECT = "not a JSON object"


@dataclass(frozen=True)
class Decoded:
    """A decoded struct and the reason it failed (null when it decoded)."""

    value: Column
    error: Column


def unwrap_connect_envelope(text: Column, schema: StructType) -> Column:
    """The ``payload`` of a schema-enabled JSON converter message, else the text itself.
    A wrapped null payload is a null value. Never unwraps when the schema itself has a
    ``schema`` or ``payload`` column, which would make the two forms ambiguous."""
    if set(CONNECT_WRAPPER_FIELDS) & set(schema.names):
        return text
    keys = F.json_object_keys(text)
    wrapped = F.array_contains(keys, "schema") & F.array_contains(keys, "payload")
    return F.when(wrapped, F.get_json_object(text, "$.payload")).otherwise(text)


def decode_object(
    text: Column, schema: StructType, required: Sequence[str] | None = None
) -> Decoded:
    """Decode a JSON object to ``schema``. ``required`` defaults to the non-nullable fields.
    The error is null for a null text (the caller decides what a null means)."""
    if required is None:
        required = [field.name for field in schema.fields if not field.nullable]
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_FIELD}
    typed = F.from_json(
        text, StructType([*schema.fields, StructField(CORRUPT_FIELD, StringType())]), options
    )
    as_text = F.from_json(
        text, StructType([StructField(f.name, StringType()) for f in schema.fields])
    )
    wrong_types = [
        F.when(
            typed[f.name].isNull() & as_text[f.name].isNotNull(),
            F.lit(f"field {f.name!r} is not a valid {f.dataType.simpleString()}"),
        )
        for f in schema.fields
    ]
    missing = [
        F.when(typed[name].isNull() & as_text[name].isNull(), F.lit(name)) for name in required
    ]
    wrong_type_detail = F.concat_ws("; ", *wrong_types)
    missing_detail = F.concat_ws(", ", *missing) if missing else F.lit("")
    error = (
        F.when(text.isNull(), F.lit(None))
        .when(F.json_object_keys(text).isNull(), F.lit(NOT_AN_OBJECT))
        .when(
            typed[CORRUPT_FIELD].isNotNull(),
            F.concat(
                F.lit("does not match the declared schema: "),
                F.when(wrong_type_detail != "", wrong_type_detail).otherwise(
                    F.lit("a nested field has the wrong type")
                ),
            ),
        )
        .when(missing_detail != "", F.concat(F.lit("missing required field(s): "), missing_detail))
    )
    value = F.struct(*[typed[f.name].alias(f.name) for f in schema.fields])
    return Decoded(value, error)


def decode_key(raw_key: Column, key_schema: StructType) -> Decoded:
    """Decode a Kafka key: an object holding the key columns, or a bare JSON scalar when
    there is exactly one key column. Every key column is required."""
    text = unwrap_connect_envelope(raw_key, key_schema)
    if len(key_schema.fields) == 1:
        opening = "{" + json.dumps(key_schema.names[0]) + ":"
        is_object = F.json_object_keys(text).isNotNull()
        text = F.when(is_object, text).otherwise(F.concat(F.lit(opening), text, F.lit("}")))
        decoded = decode_object(text, key_schema, required=key_schema.names)
        not_json = F.lit("neither a JSON object nor a JSON scalar")
        error = F.when(decoded.error == NOT_AN_OBJECT, not_json).otherwise(decoded.error)
        return Decoded(decoded.value, error)
    return decode_object(text, key_schema, required=key_schema.names)


def key_slot(raw_key: Column, key: Decoded) -> Column:
    """Which upsert slot a record (or an error row) belongs to: one per decoded key (by its
    canonical JSON), one per undecodable raw key text, and one shared by all null keys."""
    return (
        F.when(raw_key.isNull(), F.lit("null"))
        .when(key.error.isNotNull(), F.concat(F.lit("raw:"), raw_key))
        .otherwise(F.concat(F.lit("key:"), F.to_json(key.value)))
    )
