"""The Spark session resource: dagster-pyspark's, configured the way reclock needs."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from dagster_pyspark import PySparkResource

from cdc_core.spark import session_conf


def spark_resource(master: str | None, conf: Mapping[str, str] | None) -> PySparkResource:
    """One session per process: every asset and check of a run shares it.

    The run executes in process (see pipelines.definitions), so a backfill of many
    windows pays the JVM start-up once.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return PySparkResource(spark_config=session_conf(master, conf))
