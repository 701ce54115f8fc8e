"""NONE: every decodable record is +1; plus the decoding rules every envelope shares."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from cdc_core.envelopes import EnvelopeBatch, EnvelopeConfigError, apply_envelope, apply_none
from tests.envelopes.test_envelope_support import error, reclocked, updates

KEY = StructType([StructField("id", LongType())])
VALUE = StructType([StructField("name", StringType()), StructField("n", IntegerType())])


def test_every_decodable_record_is_plus_one_and_tombstones_are_skipped(spark) -> None:
    records = [
        (0, 0, 1, {"name": "a", "n": 1}),
        (1, 0, 1, {"name": "a", "n": 1}),  # the same row again: diff 2
        (0, 1, None, {"name": "b"}),  # a null key gives null key columns
        (0, 2, 1, None),  # a tombstone carries no row (as in Materialize)
        (0, 3, "zz", {"name": "c", "n": 3}),
        (0, 4, 2, "[1, 2]"),
    ]
    result = apply_none(
        EnvelopeBatch(
            reclocked(spark, records),
            time=10,
            topic="t",
            key_schema=KEY,
            value_schema=VALUE,
        ),
    )
    assert updates(result.changes, 10) == [(1, "a", 1, 2), (None, "b", None, 1)]
    assert updates(result.errors, 10) == [
        error(0, 3, "zz", "key decode error: key is neither a JSON object nor a JSON scalar", 1),
        error(0, 4, 2, "value decode error: value is not a JSON object", 1),
    ]
    assert result.error_witness is not None and not result.error_witness.isEmpty()


def test_a_batch_of_decodable_records_proves_its_errors_empty(spark) -> None:
    records = [(0, 0, 1, {"name": "a", "n": 1}), (0, 1, 2, None)]
    result = apply_none(
        EnvelopeBatch(reclocked(spark, records), time=10, topic="t", key_schema=KEY,
                      value_schema=VALUE)  # fmt: skip
    )
    assert result.error_witness is not None and result.error_witness.isEmpty()
    assert updates(result.errors, 10) == []


def test_without_key_columns_the_key_is_ignored(spark) -> None:
    result = apply_envelope(
        "none",
        EnvelopeBatch(
            reclocked(spark, [(0, 0, "not json", {"name": "a", "n": 1})]),
            time=10,
            topic="t",
            key_schema=StructType([]),
            value_schema=VALUE,
        ),
    )
    assert updates(result.changes, 10) == [("a", 1, 1)]
    assert updates(result.errors, 10) == []


def test_what_not_matching_the_declared_schema_means(spark) -> None:
    value = StructType(
        [
            StructField("name", StringType(), nullable=False),
            StructField("n", IntegerType()),
            StructField("tags", ArrayType(StringType())),
        ]
    )
    records = [
        (0, 0, 1, '{"name": 5, "n": 7, "extra": true}'),  # strings take any JSON as text
        (0, 1, 2, {"name": "x", "n": 1.5}),
        (0, 2, 3, {"name": "x", "n": "7", "tags": "t"}),
        (0, 3, 4, {"n": 1}),
        (0, 4, 5, '"just a string"'),
        (0, 5, 6, "{broken"),
        (0, 6, 7, {"name": "x", "n": 2147483648}),
    ]
    result = apply_none(
        EnvelopeBatch(
            reclocked(spark, records),
            time=10,
            topic="t",
            key_schema=KEY,
            value_schema=value,
        ),
    )
    mismatch = "value decode error: value does not match the declared schema: "
    assert updates(result.changes, 10) == [(1, "5", 7, None, 1)]
    assert updates(result.errors, 10) == [
        error(0, 1, 2, mismatch + "field 'n' is not a valid int", 1),
        error(
            0,
            2,
            3,
            mismatch + "field 'n' is not a valid int; field 'tags' is not a valid array<string>",
            1,
        ),
        error(0, 3, 4, "value decode error: value is missing required field(s): name", 1),
        error(0, 4, 5, "value decode error: value is not a JSON object", 1),
        error(0, 5, 6, "value decode error: value is not a JSON object", 1),
        error(0, 6, 7, mismatch + "field 'n' is not a valid int", 1),
    ]


def test_an_unknown_envelope_is_a_config_error(spark) -> None:
    with pytest.raises(EnvelopeConfigError, match=r"one of none, upsert, debezium-upsert, "):
        apply_envelope(
            "upsrt",
            EnvelopeBatch(
                reclocked(spark, []),
                time=1,
                topic="t",
                key_schema=KEY,
                value_schema=VALUE,
            ),
        )
