"""reclock's tables as delta-spark sees them: time travel, history, OPTIMIZE/VACUUM interop.

Users query the outputs with Delta's own Spark connector. Every shard version must
read, through it, as exactly the collection reclock itself reports at the IntoTime that
version completes; after a user's OPTIMIZE and VACUUM reclock must carry on exactly; a
table feature reclock cannot honour must stop it before it writes anything.
"""

from __future__ import annotations

import functools
import shutil
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

import pytest
import yaml
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdc_core.config import Config, load_config
from cdc_core.frontier import TimeFrontier
from cdc_core.shard import Shard
from cdc_core.shard.delta_io import UnsupportedTableFeature
from cdc_core.shard.handle import UPPER
from cdc_core.source import SourcePipeline
from cdc_core.source.state import STATE_AS_OF, refresh_state
from cdc_core.spark import planned_as
from pipelines.cli import main
from pipelines.run import materialize
from pipelines.sample import write_sample
from tests.lake_rows import SampleLake, table_rows

SHARDS = ("remap", "reclocked", "changes", "errors")
K = TypeVar("K")


def multiset(df: DataFrame) -> Counter:
    return Counter(tuple(row.values()) for row in df.toArrow().to_pylist())


def consolidated_at(
    reads: Mapping[K, tuple[DataFrame, int]], columns: list[str]
) -> dict[K, Counter]:
    """Plain Spark over delta-spark reads: each read's collection at its time (rows with
    diffs), by the read's key. One query for them all: a query per read would cost its
    own Spark jobs, several seconds per table, while each read still resolves its own
    version (its own Delta snapshot)."""
    keys = list(reads)
    tagged = [
        df.where(F.col("time") <= as_of).select(F.lit(index).alias("read"), *columns, "diff")
        for index, (df, as_of) in enumerate(reads.values())
    ]
    totals = functools.reduce(DataFrame.unionByName, tagged).groupBy("read", *columns)
    rows = totals.agg(F.sum("diff").alias("d")).where(F.col("d") != 0)
    collections: dict[K, Counter] = {key: Counter() for key in keys}
    for row in rows.toArrow().to_pylist():
        collections[keys[row.pop("read")]][tuple(row.values())] += 1
    return collections


def delta_read(spark: SparkSession, path: str, **options: object) -> DataFrame:
    """A delta-spark read of ``path`` (a reader keeps its options: one reader per read)."""
    return spark.read.format("delta").options(**options).load(path)


def commit_times(spark: SparkSession, path: str) -> dict[int, str]:
    """Version -> commit time as DESCRIBE HISTORY shows it (what a user time-travels by)."""
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select(
        "version", F.date_format("timestamp", "yyyy-MM-dd HH:mm:ss.SSS").alias("at")
    )
    return {row["version"]: row["at"] for row in history.collect()}


@pytest.fixture(scope="module")
def lake(sample_lake: SampleLake) -> Config:
    """The shared sample lake: materialized in two runs, so every table has an older version."""
    return sample_lake.config


def test_every_shard_version_reads_as_reclocks_snapshot(lake: Config, spark: SparkSession) -> None:
    for source in (lake.source("users"), lake.source("orders")):
        pipeline = SourcePipeline.from_config(spark, lake, source)
        shards = {"remap": pipeline.remap, "reclocked": pipeline.reclocked,
                  "changes": pipeline.changes, "errors": pipeline.errors}
        for name, shard in shards.items():
            columns = shard.data_schema.names
            history = commit_times(spark, shard.path)
            uppers = {v: DeltaTable(shard.path, version=v).transaction_version(UPPER) or 0
                      for v in sorted(history)}  # fmt: skip
            data_versions = [v for v, upper in uppers.items() if upper > 0]
            assert len(data_versions) >= 2, f"{source.name}/{name} has an older version"
            # reclock's own snapshot per upper: the versions a run's lease commits add
            # between its appends share their upper, and so their expected collection.
            snapshots = {upper: multiset(shard.snapshot(upper - 1).drop("time"))
                         for upper in {uppers[v] for v in data_versions}}  # fmt: skip
            reads: dict[tuple[str, int], tuple[DataFrame, int]] = {}
            for version in data_versions:
                as_of = uppers[version] - 1
                reads["version", version] = (
                    delta_read(spark, shard.path, versionAsOf=version), as_of
                )
                reads["commit time", version] = (
                    delta_read(spark, shard.path, timestampAsOf=history[version]), as_of
                )
            reads["latest", -1] = (delta_read(spark, shard.path), shard.upper.time - 1)
            with planned_as(spark, True, {}):  # small tables: planned as a small run's
                found = consolidated_at(reads, columns)
            for version in data_versions:
                expected = snapshots[uppers[version]]
                assert found["version", version] == expected, (
                    f"{source.name}/{name} at version {version}"
                )
                assert found["commit time", version] == expected, (
                    f"{source.name}/{name} at commit time {history[version]}"
                )
            assert found["latest", -1] == multiset(
                shard.snapshot(shard.upper.time - 1).drop("time")
            )


def test_every_state_version_reads_as_the_snapshot_at_its_time(
    lake: Config, spark: SparkSession
) -> None:
    for source in lake.sources:
        pipeline = SourcePipeline.from_config(spark, lake, source)
        path = str(lake.lake / source.name / "state")
        versions = [v for v in range(DeltaTable(path).version() + 1)
                    if DeltaTable(path, version=v).transaction_version(STATE_AS_OF)]
        assert len(versions) >= 2, source.name
        for version in versions:
            as_of = DeltaTable(path, version=version).transaction_version(STATE_AS_OF)
            read = spark.read.format("delta").option("versionAsOf", version).load(path)
            expected = pipeline.reader.snapshot_at(as_of)
            assert multiset(read) == multiset(expected), (source.name, version)


def test_describe_history_names_reclocks_commits(lake: Config, spark: SparkSession) -> None:
    def described(path: Path) -> list[str]:
        history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`")
        return [row["userMetadata"] or "" for row in history.select("userMetadata").collect()]

    changes = described(lake.lake / "users" / "changes")
    assert sum(text.startswith("reclock append: upper [") for text in changes) == 2
    assert any(text.startswith("reclock create") for text in changes)
    state = described(lake.lake / "users" / "state")
    assert sum(text.startswith("reclock publish state: as of time") for text in state) == 2


def users_only(workdir: Path) -> Config:
    """The bundled sample with only its ``users`` source: the one whose tables the user
    optimizes and vacuums below; the other sources would only rerun untouched tables."""
    config_file = write_sample(workdir)
    settings = yaml.safe_load(config_file.read_text())
    settings["sources"] = [s for s in settings["sources"] if s["name"] == "users"]
    del settings["transactions"]  # its sources are not configured here
    config_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    return load_config(config_file)


def test_reclock_carries_on_exactly_after_optimize_and_vacuum(
    lake: Config, tmp_path: Path, spark: SparkSession
) -> None:
    config = users_only(tmp_path)
    middle = config.start_ms + 3 * config.window_ms
    assert materialize(config, middle, exports=False)
    tables = [config.lake / "users" / table for table in (*SHARDS, "state")]
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        for table in tables:
            spark.sql(f"OPTIMIZE delta.`{table}`")
            spark.sql(f"VACUUM delta.`{table}` RETAIN 0 HOURS")
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    optimized = {t: DeltaTable(str(t)).version() for t in tables}
    assert materialize(config, middle, exports=False)  # re-run: checks pass, nothing new
    assert {t: DeltaTable(str(t)).version() for t in tables} == optimized
    assert materialize(config, exports=False)
    assert table_rows(config, "users", "state") == table_rows(lake, "users", "state")
    as_of = middle + config.window_ms
    users = SourcePipeline.from_config(spark, config, config.source("users"))
    clean = SourcePipeline.from_config(spark, lake, lake.source("users"))
    assert multiset(users.reader.snapshot_at(as_of)) == multiset(clean.reader.snapshot_at(as_of))


def _one_batch_shard(spark: SparkSession, path: Path) -> Shard:
    schema = StructType([StructField("k", LongType()), StructField("v", StringType())])
    shard = Shard.open(spark, str(path), schema)
    rows = spark.createDataFrame([(1, "a", 0, 1)], "k long, v string, time long, diff long")
    assert shard.compare_and_append(rows, TimeFrontier.at(0), TimeFrontier.at(1)) is None
    return shard


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("'delta.enableDeletionVectors' = true", "deletionVectors"),
        ("'delta.columnMapping.mode' = 'name'", "columnMapping"),
        ("'delta.enableChangeDataFeed' = true", "delta.enableChangeDataFeed=true"),
    ],
)
def test_a_feature_reclock_cannot_honour_is_refused_before_writing(
    spark: SparkSession, tmp_path: Path, setting: str, named: str
) -> None:
    shard = _one_batch_shard(spark, tmp_path / "shard")
    spark.sql(f"ALTER TABLE delta.`{shard.path}` SET TBLPROPERTIES ({setting})")
    version = DeltaTable(shard.path).version()
    more = spark.createDataFrame([(2, "b", 1, 1)], "k long, v string, time long, diff long")
    with pytest.raises(UnsupportedTableFeature, match=named):
        shard.compare_and_append(more, TimeFrontier.at(1), TimeFrontier.at(2))
    with pytest.raises(UnsupportedTableFeature, match=named):
        Shard.open(spark, shard.path, shard.data_schema)
    assert DeltaTable(shard.path).version() == version

    changes = _one_batch_shard(spark, tmp_path / "changes")
    state = tmp_path / "state"
    assert refresh_state(changes, str(state), changes.data_schema)
    spark.sql(f"ALTER TABLE delta.`{state}` SET TBLPROPERTIES ({setting})")
    version = DeltaTable(str(state)).version()
    changes.compare_and_append(more, TimeFrontier.at(1), TimeFrontier.at(2))
    with pytest.raises(UnsupportedTableFeature, match=named):
        refresh_state(changes, str(state), changes.data_schema)
    assert DeltaTable(str(state)).version() == version


def test_snapshot_command_prints_writes_and_refuses_outside_since_upper(
    lake: Config, tmp_path: Path, capsys: pytest.CaptureFixture[str], spark: SparkSession
) -> None:
    config_file = str(lake.lake.parent / "reclock.yaml")
    as_of = "2026-01-01T00:05:00Z"
    assert main(["snapshot", "--config", config_file, "--source", "users", "--as-of", as_of,
                 "--limit", "3"]) == 0
    printed = capsys.readouterr().out
    pipeline = SourcePipeline.from_config(spark, lake, lake.source("users"))
    expected = multiset(pipeline.reader.snapshot_at(1767225900000))
    assert f"users as of {as_of}: {sum(expected.values())} row(s)" in printed
    assert printed.count("  id=") == 3

    out = tmp_path / "users-at-5"
    assert main(["snapshot", "--config", config_file, "--source", "users", "--as-of", as_of,
                 "--out", str(out), "--format", "delta"]) == 0
    assert multiset(spark.read.format("delta").load(str(out))) == expected

    late = "2031-01-01T00:00:00Z"
    assert main(["snapshot", "--config", config_file, "--source", "users", "--as-of", late]) == 2
    error = capsys.readouterr().err
    assert "no exact snapshot at 2031-01-01T00:00:00Z" in error
    assert "(since)" in error and "(upper)" in error
    shutil.rmtree(out)
