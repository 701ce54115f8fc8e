"""The lake resource: where each source's Delta tables live and where its dumps land.

Every asset, check and sensor opens a source through this one resource, so the paths a
deployment uses are configured in one place and nothing in the Dagster layer builds them.
"""

from __future__ import annotations

from dagster import ConfigurableResource
from pyspark.sql import SparkSession

from cdc_core.config import Config, SourceConfig
from cdc_core.source import SourcePipeline
from cdc_core.storage import Location, located


class LakeResource(ConfigurableResource):
    """``root``: the Delta tables, one folder per source; ``landing``: the dumps, files of
    topic T anywhere under ``<landing>/<T>/``."""

    root: str
    landing: str

    @property
    def _lake(self) -> Location:
        return located(self.root)

    @property
    def _landing(self) -> Location:
        return located(self.landing)

    def source_root(self, source: SourceConfig) -> Location:
        """The folder (or object-store prefix) holding the source's tables."""
        return self._lake / source.name

    def open(self, spark: SparkSession, config: Config, source: SourceConfig) -> SourcePipeline:
        """The source's pipeline on this lake: its shards opened (created when missing)."""
        return SourcePipeline(spark, config, source, self._lake, self._landing)
