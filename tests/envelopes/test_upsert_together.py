"""Property: the UPSERT envelope applied to three sources' records together gives each
source what ``apply_upsert`` gives its records alone: the same changes and errors, in a
first batch and in the next one, which replaces the first one's contents."""

from __future__ import annotations

import json
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from cdc_core.envelopes import EnvelopeBatch, apply_upsert
from cdc_core.envelopes.upsert_together import (
    SOURCE,
    UpsertSource,
    UpsertsTogether,
    apply_upsert_together,
    joint_rows,
    own_rows,
)
from cdc_core.schemas import ERROR
from tests.spark_examples import SPARK_EXAMPLES

ID = StructType([StructField("id", IntegerType())])
NAMED = StructType([StructField("name", StringType()), StructField("n", LongType())])
PAIR = StructType([StructField("k", StringType()), StructField("j", IntegerType())])
FLAGGED = StructType([
    StructField("flag", BooleanType(), False), StructField("at", TimestampType()),
    StructField("amount", DoubleType()),
])  # fmt: skip
# Two sources of one shape (their keys meet in the same slots) and one of another.
SOURCES = {
    0: UpsertSource("orders", ID, NAMED),
    1: UpsertSource("users", PAIR, FLAGGED),
    2: UpsertSource("items", ID, NAMED),
}
KEYS = {
    0: ['{"id": 1}', "2", '{"id": null}', None, '{"id": "x"}', '{"schema": {}, "payload": 1}'],
    1: ['{"k": "a", "j": 1}', '{"k": "a", "j": null}', '{"k": "b"}', None, "[1]"],
}
VALUES = {
    0: ['{"name": "a", "n": 1}', '{"name": "b", "n": 1.0}', '{"n": 7}', None, "nope",
        '{"schema": {}, "payload": {"name": "w", "n": 2}}'],
    1: ['{"flag": true, "at": "2024-01-01T00:00:00Z", "amount": -0.0}', '{"flag": false}',
        '{"at": 5}', None, '{"flag": true, "amount": "1"}', '{"flag": true, "flag": 1}'],
}  # fmt: skip

records = st.lists(
    st.tuples(st.sampled_from((0, 1, 2)), st.integers(0, 1), st.integers(0, 5),
              st.integers(0, 5), st.integers(1, 3)),
    max_size=30,
)  # fmt: skip


def _frame(spark: SparkSession, drawn: list[tuple[int, int, int, int, int]]) -> DataFrame:
    """Records ``(source, partition, key, value, time)`` drawn as indexes into the source's
    texts, each at its own offset."""
    rows = []
    for offset, (source, partition, key, value, time) in enumerate(drawn):
        texts = 0 if source != 1 else 1
        rows.append((source, partition, offset, KEYS[texts][key % len(KEYS[texts])],
                     VALUES[texts][value % len(VALUES[texts])], time))  # fmt: skip
    return spark.createDataFrame(
        rows, "_source int, partition int, offset long, key string, payload string, time long"
    )


def _counted(frame: DataFrame) -> Counter[str]:
    """Rows as a multiset of their JSON (doubles' signs kept)."""
    rows = frame.collect()
    return Counter(json.dumps(row.asDict(), default=repr, sort_keys=True) for row in rows)


@settings(SPARK_EXAMPLES, max_examples=3)
@given(first=records, second=records)
def test_upserts_applied_together_equal_each_sources_own(
    spark: SparkSession, first: list, second: list
) -> None:
    together = UpsertsTogether.of(SOURCES)
    prior: dict[int, tuple[DataFrame | None, DataFrame | None]]
    prior = dict.fromkeys(SOURCES, (None, None))
    for drawn in (first, second):
        batch = _frame(spark, [(s, p, k, v, t + (10 if drawn is second else 0))
                               for s, p, k, v, t in drawn])  # fmt: skip
        joint_prior = [
            (joint_rows(changes, together, s), errors.withColumn(SOURCE, F.lit(s)))
            for s, (changes, errors) in prior.items()
            if changes is not None and errors is not None
        ]
        prior_changes = prior_errors = None
        for changes, errors in joint_prior:
            prior_changes = changes if prior_changes is None else prior_changes.unionByName(changes)
            prior_errors = errors if prior_errors is None else prior_errors.unionByName(errors)
        joint = apply_upsert_together(batch, together, prior_changes, prior_errors)
        for s, source in SOURCES.items():
            changes, errors = prior[s]
            alone = apply_upsert(EnvelopeBatch(
                batch.where(F.col(SOURCE) == s).drop(SOURCE), topic=source.topic,
                key_schema=source.key_schema, value_schema=source.value_schema,
                prior_changes=changes, prior_errors=errors,
            ))  # fmt: skip
            mine = own_rows(joint.changes, together, s)
            assert _counted(mine) == _counted(alone.changes), s
            joint_errors = joint.errors.where(F.col(SOURCE) == s).drop(SOURCE)
            assert _counted(joint_errors.select(*ERROR.names, "time", "diff")) == _counted(
                alone.errors.select(*ERROR.names, "time", "diff")
            ), s
            history = alone.changes if changes is None else changes.unionByName(alone.changes)
            failed = alone.errors if errors is None else errors.unionByName(alone.errors)
            prior[s] = (history.localCheckpoint(), failed.localCheckpoint())
