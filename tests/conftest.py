"""Shared fixtures: one real Spark session for the whole test run, and the lakes that cost
a run each built once per session (``sample_lake``, ``bad_input_lake``) for every test
that only reads their tables."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.config import Config, load_config
from cdc_core.source import published_tables
from cdc_core.spark import get_spark
from pipelines.cli import materialize
from pipelines.sample import write_sample
from tests.lake_rows import SampleLake
from tests.source import test_bad_inputs as bad_inputs

SAMPLE_FIRST_RUN_WINDOWS = 3  # of the sample's eight: the first run's slice


# Delta's Spark connector rebuilds a table's state from its log in this many partitions
# for every version it reads that it has not cached (each time-travel read): 50 by
# default, tasks that cost seconds per read on the few commits of a test's table. Only the
# tests read through delta-spark (reclock reads its logs with deltalake), so what they
# read is the same; the time-travel tests of tests/shard/test_delta_spark.py run several
# times faster.
DELTA_SNAPSHOT_PARTITIONS = "1"


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    return get_spark(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "4",
            "spark.databricks.delta.snapshotPartitions": DELTA_SNAPSHOT_PARTITIONS,
        },
    )


@pytest.fixture(scope="session")
def sample_lake(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> SampleLake:
    """Materializing the whole sample costs minutes: built once per session, read by every
    test that needs a lake of it. Tests that write must copy it or build their own."""
    config = load_config(write_sample(tmp_path_factory.mktemp("sample-lake")))
    first_run_ms = config.start_ms + SAMPLE_FIRST_RUN_WINDOWS * config.window_ms
    assert materialize(config, first_run_ms, exports=False)
    tables = [config.lake / s.name / table for s in config.sources for table in published_tables(s)]
    first_run_versions = {path: DeltaTable(str(path)).version() for path in tables}
    assert materialize(config, exports=False)
    return SampleLake(config, first_run_ms, first_run_versions)


@pytest.fixture(scope="session")
def bad_input_lake(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> Config:
    """The corpus of bad inputs (tests/source/test_bad_inputs.py) through one run: read by
    its own tests and by the comparison of a run over Spark Connect with a run in process."""
    workdir = tmp_path_factory.mktemp("bad-inputs")
    bad_inputs.write_landing(workdir / "landing")
    config = bad_inputs.write_config(workdir)
    assert materialize(config, exports=False), "bad inputs never fail a run"
    return config


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The benchmark's smoke run goes last. Like the benchmark itself, which warms up
    before it times anything, it should meet a JVM whose just-in-time compiler has
    already seen Spark's hot paths; run first, it would mostly time that warm-up."""
    items.sort(key=lambda item: item.path.name == "test_bench.py")
