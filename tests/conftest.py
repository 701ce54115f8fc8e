"""Shared fixtures: one real Spark session for the whole test run."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from cdc_core.spark import get_spark


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    return get_spark("local[2]", {"spark.sql.shuffle.partitions": "4"})
