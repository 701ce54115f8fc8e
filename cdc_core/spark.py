"""The one Spark session of a process, configured so its Parquet matches Delta."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

# Settings every reclock session needs: Delta expects microsecond timestamps (not
# INT96), all times are UTC, and Spark's _SUCCESS markers have no place in a table.
REQUIRED_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.hadoop.parquet.summary.metadata.level": "NONE",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}

# Defaults suited to a laptop or a CI box; any of them can be overridden.
DEFAULT_CONF: dict[str, str] = {
    "spark.master": "local[2]",
    "spark.app.name": "reclock",
    "spark.sql.shuffle.partitions": "8",
    "spark.default.parallelism": "8",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "4g",
    "spark.sql.adaptive.enabled": "true",
    # Lets adaptive execution coalesce the partitions of cached frames too: a run caches
    # its parsed dumps and envelope inputs, and small inputs then run one task, not many.
    "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true",
    "spark.sql.files.maxPartitionBytes": "64m",
}


def session_conf(
    master: str | None = None, conf: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The full Spark configuration: defaults, then the caller's, then what reclock requires."""
    merged = {**DEFAULT_CONF, **(conf or {})}
    if master:
        merged["spark.master"] = master
    return {**merged, **REQUIRED_CONF}


def get_spark(master: str | None = None, conf: Mapping[str, str] | None = None) -> SparkSession:
    """Return the process's Spark session, creating it on first use.

    Reuses an active session so that a process never pays the JVM start-up twice.
    """
    # Python workers must run the interpreter (and virtualenv) of the driver.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    for key, value in session_conf(master, conf).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def local_frame(spark: SparkSession, data: Any, schema: Any = None) -> DataFrame:
    """Tiny driver-side data (metadata rows, or none at all) as a single partition: split
    over the default parallelism, every stage reading it would run a task per slice."""
    return spark.createDataFrame(data, schema).coalesce(1)
