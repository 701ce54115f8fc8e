"""Shared fixtures: one real Spark session for the whole test run."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from cdc_core.spark import get_spark


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    return get_spark("local[2]", {"spark.sql.shuffle.partitions": "4"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The benchmark's smoke run goes last. Like the benchmark itself, which warms up
    before it times anything, it should meet a JVM whose just-in-time compiler has
    already seen Spark's hot paths; run first, it would mostly time that warm-up."""
    items.sort(key=lambda item: item.path.name == "test_bench.py")
