"""The one Spark session of a process, configured so its Parquet matches Delta."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from importlib.metadata import version
from pathlib import Path
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
    # Delta Lake's Spark connector: users (and reclock's own reads) query the tables as
    # Delta, with SQL (`delta.`path``, DESCRIBE HISTORY, OPTIMIZE, VACUUM) and time travel.
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

# Where `make` puts the connector's jars (pom.xml); RECLOCK_JARS points elsewhere.
JARS_FOLDER = Path(os.environ.get("RECLOCK_JARS", Path(sys.prefix) / "jars"))

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
    # Cached frames hold mostly distinct text (keys, payloads): the cache's column
    # encodings find nothing to compress there and cost CPU to try.
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    "spark.sql.files.maxPartitionBytes": "64m",
    # Reads name their files exactly (from a Delta log or the dump registry): listing
    # them is a stat per file, which the driver does at once; above the default threshold
    # (32 paths) Spark would run a listing job with a task per file for every read.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
}


def delta_jars_conf(folder: Path = JARS_FOLDER) -> dict[str, str]:
    """How the session gets Delta's jars: the ones setup fetched, shipped to executors with
    ``spark.jars``; else Spark resolves the connector matching the installed ``delta-spark``
    from Maven Central itself (``spark.jars.packages``, cached in ~/.ivy2)."""
    jars = sorted(folder.glob("*.jar"))
    if jars:
        return {"spark.jars": ",".join(str(jar) for jar in jars)}
    return {"spark.jars.packages": delta_package()}


def delta_package() -> str:
    """The Maven coordinates of Delta's connector for this pyspark and delta-spark: Delta
    publishes one artifact per Spark minor version."""
    spark_minor = ".".join(version("pyspark").split(".")[:2])
    return f"io.delta:delta-spark_{spark_minor}_2.13:{version('delta-spark')}"


def session_conf(
    master: str | None = None, conf: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The full Spark configuration: defaults, then the caller's, then what reclock requires."""
    merged = {**DEFAULT_CONF, **delta_jars_conf(), **(conf or {})}
    if master:
        merged["spark.master"] = master
    return {**merged, **REQUIRED_CONF}


class SparkConnectUnsupported(ValueError):
    """A Spark Connect address was configured; reclock needs a classic Spark driver."""


def refuse_spark_connect(master: str | None, conf: Mapping[str, str] | None) -> None:
    """Raise SparkConnectUnsupported for ``sc://`` masters and ``spark.remote``: the
    driver commits the files executors wrote by reading their Parquet footers from shared
    storage, and verifies gzip dumps with the RDD API; a Connect client has neither."""
    settings = {**(conf or {}), **({"spark.master": master} if master else {})}
    master = settings.get("spark.master", "")
    remote = settings.get("spark.remote") or (master if master.startswith("sc://") else None)
    if remote:
        raise SparkConnectUnsupported(
            f"Spark Connect ({remote}) is not supported: reclock's driver reads the footers "
            "of the Parquet files Spark writes to commit them to Delta, and uses the RDD "
            "API, neither of which a Connect client has. Set spark.master to the cluster "
            "itself (local[N], spark://host:port, yarn, k8s://...) with lake and landing on "
            "storage the driver shares"
        )


def get_spark(master: str | None = None, conf: Mapping[str, str] | None = None) -> SparkSession:
    """Return the process's Spark session, creating it on first use.

    Reuses an active session so that a process never pays the JVM start-up twice.
    """
    refuse_spark_connect(master, conf)
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
