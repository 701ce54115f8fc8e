"""Rebuilding a source from its dumps with a new configuration, beside the old tables.

For a change no evolution covers (a value column removed or retyped, another key or
envelope): the new tables are built under ``<lake>/.rebuild/<source>`` (see ``swap``) with
the old source's bindings, so every window holds the same records as before, and its dumps'
arrival times, so windows not bound yet bind as they would have; then they are swapped in,
and the source's registrations in the config's catalog are brought in step with them.

Invariant: the old tables are neither changed nor moved until the new ones are complete
through the windows asked for. A rebuild cut short anywhere is finished by running it again
(every append is idempotent; the bindings are copied once, in one commit).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pyspark.sql import SparkSession

from cdc_core.config import Config, SourceConfig
from cdc_core.frontier import TimeFrontier
from cdc_core.reclock import Windows
from cdc_core.schemas import REMAP
from cdc_core.shard import Shard
from cdc_core.source.layout import source_registry
from cdc_core.source.pipeline import SourcePipeline
from cdc_core.source.registration import Registration
from cdc_core.source.swap import mid_swap, staging_lake, swap_in
from cdc_core.storage import Location, files, located


class RebuildRefused(RuntimeError):
    """The old tables cannot be rebuilt from the dumps (some were retired)."""


@dataclass(frozen=True)
class RebuildReport:
    """What a rebuild did: the windows now held and where the old tables are kept."""

    source: str
    windows: int
    kept: str | None


def rebuild(
    spark: SparkSession, config: Config, source: SourceConfig, windows: Windows
) -> RebuildReport:
    """Build ``source``'s tables anew through ``windows`` beside the old ones, then swap
    (or only finish a swap cut short)."""
    lake = located(config.lake)
    old_root = lake / source.name
    registration = Registration.of(spark, config, source, old_root)
    if registration is not None:  # before anything is written
        registration.reach()
    if not mid_swap(lake, source.name):
        had_tables = files.exists(str(old_root))
        arrivals = _old_arrivals(lake, source) if had_tables else {}
        pipeline = SourcePipeline(
            spark, config, source, staging_lake(lake), config.landing, group_lake=lake,
            registers=False,
        )  # fmt: skip
        if had_tables:
            old_remap = Shard.open(spark, str(old_root / "remap"), REMAP)
            _copy_bindings(old_remap, pipeline.remap)
        pipeline.register_dumps(arrival_ms=int(time.time() * 1000), arrived=arrivals)
        pipeline.run_windows(windows)
        pipeline.finish()
    kept = swap_in(lake, source.name, int(time.time() * 1000))
    if registration is not None:  # the same names, at the same places: the new tables
        registration.sync()
    return RebuildReport(source.name, len(windows.ends), kept)


def _old_arrivals(lake: Location, source: SourceConfig) -> dict[str, int]:
    """When each dump registered with the old tables arrived; refused when a dump was
    retired (archived or deleted), since the rebuild reads the landing zone."""
    registered = source_registry(lake, source).files()
    retired = [f.path for f in registered if f.retired]
    if retired:
        raise RebuildRefused(
            f"{source.name}: {len(retired)} dump(s) were retired (e.g. {retired[0]}), so its "
            "tables cannot be rebuilt from the landing zone; put the archived dumps back "
            "under the landing zone as they were, or give the source a new name"
        )
    return {f.path: f.arrival_ms for f in registered}


def _copy_bindings(old: Shard, new: Shard) -> None:
    """Give the new remap the old one's bindings, in one commit (none if it has them)."""
    upper = old.refresh().upper
    if new.refresh().upper != TimeFrontier.minimum() or upper.time in (None, 0):
        return
    new.compare_and_append(old.updates_through(upper.time - 1), TimeFrontier.minimum(), upper)
