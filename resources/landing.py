"""The landing-zone resource: where Kafka dumps arrive, one folder per topic."""

from __future__ import annotations

from pathlib import Path

from dagster import ConfigurableResource

from cdc_core.ingest.dumps import DumpFile, list_dump_files


class LandingZone(ConfigurableResource):
    """Root folder of the dumps; files of topic T live anywhere under ``<root>/<T>/``."""

    root: str

    def files(self, topic: str) -> list[DumpFile]:
        return list_dump_files(Path(self.root), topic)
