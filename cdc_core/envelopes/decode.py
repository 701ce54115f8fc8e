"""Raw JSON text of a dump record -> typed columns, with a reason when that fails.

What "does not match the declared schema" means (Spark's JSON reader, made explicit):
- the text is not valid UTF-8;
- the text is not a JSON object: malformed JSON, an array, a scalar, the literal ``null``;
- a present field's JSON value cannot be read as the field's declared type, e.g. a string
  or ``1.5`` for an ``int`` column, an out-of-range number, a string for a struct
  (a ``string`` column takes any JSON value, as its JSON text), or a non-finite number
  (``NaN``, ``Infinity``) where the JSON standard has none;
- a required field is missing or null (a non-nullable field of the schema), or a field that
  must be present is absent: every key column (a key lacking a column identifies nothing,
  while a key column present as JSON ``null`` is a normal key value, as in Kafka, where
  only an absent key is no key).
Missing optional fields become null and unknown fields are ignored.

Kafka Connect's JSON converter with schemas enabled wraps every message as
``{"schema": ..., "payload": ...}``; both that and the bare form are accepted. Keys and
values in another encoding arrive here as JSON text too (``encodings``), with an
``encoding_error_column`` saying why a text could not even be read; that error comes first.

Each step adds real columns (instead of nesting expressions) so that every JSON text is
parsed once per record and the generated code stays small.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from cdc_core.envelopes.encodings import encoding_error_column
from cdc_core.expressions import built_once

CORRUPT_FIELD = "__reclock_corrupt_record__"
CONNECT_WRAPPER_FIELDS = ("schema", "payload")
NOT_AN_OBJECT = "is not a JSON object"
NOT_UTF8 = "is not valid UTF-8"


def error_column(name: str) -> str:
    """The column holding why ``name`` did not decode (null when it did)."""
    return f"{name}_error"


def _scratch(into: str, part: str) -> str:
    """A working column of the step that adds ``into``, dropped before the step ends."""
    return f"_{into}_{part}"


def unwrap_connect_envelope(df: DataFrame, text: str, schema: StructType, into: str) -> DataFrame:
    """Add ``into``: the ``payload`` of a schema-enabled JSON converter message in column
    ``text``, else the text itself. A wrapped null payload is a null value. Never unwraps
    when the schema has a ``schema`` or ``payload`` column (the forms would be ambiguous)."""
    if encoding_error_column(text) in df.columns:  # carried along with the text
        df = df.withColumn(encoding_error_column(into), F.col(encoding_error_column(text)))
    if set(CONNECT_WRAPPER_FIELDS) & set(schema.names):
        return df.withColumn(into, F.col(text))
    keys, unwrapped = _unwrapping(text, into)
    scratch = _scratch(into, "keys")
    return df.withColumn(scratch, keys).withColumn(into, unwrapped).drop(scratch)


@built_once
def _unwrapping(text: str, into: str) -> tuple[Column, Column]:
    """The expressions of ``unwrap_connect_envelope``: the keys of a text that may be a
    wrapper (its ``keys`` scratch column), then the payload or the text."""
    keys = _scratch(into, "keys")
    # Only a text naming both keys can be a wrapper: a cheap substring test spares the
    # JSON parse of every bare message (the converter writes the keys unescaped).
    maybe_wrapped = F.col(text).contains('"schema"') & F.col(text).contains('"payload"')
    wrapped = F.array_contains(keys, "schema") & F.array_contains(keys, "payload")
    return (
        F.when(maybe_wrapped, F.json_object_keys(F.col(text))),
        F.when(wrapped, F.get_json_object(text, "$.payload")).otherwise(F.col(text)),
    )


def decode_json(
    df: DataFrame,
    text: str,
    schema: StructType,
    into: str,
    required: Sequence[str] | None = None,
    present: Sequence[str] = (),
) -> DataFrame:
    """Add ``into`` (a struct of ``schema`` decoded from column ``text``) and its error column.
    ``required`` (fields that must be non-null) defaults to the non-nullable fields;
    ``present``: fields that must be in the object, possibly as ``null``. The error is
    null for a null text (the caller decides what a null means)."""
    if required is None:
        required = [field.name for field in schema.fields if not field.nullable]
    encoded = encoding_error_column(text) in df.columns
    parse, error, value = _decoding(text, schema, into, tuple(required), tuple(present), encoded)
    return df.select("*", parse).select("*", error, value).drop(_scratch(into, "typed"))


@built_once
def _decoding(
    text: str,
    schema: StructType,
    into: str,
    required: tuple[str, ...],
    present: tuple[str, ...],
    encoded: bool,
) -> tuple[Column, Column, Column]:
    """The expressions of ``decode_json``: the parse (its ``typed`` scratch column), then
    the error and the decoded struct, which read it. ``encoded``: whether ``text`` carries
    an ``encoding_error_column``."""
    typed = _scratch(into, "typed")
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_FIELD}
    with_corrupt = StructType([*schema.fields, StructField(CORRUPT_FIELD, StringType())])
    # Every field as text, read leniently (``Infinity``, ``NaN`` pass): tells a text that
    # is no object at all from an object with a field of the wrong type.
    all_text = StructType(
        [*(StructField(f.name, StringType()) for f in schema.fields),
         StructField(CORRUPT_FIELD, StringType())]
    )
    parse = F.from_json(F.col(text), with_corrupt, options).alias(typed)
    # A text that parses without a corrupt record and with every required field is a
    # good object (anything else that is not an object sets the corrupt record), so the
    # extra parses below that explain a failure run only for the records that fail.
    decoded = F.col(typed)[CORRUPT_FIELD].isNull()
    for name in required:
        decoded &= F.col(typed)[name].isNotNull()
    # A null field is present only if the object names it: the keys are listed (one more
    # parse) only for records with a null among the ``present`` fields.
    keys = F.json_object_keys(F.col(text))
    absent = {
        name: F.col(typed)[name].isNull() & ~F.coalesce(F.array_contains(keys, name), F.lit(False))
        for name in present
        if name not in required
    }
    for is_absent in absent.values():
        decoded &= ~is_absent
    as_text = F.from_json(F.col(text), all_text, options)
    wrong_types = F.concat_ws(
        "; ",
        *[
            F.when(
                F.col(typed)[f.name].isNull() & as_text[f.name].isNotNull(),
                F.lit(f"field {f.name!r} is not a valid {f.dataType.simpleString()}"),
            )
            for f in schema.fields
        ],
    )
    missing = F.concat_ws(
        ", ",
        F.lit(None).cast("string"),
        *[
            F.when(F.col(typed)[name].isNull() & as_text[name].isNull(), F.lit(name))
            for name in required
        ],
        *[F.when(is_absent, F.lit(name)) for name, is_absent in absent.items()],
    )
    # Strictly no object, and not even leniently an object (``{"n": Infinity}`` is one,
    # with a field of the wrong type).
    not_object = F.json_object_keys(F.col(text)).isNull() & (
        as_text.isNull() | as_text[CORRUPT_FIELD].isNotNull() | ~F.col(text).rlike(r"^\s*\{")
    )
    corrupt = F.col(typed)[CORRUPT_FIELD].isNotNull()
    error = decode_error(text, encoded, decoded, not_object, corrupt, wrong_types, missing)
    value = F.struct(*[F.col(typed)[f.name].alias(f.name) for f in schema.fields])
    return parse, error.alias(error_column(into)), value.alias(into)


def decode_error(
    text: str,
    encoded: bool,
    decoded: Column,
    not_object: Column,
    corrupt: Column,
    wrong_types: Column,
    missing: Column,
) -> Column:
    """Why JSON column ``text`` does not decode (null when it does, or is null), in the
    words every decode shares, from what the decode found: ``decoded``, ``not_object``,
    ``corrupt`` (a field failed to read), the ``wrong_types`` and ``missing`` fields
    (empty text for none). ``encoded``: ``text`` carries an ``encoding_error_column``,
    which comes first."""
    no_error = (F.col(text).isNull() | decoded, F.lit(None))
    unreadable = F.col(encoding_error_column(text))  # not even readable in its encoding
    error = (
        F.when(unreadable.isNotNull(), unreadable).when(*no_error)
        if encoded
        else F.when(*no_error)
    )
    return (
        error
        .when(~F.is_valid_utf8(F.col(text)), F.lit(NOT_UTF8))
        .when(not_object, F.lit(NOT_AN_OBJECT))
        .when(
            corrupt,
            F.concat(
                F.lit("does not match the declared schema: "),
                F.when(wrong_types != "", wrong_types).otherwise(
                    F.lit("a nested field has the wrong type")
                ),
            ),
        )
        .when(missing != "", F.concat(F.lit("is missing required field(s): "), missing))
    )


def decode_key(df: DataFrame, raw: str, key_schema: StructType, into: str) -> DataFrame:
    """Add ``into`` (the decoded Kafka key in column ``raw``) and its error column. A key
    is an object holding the key columns, or a bare JSON scalar when there is exactly one
    key column. Every key column must be present; any may be ``null`` (a composite key
    such as ``{"f3": null, "f4": "yin"}`` is a key like any other)."""
    text = _scratch(into, "text")
    df = unwrap_connect_envelope(df, raw, key_schema, text)
    scalar = len(key_schema.fields) == 1
    if scalar:
        as_object, scalar_error = _scalar_key(text, key_schema.names[0], into)
        df = df.withColumn(text, as_object)
    df = decode_json(df, text, key_schema, into, required=(), present=key_schema.names)
    df = df.drop(text, encoding_error_column(text))
    return df.withColumn(error_column(into), scalar_error) if scalar else df


@built_once
def _scalar_key(text: str, name: str, into: str) -> tuple[Column, Column]:
    """For a key of the one column ``name``: the text as an object (a bare scalar wrapped
    as ``{name: scalar}``), and the error of ``into`` that says a text that is no object
    is no JSON scalar either."""
    opening = "{" + json.dumps(name) + ":"
    # A text that does not open with ``{`` is no object; one that does and is not
    # an object fails to decode below, with the same error as a wrapped non-scalar.
    is_object = F.col(text).rlike(r"^\s*\{")
    as_object = F.concat(F.lit(opening), F.col(text), F.lit("}"))
    error = F.col(error_column(into))
    not_json = F.lit("is neither a JSON object nor a JSON scalar")
    return (
        F.when(is_object, F.col(text)).otherwise(as_object),
        F.when(error == NOT_AN_OBJECT, not_json).otherwise(error),
    )


@built_once
def key_slot(raw: str, key: str) -> Column:
    """Which upsert slot a record (or an error row) belongs to, from its raw key column and
    the decoded ``key``: one per decoded key (by its canonical JSON), one per undecodable
    raw key text, and one shared by all null keys."""
    return (
        F.when(F.col(raw).isNull(), F.lit("null"))
        .when(F.col(error_column(key)).isNotNull(), F.concat(F.lit("raw:"), F.col(raw)))
        .otherwise(F.concat(F.lit("key:"), F.to_json(F.col(key))))
    )
