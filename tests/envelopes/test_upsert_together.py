"""Property: the UPSERT (and the DEBEZIUM UPSERT) envelope applied to three sources'
records together gives each source what ``apply_upsert`` (``apply_debezium_upsert``)
gives its records alone: the same changes and errors, in a first batch and in the next
one, which replaces the first one's contents."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable

from hypothesis import example, given, settings
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
from cdc_core.envelopes.debezium import apply_debezium_upsert
from cdc_core.envelopes.result import EnvelopeResult
from cdc_core.envelopes.upsert_together import (
    SOURCE,
    UpsertSource,
    UpsertsTogether,
    apply_debezium_upsert_together,
    apply_upsert_together,
    joint_rows,
    own_rows,
)
from cdc_core.schemas import ERROR
from cdc_core.vocabulary import Envelope
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


def _frame(
    spark: SparkSession, drawn: list[tuple[int, int, int, int, int]], keys: dict[int, list],
    values: dict[int, list],
) -> DataFrame:  # fmt: skip
    """Records ``(source, partition, key, value, time)`` drawn as indexes into the source's
    texts, each at its own offset."""
    rows = []
    for offset, (source, partition, key, value, time) in enumerate(drawn):
        texts = 0 if source != 1 else 1
        rows.append((source, partition, offset, keys[texts][key % len(keys[texts])],
                     values[texts][value % len(values[texts])], time))  # fmt: skip
    return spark.createDataFrame(
        rows, "_source int, partition int, offset long, key string, payload string, time long"
    )


def _counted(frame: DataFrame) -> Counter[str]:
    """Rows as a multiset of their JSON (doubles' signs kept)."""
    rows = frame.collect()
    return Counter(json.dumps(row.asDict(), default=repr, sort_keys=True) for row in rows)


# DEBEZIUM UPSERT: after images holding the key columns, one key column named oddly.
QUOTED = StructType([StructField('q"t', StringType()), StructField("j", IntegerType())])
DEBEZIUM_SOURCES = {
    0: UpsertSource("orders", ID, StructType([*ID.fields, *NAMED.fields]),
                    Envelope.DEBEZIUM_UPSERT),
    1: UpsertSource("users", QUOTED, StructType([*QUOTED.fields, *FLAGGED.fields]),
                    Envelope.DEBEZIUM_UPSERT),
    2: UpsertSource("items", ID, StructType([*ID.fields, *NAMED.fields]),
                    Envelope.DEBEZIUM_UPSERT),
}
DEBEZIUM_KEYS = {
    0: KEYS[0],
    1: ['{"q\\"t": "a", "j": 1}', '{"q\\"t": "a", "j": null}', '{"q\\"t": "b"}', None, "[1]"],
}
DEBEZIUM_VALUES = {
    0: ['{"op": "c", "after": {"id": 1, "name": "a", "n": 1}}',
        '{"op": "u", "before": null, "after": {"id": 2, "name": "b", "n": 1.0}}',
        '{"op": "d", "before": {"id": 1}, "after": null}', None, "nope",
        '{"op": "x", "after": {"id": 1}}', '{"after": {"id": 1}}',
        '{"op": "r", "after": {"id": "bad"}}', '{"op": "c", "after": {"id": null, "n": 3}}',
        '{"schema": {}, "payload": {"op": "c", "after": {"id": 1, "name": "w", "n": 2}}}'],
    1: ['{"op": "c", "after": {"q\\"t": "a", "j": 1, "flag": true, "amount": -0.0}}',
        '{"op": "c", "after": {"q\\"t": "a", "j": null, "flag": false}}',
        '{"op": "u", "after": {"q\\"t": "b", "flag": true, "at": 5}}', '{"op": "d"}', None,
        '{"op": "c", "after": {"q\\"t": "a", "j": 2, "flag": true, '
        '"at": "2024-01-01T00:00:00Z"}}',
        '{"op": "c", "after": {"j": 1, "flag": true}}'],
}  # fmt: skip


@settings(SPARK_EXAMPLES, max_examples=3)
@given(first=records, second=records)
def test_upserts_applied_together_equal_each_sources_own(
    spark: SparkSession, first: list, second: list
) -> None:
    texts = (KEYS, VALUES)
    _check(spark, SOURCES, texts, apply_upsert_together, apply_upsert, first, second)


@settings(SPARK_EXAMPLES, max_examples=2)
@given(first=records, second=records)
# Always: after images whose key differs from the record's (one with a field missing),
# a delete, a tombstone, then a second batch over the same keys.
@example(first=[(0, 0, 0, 1, 1), (1, 0, 0, 5, 1), (1, 1, 0, 6, 2), (2, 0, 0, 0, 1)],
         second=[(0, 0, 0, 2, 1), (1, 0, 0, 0, 1), (2, 0, 0, 3, 2)])  # fmt: skip
def test_debezium_upserts_applied_together_equal_each_sources_own(
    spark: SparkSession, first: list, second: list
) -> None:
    texts = (DEBEZIUM_KEYS, DEBEZIUM_VALUES)
    _check(spark, DEBEZIUM_SOURCES, texts, apply_debezium_upsert_together,
           apply_debezium_upsert, first, second)  # fmt: skip


def _check(
    spark: SparkSession,
    sources: dict[int, UpsertSource],
    texts: tuple[dict[int, list], dict[int, list]],
    apply_joint: Callable[..., EnvelopeResult],
    apply_alone: Callable[[EnvelopeBatch], EnvelopeResult],
    first: list,
    second: list,
) -> None:
    """Two batches of ``sources`` applied together and each alone: equal per source."""
    together = UpsertsTogether.of(sources)
    prior: dict[int, tuple[DataFrame | None, DataFrame | None]]
    prior = dict.fromkeys(sources, (None, None))
    for drawn in (first, second):
        batch = _frame(spark, [(s, p, k, v, t + (10 if drawn is second else 0))
                               for s, p, k, v, t in drawn], *texts)  # fmt: skip
        joint_prior = [
            (joint_rows(changes, together, s), errors.withColumn(SOURCE, F.lit(s)))
            for s, (changes, errors) in prior.items()
            if changes is not None and errors is not None
        ]
        prior_changes = prior_errors = None
        for changes, errors in joint_prior:
            prior_changes = changes if prior_changes is None else prior_changes.unionByName(changes)
            prior_errors = errors if prior_errors is None else prior_errors.unionByName(errors)
        joint = apply_joint(batch, together, prior_changes, prior_errors)
        for s, source in sources.items():
            changes, errors = prior[s]
            alone = apply_alone(EnvelopeBatch(
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
