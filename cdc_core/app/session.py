"""The Spark session a deployment's runs and commands use: starting it in process or
attaching it to a warm server.

Every front end (the command line, Dagster's Spark resource) starts its session here, so
a run gets reclock's settings, its storage layer's s3a settings and the same attach
checks whichever front end launched it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import SparkSession

from cdc_core.config import Config
from cdc_core.spark import get_spark


def config_spark(config: Config) -> SparkSession:
    """The process's session with ``config``'s Spark settings; an object-store lake or
    landing zone adds the storage layer's s3a settings."""
    return get_spark(config.spark.master, config.spark.conf, (config.lake, config.landing))


def run_spark(
    settings: Mapping[str, str], places: Sequence[str], *, quick_start: bool
) -> SparkSession:
    """The session an orchestrated run uses: started in process with ``settings`` (a
    config's own, ``spark.master`` among them), or attached to the Spark Connect server
    they or ``SPARK_REMOTE`` name. ``places`` (the lake, the landing zone) on object
    storage add the s3a settings when it starts, so credentials never sit in a front
    end's settings; ``quick_start``: the run is short (one window), its driver starts
    quick."""
    return get_spark(conf=settings, places=places, quick_start=quick_start)
