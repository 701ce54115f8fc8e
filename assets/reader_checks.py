"""The ``readers`` check of a source: warns when a live reader pins history older than
the config's ``readers.warn_after``. A pinned reader keeps compaction and gc from
shrinking its shards, so a forgotten one lets the lake grow; it never makes data wrong,
hence a warning, never a blocking failure."""

from collections.abc import Iterator

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    MetadataValue,
    Output,
    asset_check,
)

from assets.checks import CheckReports
from assets.source_assets import output_key
from cdc_core.config import Config, SourceConfig
from cdc_core.shard.leases import READER, holds_under
from resources.lake import LakeResource


def readers_check(config: Config, source: SourceConfig) -> AssetChecksDefinition:
    """The readers check, on the source's ``changes`` asset; it reads Delta logs only, and
    reports as the source's other checks do (``CheckReports``)."""
    limit_ms = config.readers.warn_after_ms
    reports = CheckReports()

    @asset_check(
        asset=output_key(source.name, "changes"),
        name="readers",
        blocking=False,
        description=(
            f"No live reader pins history of {source.name}'s tables older than "
            f"{config.readers.warn_after} (readers.warn_after)."
        ),
    )
    def readers(
        context: AssetCheckExecutionContext, lake: LakeResource
    ) -> Iterator[AssetCheckResult | Output | AssetCheckEvaluation]:
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
        yield from reports.report(context, AssetCheckResult(
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
        ))  # fmt: skip

    return reports.of(readers)
