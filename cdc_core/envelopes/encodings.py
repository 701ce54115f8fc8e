"""Kafka keys and values in each supported encoding, rewritten as the JSON text the
envelopes decode, on the executors.

- ``json``: unchanged (an object, or a scalar for a single key column);
- ``text``: the dump's text is the one (string) column's value;
- ``bytes``: the dump holds base64 text (kcat ``-J`` cannot hold raw bytes); it becomes the
  one (binary) column's value, which Spark's JSON reader decodes from base64;
- ``avro``: the dump holds base64 text of the Confluent wire format (magic byte 0, a 4-byte
  big-endian schema id, the Avro binary); it is decoded with ``fastavro`` inside an Arrow
  UDF against the configured writer schema and written out as a JSON object (a non-record
  schema fills the one column).

Invariant: a null stays null (a tombstone, or no key), and a non-null text stays non-null:
when it cannot be decoded the text is kept and ``encoding_error_column(name)`` says why, so
the envelope turns the record into a key or value decode error at its Kafka position, as it
does for bad JSON, instead of mistaking it for a tombstone.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
import io
import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from cdc_core.envelopes.avro_schemas import AvroSchema
from cdc_core.envelopes.metadata import DUMP_KEY
from cdc_core.vocabulary import RecordEncoding

_CONFLUENT_HEADER = struct.Struct(">bI")
_CONFLUENT_MAGIC = 0
_CONVERTED = StructType([StructField("text", StringType()), StructField("error", StringType())])


def encoding_error_column(name: str) -> str:
    """The column saying why text column ``name`` could not be read in its encoding."""
    return f"{name}_encoding_error"


@dataclass(frozen=True)
class PartEncoding:
    """How one part of a record (key or value) is encoded, and the columns it fills."""

    encoding: RecordEncoding
    columns: tuple[str, ...]
    avro: AvroSchema | None = None


def as_json_text(records: DataFrame, key: PartEncoding, value: PartEncoding) -> DataFrame:
    """``records`` with ``key`` and ``payload`` rewritten as JSON text (see the module
    docstring); adds the encoding error column of each part that is not JSON."""
    for name, part in (("key", key), ("payload", value)):
        if part.encoding is RecordEncoding.JSON:
            continue
        converted = f"_{name}_as_json"
        if name == "key":  # what ``include: [key]`` shows
            records = records.withColumn(DUMP_KEY, F.col(name))
        records = records.withColumn(converted, _converted(F.col(name), part))
        records = records.withColumn(
            name, F.coalesce(F.col(converted)["text"], F.col(name))
        ).withColumn(encoding_error_column(name), F.col(converted)["error"]).drop(converted)
    return records


def _converted(raw: Column, part: PartEncoding) -> Column:
    """A struct of the JSON ``text`` and the ``error`` (both null for a null ``raw``)."""
    if part.encoding is RecordEncoding.AVRO:
        if part.avro is None:
            raise ValueError("avro needs its writer schema")
        return _avro_to_json(part.avro, part.columns)(raw)
    [column] = part.columns
    as_json = F.to_json(F.struct(raw.alias(column)))
    error = F.lit(None).cast("string")
    if part.encoding is RecordEncoding.BYTES:
        error = F.when(
            raw.isNotNull() & F.try_to_binary(raw, F.lit("base64")).isNull(),
            F.lit("is not base64 text (bytes are dumped as base64)"),
        )
    text = F.when(raw.isNotNull() & error.isNull(), as_json)
    return F.struct(text.alias("text"), error.alias("error"))


def _avro_to_json(schema: AvroSchema, columns: Sequence[str]) -> Callable[[Column], Column]:
    """An Arrow UDF: base64 Confluent-framed Avro text -> (JSON text, error)."""
    writer, schema_id, origin = schema.schema, schema.schema_id, schema.origin
    single = None if schema.is_record else columns[0]

    def convert(texts: pa.Array) -> pa.Array:
        parsed = fastavro.parse_schema(writer)
        rows: list[dict[str, str | None]] = []
        for text in texts.to_pylist():
            if text is None:
                rows.append({"text": None, "error": None})
                continue
            try:
                value = _read_avro(text, parsed, writer, schema_id, origin)
            except AvroRecordError as error:
                rows.append({"text": None, "error": str(error)})
                continue
            rows.append({"text": json.dumps(value if single is None else {single: value},
                                            default=json_value), "error": None})  # fmt: skip
        return pa.array(rows, type=pa.struct([("text", pa.string()), ("error", pa.string())]))

    # pyspark's stub has no overload without functionType, which the runtime infers from
    # convert's type hints (and warns when it is given).
    return F.arrow_udf(convert, _CONVERTED)  # type: ignore[call-overload]


class AvroRecordError(ValueError):
    """One record's bytes that do not decode with the configured writer schema."""


_UNREADABLE = (EOFError, ValueError, IndexError, UnicodeDecodeError, struct.error)


def _failing_field(body: bytes, writer: Any, error: Exception) -> tuple[str, int, Exception]:
    """Which top-level field of a record schema the bytes fail in (``"field 'x' "``), where
    that field starts, and its error; for other schemas, the start and ``error``."""
    if not (isinstance(writer, dict) and writer.get("type") == "record"):
        return "", 0, error
    named: dict[str, Any] = {}
    fastavro.parse_schema(writer, named_schemas=named)
    stream = io.BytesIO(body)
    for field in writer.get("fields", []):
        start = stream.tell()
        field_schema = fastavro.parse_schema(field["type"], named_schemas=named)
        try:
            fastavro.schemaless_reader(stream, field_schema, field_schema)
        except _UNREADABLE as failure:
            return f"field {field['name']!r} ", start, failure
    return "", stream.tell(), error


def _read_avro(text: str, parsed: Any, writer: Any, schema_id: int, origin: str) -> Any:
    try:
        payload = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise AvroRecordError("is not base64 text (Avro is dumped as base64)") from None
    if len(payload) < _CONFLUENT_HEADER.size or payload[0] != _CONFLUENT_MAGIC:
        raise AvroRecordError(
            "is not in the Confluent wire format (magic byte 0, 4-byte schema id, Avro)"
        )
    _, found_id = _CONFLUENT_HEADER.unpack_from(payload)
    if found_id != schema_id:
        raise AvroRecordError(
            f"schema id mismatch: the record names schema id {found_id}, "
            f"the configured schema ({origin}) is id {schema_id}"
        )
    body = io.BytesIO(payload[_CONFLUENT_HEADER.size :])
    try:
        value = fastavro.schemaless_reader(body, parsed, parsed)
    except _UNREADABLE as error:
        field, at, failure = _failing_field(payload[_CONFLUENT_HEADER.size :], writer, error)
        raise AvroRecordError(
            f"does not match Avro schema {origin}: {field}at byte "
            f"{_CONFLUENT_HEADER.size + at} of the record: {failure!r}"
        ) from None
    left = len(payload) - _CONFLUENT_HEADER.size - body.tell()
    if left:
        raise AvroRecordError(f"has {left} byte(s) after its Avro value ({origin})")
    return value


def json_value(value: object) -> object:
    """JSON for what fastavro returns beyond JSON's types, as Spark's JSON reader takes it."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
