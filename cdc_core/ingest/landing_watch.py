"""Watching an object-store landing zone tick after tick without listing all of it each time.

An object store lists 1,000 keys per request, so a landing zone holding months of
per-minute dumps costs hundreds of requests to list whole. Writers name dumps so that
they sort in the order they land within their folder (Kafka Connect's S3 sink writes
``<topic>+<partition>+<zero-padded start offset>``; kcat copies are named by time). So a
tick lists each active folder only after the greatest dump it has seen there
(``StartAfter``), and the topic's prefix after the greatest dump seen anywhere under it
(which finds a new folder that sorts last, as a time-based partitioner's next hour does).

A Kafka Connect sink writes a value file's key and header files after it, but they sort
around it (``x.headers.json`` < ``x.json`` < ``x.keys.json``). So a value file seen less
than ``FULL_LISTING_EVERY_MS`` ago whose key and header files have not both been seen
keeps its folder's listing starting at its stem (``topic+partition+start``), which sorts
before all three; the full listing after that finds any that land later still.

A full listing, on the first tick and then every ``FULL_LISTING_EVERY_MS``, finds what
sorts elsewhere: a dump copied in under an earlier name, or a new folder that sorts
between others (a new Kafka partition). It also chooses the active folders: those that
got a dump in the last ``ACTIVE_FOR_MS``, at most ``ACTIVE_FOLDERS_MAX`` (the newest).
Either way nothing is lost: every run lists the landing zone whole before it registers,
so a dump no tick has seen yet is registered by the next run all the same; the watch
only bounds how soon a tick asks for a run because of it.

A local landing zone is always listed whole (a folder walk cannot start after a name).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from cdc_core.ingest.connect_files import stem, stored_kind
from cdc_core.ingest.dumps import DumpFile, dump_objects, list_dump_files
from cdc_core.storage import LocationLike, is_remote
from cdc_core.storage import files as storage_files
from cdc_core.vocabulary import SinkStore

FULL_LISTING_EVERY_MS = 10 * 60_000
ACTIVE_FOR_MS = 24 * 3_600_000
ACTIVE_FOLDERS_MAX = 100


@dataclass
class TopicMarks:
    """How far one topic's prefix has been listed: when it was last listed whole, the
    greatest dump seen in each active folder, the greatest seen under the topic, and the
    sink value files still open: by stem, when first seen and which of their stored files
    have been seen."""

    listed_whole_ms: int
    folders: dict[str, str] = field(default_factory=dict)
    greatest: str | None = None
    open_stems: dict[str, tuple[int, list[str]]] = field(default_factory=dict)

    def advance(self, dumps: Iterable[DumpFile], now_ms: int) -> None:
        """Move the marks past ``dumps`` (their folders become active); a sink value file
        opens its stem, and its key and header files close it."""
        dumps = list(dumps)
        for dump in dumps:
            folder = posixpath.dirname(dump.path)
            self.folders[folder] = max(self.folders.get(folder, dump.path), dump.path)
            self.greatest = max(self.greatest or dump.path, dump.path)
        paired = [(stem(d.path), stored_kind(d.path), d) for d in dumps]
        for key, kind, _ in paired:
            if key is not None and kind is None:
                self.open_stems.setdefault(key, (now_ms, []))
        for key, kind, _ in paired:
            if key in self.open_stems and kind is not None:
                since, seen = self.open_stems[key]
                self.open_stems[key] = (since, sorted({*seen, kind}))
        self.open_stems = {
            key: (since, seen) for key, (since, seen) in self.open_stems.items()
            if now_ms - since < FULL_LISTING_EVERY_MS and len(seen) < len(SinkStore)
        }  # fmt: skip

    def start_after(self, folder: str) -> str:
        """Where a tick's listing of an active folder starts: after its greatest dump, or
        before the earliest value file of it still open."""
        opened = [key for key in self.open_stems if posixpath.dirname(key) == folder]
        return min([self.folders[folder], *opened])

    def is_new(self, path: str) -> bool:
        """Whether a dump listed in an active folder was not seen before: it sorts after
        the folder's greatest dump, or it is a stored file of an open value file."""
        if path > self.folders[posixpath.dirname(path)]:
            return True
        kind, key = stored_kind(path), stem(path)
        return kind is not None and key in self.open_stems and kind not in self.open_stems[key][1]


class LandingWatch:
    """Where the listing of each topic of one landing zone stands, kept between ticks
    (a sensor's cursor holds ``state()``); ``now_ms`` is the tick's time."""

    def __init__(self, state: Mapping[str, Any] | None, now_ms: int) -> None:
        self.now_ms = now_ms
        self.topics = {
            topic: TopicMarks(**{**marks, "open_stems": {
                key: (since, list(seen)) for key, (since, seen) in
                marks.get("open_stems", {}).items()
            }})
            for topic, marks in (state or {}).items()
        }  # fmt: skip

    def state(self) -> dict[str, Any]:
        """The marks as JSON-ready data, for the next tick."""
        return {topic: asdict(marks) for topic, marks in sorted(self.topics.items())}

    def landed(self, landing: LocationLike, topic: str, pending: Iterable[str]) -> list[str]:
        """Paths of ``topic``'s dumps to look up in its registry: after a full listing every
        dump landed; otherwise those of ``pending`` (seen by earlier ticks, not registered
        then) under the topic and the dumps listed after the marks."""
        root = storage_files.join(str(landing), topic)
        marks = self.topics.get(topic)
        if not is_remote(landing) or marks is None or (
            self.now_ms - marks.listed_whole_ms >= FULL_LISTING_EVERY_MS
        ):
            dumps = list_dump_files(landing, topic)
            if is_remote(landing):
                self.topics[topic] = self._marks_of_whole_listing(dumps)
            return [dump.path for dump in dumps]
        listed = [
            [entry for entry in storage_files.list_after(
                folder, marks.start_after(folder), recursive=False
            ) if marks.is_new(entry.path)]
            for folder in marks.folders
        ]  # fmt: skip
        listed.append(storage_files.list_after(root, marks.greatest))
        unique = {entry.path: entry for entries in listed for entry in entries}
        new = dump_objects(root, unique.values())
        marks.advance(new, self.now_ms)
        inside = root.rstrip("/") + "/"
        return sorted({*(path for path in pending if path.startswith(inside)),
                       *(dump.path for dump in new)})  # fmt: skip

    def _marks_of_whole_listing(self, dumps: list[DumpFile]) -> TopicMarks:
        """Marks after listing a topic whole: every dump seen, the recently written
        folders active."""
        marks = TopicMarks(self.now_ms)
        marks.advance(dumps, self.now_ms)
        # Only value files written lately may still get their stored files.
        lately = {stem(d.path) for d in dumps if self.now_ms - d.mtime_ms < FULL_LISTING_EVERY_MS}
        marks.open_stems = {k: v for k, v in marks.open_stems.items() if k in lately}
        newest: dict[str, int] = {}
        for dump in dumps:
            folder = posixpath.dirname(dump.path)
            newest[folder] = max(newest.get(folder, 0), dump.mtime_ms)
        recent = sorted(
            (folder for folder, written in newest.items()
             if written >= self.now_ms - ACTIVE_FOR_MS),
            key=lambda folder: newest[folder], reverse=True,
        )[:ACTIVE_FOLDERS_MAX]  # fmt: skip
        marks.folders = {folder: marks.folders[folder] for folder in sorted(recent)}
        return marks
