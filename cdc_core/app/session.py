"""The Spark session a deployment's commands run in, with the config's settings."""

from __future__ import annotations

from pyspark.sql import SparkSession

from cdc_core.config import Config
from cdc_core.spark import get_spark


def config_spark(config: Config) -> SparkSession:
    """The process's session with ``config``'s Spark settings; an object-store lake or
    landing zone adds the storage layer's s3a settings."""
    return get_spark(config.spark.master, config.spark.conf, (config.lake, config.landing))
