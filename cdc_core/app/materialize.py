"""Materializing a run: its windows for one source, and many sources served at once.

A deployment's run serves every source it selects. Serving them one after another makes
a window's cost grow by a whole source's round of small Spark jobs and Delta commits per
source, most of it waiting (on the JVM, on a commit), not computing. So the run serves up
to ``SOURCE_WORKERS`` sources at once on the one Spark session, which runs their jobs
side by side.

Invariants:

- Each source is served whole and on its own: what one source writes never depends on
  another being served beside it (they share no table), and a source that fails is
  reported as that source's failure while the others go on.
- The members of a transaction group are served one after another by one worker: they
  register each other's dumps and bind from the group's shards.
- Work of the same kind for every source runs once for all of them: a run's new dumps
  are registered in one scan, each registry with its own commit, and its windows bound
  and reclocked in one job each, each table with its own commit.
- The plan settings are the session's, so sources served together are planned once,
  from what they read together (``planned_together``); a single unit keeps its own
  per-phase plans.
"""

from __future__ import annotations

import functools
import queue
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from pyspark.sql import SparkSession

from cdc_core.config import Config, SourceConfig
from cdc_core.ingest.registering import (
    LandedDumps,
    ListedLanding,
    RegisteredAhead,
    register_landed,
)
from cdc_core.phases import ALL_SOURCES, phase
from cdc_core.reclock import Windows
from cdc_core.source import RunsTogether, SourcePipeline, SourceStatus, WindowReport
from cdc_core.spark import planned_together
from cdc_core.storage import LocationLike

# Sources served at once. Spark runs their jobs side by side on one session; more than a
# few only queue on the JVM's cores (a 2-core machine served 16 sources' windows 1.5x to
# 1.7x faster with 4 at once than one by one, and no faster with 8).
SOURCE_WORKERS = 4
# How often the calling thread wakes while sources are served, to pass on their progress.
IDLE_SECONDS = 0.25

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
# A source's run as a run serving many sources prepares it: its pipeline, and the windows
# it is about to run.
SourceRun = tuple[SourcePipeline, Windows]


@dataclass(frozen=True)
class MaterializedWindows:
    """What a source's part of a run did: a report per window, and its status after."""

    reports: list[WindowReport]
    status: SourceStatus


def open_source(
    spark: SparkSession,
    config: Config,
    source: SourceConfig,
    lake: LocationLike,
    landing: LocationLike,
) -> SourcePipeline:
    """The source opened to be written: its tables under ``lake``, its dumps under
    ``landing``, its shards opened and created when missing. A run, its export and
    maintenance work on it; what only reads (status, snapshots, the checks) opens a read
    handle instead, which creates nothing."""
    return SourcePipeline(spark, config, source, lake, landing)


def materialize_windows(
    pipeline: SourcePipeline,
    runs: Sequence[Windows],
    *,
    now_ms: int,
    arrived: dict[str, int],
    on_window: Callable[[WindowReport], None] | None = None,
) -> MaterializedWindows:
    """Register the source's new dumps (stamped ``now_ms``, or their time in
    ``arrived``), process each run of adjacent windows in one pass, and publish.

    Windows already held write nothing, so a run repeated or resumed after a crash equals
    one never interrupted."""
    pipeline.register_dumps(arrival_ms=now_ms, arrived=arrived)
    reports: list[WindowReport] = []
    for windows in runs:
        for report in pipeline.run_windows(windows):
            reports.append(report)
            if on_window is not None:
                on_window(report)
    return MaterializedWindows(reports, pipeline.finish())


class SourceWork(Protocol[T_co]):
    """One source's part of a run, opened: what it reads, and serving it."""

    def input_bytes(self, listed: ListedLanding) -> int:
        """What serving it reads, in stored bytes, listing the landing through ``listed``,
        which the run's sources share (see ``SourcePipeline.input_bytes``)."""
        ...

    def landed_dumps(self) -> Sequence[LandedDumps]:
        """What serving it registers first (see ``SourcePipeline.landed_dumps``)."""
        ...

    def registered_ahead(self, registered: RegisteredAhead) -> None:
        """What the run registered before serving it: its registration skips that (see
        ``SourcePipeline.registered_ahead``)."""
        ...

    def binding(self) -> SourceRun | None:
        """The pipeline and the windows serving it runs, to bind with the other sources'
        (None: it runs none, or several runs of windows, which bind one after another)."""
        ...

    def serve(self) -> T_co:
        """Serve the source; what the caller reports of it."""
        ...


@dataclass(frozen=True)
class Served(Generic[T]):
    """A source served: what it gave, or the failure that stopped it."""

    source: str
    result: T | None = None
    failure: Exception | None = None


def serving_units(config: Config, names: Sequence[str]) -> list[list[str]]:
    """``names`` in config order, grouped into what one worker serves in turn: each
    transaction group's members together, every other source alone."""
    units: dict[str, list[str]] = {}
    for source in config.sources:
        if source.name in names:
            group = config.transaction_group(source.name)
            units.setdefault(source.name if group is None else f"group {group.name}", []).append(
                source.name
            )
    return list(units.values())


def serve_together(
    spark: SparkSession,
    config: Config,
    names: Sequence[str],
    open_work: Callable[[str], SourceWork[T]],
    *,
    idle: Callable[[], None],
    workers: int = SOURCE_WORKERS,
    finish: Callable[[list[Served[T]]], list[Served[T]]] | None = None,
) -> Iterator[Served[T]]:
    """Serve the named sources, up to ``workers`` units at once, yielding each source as
    it finishes (in the calling thread, which calls ``idle`` while it waits: the place to
    pass on progress, since only the calling thread may talk to the orchestrator).

    Stages: every source is opened and sized; then, when several sources share the
    session, planned once from their sizes together, their new dumps are registered in
    one scan (``register_together``) and their windows bound and reclocked in one job
    each (``RunsTogether``, which keeps what they share until all are done); then they
    are served (a transaction group's members side by side once all were reclocked
    ahead: their group bound them already). ``finish``, when given, is
    what the run does once every source is served, for all of them together (judging
    their checks by one job per kind, then their exports): given every source as served
    (a source that could not be opened is yielded at once), what to yield for each."""
    units = serving_units(config, names)
    if not units:
        return
    sources = sum(len(unit) for unit in units)
    together = sources > 1
    done: queue.SimpleQueue[Served[T]] = queue.SimpleQueue()
    pool = ThreadPoolExecutor(max(1, min(workers, sources)), "reclock-source")
    try:
        listed = ListedLanding() if together else None
        opened = _run_all(
            pool, [functools.partial(_open_unit, unit, open_work, listed) for unit in units], idle
        )
        works = [ready for ready, _ in opened if ready]
        for _, failed in opened:
            yield from failed
        if not together:
            jobs = [functools.partial(_serve_unit, unit, done) for unit in works]
            yield from _finished(_drain_while(pool, jobs, idle, done), pool, idle, finish)
            return
        sizes = sum(size for unit in works for _, _, size in unit)
        shared = RunsTogether()
        with planned_together(spark, sizes, config.spark.conf):
            sized = [work for unit in works for _, work, _ in unit]
            _run_all(pool, [functools.partial(register_together, spark, sized)], idle)
            runs = [run for work in sized if (run := work.binding()) is not None]
            try:
                _run_all(pool, [functools.partial(shared.prepare, spark, runs)], idle)
                jobs = [
                    functools.partial(_serve_unit, part, done)
                    for unit in works
                    for part in _split_when_bound(unit, shared.reclocked)
                ]
                yield from _finished(_drain_while(pool, jobs, idle, done), pool, idle, finish)
            finally:
                shared.release()
    finally:
        # A run stopped early (terminated, or its caller failed) starts no further source;
        # those under way finish their (atomic, idempotent) commits before it returns.
        pool.shutdown(wait=True, cancel_futures=True)


Opened = list[tuple[str, SourceWork[T], int]]


def register_together(spark: SparkSession, works: Sequence[SourceWork[object]]) -> None:
    """Register the new dumps of every source of a run in one scan (each registry once:
    a transaction group's members list the same ones), before any source is served.

    Only a shortcut: each source is handed what was registered here
    (``RegisteredAhead``), and registers as it is served what that does not cover. So
    what fails here (a registry that cannot be read or refuses a changed dump, a scan
    that cannot read a dump) is left for the sources concerned to meet, and report as
    their own failure, when they register."""
    with phase(ALL_SOURCES, "register dumps") as figures:
        landed: dict[str, LandedDumps] = {}
        for work in works:
            try:
                landed.update((e.registry.files_path, e) for e in work.landed_dumps())
            except Exception:  # noqa: BLE001, S112 - the source meets it when it registers
                continue
        entries = list(landed.values())
        try:
            registered = register_landed(spark, entries)
            ahead = RegisteredAhead.of(entries, registered)
        except Exception:  # noqa: BLE001 - each source meets it again when it registers
            registered, ahead = [], RegisteredAhead()
        figures["files"] = sum(outcome.files for outcome in registered)
    for work in works:
        work.registered_ahead(ahead)


def _split_when_bound(unit: Opened[T], reclocked: set[str]) -> list[Opened[T]]:
    """A unit whose sources were all reclocked ahead (a transaction group's members,
    bound by the group already) as one unit per source: nothing is left that they must
    do in turn, so they are served side by side; any other unit as it is."""
    if len(unit) > 1 and all(name in reclocked for name, _, _ in unit):
        return [[entry] for entry in unit]
    return [unit]


def _open_unit(
    unit: list[str], open_work: Callable[[str], SourceWork[T]], listed: ListedLanding | None
) -> tuple[Opened[T], list[Served[T]]]:
    """Open each source of a unit (and size it, listing the landing through ``listed``,
    when given); a source that cannot be opened fails alone (a group's members after it
    still open: each is its own source)."""
    ready: Opened[T] = []
    failed: list[Served[T]] = []
    for name in unit:
        try:
            work = open_work(name)
            ready.append((name, work, 0 if listed is None else work.input_bytes(listed)))
        except Exception as failure:  # noqa: BLE001 - reported as the source's failure
            failed.append(Served(name, failure=failure))
    return ready, failed


def _serve_unit(unit: Opened[T], done: queue.SimpleQueue[Served[T]]) -> None:
    """Serve a unit's sources in turn, each reported as soon as it finishes."""
    for name, work, _ in unit:
        try:
            done.put(Served(name, result=work.serve()))
        except Exception as failure:  # noqa: BLE001 - reported as the source's failure
            done.put(Served(name, failure=failure))


def _finished(
    served: Iterator[Served[T]],
    pool: ThreadPoolExecutor,
    idle: Callable[[], None],
    finish: Callable[[list[Served[T]]], list[Served[T]]] | None,
) -> Iterator[Served[T]]:
    """The sources as ``served`` yields them, or, with ``finish``, once all are served,
    what ``finish`` makes of them all (run on the pool, ``idle`` called meanwhile)."""
    if finish is None:
        yield from served
        return
    everyone = list(served)
    yield from _run_all(pool, [functools.partial(finish, everyone)], idle)[0]


def _run_all(
    pool: ThreadPoolExecutor, jobs: Sequence[Callable[[], T]], idle: Callable[[], None]
) -> list[T]:
    """Run ``jobs`` on the pool, calling ``idle`` while they run; their results in order."""
    futures = [pool.submit(job) for job in jobs]
    pending: set[Future[T]] = set(futures)
    while pending:
        _, pending = wait(pending, timeout=IDLE_SECONDS, return_when=FIRST_COMPLETED)
        idle()
    return [future.result() for future in futures]


def _drain_while(
    pool: ThreadPoolExecutor,
    jobs: Sequence[Callable[[], None]],
    idle: Callable[[], None],
    done: queue.SimpleQueue[Served[T]],
) -> Iterator[Served[T]]:
    """Run ``jobs`` on the pool, yielding what they put in ``done`` as it comes."""
    pending: set[Future[None]] = {pool.submit(job) for job in jobs}
    while pending or not done.empty():
        if pending:
            _, pending = wait(pending, timeout=IDLE_SECONDS, return_when=FIRST_COMPLETED)
        idle()
        while not done.empty():
            yield done.get()
