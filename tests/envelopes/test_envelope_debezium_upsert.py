"""DEBEZIUM UPSERT: one table-driven test per rule (exact changes and errors, by hand)."""

from __future__ import annotations

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdc_core.envelopes import EnvelopeConfigError, apply_debezium_upsert, output_schema
from tests.envelopes.test_envelope_support import Run, batched, error

KEY = StructType([StructField("id", LongType())])
AFTER = StructType([StructField("id", LongType()), StructField("name", StringType())])
UNKNOWN_X = "unknown op: op 'x' is none of c, r, u, d, t"
NO_OP = "unknown op: the value has no op, so it is not a Debezium change event"


@pytest.fixture
def run(spark) -> Run:
    apply = batched(apply_debezium_upsert, key_schema=KEY, value_schema=AFTER)
    return Run(spark, output_schema("debezium-upsert", KEY, AFTER), apply)


def ev(op: str | None, after: dict | None = None, before: dict | None = None) -> dict:
    event = {"before": before, "after": after, "source": {"connector": "postgresql"}}
    return event if op is None else {**event, "op": op}


def row(id_: int, name: str) -> dict:
    return {"id": id_, "name": name}


CASES = {
    "c, r and u upsert the after image": (
        [
            [(0, 0, 1, ev("r", row(1, "a"))), (0, 1, 2, ev("c", row(2, "b")))],
            [(0, 2, 1, ev("u", row(1, "A"), before=row(1, "a")))],
        ],
        [[(1, "a", 1), (2, "b", 1)], [(1, "a", -1), (1, "A", 1)]],
        [[], []],
    ),
    "d deletes and the tombstone after it is no error": (
        [
            [(0, 0, 1, ev("c", row(1, "a")))],
            [(0, 1, 1, ev("d", before=row(1, "a"))), (0, 2, 1, None)],
        ],
        [[(1, "a", 1)], [(1, "a", -1)]],
        [[], []],
    ),
    "a null after deletes whatever the op": (
        [[(0, 0, 1, ev("c", row(1, "a")))], [(0, 1, 1, ev("u", None, before=row(1, "a")))]],
        [[(1, "a", 1)], [(1, "a", -1)]],
        [[], []],
    ),
    "connect-wrapped events and wrapped tombstones": (
        [
            [(0, 0, {"schema": {}, "payload": 1}, {"schema": {}, "payload": ev("c", row(1, "a"))})],
            [(0, 1, 1, {"schema": None, "payload": None})],
        ],
        [[(1, "a", 1)], [(1, "a", -1)]],
        [[], []],
    ),
    "truncate empties every key at its position; the window's later events apply after it": (
        [
            [(0, 0, 1, ev("c", row(1, "a"))), (0, 1, 2, ev("c", row(2, "b"))),
             (0, 2, 5, ev("x", row(5, "e")))],
            [(0, 3, 1, ev("u", row(1, "A"), before=row(1, "a"))), (0, 4, None, ev("t")),
             (0, 5, 3, ev("c", row(3, "c")))],
            [(0, 6, 3, ev("u", row(3, "C"), before=row(3, "c"))), (0, 7, None, ev("t"))],
        ],
        [[(1, "a", 1), (2, "b", 1)], [(1, "a", -1), (2, "b", -1), (3, "c", 1)], [(3, "c", -1)]],
        [[error(0, 2, 5, UNKNOWN_X, 1)], [error(0, 2, 5, UNKNOWN_X, -1)], []],
    ),
    "an unknown op makes the key an error until a valid event supersedes it": (
        [
            [(0, 0, 1, ev("c", row(1, "a")))],
            [(0, 1, 1, ev("x", row(1, "b")))],
            [(0, 2, 1, ev("u", row(1, "c"), before=row(1, "a")))],
        ],
        [[(1, "a", 1)], [(1, "a", -1)], [(1, "c", 1)]],
        [
            [],
            [error(0, 1, 1, UNKNOWN_X, 1)],
            [error(0, 1, 1, UNKNOWN_X, -1)],
        ],
    ),
    "a value without op is no change event": (
        [[(0, 0, 1, row(1, "a"))]],
        [[]],
        [
            [
                error(
                    0,
                    0,
                    1,
                    "unknown op: the value has no op, so it is not a Debezium change event",
                    1,
                )
            ]
        ],
    ),
    "an after image of the wrong type is a decode error": (
        [[(0, 0, 1, ev("c", {"id": "one", "name": "a"}))]],
        [[]],
        [
            [
                error(
                    0,
                    0,
                    1,
                    "value decode error: after image does not match the declared schema: "
                    "field 'id' is not a valid bigint",
                    1,
                )
            ]
        ],
    ),
    "an after image whose key differs from the record key is an error": (
        [[(0, 0, 1, ev("c", row(2, "b")))]],
        [[]],
        [
            [
                error(
                    0,
                    0,
                    1,
                    'key mismatch: after image key {"id":2} differs from the record key {"id":1}',
                    1,
                )
            ]
        ],
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_debezium_upsert_rule(run: Run, case: str) -> None:
    windows, expected_changes, expected_errors = CASES[case]
    for index, rows in enumerate(windows):
        changes, errors = run.upsert_window(10 * (index + 1), rows)
        assert changes == sorted(expected_changes[index], key=repr), f"window {index}"
        assert errors == sorted(expected_errors[index], key=repr), f"window {index}"


def test_key_columns_must_be_after_image_columns_of_the_same_type() -> None:
    with pytest.raises(EnvelopeConfigError, match="key column 'id'"):
        output_schema("debezium-upsert", StructType([StructField("id", StringType())]), AFTER)
