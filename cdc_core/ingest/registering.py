"""Registering the landed dumps of many registries at once: one scan, a commit each.

A run serves many sources, each with its own registry (a transaction group's member
registers its group's too). Registering them one by one costs a Spark job per registry;
registering them together scans every new dump in one job and commits each registry's
rows from a pool of threads.

Invariant: what a registry holds afterwards does not depend on the registries registered
beside it. Its rows come from the same scan rules (a line's topic is judged against its
own file's topic), it commits its files in one commit per arrival moment, as when it
registers alone, and a registry that refuses its files (``DumpFileChanged``) or fails its
commit fails alone: the others are registered all the same.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from cdc_core.ingest.dumps import DumpFile, list_dump_files
from cdc_core.ingest.registry import Registry, scan_new_dumps
from cdc_core.storage import LocationLike, located

# Registries committing at once: each commit is a few small object writes, mostly waiting.
COMMIT_THREADS = 4


@dataclass(frozen=True)
class LandedDumps:
    """A registry's dumps as a run listed them, and when each arrived: at its time in
    ``arrived`` (by path, for a file seen landing earlier), else at ``arrival_ms``."""

    registry: Registry
    dumps: Sequence[DumpFile]
    arrival_ms: int
    arrived: Mapping[str, int] = field(default_factory=dict)

    def by_arrival(self, new: Sequence[DumpFile]) -> list[tuple[int, list[DumpFile]]]:
        """``new`` (some of the dumps) grouped by arrival moment, oldest first."""
        moments: dict[int, list[DumpFile]] = {}
        for dump in new:
            moments.setdefault(self.arrived.get(dump.path, self.arrival_ms), []).append(dump)
        return sorted(moments.items())


class ListedLanding:
    """The landing zone as one run lists it for the sources it serves: each topic's dump
    files listed once, by the first source to ask, and each registry's new bytes counted
    once, for the first source to ask.

    Why: a member of a transaction group registers every registry of its group, so each
    member of a 200-table group would list the same 202 folders and look through the
    same 202 registries, and the run's size would count the group's dumps 200 times. One
    listing serves them all as well as one each: any listing is the landing as it stood
    at some moment of the run's start, and what lands after it is the next run's.

    Invariant: summed over the run's sources, ``new_bytes`` counts each registry's new
    dumps exactly once."""

    def __init__(self) -> None:
        self._listed: dict[tuple[str, str], list[DumpFile]] = {}
        self._counted: set[str] = set()
        self._lock = threading.Lock()

    def dump_files(self, landing: LocationLike, topic: str) -> list[DumpFile]:
        """The dump files landed for ``topic`` under ``landing``, listed once per run."""
        key = (str(located(landing)), topic)
        with self._lock:
            listed = self._listed.get(key)
        if listed is None:  # two sources listing a topic at once keep the first listing
            found = list_dump_files(landing, topic)
            with self._lock:
                listed = self._listed.setdefault(key, found)
        return listed

    def new_bytes(self, landed: Sequence[LandedDumps]) -> int:
        """The stored bytes that registering ``landed`` would scan, of the registries no
        source of the run counted before (an unreadable path counts nothing)."""
        fresh: dict[str, LandedDumps] = {}
        with self._lock:
            for entry in landed:
                if entry.registry.files_path not in self._counted:
                    self._counted.add(entry.registry.files_path)
                    fresh[entry.registry.files_path] = entry
        return new_dump_bytes(list(fresh.values()))


def new_dump_bytes(landed: Sequence[LandedDumps]) -> int:
    """The stored bytes of the ``landed`` dumps that registering would scan: those not
    registered yet (an unreadable path counts nothing)."""
    total = 0
    for entry in landed:
        new = set(entry.registry.unregistered([d.path for d in entry.dumps]))
        total += sum(max(d.size, 0) for d in entry.dumps if d.path in new)
    return total


@dataclass(frozen=True)
class Registered:
    """What registering one registry's landed dumps gave: how many were new, or why it
    failed (that registry alone)."""

    files: int = 0
    failure: Exception | None = None


@dataclass(frozen=True)
class RegisteredAhead:
    """The dumps a run registered before serving its sources, per registry (by its
    table's location): each registry's landed dumps as the run registered them, those of
    registries that refused or failed left out.

    Why: a member of a transaction group registers every registry of its group, so a run
    serving a group of N members would read N registries N times over, though the run
    registered them all at once before serving any. A source served afterwards skips a
    registry whose dumps it lists are all here: registering them again would find none
    new and refuse none, being the same files (path, size, mtime) against a registry
    that only grows.

    Invariant: only a registry whose registration succeeded is here, with the dumps it
    was given; a dump listed since, or a registry that failed, is registered (and its
    failure met) by the source as it is served."""

    dumps: Mapping[str, frozenset[DumpFile]] = field(default_factory=dict)

    @classmethod
    def of(cls, landed: Sequence[LandedDumps], outcomes: Sequence[Registered]) -> RegisteredAhead:
        """What registering ``landed`` together gave ``outcomes`` (in order)."""
        return cls({
            entry.registry.files_path: frozenset(entry.dumps)
            for entry, outcome in zip(landed, outcomes, strict=True)
            if outcome.failure is None
        })  # fmt: skip

    def covers(self, entry: LandedDumps) -> bool:
        """Whether every dump of ``entry`` was registered in its registry ahead."""
        held = self.dumps.get(entry.registry.files_path)
        return held is not None and held.issuperset(entry.dumps)


def register_landed(spark: SparkSession, landed: Sequence[LandedDumps]) -> list[Registered]:
    """Register the new ones of each registry's landed dumps (one scan job for all of
    them); what each gave, in order. A failure of the scan itself (a dump gone since it was
    listed, say) raises: no registry has committed anything by then."""
    news: list[list[DumpFile] | Exception] = []
    for entry in landed:
        try:
            news.append(entry.registry.new_files(entry.dumps))
        except Exception as refused:  # noqa: BLE001 - that registry's failure alone
            news.append(refused)
    found = [
        (entry.registry.topic, new)
        for entry, new in zip(landed, news, strict=True)
        if isinstance(new, list) and new
    ]
    scan = scan_new_dumps(spark, found) if found else None

    def commit(entry: LandedDumps, new: list[DumpFile] | Exception) -> Registered:
        if isinstance(new, Exception):
            return Registered(failure=new)
        if not new or scan is None:
            return Registered()
        try:
            for moment, files in entry.by_arrival(new):
                entry.registry.record(files, scan, moment)
        except Exception as failed:  # noqa: BLE001 - that registry's failure alone
            return Registered(failure=failed)
        return Registered(files=len(new))

    with ThreadPoolExecutor(COMMIT_THREADS, "reclock-register") as pool:
        return list(pool.map(commit, landed, news))

