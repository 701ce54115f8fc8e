"""Binding the windows of many sources at once: one read of their dumps, one job.

A run serving many sources would otherwise bind each source's windows with its own read
of its dumps and its own Spark job, and a job costs far more than the few positions a
source adds in a window. So before any source is served, every source whose own policy
binds its windows asks together (``propose_frontiers``): one scan reads every source's
candidate dumps, one job finds every source's frontiers, and each source commits its
bindings to its own remap, with its own compare-and-set, from a pool of threads. The read
stays persisted (in the run's ``SharedReads``), and each source's run reclocks its
windows from its part of it.

Invariants: what a source binds does not depend on the sources bound beside it (its
partitions are bound on their own, from its own files, by its own policy), so its remap
holds what binding it alone would hold. This is only a shortcut, like registering
together: a source whose binding fails here (a refused start offset, a remap another
process moved, a read that failed) is left to bind on its own when it is served, and to
report its failure as its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import SparkSession

from cdc_core.calendar import Windows
from cdc_core.frontier import OffsetFrontier
from cdc_core.ingest.canonical import SharedReads
from cdc_core.phases import ALL_SOURCES, phase
from cdc_core.reclock.remap import FrontierRequest, UnboundWindows, propose_frontiers
from cdc_core.source.pipeline import SourcePipeline

# Remaps committing at once: each commit is a few small object writes, mostly waiting.
COMMIT_THREADS = 4

# A source's run to bind ahead: its pipeline, the windows it will run, what is unbound.
_Ahead = tuple[SourcePipeline, Windows, UnboundWindows]


def bind_together(
    spark: SparkSession, runs: Sequence[tuple[SourcePipeline, Windows]], shared: SharedReads
) -> int:
    """Bind the windows of every run (a source's pipeline and the windows it is about to
    run) that its remap has yet to bind by the source's own policy, all in one job (one
    per headers setting: the runs' reads keep them or not); how many sources it bound.
    Each bound run is handed its bindings and its part of the read (kept in ``shared``,
    which the caller releases once the runs are done)."""
    with phase(ALL_SOURCES, "bind windows") as figures:
        ahead: dict[bool, list[_Ahead]] = {}
        for pipeline, windows in runs:
            try:
                found = pipeline.binding_ahead(windows)
            except Exception:  # noqa: BLE001, S112 - the source meets it when it runs
                continue
            if found is not None:
                ahead.setdefault(pipeline.source.keeps_headers, []).append((pipeline, *found))
        bound = sum(_bind(spark, together, shared) for together in ahead.values())
        figures["sources"] = bound
    return bound


def _bind(spark: SparkSession, ahead: Sequence[_Ahead], shared: SharedReads) -> int:
    """Propose every run's frontiers in one job and commit each source's bindings; how
    many sources it bound."""
    requests = [
        FrontierRequest(p.source, p.registry, u.previous, u.unbound, p.run_reads())
        for p, _, u in ahead
    ]
    try:
        answers = propose_frontiers(spark, requests, shared=shared)
    except Exception:  # noqa: BLE001 - each source meets it again when it binds alone
        return 0

    def commit(run: _Ahead, answer: list[OffsetFrontier] | Exception) -> bool:
        pipeline, windows, unbound = run
        if isinstance(answer, Exception):
            return False
        try:
            minted = list(zip(unbound.unbound.ends, answer, strict=True))
            bindings = unbound.commit(pipeline.remap, minted)
        except Exception:  # noqa: BLE001 - the source meets it when it binds alone
            return False
        if bindings is None:  # another process bound first: the run reads its bindings
            return False
        pipeline.bound_ahead(windows, bindings)
        return True

    with ThreadPoolExecutor(COMMIT_THREADS, thread_name_prefix="reclock-bind") as pool:
        return sum(pool.map(commit, ahead, answers))
