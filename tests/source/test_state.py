"""The ``state`` table: the snapshot of ``changes`` at its newest complete time, published
incrementally (published rows plus the changes since), and rebuilt when it was tampered with."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdc_core.frontier import TimeFrontier
from cdc_core.shard import Shard
from cdc_core.source.state import STATE_AS_OF, refresh_state

DATA = StructType([StructField("id", LongType()), StructField("name", StringType())])


def published(path: Path) -> Counter:
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return Counter((row["id"], row["name"]) for row in rows)


def append(spark: SparkSession, shard: Shard, rows: list[tuple], lower: int, upper: int) -> None:
    updates = spark.createDataFrame(rows, "id long, name string, time long, diff long")
    outcome = shard.compare_and_append(updates, TimeFrontier.at(lower), TimeFrontier.at(upper))
    assert outcome is None


def test_state_follows_changes_and_heals_after_tampering(spark: SparkSession, tmp_path: Path):
    changes = Shard.open(spark, str(tmp_path / "changes"), DATA)
    state = tmp_path / "state"
    append(spark, changes, [(1, "a", 1, 1), (2, "b", 1, 1), (3, "c", 1, 2)], 0, 2)
    assert refresh_state(changes, str(state), DATA)
    assert published(state) == Counter({(1, "a"): 1, (2, "b"): 1, (3, "c"): 2})
    assert not refresh_state(changes, str(state), DATA)  # nothing new: no new version

    # Published rows plus the changes since: an update, a delete, one copy less, an insert.
    append(spark, changes, [(1, "a", 3, -1), (1, "A", 3, 1), (2, "b", 4, -1), (3, "c", 4, -1),
                            (4, "d", 4, 1)], 2, 5)
    assert refresh_state(changes, str(state), DATA)
    assert published(state) == Counter({(1, "A"): 1, (3, "c"): 1, (4, "d"): 1})
    assert DeltaTable(str(state)).transaction_version(STATE_AS_OF) == 4

    # Someone drops a row behind reclock's back: the next publication rebuilds exactly.
    kept = pa.table({"id": [1, 4], "name": ["A", "d"]})
    write_deltalake(str(state), kept, mode="overwrite")
    assert published(state) == Counter({(1, "A"): 1, (4, "d"): 1})
    append(spark, changes, [(5, "e", 6, 1)], 5, 7)
    assert refresh_state(changes, str(state), DATA)
    assert published(state) == Counter({(1, "A"): 1, (3, "c"): 1, (4, "d"): 1, (5, "e"): 1})
