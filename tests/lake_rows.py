"""Building a lake's tables and reading them back, for comparisons between two lakes built
from the same dumps."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.config import Config
from cdc_core.reclock import Windows
from cdc_core.shard.log import commit_at
from cdc_core.source import SourcePipeline


def run_through(spark: SparkSession, config: Config, name: str, through_ms: int) -> SourcePipeline:
    """The windows of ``name`` through ``through_ms`` in one run, then its state published."""
    source = config.source(name)
    pipeline = SourcePipeline.from_config(spark, config, source)
    pipeline.register_dumps(arrival_ms=through_ms)
    pipeline.run_windows(Windows(config.start_ms, through_ms, config.window_ms))
    pipeline.finish()
    return pipeline


def table_rows(config: Config, source: str, table: str, version: int | None = None) -> Counter:
    """A table's rows (at Delta ``version``, else the latest) as a multiset, with the lake's
    own folder (in error file names) replaced, so lakes built in different folders compare
    equal when their data is."""
    root = str(config.lake.parent)

    def portable(value: object) -> object:
        if isinstance(value, dict | list):  # a struct, map or array column: hashable text
            value = json.dumps(value, sort_keys=True, default=str)
        return value.replace(root, "<root>") if isinstance(value, str) else value

    rows = DeltaTable(str(config.lake / source / table), version=version).to_pyarrow_table()
    return Counter(
        tuple((name, portable(v)) for name, v in sorted(row.items())) for row in rows.to_pylist()
    )


@dataclass(frozen=True)
class SampleLake:
    """The bundled sample materialized in two runs (without CDCv2 exports), shared by every
    test that only reads it: through ``first_run_ms`` first, then every window.

    Two runs, so every table has an older version to time-travel to, and the first run's
    versions (``first_run_versions``, by table folder) are what a lake materialized only
    through ``first_run_ms`` holds: a test runs a shorter slice of the sample elsewhere
    and compares it with ``rows(..., first_run=True)`` instead of building its own."""

    config: Config
    first_run_ms: int
    first_run_versions: dict[Path, int]

    def rows(self, source: str, table: str, *, first_run: bool = False) -> Counter:
        """``table_rows`` of one table, as of the first run or of the whole sample."""
        path = self.config.lake / source / table
        version = self.first_run_versions[path] if first_run else None
        return table_rows(self.config, source, table, version)


def commit_info(location: str, version: int) -> dict:
    """The commitInfo of commit ``version`` of the table at ``location`` (which must
    still be in its log): its log time and reclock's metadata."""
    commit = commit_at(location, version)
    assert commit is not None, f"commit {version} of {location} is not in its log"
    return dict(commit.info)
