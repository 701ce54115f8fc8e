"""Exporting a source's run: each window of its ``changes`` shard as a CDCv2 stream in
files, for downstream consumers that do not read Delta.

Window ``[start, end)`` binds at ``end``, so its stream covers IntoTimes
``[start + 1, end + 1)`` and lands in ``<lake>/<source>/cdcv2/<window key>/``. Streams of
adjacent windows chain: read together from the first window's ``start + 1`` they are one
stream, complete through the last window's ``end + 1``.

The encoding is a constant (JSON lines) rather than a per-run choice: consumers read many
window folders as one stream with one decoder, so every folder must share an encoding.
"""

from __future__ import annotations

import contextlib
import posixpath
import time
import uuid
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from cdc_core.cdcv2 import Encoding, export_shard
from cdc_core.cdcv2.export import CdcStream, StreamInterval, stored_updates
from cdc_core.cdcv2.export_folder import EXPORT_FOLDER as EXPORT_FOLDER
from cdc_core.cdcv2.export_folder import exportable as exportable
from cdc_core.cdcv2.stream_files import (
    StoredStream,
    StreamPart,
    UpdateFiles,
    file_owner,
    is_progress_file,
    write_progress,
    write_stored_updates,
    write_updates,
)
from cdc_core.config import Config
from cdc_core.frontier import TimeFrontier, iso
from cdc_core.phases import ALL_SOURCES, phase
from cdc_core.shard import Shard
from cdc_core.shard.leases import read_leases, reading
from cdc_core.source import SourcePipeline
from cdc_core.source.planning import is_small_step
from cdc_core.spark import planned_as
from cdc_core.storage import LocationLike, files, located

EXPORT_ENCODING = Encoding.JSON
# A hidden staging folder this old belongs to no live export (an export writes its
# folder in seconds to minutes); a younger one may be a concurrent run's. A folder named
# after an export's reader registration is judged by that registration's lease instead.
ABANDONED_AFTER_S = 6 * 3600
EXPORT_READER = "cdcv2-export-"
# Threads that register (and release) the exports' holds on each source's ``changes``.
HOLD_THREADS = 4
PUBLISH_ATTEMPTS = 20


def work_folder(root: Path) -> Path:
    """Where exports into ``root`` stage their windows and retire replaced ones: a hidden
    sibling of ``root`` (same filesystem, so publishing is a rename), so that ``root``
    holds only window folders and finding a window's leftovers looks at the few there
    are, not at the folder per window ever exported."""
    return root.parent / f".{root.name}.work"


@dataclass(frozen=True)
class WindowExport:
    """What the export of one window wrote: its folder and the stream's size."""

    key: str
    start: int
    end: int
    folder: str
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


@dataclass(frozen=True)
class ShardExport:
    """One shard's windows to export into ``root``, by the export registered as
    ``holder`` on the shard (see ``export_windows``)."""

    shard: Shard
    root: LocationLike
    windows: Sequence[Window]
    holder: str | None = None


def export_windows(
    shard: Shard, root: LocationLike, windows: Sequence[Window], holder: str | None = None
) -> list[WindowExport]:
    """Write the stream of each window ``[start, end)`` (times ``[start + 1, end + 1)``)
    into ``root/<key>``, replacing any earlier export of it. The windows are read,
    counted and written together: one pass over the shard for the run, however many
    windows it exports.

    A reader never sees a half-written stream, nor a progress file beside updates of
    another export of the window (``write_stream`` alone would add a second copy).
    Concurrent exports of one window (two runs of one config) each leave a complete
    stream; the stream is a function of the committed shard, and both hold a reader
    registration on it, so both write the same updates. ``holder``, the export's
    registration on ``shard``, marks what it writes: other exports leave it alone while
    that registration is live, and remove it once it is not.
    """
    (exported,) = export_together(shard.spark, [ShardExport(shard, root, windows, holder)])
    if isinstance(exported, Exception):
        raise exported
    return exported


def export_together(
    spark: SparkSession, exports: Sequence[ShardExport]
) -> list[list[WindowExport] | Exception]:
    """Each export as ``export_windows`` makes it, in order (a failed one as its error:
    the others go on). The updates of every stream the shards store as they are
    (``stored_updates``) are written by one Spark job; a stream that folds compacted
    history is read and consolidated by a job of its own."""
    steps: dict[int, _Steps] = {}
    asked: dict[int, _Updates] = {}
    outcomes: dict[int, list[WindowExport] | Exception] = {}
    for index, export in enumerate(exports):
        try:
            steps[index] = _export_steps(export)
            asked[index] = next(steps[index])
        except Exception as failure:  # noqa: BLE001 - that export's own failure
            outcomes[index] = failure
    stored = {i: a for i, a in asked.items() if isinstance(a, StoredStream)}
    written: dict[int, list[UpdateFiles]] = {}
    try:
        written = dict(zip(stored, write_stored_updates(spark, list(stored.values()),
                                                        EXPORT_ENCODING), strict=True))  # fmt: skip
    except Exception:  # noqa: BLE001 - each is written alone, to fail alone
        for index, alone in stored.items():
            try:
                written[index] = write_stored_updates(spark, [alone], EXPORT_ENCODING)[0]
            except Exception as failure:  # noqa: BLE001 - that export's own failure
                outcomes[index] = failure
    for index, ask in asked.items():
        if index in outcomes:
            steps[index].close()  # its staging is removed
            continue
        try:
            if isinstance(ask, StoredStream):
                updates = written[index]
            else:
                stream, parts, owner = ask
                updates = write_updates(stream, parts, EXPORT_ENCODING, owner=owner)
            steps[index].send(updates)
        except StopIteration as done:
            outcomes[index] = done.value
        except Exception as failure:  # noqa: BLE001 - that export's own failure
            outcomes[index] = failure
    return [outcomes[index] for index in range(len(exports))]


# What one window's export wrote: its folder, how many updates and progress statements.
_Written = tuple[str, int, int]
# The updates an export asks to have written: a stream as its shard stores it (written
# with other exports'), or a stream to consolidate into its parts (by ``owner``).
_Updates = StoredStream | tuple[CdcStream, list[StreamPart], str | None]
# An export as steps: it asks for its updates written, is sent their files, and returns
# what each window's export wrote.
_Steps = Generator[_Updates, list[UpdateFiles], list[WindowExport]]


def _export_steps(export: ShardExport) -> _Steps:
    """One export, around the writing of its updates (which its driver does, with other
    exports' when it can)."""
    ordered = sorted(export.windows, key=lambda w: w.start)
    shard = export.shard.refresh()
    lower, upper = ordered[0].start + 1, TimeFrontier.at(ordered[-1].end + 1)
    stored = stored_updates(shard, lower, upper)
    interval = StreamInterval(shard.data_schema, lower, upper)

    def updates_of(parts: list[StreamPart], owner: str | None) -> _Updates:
        if stored is None:
            return export_shard(shard, lower, upper), parts, owner
        return StoredStream(shard.path, tuple(stored), shard.data_schema, tuple(parts), owner)

    place = located(export.root)
    if place.is_local:
        written = yield from _export_renaming(
            shard, interval, Path(place.path), ordered, export.holder, updates_of
        )
    else:
        written = yield from _export_in_place(
            shard, interval, str(place), ordered, export.holder, updates_of
        )
    return [
        WindowExport(w.key, w.start, w.end, folder, updates, statements)
        for w, (folder, updates, statements) in zip(ordered, written, strict=True)
    ]


def _live_exports(shard: Shard) -> set[str]:
    """The holders of the shard's live reader registrations, as of its newest commit."""
    return {r.holder for r in read_leases(shard.refresh().delta_table).live()}


def _export_renaming(
    shard: Shard,
    interval: StreamInterval,
    root: Path,
    ordered: Sequence[Window],
    holder: str | None,
    updates_of: Callable[[list[StreamPart], str | None], _Updates],
) -> Generator[_Updates, list[UpdateFiles], list[_Written]]:
    """A local export: each window's stream is written into a hidden staging folder of
    this export (named after ``holder``) and renamed into place as a whole folder."""
    live = _live_exports(shard)
    work = work_folder(root)
    files.make_folder(str(root))
    files.make_folder(str(work))
    staging = {}
    for window in ordered:
        _discard_abandoned(work, window.key, live)
        staging[window.key] = work / f".{window.key}.{holder or uuid.uuid4().hex}.staging"
    try:
        parts: list[StreamPart] = [
            (w.start + 1, TimeFrontier.at(w.end + 1), staging[w.key]) for w in ordered
        ]
        updates = yield updates_of(parts, None)
        written = []
        for window, part, update_files in zip(ordered, parts, updates, strict=True):
            _, statements = write_progress(interval, part, update_files, EXPORT_ENCODING)
            target = root / window.key
            _publish(staging[window.key], target)
            written.append((str(target), update_files.updates, statements))
        return written
    finally:
        for folder in staging.values():
            files.delete_tree(str(folder))  # gone already once published


def _export_in_place(
    shard: Shard,
    interval: StreamInterval,
    root: str,
    ordered: Sequence[Window],
    holder: str | None,
    updates_of: Callable[[list[StreamPart], str | None], _Updates],
) -> Generator[_Updates, list[UpdateFiles], list[_Written]]:
    """An export to an object store, which has no rename: files are written into the
    window's folder itself, each named after its export (``holder``), and files of
    exports no longer live are deleted in an order that keeps every state a reader can
    list correct. Their progress files go first (the window then reads as not yet
    complete), then the new updates are written, then the old updates are deleted, and
    only then is this export's progress file written: a progress file is only ever
    listed beside every update it counts and none of another stream's.

    The folders are listed before the live registrations are read, so every file listed
    belongs to an export registered by then: a live one is never taken for a dead one.
    An upload not yet moved into place is stale as its export is (see ``_stale``)."""
    owner = holder or f"unregistered-{uuid.uuid4().hex}"
    folders = {w.key: files.join(root, w.key) for w in ordered}
    listed = {key: files.list_files(folder, recursive=False) for key, folder in folders.items()}
    live = _live_exports(shard) | {owner}
    oldest_ms = (time.time() - ABANDONED_AFTER_S) * 1000
    stale = {
        key: [entry.path for entry in entries
              if _stale(posixpath.basename(entry.path), entry.mtime_ms, live, oldest_ms)]
        for key, entries in listed.items()
    }  # fmt: skip
    for path in (p for paths in stale.values() for p in paths):
        if is_progress_file(posixpath.basename(path)):
            files.delete_file(path)
    parts: list[StreamPart] = [
        (w.start + 1, TimeFrontier.at(w.end + 1), folders[w.key]) for w in ordered
    ]
    updates = yield updates_of(parts, owner)
    written = []
    for window, part, update_files in zip(ordered, parts, updates, strict=True):
        folder = folders[window.key]
        for path in stale[window.key]:
            if not is_progress_file(posixpath.basename(path)):
                files.delete_file(path)
        _, statements = write_progress(interval, part, update_files, EXPORT_ENCODING, owner)
        written.append((folder, update_files.updates, statements))
    return written


def _stale(name: str, mtime_ms: int, live: set[str], oldest_ms: float) -> bool:
    """Whether a file in a window folder belongs to an export no longer live. A published
    file by the export its name carries; an upload not yet in place (``published_output``'s
    hidden temporary) by the export of the name it will take: a registered export's at
    once (it registered before uploading), any other's once untouched since ``oldest_ms``
    (younger, it may still be moving into place). Other hidden names are never stale."""
    if not name.startswith("."):
        return file_owner(name) not in live
    published = files.published_name(name)
    if published is None:
        return False
    owner = file_owner(published)
    if owner in live:
        return False
    return (owner or "").startswith(EXPORT_READER) or mtime_ms < oldest_ms


def _discard_abandoned(work: Path, key: str, live_holders: set[str]) -> None:
    """Staging or retired folders of this window (in the export's ``work`` folder) that
    an interrupted export left behind. A folder of a registered export goes once its
    registration is no longer live (released, or its lease ran out); any other only when
    untouched for ``ABANDONED_AFTER_S``: a younger one may be a concurrent export's live
    staging."""
    oldest_ms = (time.time() - ABANDONED_AFTER_S) * 1000
    for name in files.list_folders(str(work)):
        if not name.startswith(f".{key}."):
            continue
        leftover = str(work / name)
        owner = name[len(key) + 2 :].rsplit(".", 1)[0]
        if owner in live_holders:
            continue
        if owner.startswith(EXPORT_READER):
            files.delete_tree(leftover)
            continue
        try:
            abandoned = files.mtime_ms(leftover) < oldest_ms
        except FileNotFoundError:  # another export removed it meanwhile
            continue
        if abandoned:
            files.delete_tree(leftover)


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
            files.rename_folder(str(target), str(retired))
        try:
            files.rename_folder(str(staging), str(target))
        except FileExistsError:
            continue  # another export published in between: replace that one
        finally:
            files.delete_tree(str(retired))  # hidden; the next export retries
        return
    raise ExportConflict(
        f"could not publish {target}: other exports of the window replaced it "
        f"{PUBLISH_ATTEMPTS} times in a row; it holds one of their complete exports"
    )


@dataclass(frozen=True)
class SourceExport:
    """A source's run exported: the windows written under ``root``."""

    source: str
    root: LocationLike
    exports: list[WindowExport]


def export_changes(
    config: Config, pipeline: SourcePipeline, windows: Sequence[Window], run_id: str
) -> SourceExport:
    """Export ``windows`` (a run's windows) of the source's ``changes`` as CDCv2 files,
    one folder per IntoTime window: ``export_sources`` for one source."""
    (exported,) = export_sources(config, [(pipeline, windows)], run_id)
    if isinstance(exported, Exception):
        raise exported
    return exported


# A source's run to export: its tables, and the run's windows.
ExportRun = tuple[SourcePipeline, Sequence[Window]]


def export_sources(
    config: Config, runs: Sequence[ExportRun], run_id: str
) -> list[SourceExport | Exception]:
    """Export each source's ``windows`` (a run's windows) of its ``changes`` as CDCv2
    files, one folder per IntoTime window, every source's updates by one Spark job
    (``export_together``); in order, a failed export as its error. It reports nothing
    itself: its caller does.

    It runs only after the sources' checks passed (a run leaves a source out when a
    blocking check failed): a consumer never receives a stream the lake itself judged
    incomplete.

    While it runs the export is a registered reader of each source's ``changes`` (from
    its first window on), so no compaction or gc takes that history away mid-export: the
    leases are renewed while the export runs, and released at the end, also on failure.
    """
    reader = f"{EXPORT_READER}{run_id}"
    lease_ms = config.readers.lease_ms
    outcomes: dict[int, SourceExport | Exception] = {}
    asked: dict[int, ShardExport] = {}
    rows = 0  # what the exports read: it plans their queries
    holds: list[ExitStack] = []
    # Each hold is a commit to its source's log: a pool of threads registers them, and
    # releases them, side by side.
    with ThreadPoolExecutor(HOLD_THREADS, thread_name_prefix="reclock-export") as pool:
        try:
            held = pool.map(lambda run: _held(run, reader, lease_ms), runs)
            for index, outcome in enumerate(held):
                if isinstance(outcome, Exception):  # that source's own failure
                    outcomes[index] = outcome
                    continue
                hold, asked[index], source_rows = outcome
                holds.append(hold)
                rows += source_rows
            if asked:
                spark = runs[next(iter(asked))][0].spark
                name = runs[0][0].source.name if len(runs) == 1 else ALL_SOURCES
                with (
                    planned_as(spark, is_small_step(rows), config.spark.conf),
                    phase(name, "export CDCv2") as figures,
                ):
                    exported = export_together(spark, list(asked.values()))
                    figures["sources"] = len(asked)
                for index, windows_exported in zip(asked, exported, strict=True):
                    pipeline = runs[index][0]
                    outcomes[index] = (
                        windows_exported if isinstance(windows_exported, Exception)
                        else SourceExport(pipeline.source.name, asked[index].root,
                                          windows_exported)
                    )  # fmt: skip
        finally:
            list(pool.map(ExitStack.close, holds))
    return [outcomes[index] for index in range(len(runs))]


def _held(
    run: ExportRun, reader: str, lease_ms: int
) -> tuple[ExitStack, ShardExport, int] | Exception:
    """The source's ``changes`` held for its export (from its first window on): the
    hold (to close when the export ends), what to export, and the rows it reads; or the
    source's own failure, with nothing held."""
    pipeline, windows = run
    ordered = sorted(windows, key=lambda w: w.start)
    first = ordered[0].start
    try:
        with ExitStack() as hold:
            since = TimeFrontier.at(first).join(pipeline.changes.refresh().since)
            hold.enter_context(reading(pipeline.changes, reader, since.time or 0, lease_ms))
            # From the shard's since, the export reads the snapshot there too.
            from_since = pipeline.changes.since == TimeFrontier.at(first + 1)
            after = {} if from_since else {"changes": first}
            rows = pipeline.reader.rows_to_read("changes", after=after)
            export = ShardExport(pipeline.changes, pipeline.root / EXPORT_FOLDER, ordered, reader)
            return hold.pop_all(), export, rows
    except Exception as failure:  # noqa: BLE001 - that source's own failure
        return failure
