"""JSON and Avro encodings of CDCv2 messages: exact Materialize CDC schema, round trips
checked against the schema, the Confluent wire format, and malformed input."""

from __future__ import annotations

import io
import json
import struct

import pytest
from fastavro.validation import validate
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from cdc_core.cdcv2 import MalformedMessage, Progress, Updates, codec_json
from cdc_core.cdcv2.codec_avro import AvroCodec, cdc_schema
from cdc_core.cdcv2.data_columns import DataColumns, UnsupportedColumnType
from cdc_core.frontier import TimeFrontier

SCHEMA = StructType(
    [
        StructField("id", LongType(), nullable=False),
        StructField("name", StringType()),
        StructField("qty", IntegerType()),
        StructField("price", DoubleType()),
    ]
)
CODEC = AvroCodec(SCHEMA)
COLUMNS = DataColumns(SCHEMA)

LONGS = st.integers(-(2**63), 2**63 - 1)
TIMES = st.integers(0, 2**62)
ROWS = st.tuples(
    LONGS,
    st.none() | st.text(max_size=5),
    st.none() | st.integers(-(2**31), 2**31 - 1),
    st.none() | st.floats(allow_nan=False),
)
UPDATES = st.lists(
    st.tuples(ROWS, TIMES, LONGS.filter(bool)), max_size=6
).map(lambda updates: Updates(tuple(updates)))


@st.composite
def progress(draw: st.DrawFn) -> Progress:
    lower = draw(st.integers(0, 1000))
    upper = draw(st.none() | st.integers(lower, 2000))
    end = TimeFrontier.empty() if upper is None else TimeFrontier.at(upper)
    last = 3000 if upper is None else upper - 1
    times = draw(st.sets(st.integers(lower, last), max_size=5)) if last >= lower else set()
    counts = tuple((t, draw(st.integers(1, 2**40))) for t in times)
    return Progress(TimeFrontier.at(lower), end, counts)


MESSAGES = UPDATES | progress()


def test_schema_is_the_materialize_cdc_schema() -> None:
    long_array = {"type": "array", "items": "long"}
    expected = [
        {
            "type": "array",
            "items": {
                "type": "record",
                "name": "update",
                "namespace": "com.materialize.cdc",
                "fields": [
                    {
                        "name": "data",
                        "type": {
                            "type": "record",
                            "name": "data",
                            "fields": [
                                {"name": "id", "type": "long"},
                                {"name": "name", "type": ["null", "string"]},
                                {"name": "qty", "type": ["null", "int"]},
                                {"name": "price", "type": ["null", "double"]},
                            ],
                        },
                    },
                    {"name": "time", "type": "long"},
                    {"name": "diff", "type": "long"},
                ],
            },
        },
        {
            "type": "record",
            "name": "progress",
            "namespace": "com.materialize.cdc",
            "fields": [
                {"name": "lower", "type": long_array},
                {"name": "upper", "type": long_array},
                {
                    "name": "counts",
                    "type": {
                        "type": "array",
                        "items": {
                            "type": "record",
                            "name": "counts",
                            "fields": [
                                {"name": "time", "type": "long"},
                                {"name": "count", "type": "long"},
                            ],
                        },
                    },
                },
            ],
        },
    ]
    assert cdc_schema(SCHEMA) == expected


@settings(max_examples=150, deadline=None)
@given(MESSAGES, st.none() | st.integers(0, 2**32 - 1))
def test_avro_round_trip_is_checked_against_the_schema(message, schema_id) -> None:
    assert validate(CODEC.value(message), CODEC.schema)
    payload = CODEC.encode(message, schema_id)
    if schema_id is not None:
        assert payload[:5] == struct.pack(">bI", 0, schema_id)
    assert CODEC.decode(payload, confluent=schema_id is not None) == message


@settings(max_examples=150, deadline=None)
@given(MESSAGES)
def test_json_round_trip(message) -> None:
    assert codec_json.decode(codec_json.encode(message, COLUMNS), COLUMNS) == message


@settings(max_examples=20, deadline=None)
@given(st.lists(MESSAGES, max_size=8))
def test_avro_container_round_trip(messages) -> None:
    out = io.BytesIO()
    CODEC.write_container(out, messages)
    assert list(CODEC.read_container(io.BytesIO(out.getvalue()))) == messages


def test_updates_branch_is_union_index_zero_and_progress_index_one() -> None:
    updates = CODEC.encode(Updates((((1, None, None, None), 3, 1),)))
    statement = CODEC.encode(Progress(TimeFrontier.at(0), TimeFrontier.at(1)))
    assert (updates[0], statement[0]) == (0, 2)  # zig-zag varints of 0 and 1


def test_avro_json_spelling_is_accepted() -> None:
    avro_json = (
        '{"array": [{"data": {"id": 7, "name": {"string": "x"}, "qty": null, '
        '"price": {"double": 1.5}}, "time": 5, "diff": -1}]}'
    )
    plain = '{"updates": [{"data": {"id": 7, "name": "x", "qty": null, "price": 1.5}, '
    plain += '"time": 5, "diff": -1}]}'
    expected = Updates((((7, "x", None, 1.5), 5, -1),))
    assert codec_json.decode(avro_json, COLUMNS) == codec_json.decode(plain, COLUMNS) == expected
    statement = '{"com.materialize.cdc.progress": {"lower": [3], "upper": [10], '
    statement += '"counts": [{"time": 4, "count": 1}]}}'
    assert codec_json.decode(statement, COLUMNS) == Progress(
        TimeFrontier.at(3), TimeFrontier.at(10), ((4, 1),)
    )


def _update_with(data: dict) -> str:
    return json.dumps({"updates": [{"data": data, "time": 1, "diff": 1}]})


GOOD_DATA = {"id": 1, "name": "a", "qty": 2, "price": 0.5}


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"updates": [], "progress": {}}',
        '{"snapshot": []}',
        '{"updates": {}}',
        _update_with({**GOOD_DATA, "id": None}),  # not nullable
        _update_with({**GOOD_DATA, "qty": "2"}),
        _update_with({**GOOD_DATA, "qty": 2**31}),
        _update_with({**GOOD_DATA, "qty": True}),
        _update_with({k: v for k, v in GOOD_DATA.items() if k != "price"}),
        _update_with({**GOOD_DATA, "extra": 1}),
        _update_with({**GOOD_DATA, "name": {"string": "a"}}),  # union spelling only in Avro-JSON
        '{"updates": [{"data": {"id": 1, "name": null, "qty": null, "price": null}, '
        '"time": 1, "diff": 0}]}',
        '{"progress": {"lower": [0], "upper": [2, 3], "counts": []}}',
        '{"progress": {"lower": [], "upper": [2], "counts": []}}',
        '{"progress": {"lower": [0], "upper": [2], "counts": [{"time": 2, "count": 1}]}}',
        '{"progress": {"lower": [0], "upper": [2], "counts": [{"time": 1}]}}',
        '{"progress": {"lower": [0.5], "upper": [2], "counts": []}}',
    ],
)
def test_malformed_json_is_a_named_error(text: str) -> None:
    with pytest.raises(MalformedMessage):
        codec_json.decode(text, COLUMNS)


def test_malformed_avro_is_a_named_error() -> None:
    good = CODEC.encode(Progress(TimeFrontier.at(0), TimeFrontier.at(9), ((3, 1),)), 1)
    for payload in [b"", b"\x01\x00\x00\x00\x01\x02", good[:-1], good + b"\x00", b"\x00" * 5]:
        with pytest.raises(MalformedMessage):
            CODEC.decode(payload)
    with pytest.raises(MalformedMessage):
        list(CODEC.read_container(io.BytesIO(b"Obj\x01garbage")))


def test_unsupported_column_types_are_refused_by_name() -> None:
    with pytest.raises(UnsupportedColumnType, match="'tags'"):
        AvroCodec(StructType([StructField("tags", ArrayType(StringType()))]))
    with pytest.raises(UnsupportedColumnType, match="time"):
        DataColumns(StructType([StructField("time", LongType())]))
