"""Timestamp, date and bytes columns in CDCv2 streams: Avro carries them as the logical and
primitive types timestamp-micros, date and bytes; JSON spells them as Avro-JSON does (epoch
microseconds, days since the epoch, one code point per byte), with or without union
wrappers; exported stream files read back through the CDCv2 reader unchanged."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    BinaryType,
    DateType,
    LongType,
    StructField,
    StructType,
    TimestampType,
)

from cdc_core.cdcv2 import MalformedMessage, Updates, codec_json, read_stream
from cdc_core.cdcv2.codec_avro import AvroCodec, cdc_schema
from cdc_core.cdcv2.data_columns import DataColumns
from cdc_core.cdcv2.export import export_updates
from cdc_core.cdcv2.stream_files import Encoding, read_stream_files, write_stream
from cdc_core.frontier import TimeFrontier

SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("at", TimestampType()),
        StructField("day", DateType()),
        StructField("raw", BinaryType()),
    ]
)
COLUMNS = DataColumns(SCHEMA)
AT = datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)
ROW = (1, AT, date(2026, 1, 2), b"\x00\xff")
# 2026-01-01T00:00:00Z is 1767225600 s after the epoch, day 20454.
SPELLED = {"id": 1, "at": 1_767_225_600_123_456, "day": 20_455, "raw": "\u0000\u00ff"}


def test_json_spells_them_as_avro_json_does() -> None:
    line = codec_json.encode(Updates(((ROW, 5, 1), ((2, None, None, None), 5, -1))), COLUMNS)
    [first, second] = json.loads(line)["updates"]
    assert first["data"] == SPELLED
    assert second["data"] == {"id": 2, "at": None, "day": None, "raw": None}
    assert codec_json.decode(line, COLUMNS).updates[0] == (ROW, 5, 1)


def test_json_reads_the_union_wrapped_spelling_too() -> None:
    wrapped = {"id": {"long": 1}, "at": {"long": SPELLED["at"]}, "day": {"int": SPELLED["day"]},
               "raw": {"bytes": SPELLED["raw"]}}  # fmt: skip
    line = json.dumps({"array": [{"data": wrapped, "time": 5, "diff": 1}]})
    assert codec_json.decode(line, COLUMNS).updates == ((ROW, 5, 1),)


@pytest.mark.parametrize(
    ("column", "value", "words"),
    [
        ("at", "2026-01-01T00:00:00Z", "column 'at' expects long"),
        ("day", 1.5, "column 'day' expects int"),
        ("raw", "\u0100", "column 'raw' value"),
        ("at", 2**62, "column 'at' value"),
    ],
)
def test_a_wrong_json_spelling_is_a_named_error(column: str, value: object, words: str) -> None:
    data = {**SPELLED, column: value}
    line = json.dumps({"updates": [{"data": data, "time": 5, "diff": 1}]})
    with pytest.raises(MalformedMessage, match=words):
        codec_json.decode(line, COLUMNS)


def test_avro_uses_the_logical_types_and_round_trips() -> None:
    [updates, _] = cdc_schema(SCHEMA)
    fields = {f["name"]: f["type"] for f in updates["items"]["fields"][0]["type"]["fields"]}
    assert fields["at"] == ["null", {"type": "long", "logicalType": "timestamp-micros"}]
    assert fields["day"] == ["null", {"type": "int", "logicalType": "date"}]
    assert fields["raw"] == ["null", "bytes"]
    codec = AvroCodec(SCHEMA)
    message = Updates(((ROW, 5, 1),))
    assert codec.decode(codec.encode(message, 9)) == message


@pytest.mark.parametrize("encoding", list(Encoding))
def test_exported_files_read_back_through_the_reader(
    spark: SparkSession, tmp_path: Path, encoding: Encoding
) -> None:
    rows = [(*ROW, 3, 1), (2, None, None, None, 3, 1), (3, AT, date(1969, 12, 31), b"", 4, -1)]
    ddl = "id long, at timestamp, day date, raw binary, time long, diff long"
    frame = spark.createDataFrame(rows, ddl)
    write_stream(export_updates(frame, 0, TimeFrontier.at(7)), tmp_path, encoding)
    decoded = read_stream_files(spark, str(tmp_path), SCHEMA, encoding)
    assert decoded.errors.count() == 0
    imported = read_stream(decoded.updates, decoded.progress)
    assert imported.frontier == TimeFrontier.at(7)
    got = sorted(tuple(r) for r in imported.updates.collect())
    assert got == sorted(tuple(r) for r in frame.collect())
