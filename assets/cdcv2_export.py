"""Per source, ``<source>/changes_cdcv2``: the asset of the source's CDCv2 export
(``cdc_core.app.export``), partitioned by window like ``changes``: its spec, and the
figures a run reports of it, per window.
"""

from collections.abc import Sequence

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetSpec,
    MaterializeResult,
    MetadataValue,
    TimeWindowPartitionsDefinition,
)

from assets.partitions import window_bounds
from assets.source_assets import Metadata, output_key, source_tags, with_window_figures
from cdc_core.app.export import EXPORT_ENCODING, SourceExport, Window, WindowExport
from cdc_core.calendar import to_datetime
from cdc_core.config import SourceConfig


def export_key(source: str) -> AssetKey:
    """The asset key of a source's CDCv2 export of ``changes``."""
    return output_key(source, "changes_cdcv2")

def window_export_metadata(export: WindowExport) -> Metadata:
    """One window's own export, under stable keys the Partitions view plots per window."""
    return {
        "updates": export.updates,
        "progress_statements": export.progress_statements,
        "window_folder": MetadataValue.path(str(export.folder)),
        "window_start": MetadataValue.timestamp(to_datetime(export.start)),
        "window_end": MetadataValue.timestamp(to_datetime(export.end)),
        # The window binds at its end; its stream is complete through end + 1.
        "judged_time": MetadataValue.timestamp(to_datetime(export.end)),
        "upper": MetadataValue.timestamp(to_datetime(export.end + 1)),
    }


def export_spec(source: SourceConfig) -> AssetSpec:
    """The asset of the source's export, downstream of its ``changes`` and partitioned
    like it."""
    return AssetSpec(
        export_key(source.name),
        description=(
            "The `changes` shard as CDCv2 files, one folder per IntoTime window, for "
            "consumers that do not read Delta."
        ),
        deps=[output_key(source.name, "changes")],
        group_name=source.name,
        kinds={"spark", "json"},
        owners=list(source.owners),
        tags=source_tags(source),
        metadata={"encoding": EXPORT_ENCODING.name, "topic": source.topic},
    )


def export_windows_of(
    partitions: TimeWindowPartitionsDefinition, keys: Sequence[str]
) -> list[Window]:
    """The windows a run's partition ``keys`` name, as the export writes them."""
    return [
        Window(key, *window_bounds(partitions.time_window_for_partition_key(key)))
        for key in keys
    ]


def report_export(
    context: AssetExecutionContext, exported: SourceExport, run_keys: Sequence[str]
) -> MaterializeResult:
    """The export's materialization after a run of the windows ``run_keys``, with each
    window's own figures."""
    for index, export in enumerate(exported.exports, 1):
        context.log.info(
            f"[{index}/{len(exported.exports)}] {exported.source}: exported {export.summary()}"
        )
    metadata: Metadata = {
        "folder": MetadataValue.path(str(exported.root)),
        "encoding": EXPORT_ENCODING.name,
        "windows": len(exported.exports),
    }
    per_window = {e.key: window_export_metadata(e) for e in exported.exports}
    return with_window_figures(
        context, export_key(exported.source), metadata, per_window, run_keys
    )
