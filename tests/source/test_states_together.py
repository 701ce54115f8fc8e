"""Many ``state`` tables published by one job (``publish_together``): each holds what
``refresh_state`` publishes from the same ``changes``, row for row and value for value
(``-0.0`` and NaN as Spark groups them), at the same time, through several publications;
a table another writer touched is left to ``refresh_state``."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from cdc_core.shard import Shard
from cdc_core.shard.log import STATE_AS_OF, TableDescription
from cdc_core.source.state import ROWS_KEY, refresh_state
from cdc_core.source.states_together import StatePublish, publish_together

DATA = StructType([StructField("id", LongType()), StructField("x", DoubleType()),
                   StructField("s", StringType())])  # fmt: skip
DESCRIBED = TableDescription("a state", {})
TABLES = 3

update = st.tuples(
    st.integers(0, 2),
    st.sampled_from([0.0, -0.0, math.nan, 1.5, None]),
    st.sampled_from(["a", None]),
    st.sampled_from([-1, 1, 2]),
)
# Per publication, per table: the updates of its next window (None: no new window).
publications = st.lists(
    st.lists(st.none() | st.lists(update, max_size=6), min_size=TABLES, max_size=TABLES),
    min_size=1,
    max_size=3,
)


def rows(path: Path) -> Counter:
    """The table's rows, each value by its ``repr`` (so ``-0.0`` differs from ``0.0``)."""
    table = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return Counter(tuple(repr(row[name]) for name in DATA.names) for row in table)


def newest(path: Path) -> tuple[int | None, object]:
    """The table's published time and the rows its newest commit says it holds."""
    table = DeltaTable(str(path))
    return table.transaction_version(STATE_AS_OF), table.history(1)[0].get(ROWS_KEY)


def append(spark: SparkSession, shard: Shard, updates: list[tuple], time: int) -> None:
    """The updates at ``time``, one row per (data, time) as an envelope writes them."""
    summed: dict[tuple, int] = {}
    for *data, diff in updates:
        key = (data[0], repr(data[1]), data[2])
        summed[key] = summed.get(key, 0) + diff
    values = {(d[0], repr(d[1]), d[2]): d[1] for *d, _ in updates}
    kept = [(k[0], values[k], k[2], time, diff) for k, diff in summed.items() if diff]
    frame = spark.createDataFrame(kept, "id long, x double, s string, time long, diff long")
    assert shard.append(frame, time, time + 1, consolidated=True) is not None


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(publications)
def test_states_published_together_equal_each_published_alone(
    spark: SparkSession, tmp_path_factory, publications: list[list[list[tuple] | None]]
) -> None:
    lake = tmp_path_factory.mktemp("states")
    shards = [Shard.open(spark, str(lake / f"t{i}" / "changes"), DATA) for i in range(TABLES)]
    times = [0] * TABLES
    for publication in publications:
        for i, updates in enumerate(publication):
            if updates is not None:
                append(spark, shards[i], updates, times[i])
                times[i] += 1
        publishes = {
            f"t{i}": StatePublish(shards[i], str(lake / f"t{i}" / "joint"), DATA, DESCRIBED)
            for i in range(TABLES)
        }
        current = publish_together(spark, publishes)
        assert current == {f"t{i}" for i in range(TABLES) if times[i] > 0}
        for i, shard in enumerate(shards):
            if times[i] == 0:
                continue
            refresh_state(shard, str(lake / f"t{i}" / "alone"), DATA, DESCRIBED)
            joint, alone = lake / f"t{i}" / "joint", lake / f"t{i}" / "alone"
            assert rows(joint) == rows(alone)
            assert newest(joint) == newest(alone) == (times[i] - 1, newest(alone)[1])
            # Published here: its source's own refresh finds nothing to write.
            assert not refresh_state(shard, str(joint), DATA, DESCRIBED)


def test_a_state_another_writer_touched_is_left_to_refresh_state(
    spark: SparkSession, tmp_path: Path
) -> None:
    changes = Shard.open(spark, str(tmp_path / "changes"), DATA)
    state = tmp_path / "state"
    append(spark, changes, [(1, 1.0, "a", 1), (2, -0.0, "b", 1)], 0)
    assert publish_together(spark, {"t": StatePublish(changes, str(state), DATA, DESCRIBED)})
    assert rows(state) == Counter({("1", "1.0", "'a'"): 1, ("2", "0.0", "'b'"): 1})
    write_deltalake(str(state), pa.table({"id": [1], "x": [1.0], "s": ["a"]}), mode="overwrite")
    append(spark, changes, [(3, 3.0, "c", 1)], 1)
    publish = StatePublish(changes, str(state), DATA, DESCRIBED)
    assert publish_together(spark, {"t": publish}) == set()
    assert rows(state) == Counter({("1", "1.0", "'a'"): 1})  # untouched here
    assert refresh_state(changes, str(state), DATA, DESCRIBED)
    assert rows(state) == Counter(
        {("1", "1.0", "'a'"): 1, ("2", "0.0", "'b'"): 1, ("3", "3.0", "'c'"): 1}
    )
