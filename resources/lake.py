"""The lake resource: where each source's Delta tables live."""

from __future__ import annotations

from pathlib import Path

from dagster import ConfigurableResource


class LakeResource(ConfigurableResource):
    """Root folder of the Delta tables; one sub-folder per source."""

    root: str

    def source_root(self, source: str) -> Path:
        return Path(self.root) / source
