"""A state machine drives random writes, since downgrades, compactions, gc and reads
against a real shard and a plain-Python model (a dict of (data, time) -> diff): every
snapshot and listen in [since, upper) must equal the model."""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdc_core.frontier import TimeFrontier
from cdc_core.shard import Shard, UpperMismatch

KV = StructType([StructField("k", StringType()), StructField("v", LongType())])
UPDATE_DDL = "k string, v long, time long, diff long"

# Few keys, small diffs and repeated rows make cancellations and consolidation common.
offset_updates = st.lists(
    st.tuples(
        st.sampled_from("ab"),
        st.integers(0, 1),
        st.integers(0, 3),  # time offset from the batch's lower bound
        st.integers(-2, 2),
    ),
    max_size=6,
)


def accumulate(model: Counter, low: int | None, high: int) -> Counter:
    """Sum of the model's updates with low < time <= high, per (k, v)."""
    totals: Counter = Counter()
    for (k, v, time), diff in model.items():
        if (low is None or low < time) and time <= high:
            totals[(k, v)] += diff
    return totals


class ShardMachine(RuleBasedStateMachine):
    spark: SparkSession  # set by the test: the session-wide Spark

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="shard-model-")
        self.shard = Shard.open(self.spark, f"{self.folder}/shard", KV)
        self.model: Counter = Counter()  # (k, v, time) -> diff
        self.upper = 0
        self.since = 0

    def teardown(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def batch(self, rows: list[tuple[str, int, int, int]], width: int) -> DataFrame:
        """Rows with time offsets folded into [upper, upper + width)."""
        placed = [(k, v, self.upper + offset % width, d) for k, v, offset, d in rows]
        return self.spark.createDataFrame(placed, UPDATE_DDL)

    def record(self, rows: list[tuple[str, int, int, int]], width: int) -> None:
        for k, v, offset, diff in rows:
            self.model[(k, v, self.upper + offset % width)] += diff
        self.upper += width

    @rule(rows=offset_updates, width=st.integers(1, 3))
    def compare_and_append(self, rows, width):
        new_upper = TimeFrontier.at(self.upper + width)
        result = self.shard.compare_and_append(
            self.batch(rows, width), TimeFrontier.at(self.upper), new_upper
        )
        assert result is None
        self.record(rows, width)

    @rule(distance=st.sampled_from([-2, -1, 1, 2]))
    def compare_and_append_with_a_wrong_expected_upper(self, distance):
        expected = TimeFrontier.at(max(0, self.upper + distance))
        if expected.time == self.upper:
            return
        result = self.shard.compare_and_append(
            self.spark.createDataFrame([], UPDATE_DDL), expected, TimeFrontier.at(10**6)
        )
        assert result == UpperMismatch(expected, TimeFrontier.at(self.upper))

    @rule(rows=offset_updates, width=st.integers(1, 3))
    def append_twice_as_replicated_writers_do(self, rows, width):
        batch = self.batch(rows, width)
        lower, upper = TimeFrontier.at(self.upper), TimeFrontier.at(self.upper + width)
        assert self.shard.append(batch, lower, upper) is not None
        version = self.shard.version
        assert self.shard.append(batch, lower, upper) is None
        assert self.shard.version == version
        self.record(rows, width)

    @rule(step=st.integers(1, 3))
    def downgrade_since(self, step):
        self.since = min(self.since + step, self.upper)
        self.shard.downgrade_since(TimeFrontier.at(self.since))

    @rule()
    def compact(self):
        self.shard.compact()
        if self.since < self.upper:  # since is where forwarded updates must all reappear
            self.check_snapshot(self.since)

    @rule()
    def gc(self):
        self.shard.gc(retention_hours=0)

    @precondition(lambda self: self.since < self.upper)
    @rule(data=st.data())
    def snapshot_matches_the_model(self, data):
        self.check_snapshot(data.draw(st.integers(self.since, self.upper - 1), label="as_of"))

    def check_snapshot(self, as_of: int) -> None:
        expected = sorted(
            (k, v, as_of, d) for (k, v), d in accumulate(self.model, None, as_of).items() if d
        )
        actual = sorted(tuple(r) for r in self.shard.snapshot(as_of).collect())
        assert actual == expected, f"snapshot at {as_of}"

    @precondition(lambda self: self.since < self.upper)
    @rule(data=st.data())
    def listen_matches_the_model(self, data):
        as_of = data.draw(st.integers(self.since, self.upper - 1), label="as_of")
        until = data.draw(st.integers(as_of, self.upper - 1), label="until")
        expected = sorted(
            (k, v, t, d) for (k, v, t), d in self.model.items() if d and as_of < t <= until
        )
        actual = sorted(tuple(r) for r in self.shard.listen(as_of, until).collect())
        assert actual == expected

    @invariant()
    def frontiers_match_the_model(self):
        assert self.shard.upper == TimeFrontier.at(self.upper)
        assert self.shard.since == TimeFrontier.at(self.since)


def test_shard_agrees_with_the_model(spark):
    ShardMachine.spark = spark
    run_state_machine_as_test(
        ShardMachine,
        settings=settings(
            max_examples=8,
            stateful_step_count=15,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
