"""The ``readers`` check of a source: warns when a live reader pins history older than
the config's ``readers.warn_after``. A pinned reader keeps compaction and gc from
shrinking its shards, so a forgotten one lets the lake grow; it never makes data wrong,
hence a warning, never a blocking failure."""

from dagster import (
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    MetadataValue,
    TimeWindowPartitionsDefinition,
    asset_check,
)

from assets.checks import preview_partitioned_checks
from assets.source_assets import output_key
from cdc_core.config import Config, SourceConfig
from cdc_core.shard.leases import READER, holds_under
from resources.lake import LakeResource


def readers_check(
    config: Config, source: SourceConfig, partitions: TimeWindowPartitionsDefinition
) -> AssetChecksDefinition:
    """The readers check, on the source's ``changes`` asset; it reads Delta logs only.

    Partitioned like ``changes`` (``assets.checks.preview_partitioned_checks`` says why),
    though what it judges is the readers' holds when it runs, whatever the windows."""
    limit_ms = config.readers.warn_after_ms

    with preview_partitioned_checks():

        @asset_check(
            asset=output_key(source.name, "changes"),
            name="readers",
            blocking=False,
            partitions_def=partitions,
            description=(
                f"No live reader pins history of {source.name}'s tables older than "
                f"{config.readers.warn_after} (readers.warn_after)."
            ),
        )
        def readers(lake: LakeResource) -> AssetCheckResult:
            holds = holds_under(str(lake.source_root(source)))
            found = [h for h in holds if h.live and h.registration.kind == READER]
            stale = [h for h in found if h.age_ms > limit_ms]
            description = (
                f"{len(stale)} reader(s) pin history older than {config.readers.warn_after}: "
                + ", ".join(f"{h.table}/{h.registration.holder}" for h in stale)
                if stale
                else f"{len(found)} live reader(s), none pinning history older than "
                f"{config.readers.warn_after}"
            )
            return AssetCheckResult(
                passed=not stale,
                severity=AssetCheckSeverity.WARN,
                description=description,
                metadata={
                    "readers": MetadataValue.json(
                        [
                            {
                                "table": h.table,
                                "reader": h.registration.holder,
                                "since": h.registration.since,
                                "pinned_version": h.registration.version,
                                "expires_ms": h.registration.expires_ms,
                                "pinned_versions": h.versions,
                                "pinned_bytes": h.bytes,
                                "age_ms": h.age_ms,
                            }
                            for h in found
                        ]
                    ),
                    "warn_after_ms": limit_ms,
                },
            )

    return readers
