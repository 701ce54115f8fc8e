"""UPSERT: one table-driven test per rule (exact changes, errors and state, by hand)."""

from __future__ import annotations

import pytest
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from cdc_core.envelopes import EnvelopeBatch, EnvelopeConfigError, apply_upsert, output_schema
from cdc_core.schemas import ERROR
from tests.envelopes.test_envelope_support import (
    TOPIC,
    Run,
    batched,
    dataframe,
    error,
    reclocked,
    updates,
    with_diff,
)

KEY = StructType([StructField("id", LongType())])
VALUE = StructType([StructField("name", StringType()), StructField("n", IntegerType())])
NULL_KEY = (
    "null key: record with NULL key in UPSERT source; to retract this error, produce a "
    "record upstream with a NULL key and NULL value"
)
BAD_N = "value decode error: value does not match the declared schema: field 'n' is not a valid int"


@pytest.fixture
def run(spark) -> Run:
    apply = batched(apply_upsert, key_schema=KEY, value_schema=VALUE)
    return Run(spark, output_schema("upsert", KEY, VALUE), apply)


def v(name: str, n: int) -> dict:
    return {"name": name, "n": n}


# Each case: windows of (partition, offset, key, value) records, then per window the exact
# expected changes and errors, then the final state (rows) and error state.
CASES = {
    "insert": ([[(0, 0, 1, v("a", 1))]], [[(1, "a", 1, 1)]], [[]]),
    "update emits -old +new": (
        [[(0, 0, 1, v("a", 1))], [(0, 1, 1, v("b", 2))]],
        [[(1, "a", 1, 1)], [(1, "a", 1, -1), (1, "b", 2, 1)]],
        [[], []],
    ),
    "unchanged value emits nothing": (
        [[(0, 0, 1, v("a", 1))], [(0, 1, 1, v("a", 1))]],
        [[(1, "a", 1, 1)], []],
        [[], []],
    ),
    "null value deletes": (
        [[(0, 0, 1, v("a", 1))], [(0, 1, 1, None)]],
        [[(1, "a", 1, 1)], [(1, "a", 1, -1)]],
        [[], []],
    ),
    "deleting an absent key is a no-op": ([[(0, 0, 7, None)]], [[]], [[]]),
    "latest offset in a window wins": (
        [[(0, 2, 1, v("c", 3)), (0, 0, 1, v("a", 1)), (0, 1, 1, v("b", 2))]],
        [[(1, "c", 3, 1)]],
        [[]],
    ),
    "insert then delete in one window is nothing": (
        [[(0, 0, 1, v("a", 1)), (0, 1, 1, None)]],
        [[]],
        [[]],
    ),
    "across partitions the higher partition wins within a window": (
        [[(1, 0, 1, v("p1", 1)), (0, 5, 1, v("p0", 0))]],
        [[(1, "p1", 1, 1)]],
        [[]],
    ),
    "a later window wins over a higher partition": (
        [[(1, 0, 1, v("p1", 1))], [(0, 5, 1, v("p0", 0))]],
        [[(1, "p1", 1, 1)], [(1, "p1", 1, -1), (1, "p0", 0, 1)]],
        [[], []],
    ),
    "bare scalar and object keys are the same key": (
        [[(0, 0, "1", v("a", 1))], [(0, 1, '{"id": 1}', v("b", 2))]],
        [[(1, "a", 1, 1)], [(1, "a", 1, -1), (1, "b", 2, 1)]],
        [[], []],
    ),
    "connect-wrapped values decode like bare ones": (
        [[(0, 0, {"schema": {}, "payload": {"id": 1}}, {"schema": {}, "payload": v("a", 1)})]],
        [[(1, "a", 1, 1)]],
        [[]],
    ),
    "a bad value replaces the row until a valid value supersedes it": (
        [[(0, 0, 1, v("a", 1))], [(0, 1, 1, {"n": "x"})], [(0, 2, 1, v("b", 2))]],
        [[(1, "a", 1, 1)], [(1, "a", 1, -1)], [(1, "b", 2, 1)]],
        [[], [error(0, 1, 1, BAD_N, 1)], [error(0, 1, 1, BAD_N, -1)]],
    ),
    "a null value retracts a key's error": (
        [[(0, 1, 1, {"n": "x"})], [(0, 2, 1, None)]],
        [[], []],
        [[error(0, 1, 1, BAD_N, 1)], [error(0, 1, 1, BAD_N, -1)]],
    ),
    "a newer bad value replaces the older error": (
        [[(0, 1, 1, {"n": "x"})], [(0, 2, 1, "{oops")]],
        [[], []],
        [
            [error(0, 1, 1, BAD_N, 1)],
            [
                error(0, 1, 1, BAD_N, -1),
                error(0, 2, 1, "value decode error: value is not a JSON object", 1),
            ],
        ],
    ),
    "null keys share one error slot, cleared by a null key with a null value": (
        [
            [(0, 0, None, v("a", 1)), (0, 1, None, v("b", 2))],
            [(0, 2, None, v("c", 3))],
            [(0, 3, None, None)],
        ],
        [[], [], []],
        [
            [error(0, 1, None, NULL_KEY, 1)],
            [error(0, 1, None, NULL_KEY, -1), error(0, 2, None, NULL_KEY, 1)],
            [error(0, 2, None, NULL_KEY, -1)],
        ],
    ),
    "an undecodable key is cleared by a null value with the same raw key": (
        [[(0, 0, "zz", v("a", 1))], [(0, 1, "yy", None), (0, 2, 5, None)], [(0, 3, "zz", None)]],
        [[], [], []],
        [
            [
                error(
                    0,
                    0,
                    "zz",
                    "key decode error: key is neither a JSON object nor a JSON scalar",
                    1,
                )
            ],
            [],
            [
                error(
                    0,
                    0,
                    "zz",
                    "key decode error: key is neither a JSON object nor a JSON scalar",
                    -1,
                )
            ],
        ],
    ),
    "a key missing its key column is an error": (
        [[(0, 0, {"other": 1}, v("a", 1))]],
        [[]],
        [[error(0, 0, {"other": 1}, "key decode error: key is missing required field(s): id", 1)]],
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_upsert_rule(run: Run, case: str) -> None:
    windows, expected_changes, expected_errors = CASES[case]
    for index, rows in enumerate(windows):
        changes, errors = run.upsert_window(10 * (index + 1), rows)
        assert changes == sorted(expected_changes[index], key=repr), f"window {index}"
        assert errors == sorted(expected_errors[index], key=repr), f"window {index}"


def test_state_is_the_accumulated_changes_and_untouched_keys_are_not_emitted(run: Run) -> None:
    run.upsert_window(10, [(0, 0, 1, v("a", 1)), (0, 1, 2, v("b", 2)), (0, 2, 3, v("c", 3))])
    changes, errors = run.upsert_window(20, [(0, 3, 2, v("B", 20)), (0, 4, 3, None)])
    assert changes == sorted([(2, "b", 2, -1), (2, "B", 20, 1), (3, "c", 3, -1)], key=repr)
    assert run.state() == [(1, "a", 1, 1), (2, "B", 20, 1)]


def test_errors_written_by_other_stages_are_never_retracted(spark) -> None:
    """Dump and reclocking errors share the errors shard; the envelope leaves them alone."""
    dump_error = ("t", 0, 0, "1", "malformed dump line: ...", "f.json", 1)
    prior_errors = spark.createDataFrame(
        [dump_error],
        "topic string, partition int, offset long, key string, reason string, "
        "file string, diff long",
    )
    result = apply_upsert(
        EnvelopeBatch(
            reclocked(spark, [(0, 1, 1, v("a", 1))]),
            time=10,
            topic="t",
            key_schema=KEY,
            value_schema=VALUE,
            prior_errors=prior_errors,
        ),
    )
    assert updates(result.errors, 10) == []
    assert updates(result.changes, 10) == [(1, "a", 1, 1)]


def test_a_batch_proves_its_errors_empty_whatever_errors_came_before(spark) -> None:
    """Each error update is a command's reason, the one it replaces, or the retraction of
    an error a touched key still holds: the witness is empty exactly when the errors are,
    given prior errors as unconsolidated history (as the pipeline passes the shard's)."""
    prior_errors = dataframe(spark, [
        error(0, 1, 1, BAD_N, 1), error(0, 1, 1, BAD_N, -1),  # key 1: an error since retracted
        error(0, 2, 2, BAD_N, 1),  # key 2 still holds an error
    ], with_diff(ERROR))  # fmt: skip

    def applied(*records: tuple[int, int, object, object]) -> tuple[bool, list[tuple]]:
        result = apply_upsert(EnvelopeBatch(
            reclocked(spark, records), time=10, topic=TOPIC, key_schema=KEY,
            value_schema=VALUE, prior_errors=prior_errors,
        ))  # fmt: skip
        assert result.error_witness is not None
        return result.error_witness.isEmpty(), updates(result.errors, 10)

    assert applied((0, 5, 1, v("a", 1)), (0, 6, 3, v("c", 3))) == (True, [])
    assert applied((0, 5, 2, v("b", 2))) == (False, [error(0, 2, 2, BAD_N, -1)])
    witnessed_empty, errors = applied((0, 5, None, v("n", 0)))
    assert not witnessed_empty and errors


def test_prior_state_may_be_unconsolidated_history(spark) -> None:
    """The prior changes may be the shard's raw updates: only touched keys are summed."""
    history = dataframe(
        spark,
        [(1, "a", 1, 1), (1, "a", 1, -1), (1, "b", 2, 1), (2, "x", 0, 1)],
        with_diff(output_schema("upsert", KEY, VALUE)),
    )
    result = apply_upsert(
        EnvelopeBatch(
            reclocked(spark, [(0, 9, 1, None)]),
            time=10,
            topic="t",
            key_schema=KEY,
            value_schema=VALUE,
            prior_changes=history,
        ),
    )
    assert updates(result.changes, 10) == [(1, "b", 2, -1)]


def test_key_and_value_columns_must_differ() -> None:
    with pytest.raises(EnvelopeConfigError, match=r"both have \['id'\]"):
        output_schema("upsert", KEY, StructType([*VALUE.fields, KEY.fields[0]]))


def test_upsert_needs_key_columns() -> None:
    with pytest.raises(EnvelopeConfigError, match="needs key columns"):
        output_schema("upsert", StructType([]), VALUE)
