"""Many sources' windows bound and reclocked together: one read of their dumps, one job
to bind them, one job to write their reclocked records.

A run serving many sources would otherwise bind and reclock each source's windows with
its own read of its dumps and its own Spark jobs, and a job costs far more than the few
records a source adds in a window. So before any source is served, every source whose
own policy binds its windows asks together (``propose_frontiers``): one scan reads every
source's candidate dumps, one job finds every source's frontiers, and each source
commits its bindings to its own remap, with its own compare-and-set, from a pool of
threads. Then one plan reclocks every source's range from that read
(``reclocked_parts``), and one job stages every source's reclocked records in its own
table's folder, each table committing its own files (``append_together``). Each
source's run then applies its envelope to its part of the reclocked records.

The members of a transaction group are bound by their group: the group's binding is
minted once (by the first member to ask), and each member commits its part of it to its
remap from the pool. Their ranges are then read by one scan of the dumps they need and
reclocked and written as above, so a group of hundreds of tables costs one pass, not
one per member.

Invariants: what a source binds and reclocks does not depend on the sources served
beside it (its partitions are bound on their own, from its own files, by its own policy
or its group's, and its range from its own bindings), so its tables hold what serving it
alone would hold. Each source's run registers its writer lease on its tables before
anything is staged for it, and releases it when its run ends (``RunsTogether.release``
releases what a run that never started left). This is only a shortcut, like registering together: a
source whose binding or reclocking fails here (a refused start offset, a remap another
process moved, a read that failed) is left to do it on its own when it is served, and to
report its failure as its own.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_core.calendar import Windows
from cdc_core.frontier import OffsetFrontier
from cdc_core.ingest.canonical import (
    SOURCE,
    CanonicalRecords,
    SharedReads,
    SourceFiles,
    read_canonical,
)
from cdc_core.phases import ALL_SOURCES, phase
from cdc_core.reclock.reclocking import (
    RangeToReclock,
    ReclockedFrames,
    ReclockedRange,
    reclocked_parts,
)
from cdc_core.reclock.remap import FrontierRequest, Proposals, UnboundWindows, propose_frontiers
from cdc_core.shard.together import TARGET, Batch, append_together
from cdc_core.source.pipeline import SourcePipeline
from cdc_core.source.states_together import publish_together
from cdc_core.source.upserts_together import UpsertRun, truncating, upserts_together
from cdc_core.vocabulary import Envelope

# Tables committing at once: each commit is a few small object writes, mostly waiting.
COMMIT_THREADS = 4
# The fewest sources of one envelope (UPSERT, DEBEZIUM UPSERT) whose envelopes are
# applied together. The joint plan is larger than one source's, and it runs before the
# sources are served, while their own envelopes run side by side on the serving pool
# (measured with the UPSERT envelope: ``benchmarks.upserts_together`` has
# 2 sources at 2.6 s together against 1.9 s one after another, 4 at 3.1 s against 3.6 s,
# 8 at 3.7 s against 6.5 s; on 2 cores, where the pool runs about two at once).
ENVELOPES_TOGETHER_FROM = 8


@dataclass(frozen=True)
class _Ahead:
    """A source's run to bind ahead: its pipeline, the windows it will run, what of them
    its remap has yet to bind."""

    pipeline: SourcePipeline
    windows: Windows
    unbound: UnboundWindows


class RunsTogether:
    """What a run serving many sources shares until every source is served: the reads
    and reclocked records persisted for them, and the writer leases taken ahead of their
    runs. ``prepare`` before serving them, ``release`` once all are served."""

    def __init__(self, *, envelopes_from: int = ENVELOPES_TOGETHER_FROM) -> None:
        """``envelopes_from``: the fewest sources of one envelope whose envelopes are
        applied (and whose ``state`` is published) together; fewer apply their own."""
        self.envelopes_from = envelopes_from
        # The sources whose windows were reclocked ahead: their runs have nothing left
        # to bind, so a transaction group's members among them may be served side by side.
        self.reclocked: set[str] = set()
        self.reads = SharedReads()
        self._leases: list[ExitStack] = []
        self._lock = threading.Lock()

    def prepare(self, spark: SparkSession, runs: Sequence[tuple[SourcePipeline, Windows]]) -> int:
        """Bind, then reclock, the windows of every run (a source's pipeline and the
        windows it is about to run) that its remap has yet to bind, by the source's own
        policy or by its transaction group's: one job each for all of them (one per
        headers setting, and per kind of binding: the runs' reads keep the headers or
        not). Returns how many sources' windows were reclocked ahead."""
        if not runs:
            return 0
        with phase(ALL_SOURCES, "bind windows") as figures:
            ahead: dict[bool, list[_Ahead]] = {}
            members: dict[bool, list[_Ahead]] = {}
            for pipeline, windows in runs:
                try:
                    found = pipeline.binding_ahead(windows)
                except Exception:  # noqa: BLE001, S112 - the source meets it when it runs
                    continue
                if found is not None:
                    into = ahead if pipeline.group is None else members
                    headers = pipeline.source.keeps_headers
                    into.setdefault(headers, []).append(_Ahead(pipeline, *found))
            proposed = [(batch, self._bind(spark, batch)) for batch in ahead.values()]
            imposed = [(batch, self._bind_members(batch)) for batch in members.values()]
            figures["sources"] = sum(len(bound) for _, (_, bound) in proposed) + sum(
                len(bound) for _, bound in imposed
            )
        reclocked = 0
        for batch, (proposals, bound) in proposed:
            if bound and proposals is not None:
                reclocked += self._reclock_proposed(spark, batch, proposals, bound)
        for batch, bound in imposed:
            if bound:
                reclocked += self._reclock_members(spark, batch, bound)
        return reclocked

    def release(self) -> None:
        """Release the leases of runs that never started, then every persisted read."""
        with self._lock:
            leases, self._leases = self._leases, []
        for lease in leases:
            lease.close()  # a run that ended closed it already: nothing happens
        self.reads.release()

    def _bind(
        self, spark: SparkSession, ahead: Sequence[_Ahead]
    ) -> tuple[Proposals | None, list[int]]:
        """Propose every run's frontiers in one job and commit each source's bindings;
        what was read to bind them (None when nothing could be), and the runs bound (by
        index in ``ahead``)."""
        requests = [
            FrontierRequest(a.pipeline.source, a.pipeline.registry, a.unbound.previous,
                            a.unbound.unbound, a.pipeline.run_reads())
            for a in ahead
        ]  # fmt: skip
        try:
            proposals = propose_frontiers(spark, requests, shared=self.reads)
        except Exception:  # noqa: BLE001 - each source meets it again when it binds alone
            return None, []

        def commit(run: _Ahead, answer: list[OffsetFrontier] | Exception) -> bool:
            if isinstance(answer, Exception):
                return False
            return _committed(run, lambda: list(zip(run.unbound.unbound.ends, answer,
                                                    strict=True)))  # fmt: skip

        with ThreadPoolExecutor(COMMIT_THREADS, thread_name_prefix="reclock-bind") as pool:
            committed = list(pool.map(commit, ahead, proposals.frontiers))
        return proposals, [i for i, done in enumerate(committed) if done]

    @staticmethod
    def _bind_members(ahead: Sequence[_Ahead]) -> list[int]:
        """Commit to each member of a transaction group its part of the group's bindings
        (the group's binding minted by the first member of each group that asks, once);
        the runs bound (by index in ``ahead``)."""

        def commit(run: _Ahead) -> bool:
            imposed = run.pipeline.imposed_bindings
            assert imposed is not None  # a member of a group
            # The member's own phase, as when it binds alone: it ends with its commit.
            with phase(run.pipeline.source.name, "bind windows"):
                return _committed(
                    run, lambda: imposed(run.unbound.previous, run.unbound.bound, run.windows)
                )

        firsts: dict[str, int] = {}
        for i, run in enumerate(ahead):
            firsts.setdefault(run.pipeline.reader.group_name or "", i)
        committed = {i: commit(ahead[i]) for i in firsts.values()}  # each group mints once
        rest = [i for i in range(len(ahead)) if i not in committed]
        with ThreadPoolExecutor(COMMIT_THREADS, thread_name_prefix="reclock-bind") as pool:
            committed.update(zip(rest, pool.map(lambda i: commit(ahead[i]), rest), strict=True))
        return sorted(i for i, done in committed.items() if done)

    def _reclock_members(
        self, spark: SparkSession, ahead: Sequence[_Ahead], bound: Sequence[int]
    ) -> int:
        """Reclock the bound members of transaction groups by one read of the dumps their
        ranges need, one plan and one write job; how many were reclocked."""
        ranges: dict[int, RangeToReclock] = {}
        runs: dict[int, _Ahead] = {}
        with phase(ALL_SOURCES, "plan reclocked ranges"):
            for i in bound:
                run = ahead[i]
                try:
                    planned = run.pipeline.range_ahead(run.windows)
                except Exception:  # noqa: BLE001, S112 - the source meets it when it runs
                    continue
                ranges[len(ranges)] = planned
                runs[len(runs)] = run
        if not runs:
            return 0
        parts = [
            SourceFiles(run.pipeline.registry.topic, ranges[k].needed, ranges[k].starts)
            for k, run in runs.items()
        ]
        headers = ahead[0].pipeline.source.keeps_headers
        try:
            read = self.reads.persist(read_canonical(spark, parts, headers=headers))
        except Exception:  # noqa: BLE001 - each source reads on its own when it runs
            return 0
        return self._reclock(spark, runs, ranges, read)

    def _reclock_proposed(
        self,
        spark: SparkSession,
        ahead: Sequence[_Ahead],
        proposals: Proposals,
        bound: Sequence[int],
    ) -> int:
        """Reclock the bound runs read together to propose their frontiers, from that
        read; how many were reclocked."""
        read = proposals.read
        if read is None:  # one source alone: its run reclocks from its own read
            return 0
        ranges: dict[int, RangeToReclock] = {}
        runs: dict[int, _Ahead] = {}
        with phase(ALL_SOURCES, "plan reclocked ranges"):
            for i in bound:
                run, part = ahead[i], proposals.parts.get(i)
                try:
                    planned = run.pipeline.range_ahead(run.windows)
                except Exception:  # noqa: BLE001, S112 - the source meets it when it runs
                    continue
                paths = {f.path for f in part.files} if part is not None else set()
                if (
                    part is None
                    or planned.starts != dict(part.starts)
                    or not {f.path for f in planned.needed} <= paths
                ):
                    continue  # its range reads more than was read: it reads on its own
                ranges[proposals.part_of[i]] = planned
                runs[proposals.part_of[i]] = run
        return self._reclock(spark, runs, ranges, read)

    def _reclock(
        self,
        spark: SparkSession,
        runs: Mapping[int, _Ahead],
        ranges: Mapping[int, RangeToReclock],
        read: CanonicalRecords,
    ) -> int:
        """Reclock each run's range (by its part of ``read``) by one plan, append every
        ``reclocked`` by one job, then apply the envelopes that go together; how many
        runs were reclocked."""
        if not ranges:
            return 0
        with ThreadPoolExecutor(COMMIT_THREADS, thread_name_prefix="reclock-lease") as pool:
            leased = dict(zip(runs, pool.map(self._lease, runs.values()), strict=True))
        runs = {k: run for k, run in runs.items() if leased[k]}
        ranges = {k: ranges[k] for k in runs}
        if not runs:
            return 0
        records, errors = reclocked_parts(spark, read, ranges)
        records = self.reads.persist_frame(records)
        batches = {
            str(k): Batch(run.pipeline.reclocked, ranges[k].lower, ranges[k].upper)
            for k, run in runs.items()
        }
        with phase(ALL_SOURCES, "append reclocked") as figures:
            try:
                written = append_together(
                    records.withColumn(TARGET, F.col(SOURCE).cast("string")), batches,
                    _as_stored, threads=COMMIT_THREADS,
                )  # fmt: skip
            except Exception:  # noqa: BLE001 - each source reclocks again when it runs
                return 0
            figures["rows"] = sum(sum((w or {}).values()) for w in written.values())
        parts = _JointParts(spark, records, errors, read.erring_lines)
        for k, run in runs.items():
            planned = ranges[k]
            build = functools.partial(parts.frames, k, planned.known_errors)
            reclocked = ReclockedRange(planned.lower, planned.upper, build)
            run.pipeline.reclocked_ahead(run.windows, reclocked, written.get(str(k)) or {})
            self.reclocked.add(run.pipeline.source.name)
        self._envelope(spark, runs, records, errors)
        return len(runs)

    def _envelope(
        self, spark: SparkSession, runs: Mapping[int, _Ahead], records: DataFrame,
        errors: DataFrame,
    ) -> None:
        """Apply the UPSERT (and the DEBEZIUM UPSERT) envelope of every run that takes it
        together, by one plan per envelope, from the records just reclocked
        (``upserts_together``); a run whose part fails applies its own."""
        by_envelope: dict[Envelope, list[UpsertRun]] = {}
        for k, run in runs.items():
            try:
                upsert = run.pipeline.upsert_ahead(run.windows, k)
            except Exception:  # noqa: BLE001, S112 - the source meets it when it runs
                continue
            if upsert is not None:
                by_envelope.setdefault(upsert.source.envelope, []).append(upsert)
        enveloped: dict[int, tuple[dict[int, int], dict[int, int]]] = {}
        for upserts in by_envelope.values():
            try:
                truncated = truncating(records, upserts)
                upserts = [u for u in upserts if u.number not in truncated]
                if len(upserts) >= self.envelopes_from:
                    enveloped.update(upserts_together(spark, upserts, records, errors))
            except Exception:  # noqa: BLE001, S112 - each source applies its own when it runs
                continue
        for k, (changes, failed) in enveloped.items():
            runs[k].pipeline.enveloped_ahead(runs[k].windows, changes, failed)
        self._publish(spark, [runs[k] for k in enveloped])

    @staticmethod
    def _publish(spark: SparkSession, runs: Sequence[_Ahead]) -> None:
        """Publish the ``state`` of every run whose ``changes`` a joint envelope wrote, by
        one job (``publish_together``); a table left out is published when its source
        finishes, as it always was."""
        with phase(ALL_SOURCES, "publish state") as figures:
            publishes = {}
            for run in runs:
                try:
                    publishes[run.pipeline.source.name] = run.pipeline.state_ahead()
                except Exception:  # noqa: BLE001, S112 - the source meets it when it finishes
                    continue
            try:
                published = publish_together(spark, publishes, threads=COMMIT_THREADS)
            except Exception:  # noqa: BLE001 - each source publishes when it finishes
                published = set()
            figures["tables"] = len(published)

    def _lease(self, run: _Ahead) -> bool:
        """Register the run's writer lease on the source's tables ahead of its run."""
        try:
            lease = run.pipeline.lease_run(run.windows)
        except Exception:  # noqa: BLE001 - the source meets it when it runs
            return False
        with self._lock:
            self._leases.append(lease)
        return True


def _committed(
    run: _Ahead, minted: Callable[[], list[tuple[int, OffsetFrontier]]]
) -> bool:
    """Commit the run's bindings (what ``minted`` gives) to its source's remap and hand
    them to its run; False when that fails or another process bound first (the run then
    binds, or reads the winner's bindings, when it is served)."""
    try:
        bindings = run.unbound.commit(run.pipeline.remap, minted())
    except Exception:  # noqa: BLE001 - the source meets it when it binds alone
        return False
    if bindings is None:
        return False
    run.pipeline.bound_ahead(run.windows, bindings)
    return True


@dataclass
class _JointParts:
    """Each source's part of the frames reclocked together, as a run reclocking alone
    would have them (``ReclockedFrames``), derived only for a source that asks: most
    have their envelope applied together and never do."""

    spark: SparkSession
    records: DataFrame
    errors: DataFrame
    erring_lines: DataFrame

    @functools.cached_property
    def erring(self) -> set[int]:
        """The sources with erring lines in the joint read (one job, run once)."""
        rows = self.erring_lines.select(SOURCE).distinct().collect()
        return {row[SOURCE] for row in rows}

    def frames(self, part: int, known_errors: bool) -> ReclockedFrames:
        """Source ``part``'s records and errors; its erring lines witness that it has no
        error (no witness when the driver knows of errors to report)."""
        mine = F.col(SOURCE) == part
        witness = None
        if not known_errors:  # its erring lines, none when it has none
            witness = self.erring_lines.where(mine) if part in self.erring else _nothing(self.spark)
        return ReclockedFrames(
            self.records.where(mine).drop(SOURCE), self.errors.where(mine).drop(SOURCE), witness
        )


def _as_stored(_target: str, rows: pa.Table) -> pa.Table:
    """A reclocked table's rows are stored as they are reclocked."""
    return rows


def _nothing(spark: SparkSession) -> DataFrame:
    """A witness of no error at all."""
    return spark.range(0)
