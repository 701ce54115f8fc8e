"""Export, then mangle, then import: a random collection exported over a random window,
duplicated, reordered and re-batched (updates and progress alike), reads back to
exactly its consolidated contents and the window's upper; with one update lost, the
stream is reported complete exactly up to that update's time."""

from __future__ import annotations

import random
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from cdc_core.cdcv2.export import export_updates
from cdc_core.cdcv2.reference import read_all
from cdc_core.frontier import TimeFrontier
from tests.cdcv2.test_cdcv2_scramble import scramble
from tests.spark_examples import SPARK_EXAMPLES

ROWS = st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", None]))
COLLECTIONS = st.lists(st.tuples(ROWS, st.integers(0, 12), st.integers(-2, 2)), max_size=25)
DDL = "k long, v string, time long, diff long"


def consolidated(collection: list, lower: int, upper: TimeFrontier) -> dict:
    """The oracle: sum the diffs per (data, time) inside the window, drop zeros."""
    sums: dict = defaultdict(int)
    for data, time, diff in collection:
        if lower <= time and not upper.less_equal(time):
            sums[(data, time)] += diff
    return {key: total for key, total in sums.items() if total}


def as_facts(updates: list) -> dict:
    facts = {(data, time): diff for data, time, diff in updates}
    assert len(facts) == len(updates), "an update was reported twice"
    return facts


@settings(SPARK_EXAMPLES, max_examples=6)
@given(
    collection=COLLECTIONS,
    lower=st.integers(0, 5),
    span=st.none() | st.integers(1, 12),
    times_per_statement=st.integers(1, 3),
    rng=st.randoms(use_true_random=False),
)
def test_export_then_mangled_import_restores_the_collection(
    spark: SparkSession,
    collection: list,
    lower: int,
    span: int | None,
    times_per_statement: int,
    rng: random.Random,
) -> None:
    upper = TimeFrontier.empty() if span is None else TimeFrontier.at(lower + span)
    rows = [(*data, time, diff) for data, time, diff in collection]
    stream = export_updates(spark.createDataFrame(rows, DDL), lower, upper, times_per_statement)
    facts = [((r.k, r.v), r.time, r.diff) for r in stream.updates.collect()]
    statements = list(stream.progress)
    expected = consolidated(collection, lower, upper)
    start = TimeFrontier.at(lower)

    for _ in range(5):
        updates, frontier = read_all(scramble(facts, statements, rng), start)
        assert as_facts(updates) == expected
        assert frontier == upper

    if facts:
        lost = rng.choice(facts)
        rest = [fact for fact in facts if fact != lost]
        updates, frontier = read_all(scramble(rest, statements, rng), start)
        assert frontier == TimeFrontier.at(lost[1])
        assert as_facts(updates) == {key: d for key, d in expected.items() if key[1] < lost[1]}
