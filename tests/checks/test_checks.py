"""The engine's verification checks judge shards they did not write: each must pass on a
well-formed shard and name what is wrong in a broken one."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdc_core.checks.invariants import (
    StateQuestion,
    constraints_hold,
    remap_monotone,
    state_counts_together,
)
from cdc_core.frontier import OffsetFrontier, TimeFrontier
from cdc_core.schemas import ERROR, RECLOCKED, REMAP
from cdc_core.shard import Shard
from tests.judged_alone import exactly_once, state_counts

CHANGES = StructType([StructField("id", StringType()), StructField("v", StringType())])


def shard_with(spark: SparkSession, path: Path, schema: StructType, rows: list[tuple]) -> Shard:
    """A shard holding ``rows`` (data columns, time, diff), complete up to time 10."""
    shard = Shard.open(spark, str(path), schema)
    times = [StructField("time", LongType()), StructField("diff", LongType())]
    full = StructType([*schema.fields, *times])
    updates = spark.createDataFrame(rows, full)
    assert shard.compare_and_append(updates, TimeFrontier.at(0), TimeFrontier.at(10)) is None
    return shard


KEY_ONLY = StructType([StructField("id", StringType())])


# (schema, keys, rows, passed, bad_counts, bad_keys) of a changes table's state.
STATE_CASES = [
    (CHANGES, ["id"], [("a", "1", 1, 1), ("a", "1", 2, -1), ("a", "2", 2, 1),
                       ("b", "1", 3, 1)], True, 0, 0),
    (CHANGES, ["id"], [("a", "1", 1, 1), ("a", "2", 2, 1)], False, 0, 1),  # one key, 2 rows
    (CHANGES, ["id"], [("a", "1", 1, 2)], False, 1, 1),  # one row counted twice
    (CHANGES, ["id"], [], True, 0, 0),
    # A key-only table (every column a key column): no value to fingerprint.
    (KEY_ONLY, ["id"], [("a", 1, 1), ("a", 2, -1), ("b", 2, 1)], True, 0, 0),
    (KEY_ONLY, ["id"], [("a", 1, 1), ("b", 2, -1)], False, 1, 1),  # a retraction of nothing
    # A bag (none, materialize): equal records count each; only a count below 1 is wrong.
    (CHANGES, [], [("a", "1", 1, 2), ("b", None, 2, 1)], True, 0, 0),
    (KEY_ONLY, [], [("a", 1, 3), ("b", 2, -1)], False, 1, 0),
]  # fmt: skip


@pytest.mark.parametrize(
    ("schema", "keys", "rows", "passed", "bad_counts", "bad_keys"), STATE_CASES
)
def test_state_counts_names_rows_and_keys_that_break_the_published_state(
    spark, tmp_path, schema, keys, rows, passed, bad_counts, bad_keys
):
    changes = shard_with(spark, tmp_path / "changes", schema, rows)
    outcome = state_counts(changes, keys, 9)
    assert outcome.passed is passed, outcome.description
    assert (outcome.figures["bad_counts"], outcome.figures["bad_keys"]) == (bad_counts, bad_keys)
    live: Counter = Counter()
    for *data, _, diff in rows:
        live[tuple(data)] += diff
    assert outcome.figures["rows"] == sum(1 for count in live.values() if count)


def test_the_states_of_many_tables_judged_together_are_each_their_own(spark, tmp_path):
    """Every case above judged in one call: tables of the same layout and key share a
    job, and a broken table's counts never leak into its neighbours' verdicts."""
    questions = [
        StateQuestion(shard_with(spark, tmp_path / f"changes{i}", schema, rows), keys, 9)
        for i, (schema, keys, rows, *_) in enumerate(STATE_CASES)
    ]
    verdicts = state_counts_together(spark, questions)
    expected = [(passed, bad_counts, bad_keys) for *_, passed, bad_counts, bad_keys in STATE_CASES]
    assert [(v.passed, v.figures["bad_counts"], v.figures["bad_keys"])
            for v in verdicts] == expected  # fmt: skip


def test_constraints_hold_until_a_constraint_violation_stands_in_errors(spark, tmp_path):
    partial = (
        "constraint violated: before image: op 'u' retracts {\"id\":1,\"name\":null} but its "
        "key holds {\"id\":1,\"name\":\"a\"}; a before image must be the whole row: ..."
    )
    decode = "value decode error: value is not a JSON object"
    rows = [
        ("t", 0, 4, '{"id":1}', decode, None, 1, 1),
        ("t", 0, 7, '{"id":1}', partial, None, 2, 1),
        ("t", 0, 9, '{"id":2}', "constraint violated: snapshot: ...", None, 3, 1),
        ("t", 0, 9, '{"id":2}', "constraint violated: snapshot: ...", None, 4, -1),
    ]
    errors = shard_with(spark, tmp_path / "errors", ERROR, rows)
    assert constraints_hold(errors, 1).passed
    outcome = constraints_hold(errors, 9)
    assert not outcome.passed
    assert outcome.description == (
        f"1 constraint violation(s) stand in errors; the first, partition 0 offset 7: {partial}"
    )
    assert outcome.figures["violations"] == 1


def test_exactly_once_names_duplicates_records_outside_the_bindings_and_missing_ones(
    spark, tmp_path
):
    names = RECLOCKED.names

    def row(partition: int, offset: int, time: int, diff: int = 1) -> tuple:
        values = {"partition": partition, "offset": offset}
        return (*(values.get(name) for name in names), time, diff)

    # Window (0, 5] reclocked offsets [0, 2) of partition 0; window (5, 9] [2, 4) and [0, 1)
    # of partition 1.
    first, second = OffsetFrontier({0: 2}), OffsetFrontier({0: 4, 1: 1})
    good_rows = [row(0, 0, 5), row(0, 1, 5), row(0, 2, 9), row(0, 3, 9), row(1, 0, 9)]
    good = shard_with(spark, tmp_path / "good", RECLOCKED, good_rows)
    assert exactly_once(good, OffsetFrontier(), first, {}, 1, 6, gaps_allowed=False).passed
    assert exactly_once(good, first, second, {}, 6, 10, gaps_allowed=False).passed

    # In the second window: offset 2 twice, offset 3 missing, and offset 1 of the first
    # window again (a duplicate across windows, invisible to a per-window count alone).
    bad_rows = [row(0, 0, 5), row(0, 1, 5), row(0, 2, 9, 2), row(0, 1, 9), row(1, 0, 9)]
    bad = shard_with(spark, tmp_path / "bad", RECLOCKED, bad_rows)
    assert exactly_once(bad, OffsetFrontier(), first, {}, 1, 6, gaps_allowed=False).passed
    outcome = exactly_once(bad, first, second, {}, 6, 10, gaps_allowed=False)
    assert not outcome.passed
    assert "partition 0: 1 offset(s) not exactly once" in outcome.description
    assert "partition 0: 1 offset(s) outside the bindings [2, 4)" in outcome.description
    assert "partition 0: 1 record(s) between offsets 2 and 4, expected 2" in outcome.description
    assert "partition 1" not in outcome.description
    assert exactly_once(bad, first, second, {}, 6, 10, gaps_allowed=True).description == (
        "partition 0: 1 offset(s) not exactly once; "
        "partition 0: 1 offset(s) outside the bindings [2, 4)"
    )


def test_remap_monotone_flags_a_binding_that_moves_backwards(spark, tmp_path):
    forward = [(0, 3, 2, 1), (0, 3, 4, -1), (0, 5, 4, 1)]
    assert remap_monotone(shard_with(spark, tmp_path / "ok", REMAP, forward), 9).passed
    backward = [(0, 5, 2, 1), (0, 5, 4, -1), (0, 3, 4, 1)]
    outcome = remap_monotone(shard_with(spark, tmp_path / "back", REMAP, backward), 9)
    assert not outcome.passed
    assert "frontier moved backwards at times 1970-01-01T00:00:00.004Z" in outcome.description


def test_remap_monotone_fails_on_a_remap_that_is_no_frontier(spark, tmp_path):
    two_in_one_partition = [(0, 3, 2, 1), (0, 5, 4, 1)]
    outcome = remap_monotone(shard_with(spark, tmp_path / "bad", REMAP, two_in_one_partition), 9)
    assert not outcome.passed
    assert "remap at 4 is not one element per partition" in outcome.description
