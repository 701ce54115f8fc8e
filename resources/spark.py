"""The Spark session resource: dagster-pyspark's, configured the way reclock needs."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from dagster import InitResourceContext
from dagster_pyspark import PySparkResource

from cdc_core.app.session import run_spark
from resources.run_tags import ASSET_PARTITION_RANGE_START_TAG, PARTITION_NAME_TAG, SHORT_RUN_TAG


class ReclockSparkResource(PySparkResource):
    """dagster-pyspark's resource with its session from ``cdc_core.app.session.run_spark``: in
    process by default, or attached to a Spark Connect server (the config's remote, or
    ``SPARK_REMOTE`` in the code location's environment, as ``make ui`` sets it), with the
    same settings and checks as the command line. ``spark_config`` holds the config's own
    settings; reclock's defaults and requirements, and the storage layer's s3a settings
    when a place in ``places`` (the lake, the landing zone) is on object storage, are
    added when the session starts (so credentials never sit in the resource's config)."""

    places: list[str] = []

    @classmethod
    def _is_dagster_maintained(cls) -> bool:
        return False

    def setup_for_execution(self, context: InitResourceContext) -> None:
        """Start (or attach) the run's one session; a short run (``is_short_run``) is
        a short job: its driver starts quick."""
        tags = context.dagster_run.tags if context.dagster_run is not None else {}
        self._spark_session = run_spark(
            self.spark_config, self.places, quick_start=is_short_run(tags)
        )


def is_short_run(tags: Mapping[str, str]) -> bool:
    """Whether a run's tags make it short: a single partition (a scheduled or sensed
    window, one picked in the UI; not a range, not unpartitioned), or ``SHORT_RUN_TAG``
    set by a launcher that knows its run is short."""
    one_partition = PARTITION_NAME_TAG in tags and ASSET_PARTITION_RANGE_START_TAG not in tags
    return one_partition or tags.get(SHORT_RUN_TAG) == "true"


def spark_resource(
    master: str | None, conf: Mapping[str, str] | None, places: Sequence[str] = ()
) -> PySparkResource:
    """One session per process: every asset and check of a run shares it.

    The run executes in process (see pipelines.definitions), so a backfill of many
    windows pays the JVM start-up once, or none with a warm Spark Connect server.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = {**(conf or {}), **({"spark.master": master} if master else {})}
    return ReclockSparkResource(spark_config=settings, places=list(places))
