"""Appending to many shards with one Spark job (``cdc_core.shard.together``), on real
Spark and real Delta tables: what each shard commits equals the rows written by hand and
what an append of its rows alone commits, a shard already holding its batch writes
nothing, and a gap is refused before anything is committed."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pa_json
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from cdc_core.frontier import TimeFrontier
from cdc_core.shard import Shard, ShardUsageError
from cdc_core.shard.together import Batch, Decode, append_together

SCHEMAS = {
    "kv": StructType([StructField("k", StringType()), StructField("v", LongType())]),
    "people": StructType([StructField("id", IntegerType()), StructField("name", StringType()),
                          StructField("born", TimestampType())]),  # fmt: skip
    "empty": StructType([StructField("k", StringType())]),
}
# The generic rows: target, payload (JSON), time, diff; "empty" gets none.
ROWS = [
    ("kv", '{"k": "a", "v": 1}', 0, 1),
    ("kv", '{"k": "b", "v": 2}', 0, 1),
    ("kv", '{"k": "a", "v": 1}', 1, -1),
    ("people", '{"id": 7, "name": "Ada", "born": "1815-12-10T00:00:00Z"}', 0, 1),
    ("people", '{"id": 8, "name": null, "born": null}', 1, 1),
    ("nobody", '{"k": "lost"}', 0, 1),  # names no shard: dropped
]
GENERIC = ("target", "payload", "time", "diff")
BORN = datetime(1815, 12, 10, tzinfo=UTC)
# What each shard holds after the batch [0, 2), by hand: data columns, time, diff.
EXPECTED = {
    "kv": [("a", 1, 0, 1), ("a", 1, 1, -1), ("b", 2, 0, 1)],
    "people": [(7, "Ada", BORN, 0, 1), (8, None, None, 1, 1)],
    "empty": [],
}


def json_decoder() -> Decode:
    """Each target's payloads read with its schema by pyarrow, time and diff kept."""

    def decode(key: str, rows: pa.Table) -> pa.Table:
        layout = to_arrow_schema(SCHEMAS[key], timezone="UTC")
        text = "\n".join(rows.column("payload").to_pylist()).encode()
        options = pa_json.ParseOptions(explicit_schema=layout)
        typed = pa_json.read_json(io.BytesIO(text), parse_options=options)
        return typed.append_column("time", rows.column("time")).append_column(
            "diff", rows.column("diff"))

    return decode


def shards(spark: SparkSession, root: Path) -> dict[str, Shard]:
    return {key: Shard.open(spark, str(root / key), schema) for key, schema in SCHEMAS.items()}


def held(shard: Shard) -> list[tuple]:
    """The shard's rows as delta-rs (not Spark, not the shard) reads them."""
    table = DeltaTable(shard.path).to_pyarrow_table()
    return sorted((tuple(row.values()) for row in table.to_pylist()),
                  key=lambda row: tuple(str(v) for v in row))  # fmt: skip


def expected(key: str) -> list[tuple]:
    return sorted(EXPECTED[key], key=lambda row: tuple(str(v) for v in row))


def version(shard: Shard) -> int:
    return DeltaTable(shard.path).version()


def test_one_job_appends_to_every_shard_what_each_append_alone_commits(
    spark: SparkSession, tmp_path: Path
) -> None:
    rows = spark.createDataFrame(ROWS, "target string, payload string, time long, diff long")
    together = shards(spark, tmp_path / "together")
    # A group no other test names: the tracker keeps a group's jobs for the session.
    spark.sparkContext.setJobGroup("appends together", "one job for every shard")
    counts = append_together(rows, {k: Batch(s, 0, 2) for k, s in together.items()},
                             json_decoder())  # fmt: skip
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup("appends together")
    spark.sparkContext.setJobGroup("other", "")

    assert len(jobs) == 1  # one job, whatever the number of shards
    assert counts == {"kv": {0: 2, 1: 1}, "people": {0: 1, 1: 1}, "empty": {}}
    alone = shards(spark, tmp_path / "alone")
    for key, shard in alone.items():
        mine = [row for row in ROWS if row[0] == key]
        if not mine:
            shard.append(shard.no_updates(), 0, 2)
            continue
        generic = pa.Table.from_pylist([dict(zip(GENERIC, row, strict=True)) for row in mine])
        layout = StructType([*SCHEMAS[key].fields, StructField("time", LongType()),
                             StructField("diff", LongType())])  # fmt: skip
        typed = spark.createDataFrame(json_decoder()(key, generic), layout)
        shard.append(typed, 0, 2, consolidated=True)
    for key in SCHEMAS:
        assert held(together[key]) == held(alone[key]) == expected(key), key
        assert together[key].refresh().upper == alone[key].refresh().upper == TimeFrontier.at(2)
        assert version(together[key]) == version(alone[key]) == 1  # created, one commit


def test_a_shard_holding_its_batch_writes_nothing_and_a_gap_is_refused_first(
    spark: SparkSession, tmp_path: Path
) -> None:
    rows = spark.createDataFrame(ROWS, "target string, payload string, time long, diff long")
    opened = shards(spark, tmp_path)
    # kv holds [0, 2) already; people holds [0, 1): only its rows at time 1 are left.
    append_together(rows, {"kv": Batch(opened["kv"], 0, 2)}, json_decoder())
    first = rows.where("time < 1")
    append_together(first, {"people": Batch(opened["people"], 0, 1)}, json_decoder())
    assert held(opened["people"]) == [(7, "Ada", BORN, 0, 1)]
    versions = {key: version(shard) for key, shard in opened.items()}

    # A batch that starts past a shard's upper: refused, and no shard commits anything.
    gap = {**{k: Batch(s, 0, 2) for k, s in opened.items()}, "empty": Batch(opened["empty"], 1, 2)}
    with pytest.raises(ShardUsageError, match="gap after the upper"):
        append_together(rows, gap, json_decoder())
    assert {key: version(shard) for key, shard in opened.items()} == versions

    counts = append_together(rows, {k: Batch(s, 0, 2) for k, s in opened.items()},
                             json_decoder())  # fmt: skip
    assert counts == {"kv": None, "people": {1: 1}, "empty": {}}
    assert version(opened["kv"]) == versions["kv"]  # held already: not one commit
    for key in SCHEMAS:
        assert held(opened[key]) == expected(key), key
        assert opened[key].refresh().upper == TimeFrontier.at(2)
