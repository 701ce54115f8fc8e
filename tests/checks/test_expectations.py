"""Expectations: config parsing judged by GX, and real GX validations on Spark DataFrames.

Expected figures are computed by hand or by a plain-Python oracle over the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession

from cdc_core.checks.expectations import (
    PARTIAL_UNEXPECTED_LIMIT,
    ExpectationConfigError,
    ExpectationOutcome,
    ExpectationSpec,
    parse_expectations,
    validate,
)

SCHEMA = "id long, score long"
NOT_NULL_ID = {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "id"}}
SCORE_0_TO_100 = {
    "type": "expect_column_values_to_be_between",
    "kwargs": {"column": "score", "min_value": 0, "max_value": 100},
}
ROW_COUNT_1_TO_10 = {
    "type": "expect_table_row_count_to_be_between",
    "kwargs": {"min_value": 1, "max_value": 10},
}


def frame(spark: SparkSession, rows: Sequence[tuple[int | None, int | None]]) -> DataFrame:
    return spark.createDataFrame(list(rows), SCHEMA)


def by_type(outcomes: Sequence[ExpectationOutcome]) -> dict[str, ExpectationOutcome]:
    return {outcome.type: outcome for outcome in outcomes}


# --- parsing -------------------------------------------------------------------------------


def test_parse_turns_config_entries_into_specs() -> None:
    raw = [NOT_NULL_ID, SCORE_0_TO_100, {"type": "expect_table_row_count_to_be_between"}]
    # GX accepts a row-count expectation without bounds; `kwargs` may be left out.
    assert parse_expectations(raw) == [
        ExpectationSpec("expect_column_values_to_not_be_null", {"column": "id"}),
        ExpectationSpec(
            "expect_column_values_to_be_between",
            {"column": "score", "min_value": 0, "max_value": 100},
        ),
        ExpectationSpec("expect_table_row_count_to_be_between", {}),
    ]


def test_unknown_expectation_type_names_its_index_and_a_near_name() -> None:
    raw = [NOT_NULL_ID, {"type": "expect_column_values_to_not_be_nul", "kwargs": {"column": "id"}}]
    with pytest.raises(ExpectationConfigError) as raised:
        parse_expectations(raw)
    assert raised.value.index == 1
    message = str(raised.value)
    assert message.startswith("expectations[1]: ")
    assert "unknown expectation type 'expect_column_values_to_not_be_nul'" in message
    assert "did you mean 'expect_column_values_to_not_be_null'" in message


@pytest.mark.parametrize(
    ("kwargs", "gx_says"),
    [
        ({}, "field required"),
        ({"column": "id", "mostly_not": 1}, "extra fields not permitted"),
        ({"column": "score", "min_value": "abc", "max_value": 1}, "min_value"),
        ({"column": "score"}, "min_value and max_value cannot both be None"),
    ],
)
def test_bad_kwargs_surface_gx_message_with_index(kwargs: dict, gx_says: str) -> None:
    raw = [
        NOT_NULL_ID,
        NOT_NULL_ID,
        {"type": "expect_column_values_to_be_between", "kwargs": kwargs},
    ]
    with pytest.raises(ExpectationConfigError) as raised:
        parse_expectations(raw)
    assert raised.value.index == 2
    assert str(raised.value).startswith("expectations[2]: expect_column_values_to_be_between")
    assert gx_says in str(raised.value)


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("expect_column_values_to_not_be_null", "expected a mapping"),
        ({"kwargs": {"column": "id"}}, "'type' must be a non-empty string"),
        ({"type": "expect_column_values_to_not_be_null", "kwarg": {}}, "unknown keys ['kwarg']"),
        ({"type": "expect_column_values_to_not_be_null", "kwargs": ["id"]}, "'kwargs' must be"),
        ({"type": "expect_column_values_to_not_be_null", "kwargs": {"id": "x"}}, "['id']"),
    ],
)
def test_malformed_entries_are_named_errors(entry: object, problem: str) -> None:
    with pytest.raises(ExpectationConfigError, match=r"^expectations\[1\]: ") as raised:
        parse_expectations([NOT_NULL_ID, entry])  # type: ignore[list-item]
    assert raised.value.index == 1
    assert problem in str(raised.value)


def test_config_that_is_not_a_list_is_rejected() -> None:
    with pytest.raises(ExpectationConfigError, match=r"^expectations: expected a list"):
        parse_expectations(NOT_NULL_ID)  # type: ignore[arg-type]


def test_validate_rejects_a_bad_hand_built_spec_by_index(spark: SparkSession) -> None:
    specs = [ExpectationSpec("expect_column_values_to_not_be_null", {"colum": "id"})]
    with pytest.raises(ExpectationConfigError, match=r"^expectations\[0\]: .*colum"):
        validate(frame(spark, [(1, 1)]), specs, name="bad spec")


# --- validation ----------------------------------------------------------------------------


def test_zero_specs_succeed_without_running_anything(spark: SparkSession) -> None:
    # Any Spark action on this DataFrame fails, so success proves no job ran.
    poisoned = spark.range(1).selectExpr("raise_error('computed') as id")
    report = validate(poisoned, [], name="orders.state@[0,60000)")
    assert report.success
    assert report.results == ()
    assert report.name == "orders.state@[0,60000)"
    assert not poisoned.is_cached


def test_null_and_out_of_range_values_fail_the_right_expectations(spark: SparkSession) -> None:
    rows = [(1, 5), (None, 50), (3, 500), (4, None), (5, 100)]
    specs = parse_expectations([NOT_NULL_ID, SCORE_0_TO_100, ROW_COUNT_1_TO_10])
    report = validate(frame(spark, rows), specs, name="orders.changes@[0,60000)")

    assert not report.success
    assert [(outcome.type, outcome.kwargs) for outcome in report.results] == [
        (spec.type, spec.kwargs) for spec in specs
    ]
    outcomes = by_type(report.results)

    not_null = outcomes["expect_column_values_to_not_be_null"]
    assert not not_null.success
    assert not_null.error is None
    assert not_null.observed["element_count"] == 5
    assert not_null.observed["unexpected_count"] == 1
    assert not_null.observed["unexpected_percent"] == pytest.approx(20.0)
    assert not_null.observed["partial_unexpected_list"] == [None]

    between = outcomes["expect_column_values_to_be_between"]
    assert not between.success
    assert between.observed["unexpected_count"] == 1  # 500; the null score is "missing"
    assert between.observed["missing_count"] == 1
    assert between.observed["partial_unexpected_list"] == [500]

    row_count = outcomes["expect_table_row_count_to_be_between"]
    assert row_count.success
    assert row_count.observed["observed_value"] == 5

    lines = report.summary().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(
        "orders.changes@[0,60000): expect_column_values_to_not_be_null(column='id') failed: "
        "1 of 5 unexpected (20.00%)"
    )
    assert lines[1].startswith(
        "orders.changes@[0,60000): expect_column_values_to_be_between(column='score', "
        "min_value=0, max_value=100) failed: 1 of 5 unexpected"
    )
    assert "e.g. [500]" in lines[1]


def test_clean_dataframe_passes(spark: SparkSession) -> None:
    specs = parse_expectations([NOT_NULL_ID, SCORE_0_TO_100, ROW_COUNT_1_TO_10])
    report = validate(frame(spark, [(1, 0), (2, 100), (3, 42)]), specs, name="clean")
    assert report.success
    assert [outcome.success for outcome in report.results] == [True, True, True]
    assert (
        by_type(report.results)["expect_column_values_to_not_be_null"].observed["unexpected_count"]
        == 0
    )
    assert report.summary() == "clean: all 3 expectations passed"


def test_missing_column_fails_with_its_error_and_keeps_spec_order(spark: SparkSession) -> None:
    specs = parse_expectations(
        [NOT_NULL_ID, {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "nope"}}]
    )
    report = validate(frame(spark, [(1, 1)]), specs, name="typo")
    assert not report.success
    first, second = report.results
    assert (first.kwargs, first.success, first.error) == ({"column": "id"}, True, None)
    assert second.kwargs == {"column": "nope"}
    assert not second.success
    assert second.error is not None and '"nope"' in second.error
    assert "error:" in report.summary()


def test_examples_of_unexpected_values_are_truncated(spark: SparkSession) -> None:
    rows = [(i, 1000 + i) for i in range(40)]
    specs = parse_expectations([SCORE_0_TO_100])
    (outcome,) = validate(frame(spark, rows), specs, name="many").results
    assert outcome.observed["unexpected_count"] == 40
    examples = outcome.observed["partial_unexpected_list"]
    assert len(examples) == PARTIAL_UNEXPECTED_LIMIT
    assert set(examples) <= {score for _, score in rows}


def test_validation_leaves_caching_as_it_found_it(spark: SparkSession) -> None:
    specs = parse_expectations([NOT_NULL_ID])
    uncached = frame(spark, [(1, 1)])
    validate(uncached, specs, name="uncached")
    assert not uncached.is_cached

    cached = frame(spark, [(1, 1)]).cache()
    validate(cached, specs, name="cached")
    assert cached.is_cached
    cached.unpersist()


nullable_ints = st.one_of(st.none(), st.integers(min_value=-50, max_value=150))


@settings(deadline=None, max_examples=5)
@given(
    rows=st.lists(st.tuples(nullable_ints, nullable_ints), min_size=1, max_size=30),
    low=st.integers(min_value=-20, max_value=60),
    width=st.integers(min_value=0, max_value=80),
)
def test_unexpected_counts_match_a_plain_python_oracle(
    spark: SparkSession, rows: list[tuple[int | None, int | None]], low: int, width: int
) -> None:
    high = low + width
    between = {"column": "score", "min_value": low, "max_value": high}
    specs = parse_expectations(
        [NOT_NULL_ID, {"type": "expect_column_values_to_be_between", "kwargs": between}]
    )
    report = validate(frame(spark, rows), specs, name="property")

    null_ids = sum(1 for row_id, _ in rows if row_id is None)
    out_of_range = sum(1 for _, score in rows if score is not None and not low <= score <= high)
    not_null, in_range = report.results
    assert not_null.observed["unexpected_count"] == null_ids
    assert not_null.success == (null_ids == 0)
    assert in_range.observed["unexpected_count"] == out_of_range
    assert in_range.success == (out_of_range == 0)
    assert report.success == (null_ids == 0 and out_of_range == 0)
