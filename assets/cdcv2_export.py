"""Per source, ``<source>/changes_cdcv2``: each window of the ``changes`` shard as a CDCv2
stream in files, for downstream consumers that do not read Delta.

Window ``[start, end)`` binds at ``end``, so its stream covers IntoTimes
``[start + 1, end + 1)`` and lands in ``<lake>/<source>/cdcv2/<window key>/``. Streams of
adjacent windows chain: read together from the first window's ``start + 1`` they are one
stream, complete through the last window's ``end + 1``.

The encoding is a constant (JSON lines) rather than a per-run choice: consumers read many
window folders as one stream with one decoder, so every folder must share an encoding.
"""

import contextlib
import errno
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    BackfillPolicy,
    MaterializeResult,
    MetadataValue,
    TimeWindowPartitionsDefinition,
    asset,
)
from dagster_pyspark import PySparkResource

from assets.partitions import to_datetime, window_bounds
from assets.source_assets import output_key, source_tags
from cdc_core.cdcv2 import DataColumns, Encoding, export_shard, write_parts
from cdc_core.cdcv2.data_columns import UnsupportedColumnType
from cdc_core.config import Config, SourceConfig
from cdc_core.frontier import TimeFrontier, iso
from cdc_core.shard import Shard, existing_table
from cdc_core.shard.leases import read_leases, reading
from resources.lake import LakeResource

EXPORT_ENCODING = Encoding.JSON
EXPORT_FOLDER = "cdcv2"
# A hidden staging folder this old belongs to no live export (an export writes its
# folder in seconds to minutes); a younger one may be a concurrent run's. A folder named
# after an export's reader registration is judged by that registration's lease instead.
ABANDONED_AFTER_S = 6 * 3600
EXPORT_READER = "cdcv2-export-"
PUBLISH_ATTEMPTS = 20


def work_folder(root: Path) -> Path:
    """Where exports into ``root`` stage their windows and retire replaced ones: a hidden
    sibling of ``root`` (same filesystem, so publishing is a rename), so that ``root``
    holds only window folders and finding a window's leftovers looks at the few there
    are, not at the folder per window ever exported."""
    return root.parent / f".{root.name}.work"


def exportable(source: SourceConfig) -> bool:
    """Whether the CDCv2 encodings carry every output column of ``source`` (scalars: a
    source that includes ``headers``, a list column, has no export asset)."""
    try:
        DataColumns(source.output_schema)
    except UnsupportedColumnType:
        return False
    return True


def export_key(source: str) -> AssetKey:
    """The asset key of a source's CDCv2 export of ``changes``."""
    return output_key(source, "changes_cdcv2")


@dataclass(frozen=True)
class WindowExport:
    """What the export of one window wrote: its folder and the stream's size."""

    key: str
    start: int
    end: int
    folder: Path
    updates: int
    progress_statements: int

    def summary(self) -> str:
        """One log line: the window, its counts, its times in ISO UTC and its folder."""
        return (
            f"window {self.key}: {self.updates} update(s), {self.progress_statements} "
            f"progress statement(s), times [{iso(self.start + 1)}, {iso(self.end + 1)}) "
            f"-> {self.folder}"
        )


class ExportConflict(RuntimeError):
    """Other exports of the same window kept replacing its folder while this one tried to
    publish: the window's folder holds one complete export, perhaps not this run's."""


@dataclass(frozen=True)
class Window:
    """A window to export: its partition key and its bounds ``[start, end)``."""

    key: str
    start: int
    end: int


def export_windows(
    shard: Shard, root: Path, windows: Sequence[Window], holder: str | None = None
) -> list[WindowExport]:
    """Write the stream of each window ``[start, end)`` (times ``[start + 1, end + 1)``)
    into ``root/<key>``, replacing any earlier export of it as a whole folder. The windows
    are read, consolidated, counted and written together: one pass over the shard for
    the run, however many windows it exports.

    Each window's stream is written into a hidden staging folder owned by this export and
    renamed into place, so a reader never sees a half-written stream, nor the files of two
    exports of the window side by side (``write_stream`` alone would add a second,
    differently named copy). Concurrent exports of one window (two runs of one config)
    each publish a complete folder; the stream is a function of the committed shard, so
    whichever lands last holds the same updates. ``holder``, the export's reader
    registration on ``shard``, names the staging folders: other exports leave them alone
    while that registration is live, and remove them once it is not.
    """
    ordered = sorted(windows, key=lambda w: w.start)
    upper = TimeFrontier.at(ordered[-1].end + 1)
    stream = export_shard(shard.refresh(), ordered[0].start + 1, upper)
    live = {r.holder for r in read_leases(shard.path, existing_table(shard.path)).live()}
    work = work_folder(root)
    work.mkdir(parents=True, exist_ok=True)
    staging = {}
    for window in ordered:
        _discard_abandoned(work, window.key, live)
        staging[window.key] = work / f".{window.key}.{holder or uuid.uuid4().hex}.staging"
    try:
        parts = [(w.start + 1, TimeFrontier.at(w.end + 1), staging[w.key]) for w in ordered]
        written = write_parts(stream, parts, EXPORT_ENCODING)
        exports = []
        for window, files in zip(ordered, written, strict=True):
            target = root / window.key
            _publish(staging[window.key], target)
            exports.append(
                WindowExport(
                    window.key, window.start, window.end, target, files.updates,
                    files.progress_statements,
                )
            )
        return exports
    finally:
        for folder in staging.values():
            shutil.rmtree(folder, ignore_errors=True)  # gone already once published


def _discard_abandoned(work: Path, key: str, live_holders: set[str]) -> None:
    """Staging or retired folders of this window (in the export's ``work`` folder) that
    an interrupted export left behind. A folder of a registered export goes once its
    registration is no longer live (released, or its lease ran out); any other only when
    untouched for ``ABANDONED_AFTER_S``: a younger one may be a concurrent export's live
    staging."""
    oldest = time.time() - ABANDONED_AFTER_S
    for leftover in work.glob(f".{key}.*"):
        owner = leftover.name[len(key) + 2 :].rsplit(".", 1)[0]
        if owner in live_holders:
            continue
        if owner.startswith(EXPORT_READER):
            shutil.rmtree(leftover, ignore_errors=True)
            continue
        try:
            abandoned = leftover.stat().st_mtime < oldest
        except FileNotFoundError:  # another export removed it meanwhile
            continue
        if abandoned:
            shutil.rmtree(leftover, ignore_errors=True)


def _publish(staging: Path, target: Path) -> None:
    """Move the complete ``staging`` folder to ``target``. An earlier export is renamed
    away first: a reader listing at that instant finds no folder, i.e. a stream complete
    through nothing new, which CDCv2 readers treat as not yet complete, never as wrong.

    Another export of the window may rename the folder away, or publish its own, between
    these steps: both are retried; ``ExportConflict`` after ``PUBLISH_ATTEMPTS`` tries."""
    for _ in range(PUBLISH_ATTEMPTS):
        retired = staging.parent / f".{target.name}.{uuid.uuid4().hex}.retired"
        # No earlier export, or another export moved it away just now: nothing to move.
        with contextlib.suppress(FileNotFoundError):
            os.rename(target, retired)
        try:
            os.rename(staging, target)
        except OSError as error:
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            continue  # another export published in between: replace that one
        finally:
            shutil.rmtree(retired, ignore_errors=True)  # hidden; the next export retries
        return
    raise ExportConflict(
        f"could not publish {target}: other exports of the window replaced it "
        f"{PUBLISH_ATTEMPTS} times in a row; it holds one of their complete exports"
    )


def window_export_metadata(export: WindowExport) -> dict[str, object]:
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


def cdcv2_export_asset(
    config: Config, source: SourceConfig, partitions: TimeWindowPartitionsDefinition
) -> AssetsDefinition:
    """Build the export asset of one source, partitioned like its ``changes``."""

    @asset(
        key=export_key(source.name),
        deps=[output_key(source.name, "changes")],
        partitions_def=partitions,
        backfill_policy=BackfillPolicy.single_run(),
        group_name=source.name,
        kinds={"spark", "json"},
        owners=list(source.owners),
        tags=source_tags(source),
        metadata={"encoding": EXPORT_ENCODING.name, "topic": source.topic},
    )
    def changes_cdcv2(
        context: AssetExecutionContext, pyspark: PySparkResource, lake: LakeResource
    ) -> MaterializeResult:
        """The ``changes`` shard as CDCv2 files, one folder per IntoTime window.

        It depends on ``changes``, so the blocking ``complete`` check on ``changes``
        stops it from being built on a window whose changes failed that check: a
        consumer never receives a stream the lake itself judged incomplete.

        While it runs it is a registered reader of ``changes`` (from its first window on),
        so no compaction or gc takes that history away mid-export: the lease is renewed
        while the export runs, and released at the end, also on failure.
        """
        pipeline = lake.open(pyspark.spark_session, config, source)
        root = Path(pipeline.root) / EXPORT_FOLDER  # local only: NotLocal on object storage
        root.mkdir(parents=True, exist_ok=True)
        keys = sorted(context.partition_keys)
        windows = [window_bounds(partitions.time_window_for_partition_key(k)) for k in keys]
        reader = f"{EXPORT_READER}{context.run_id}"
        lease_ms = config.readers.lease_ms
        since = TimeFrontier.at(windows[0][0]).join(pipeline.changes.refresh().since)
        with reading(pipeline.changes, reader, since.time or 0, lease_ms):
            exports = export_windows(
                pipeline.changes,
                root,
                [Window(key, start, end) for key, (start, end) in zip(keys, windows, strict=True)],
                reader,
            )
        for index, export in enumerate(exports, 1):
            context.log.info(f"[{index}/{len(keys)}] {source.name}: exported {export.summary()}")
            context.add_asset_metadata(window_export_metadata(export), partition_key=export.key)
        return MaterializeResult(
            metadata={
                "folder": MetadataValue.path(str(root)),
                "encoding": EXPORT_ENCODING.name,
                "windows": len(keys),
            }
        )

    return changes_cdcv2
