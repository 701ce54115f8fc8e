"""Keys and values in text, bytes and Confluent-framed Avro: rewritten as JSON on the
executors, then upserted like JSON records; a record that cannot be read in its encoding
becomes a named key or value decode error at its Kafka position."""

from __future__ import annotations

import base64
import io
import json
import struct
from datetime import datetime
from zoneinfo import ZoneInfo

import fastavro
import pytest
from pyspark.sql.types import (
    BinaryType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from cdc_core.envelopes import EnvelopeBatch, apply_upsert
from cdc_core.envelopes.avro_schemas import AvroSchema
from cdc_core.envelopes.encodings import PartEncoding, as_json_text
from cdc_core.vocabulary import RecordEncoding
from tests.envelopes.test_envelope_support import TOPIC, reclocked, updates

VALUE_AVRO = {
    "type": "record",
    "name": "User",
    "fields": [
        {"name": "name", "type": ["null", "string"]},
        {"name": "score", "type": "long"},
        {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
VALUE = StructType(
    [
        StructField("name", StringType()),
        StructField("score", LongType()),
        StructField("seen", TimestampType()),
    ]
)
KEY_AVRO = "long"  # a primitive key schema fills the one key column
KEY = StructType([StructField("id", LongType())])


def confluent(schema: object, value: object, schema_id: int) -> str:
    """base64 of magic byte 0, the schema id and the Avro binary (how dumps hold it)."""
    out = io.BytesIO()
    out.write(struct.pack(">bI", 0, schema_id))
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return base64.b64encode(out.getvalue()).decode()


def run_upsert(spark, rows, key: PartEncoding, value: PartEncoding, key_schema, value_schema):
    records = as_json_text(reclocked(spark, rows), key, value)
    batch = EnvelopeBatch(
        records, time=10, topic=TOPIC, key_schema=key_schema, value_schema=value_schema
    )
    result = apply_upsert(batch)
    return updates(result.changes, 10), updates(result.errors, 10)


def test_avro_keys_and_values_in_the_confluent_wire_format(spark) -> None:
    key = PartEncoding(RecordEncoding.AVRO, ("id",), AvroSchema(3, KEY_AVRO, "key.avsc"))
    value = PartEncoding(
        RecordEncoding.AVRO, tuple(VALUE.names), AvroSchema(7, VALUE_AVRO, "users-value v2")
    )
    seen = 1_767_225_600_000
    good = {"name": "ann", "score": 5, "seen": seen}
    truncated = confluent(VALUE_AVRO, good, 7)[:-4]
    rows = [
        (0, 0, confluent(KEY_AVRO, 1, 3), confluent(VALUE_AVRO, good, 7)),
        (0, 1, confluent(KEY_AVRO, 2, 3), confluent(VALUE_AVRO, {**good, "name": None}, 7)),
        (0, 2, confluent(KEY_AVRO, 3, 3), confluent(VALUE_AVRO, good, 8)),  # another schema
        (0, 3, confluent(KEY_AVRO, 4, 3), "!!not base64"),
        (0, 4, confluent(KEY_AVRO, 5, 3), truncated),
        (0, 5, confluent(KEY_AVRO, 6, 9), confluent(VALUE_AVRO, good, 7)),  # key id wrong
        (0, 6, confluent(KEY_AVRO, 2, 3), None),  # a tombstone stays one
    ]
    changes, errors = run_upsert(spark, rows, key, value, KEY, VALUE)
    at = datetime.fromtimestamp(seen / 1000, tz=ZoneInfo("UTC"))
    assert changes == [(1, "ann", 5, at, 1)]
    reasons = {offset: reason for _, _, offset, _, reason, _, _ in errors}
    assert reasons[2] == (
        "value decode error: value schema id mismatch: the record names schema id 8, "
        "the configured schema (users-value v2) is id 7"
    )
    assert reasons[3] == "value decode error: value is not base64 text (Avro is dumped as base64)"
    assert reasons[4].startswith(
        "value decode error: value does not match Avro schema users-value v2: field 'seen' "
        "at byte "
    )
    assert reasons[5] == (
        "key decode error: key schema id mismatch: the record names schema id 9, "
        "the configured schema (key.avsc) is id 3"
    )
    assert sorted(reasons) == [2, 3, 4, 5]


def test_text_keys_and_bytes_values(spark) -> None:
    key = PartEncoding(RecordEncoding.TEXT, ("k",))
    value = PartEncoding(RecordEncoding.BYTES, ("blob",))
    key_schema = StructType([StructField("k", StringType())])
    value_schema = StructType([StructField("blob", BinaryType())])
    rows = [
        (0, 0, "plain text, not JSON", base64.b64encode(b"\x00\xffraw").decode()),
        (0, 1, '{"looks": "like json"}', base64.b64encode(b"x").decode()),
        (0, 2, "k2", "%%% not base64"),
    ]
    changes, errors = run_upsert(spark, rows, key, value, key_schema, value_schema)
    assert changes == sorted(
        [("plain text, not JSON", b"\x00\xffraw", 1), ('{"looks": "like json"}', b"x", 1)],
        key=repr,
    )
    [(_, partition, offset, key_text, reason, _, diff)] = errors
    assert (partition, offset, diff) == (0, 2, 1)
    assert json.loads(key_text) == {"k": "k2"}  # the errors table holds the key as JSON
    assert reason == "value decode error: value is not base64 text (bytes are dumped as base64)"


@pytest.mark.parametrize("encoding", [RecordEncoding.TEXT, RecordEncoding.BYTES])
def test_null_stays_null(spark, encoding: RecordEncoding) -> None:
    part = PartEncoding(encoding, ("c",))
    records = as_json_text(reclocked(spark, [(0, 0, None, None)]), part, part)
    [row] = records.select("key", "payload").collect()
    assert (row["key"], row["payload"]) == (None, None)
