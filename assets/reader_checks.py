"""The ``readers`` check of a source: warns when a live reader pins history older than
the config's ``readers.warn_after``. A pinned reader keeps compaction and gc from
shrinking its shards, so a forgotten one lets the lake grow; it never makes data wrong,
hence a warning, never a blocking failure."""

from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, MetadataValue

from assets.source_assets import output_key
from cdc_core.app.status import live_readers
from cdc_core.config import Config, SourceConfig
from resources.lake import LakeResource

READERS_CHECK = "readers"


def readers_spec(config: Config, source: SourceConfig) -> AssetCheckSpec:
    """The readers check, on the source's ``changes`` asset."""
    return AssetCheckSpec(
        READERS_CHECK,
        asset=output_key(source.name, "changes"),
        blocking=False,
        description=(
            f"No live reader pins history of {source.name}'s tables older than "
            f"{config.readers.warn_after} (readers.warn_after)."
        ),
    )


def judge_readers(config: Config, source: SourceConfig, lake: LakeResource) -> AssetCheckResult:
    """The readers check's result; it reads Delta logs only."""
    limit_ms = config.readers.warn_after_ms
    found = live_readers(lake.root, source)
    stale = [h for h in found if h.age_ms > limit_ms]
    description = (
        f"{len(stale)} reader(s) pin history older than {config.readers.warn_after}: "
        + ", ".join(f"{h.table}/{h.registration.holder}" for h in stale)
        if stale
        else f"{len(found)} live reader(s), none pinning history older than "
        f"{config.readers.warn_after}"
    )
    return AssetCheckResult(
        asset_key=output_key(source.name, "changes"),
        check_name=READERS_CHECK,
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
