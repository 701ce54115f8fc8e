"""Composite keys whose fields are null are keys like any other (UPSERT and DEBEZIUM
UPSERT): they insert, update, delete and retract across windows, where the prior state is
found by a null-safe equality on the key columns. Only an absent key, or a key object
lacking a key column, is a key error."""

from __future__ import annotations

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from cdc_core.envelopes import apply_debezium_upsert, apply_upsert, output_schema
from tests.envelopes.test_envelope_support import Run, batched, error

KEY = StructType([StructField("f3", StringType()), StructField("f4", StringType())])
VALUE = StructType([StructField("name", StringType())])
AFTER = StructType([*KEY.fields, *VALUE.fields])


def k(f3: str | None, f4: str | None) -> dict:
    return {"f3": f3, "f4": f4}


@pytest.fixture
def upsert(spark) -> Run:
    apply = batched(apply_upsert, key_schema=KEY, value_schema=VALUE)
    return Run(spark, output_schema("upsert", KEY, VALUE), apply)


@pytest.fixture
def debezium(spark) -> Run:
    apply = batched(apply_debezium_upsert, key_schema=KEY, value_schema=AFTER)
    return Run(spark, output_schema("debezium-upsert", KEY, AFTER), apply)


def test_upsert_keys_with_null_fields_insert_update_and_delete(upsert: Run) -> None:
    changes, errors = upsert.upsert_window(
        10,
        [
            (0, 0, k(None, "yin"), {"name": "a"}),
            (0, 1, k("yang", None), {"name": "b"}),
            (0, 2, k(None, None), {"name": "c"}),
        ],
    )
    assert errors == []
    assert changes == sorted(
        [(None, "yin", "a", 1), ("yang", None, "b", 1), (None, None, "c", 1)], key=repr
    )
    # A later window: the prior row of each key is found although its key fields are null.
    changes, errors = upsert.upsert_window(
        20, [(0, 3, k(None, "yin"), {"name": "A"}), (0, 4, k(None, None), None)]
    )
    assert errors == []
    assert changes == sorted(
        [(None, "yin", "a", -1), (None, "yin", "A", 1), (None, None, "c", -1)], key=repr
    )
    assert upsert.state() == sorted([(None, "yin", "A", 1), ("yang", None, "b", 1)], key=repr)


def test_a_bad_value_under_a_null_field_key_is_retracted_by_the_next_value(upsert: Run) -> None:
    upsert.upsert_window(10, [(0, 0, k(None, "yin"), {"name": "a"})])
    changes, errors = upsert.upsert_window(20, [(0, 1, k(None, "yin"), "{oops")])
    bad = "value decode error: value is not a JSON object"
    assert changes == [(None, "yin", "a", -1)]
    assert errors == [error(0, 1, k(None, "yin"), bad, 1)]
    changes, errors = upsert.upsert_window(30, [(0, 2, k(None, "yin"), {"name": "b"})])
    assert changes == [(None, "yin", "b", 1)]
    assert errors == [error(0, 1, k(None, "yin"), bad, -1)]
    assert upsert.error_state() == []


def test_a_key_lacking_a_column_is_still_a_key_error(upsert: Run) -> None:
    changes, errors = upsert.upsert_window(10, [(0, 0, {"f4": "yin"}, {"name": "a"})])
    assert changes == []
    assert errors == [
        error(0, 0, {"f4": "yin"}, "key decode error: key is missing required field(s): f3", 1)
    ]


def test_debezium_upsert_keys_with_null_fields(debezium: Run) -> None:
    def event(op: str, after: dict | None) -> dict:
        return {"op": op, "before": None, "after": after, "source": {}}

    key = k(None, "yin")
    changes, errors = debezium.upsert_window(10, [(0, 0, key, event("c", {**key, "name": "a"}))])
    assert (changes, errors) == ([(None, "yin", "a", 1)], [])
    changes, errors = debezium.upsert_window(20, [(0, 1, key, event("u", {**key, "name": "b"}))])
    updated = sorted([(None, "yin", "a", -1), (None, "yin", "b", 1)], key=repr)
    assert (changes, errors) == (updated, [])
    deleted = [(0, 2, key, event("d", None)), (0, 3, key, None)]
    changes, errors = debezium.upsert_window(30, deleted)
    assert (changes, errors) == ([(None, "yin", "b", -1)], [])
    assert debezium.state() == []
