"""Correctness checks over a source's shards, judged at one IntoTime.

Each check recomputes its verdict from the durable tables alone (never from what the
pipeline believes it wrote), so it catches damage done behind the pipeline's back.
Only aggregates reach the driver.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from cdc_core.cdcv2 import check_completeness
from cdc_core.cdcv2.completeness import Tallies, tallies_together
from cdc_core.envelopes import constraint_violations
from cdc_core.frontier import OffsetFrontier, TimeFrontier, iso
from cdc_core.ingest import RegisteredFile
from cdc_core.reclock import HeldPartition, frontier_of, remap_updates
from cdc_core.reclock.reclocking import first_covering
from cdc_core.reclock.transactions import PendingTransactions
from cdc_core.schemas import ERROR
from cdc_core.shard import delta_io
from cdc_core.shard.read import ShardReader
from cdc_core.shard.read_together import KEY, RangeRead, read_together
from cdc_core.spark import local_frame
from cdc_core.updates import DIFF, TIME

MAX_EXAMPLES = 10


@dataclass(frozen=True)
class CheckOutcome:
    """A verdict with the figures behind it (JSON-friendly)."""

    passed: bool
    description: str
    figures: Mapping[str, object] = field(default_factory=dict)


def fingerprint(columns: Sequence[str]) -> Column:
    """A 64-bit fingerprint of a row's ``columns``, with their null positions, so that the
    checks shuffle one long per row instead of the row: two different rows collide with
    probability about 2**-64 (a million rows: about 3e-8 that any pair does)."""
    values = [F.col(f"`{name}`") for name in columns]
    if not values:  # a key-only table's rows have no columns beyond their key
        return F.lit(0).cast("long")
    return F.xxhash64(*values, *[value.isNull() for value in values])


@dataclass(frozen=True)
class CompletenessQuestion:
    """Whether ``shard`` is complete on ``[lower, upper)``: ``on_driver`` when the shard
    is metadata (the remap), read and recounted on the driver, where a Spark job would
    cost far more."""

    shard: ShardReader
    lower: int
    upper: int
    on_driver: bool = False


def completeness_together(
    spark: SparkSession, questions: Sequence[CompletenessQuestion]
) -> list[CheckOutcome]:
    """Each question's verdict, in order: distinct ``(data, time)`` updates per time equal
    the counts announced by the progress statements committed with them. ``listen``
    returns the stored rows unconsolidated, so a double write shows up too (``lower`` >=
    1). Rows are told apart by their fingerprint. Times at or before a shard's since are
    compacted (a retire folds them into the since) and can no longer be recounted, so
    the judged range starts after it.

    Shards of the same columns are recounted by one Spark job (``read_together``), so a
    run judging hundreds of sources pays a job per table layout, not per table."""
    ranges: list[tuple[int, int]] = []
    stored: list[pa.Table | Tallies | None] = []  # None: no file reaches the range
    by_layout: dict[str, dict[str, RangeRead]] = {}
    for index, question in enumerate(questions):
        shard = question.shard
        lower = max(question.lower, (shard.refresh().since.time or 0) + 1)
        ranges.append((lower, question.upper))
        stored.append(None)
        if lower >= question.upper:
            continue
        if question.on_driver:
            stored[index] = shard.updates_through(question.upper - 1, after=lower - 1)
        elif shard.holds_updates(lower - 1, question.upper - 1):
            layout = by_layout.setdefault(shard.data_schema.json(), {})
            layout[str(index)] = RangeRead(shard, lower - 1, question.upper - 1)
    for reads in by_layout.values():
        data = next(iter(reads.values())).shard.data_schema
        updates = read_together(spark, reads, delta_io.shard_schema(data)).select(
            KEY, fingerprint(data.names).alias("fingerprint"), TIME, DIFF
        )
        tallies = tallies_together(updates, KEY, 0, TimeFrontier.empty())
        for key in reads:
            stored[int(key)] = tallies.get(key, {})
    return [
        _completeness_outcome(question.shard, lower, upper, found)
        if lower < upper
        else CheckOutcome(True, f"[.., {iso(upper)}) is compacted: nothing left to recount")
        for question, (lower, upper), found in zip(questions, ranges, stored, strict=True)
    ]


def _completeness_outcome(
    shard: ShardReader, lower: int, upper: int, stored: pa.Table | Tallies | None
) -> CheckOutcome:
    """The verdict on ``[lower, upper)`` from what is ``stored`` there (its rows, or
    their tallies) against the shard's progress statements."""
    statements = shard.progress(from_time=lower)
    report = check_completeness(stored, statements, lower, TimeFrontier.at(upper))
    wrong = [
        {"time": d.time, "announced": d.announced, "found": d.found}
        for d in report.discrepancies[:MAX_EXAMPLES]
    ]
    problems = []
    if not TimeFrontier.at(upper) <= report.covered:
        problems.append(f"progress statements cover only up to {report.covered.iso()}")
    if wrong:
        problems.append("count mismatches at times " + ", ".join(iso(w["time"]) for w in wrong))
    if report.duplicated_times:
        twice = ", ".join(iso(t) for t in report.duplicated_times)
        problems.append(f"(data, time) stored twice at times {twice}")
    return CheckOutcome(
        passed=report.complete,
        description="; ".join(problems) or f"complete on [{iso(lower)}, {iso(upper)})",
        figures={
            "mismatches": wrong,
            "mismatched_times": len(report.discrepancies),
            "duplicated_times": list(report.duplicated_times[:MAX_EXAMPLES]),
            "covered_through": report.covered.time,
        },
    )


def remap_history(remap: ShardReader) -> list[tuple[int, OffsetFrontier]]:
    """The bound frontier at every binding time from the remap's since on (tiny)."""
    remap.refresh()
    since, upper = remap.since.time, remap.upper.time
    if since is None or upper is None or upper <= since:
        return []
    by_time: dict[int, list[tuple[int, int, int]]] = {}
    for partition, offset, time, diff in remap_updates(remap, upper - 1):
        by_time.setdefault(max(time, since), []).append((partition, offset, diff))
    history: list[tuple[int, OffsetFrontier]] = []
    current: Counter[tuple[int, int]] = Counter()
    for time in sorted(by_time):
        for partition, offset, diff in by_time[time]:
            current[(partition, offset)] += diff
        history.append((time, frontier_of(current, time)))
    return history


def remap_monotone(remap: ShardReader, window_end: int) -> CheckOutcome:
    """Every binding is at or beyond the previous one, and the remap covers the window."""
    try:
        history = remap_history(remap)
    except ValueError as malformed:
        return CheckOutcome(False, str(malformed))
    regressions: list[tuple[int, dict[str, tuple[int, int]]]] = []
    for (_, before), (time, after) in zip(history, history[1:], strict=False):
        moved_back = {str(p): v for p, v in before.regressions(after).items()}
        if moved_back:
            regressions.append((time, moved_back))
    covered = not remap.upper.less_equal(window_end)
    problems = []
    if regressions:
        moved = ", ".join(iso(time) for time, _ in regressions)
        problems.append(f"frontier moved backwards at times {moved}")
    if not covered:
        problems.append(
            f"remap upper {remap.upper.iso()} does not cover window end {iso(window_end)}"
        )
    return CheckOutcome(
        passed=not problems,
        description="; ".join(problems) or f"{len(history)} binding(s), monotone",
        figures={
            "bindings": len(history),
            "regressions": [
                {"time": time, "partitions": moved_back}
                for time, moved_back in regressions[:MAX_EXAMPLES]
            ],
        },
    )


# The columns the position checks read of ``reclocked`` and ``errors``: the same for
# every source, so one read serves every source's tables.
POSITIONS = StructType(
    [
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField(TIME, LongType()),
        StructField(DIFF, LongType()),
    ]
)


@dataclass(frozen=True)
class ExactlyOnceQuestion:
    """Whether the records ``reclocked`` holds at times in ``[lower, upper)`` are exactly
    the offsets from ``before`` up to ``after``, each once (``exactly_once_together``). Nothing to
    judge when ``lower >= upper`` (the range is compacted)."""

    reclocked: ShardReader
    before: OffsetFrontier
    after: OffsetFrontier
    starts: Mapping[int, int]
    lower: int
    upper: int
    gaps_allowed: bool
    errors: ShardReader | None = None
    holes: Mapping[int, Sequence[tuple[int, int]]] = field(default_factory=dict)


def exactly_once_together(
    spark: SparkSession, questions: Sequence[ExactlyOnceQuestion]
) -> list[CheckOutcome]:
    """Each question's verdict, in order: the records reclocked at times in ``[lower,
    upper)`` are exactly the offsets from ``before`` up to ``after``, each once: nothing
    outside that interval (which includes an earlier window's record appearing again), no
    offset twice, none missing unless gaps are allowed, ``errors`` holds the offset at
    those times (a damaged line is bound at its position, as an error instead of a
    record) or it lies in one of the partition's ``holes`` (``[low, high)`` ranges known
    to hold no record: ``sink_gaps``). It reads only the range's updates, so a run pays
    for what it wrote; with every window judged once, every offset appears exactly once
    overall. Where the range starts below ``since`` it judges everything from the first
    offset. One Spark job for every question (the positions are every source's same
    columns), and one more for those whose errors may hold damaged lines."""
    judged = {str(i): q for i, q in enumerate(questions) if q.lower < q.upper}
    befores = {
        key: OffsetFrontier() if q.lower - 1 < (q.reclocked.since.time or 0) else q.before
        for key, q in judged.items()
    }
    per_record = _per_position(
        spark, {key: (q.reclocked, q.lower, q.upper) for key, q in judged.items()}
    )
    bounds = local_frame(
        spark,
        [(key, p, befores[key][p], q.after[p], max(befores[key][p], q.starts.get(p, 0)))
         for key, q in judged.items() for p in set(q.after.partitions) | set(q.before.partitions)],
        f"{KEY} string, partition int, _before long, _after long, _first_placed long",
    )  # fmt: skip
    placed = per_record.join(F.broadcast(bounds), [KEY, "partition"], "left")
    outside = (F.col("offset") < F.coalesce("_before", F.lit(0))) | (
        F.col("offset") >= F.coalesce("_after", F.lit(0))
    )
    summary = placed.groupBy(KEY, "partition").agg(
        F.count("*").alias("records"),
        F.sum(F.when(F.col("count") != 1, 1).otherwise(0)).alias("not_once"),
        F.sum(F.when(outside, 1).otherwise(0)).alias("outside"),
    )
    seen: dict[str, dict[int, Row]] = {}
    for row in summary.collect() if judged else ():
        seen.setdefault(row[KEY], {})[row["partition"]] = row
    damaged = _damaged_positions(spark, judged, per_record, bounds)
    return [
        _exactly_once_outcome(
            q, befores[str(i)], seen.get(str(i), {}), damaged.get(str(i), {})
        )
        if str(i) in judged
        else CheckOutcome(True, "the range is compacted: judged when it ran")
        for i, q in enumerate(questions)
    ]


def _per_position(
    spark: SparkSession, ranges: Mapping[str, tuple[ShardReader, int, int]]
) -> DataFrame:
    """Per key, partition and offset, the summed diff (``count``) of each shard's updates
    at times ``[lower, upper)``; from its since on as a snapshot when the range starts
    below it (earlier times are compacted into the since, and a position consolidated to
    zero there is no row, as in a snapshot: a position's rows are one record's)."""
    reads, early = {}, []
    for key, (shard, lower, upper) in ranges.items():
        since = shard.since.time or 0
        below = lower - 1 < since
        reads[key] = RangeRead(shard, None if below else lower - 1, upper - 1)
        early.append((key, since if below else None))
    rows = read_together(spark, reads, POSITIONS)
    marks = local_frame(spark, early, f"{KEY} string, _early_through long")
    is_early = F.coalesce(F.col(TIME) <= F.col("_early_through"), F.lit(False))
    per_part = (
        rows.join(F.broadcast(marks), KEY)
        .groupBy(KEY, "partition", "offset", is_early.alias("_early"))
        .agg(F.sum(DIFF).alias("count"))
        .where(~F.col("_early") | (F.col("count") != 0))
    )
    return per_part.groupBy(KEY, "partition", "offset").agg(F.sum("count").alias("count"))


def _damaged_positions(
    spark: SparkSession,
    judged: Mapping[str, ExactlyOnceQuestion],
    per_record: DataFrame,
    bounds: DataFrame,
) -> dict[str, dict[int, int]]:
    """Per key and partition, the positions of the judged range that only the errors
    hold: damaged lines bound there (between the first offset placed and ``after``)."""
    asking = {
        key: (q.errors, q.lower, q.upper)
        for key, q in judged.items()
        if q.errors is not None and not q.gaps_allowed and q.errors.holds_updates()
    }
    if not asking:
        return {}
    placed = (
        _per_position(spark, asking)
        .join(F.broadcast(bounds), [KEY, "partition"])
        .where((F.col("offset") >= F.col("_first_placed")) & (F.col("offset") < F.col("_after")))
        .select(KEY, "partition", "offset")
    )
    only = placed.join(per_record.select(KEY, "partition", "offset"),
                       [KEY, "partition", "offset"], "left_anti")  # fmt: skip
    damaged: dict[str, dict[int, int]] = {}
    for row in only.groupBy(KEY, "partition").count().collect():
        damaged.setdefault(row[KEY], {})[row["partition"]] = row["count"]
    return damaged


def _exactly_once_outcome(
    question: ExactlyOnceQuestion,
    before: OffsetFrontier,
    seen: Mapping[int, Row],
    damaged: Mapping[int, int],
) -> CheckOutcome:
    """The verdict from a range's per-partition summary (``seen``) and damaged lines."""
    after, starts, holes = question.after, question.starts, question.holes
    problems = []
    figures: dict[str, object] = {}
    for partition in sorted(set(seen) | set(after.partitions)):
        row = seen.get(partition)
        records = row["records"] if row else 0
        low = max(before[partition], starts.get(partition, 0))
        high = after[partition]
        empty = sum(max(min(hi, high) - max(lo, low), 0) for lo, hi in holes.get(partition, ()))
        expected = max(high - low, 0) - empty
        figures[f"partition_{partition}"] = {"records": records, "from": low, "to": high}
        if row and row["not_once"]:
            problems.append(f"partition {partition}: {row['not_once']} offset(s) not exactly once")
        if row and row["outside"]:
            problems.append(
                f"partition {partition}: {row['outside']} offset(s) outside the bindings "
                f"[{before[partition]}, {high})"
            )
        inside = records - (row["outside"] if row else 0) + damaged.get(partition, 0)
        if not question.gaps_allowed and inside != expected:
            problems.append(
                f"partition {partition}: {inside} record(s) between offsets {low} and {high}, "
                f"expected {expected}"
            )
    return CheckOutcome(not problems, "; ".join(problems) or "exactly once", figures)


@dataclass(frozen=True)
class AccountedQuestion:
    """Whether nothing of ``files`` registered is in neither ``reclocked`` nor ``errors``,
    judged at ``as_of`` (``accounted_together``)."""

    reclocked: ShardReader
    errors: ShardReader
    files: Sequence[RegisteredFile]
    frontier: OffsetFrontier
    starts: Mapping[int, int]
    as_of: int
    stalled: Sequence[HeldPartition] = ()
    checked: OffsetFrontier | None = None
    bindings: Sequence[tuple[int, int, int]] = ()

    def ranges(self) -> list[tuple[int, int, int, int, int, str]]:
        """``(index, partition, low, high, records, file)`` of every registered range to
        find in reclocked: wholly between the partition's start and the frontier, and
        not below ``checked`` (judged with earlier windows)."""
        starts, frontier, checked = self.starts, self.frontier, self.checked
        return [
            (index, s.partition, s.min_offset, s.max_offset, s.records, f.path)
            for index, (f, s) in enumerate((f, s) for f in self.files for s in f.partitions)
            if starts.get(s.partition, 0) <= s.min_offset and s.max_offset < frontier[s.partition]
            and (checked is None or s.max_offset >= checked[s.partition])
        ]  # fmt: skip

    def flagged(self) -> list[str]:
        """The live files whose errors are due: damage or lines without a position once a
        run has read it, damaged lines with a position once their partition's range is
        bound."""
        starts, frontier = self.starts, self.frontier

        def read(registered: RegisteredFile) -> bool:
            """Whether a run has read the file: its first record of the source is below
            the frontier (a file without one is reported by the first run after it
            lands)."""
            lowest = [
                max(s.min_offset, starts.get(s.partition, 0)) < frontier[s.partition]
                for s in registered.partitions
                if s.max_offset >= starts.get(s.partition, 0)
            ]
            return not lowest or any(lowest)

        def owes_row(registered: RegisteredFile) -> bool:
            if registered.has_file_errors:
                return read(registered)
            return any(
                s.damaged_lines and s.max_offset < frontier[s.partition]
                for s in registered.partitions
            )

        return [f.path for f in self.files if not f.retired and f.has_errors and owes_row(f)]


def accounted_together(
    spark: SparkSession, questions: Sequence[AccountedQuestion]
) -> list[CheckOutcome]:
    """Each question's verdict, in order: nothing registered is in neither the outputs
    nor ``errors``, judged at ``as_of``:

    - every registered file's records of a partition, when its whole offset range lies
      between the partition's start and ``frontier`` (the remap at ``as_of``), are in
      ``reclocked``: at least the file's count of records in that range (records above
      the frontier are lag, which ``inspect`` shows);
    - every live dump file a run has read that is damaged or yields no record, or whose
      bad lines are bound, has an ``errors`` row naming it, since what it lost is
      counted nowhere else;
    - no partition is ``stalled``: registered offsets held back longer than the
      source's ``stall_after`` (the caller judges that from the registry, ``held``).
    One Spark job per table kind for every question, over a broadcast list of ranges and
    of files; only counts and file names return.

    ``checked``: the remap where the judged windows start; ranges wholly below it were
    judged with earlier windows, so a year of them costs nothing. ``bindings``: the
    remap's ``(partition, next offset, time)``, dating the ranges judged, so reclocked
    is read from the earliest binding time among them, not from its beginning."""
    ranges = {str(i): q.ranges() for i, q in enumerate(questions)}
    flagged = {str(i): q.flagged() for i, q in enumerate(questions)}
    found = _found_in_ranges(spark, questions, ranges)
    reported = _reported_files(spark, questions, flagged)
    return [
        _accounted_outcome(q, ranges[str(i)], found.get(str(i), {}), flagged[str(i)],
                           reported.get(str(i), set()))  # fmt: skip
        for i, q in enumerate(questions)
    ]


def _found_in_ranges(
    spark: SparkSession,
    questions: Sequence[AccountedQuestion],
    ranges: Mapping[str, list[tuple[int, int, int, int, int, str]]],
) -> dict[str, dict[int, int]]:
    """Per key and range, the records reclocked holds there (diffs summed per range need
    no consolidation by the wide data columns)."""
    reads = {}
    for key, judged in ranges.items():
        if judged:
            q = questions[int(key)]
            earliest = min(first_covering(q.bindings, p, low) for _, p, low, *_ in judged)
            since = q.reclocked.since.time or 0
            after = None if earliest - 1 < since else earliest - 1
            reads[key] = RangeRead(q.reclocked, after, q.as_of)
    if not reads:
        return {}
    records = read_together(spark, reads, POSITIONS)
    wanted = local_frame(
        spark,
        [(key, index, p, low, high) for key in reads for index, p, low, high, *_ in ranges[key]],
        f"{KEY} string, range int, partition int, low long, high long",
    )
    counted = (
        records.join(
            F.broadcast(wanted),
            (records[KEY] == wanted[KEY])
            & (records["partition"] == wanted["partition"])
            & records["offset"].between(wanted["low"], wanted["high"]),
        )
        .groupBy(wanted[KEY], "range")
        .agg(F.sum(DIFF).alias("count"))
        .collect()
    )
    found: dict[str, dict[int, int]] = {}
    for row in counted:
        found.setdefault(row[KEY], {})[row["range"]] = row["count"]
    return found


def _reported_files(
    spark: SparkSession, questions: Sequence[AccountedQuestion], flagged: Mapping[str, list[str]]
) -> dict[str, set[str]]:
    """Per key, which of its flagged files the errors name at ``as_of`` (consolidated:
    an errors row retracted names nothing)."""
    reads = {
        key: RangeRead(questions[int(key)].errors, None, questions[int(key)].as_of)
        for key, paths in flagged.items()
        if paths
    }
    if not reads:
        return {}
    rows = read_together(spark, reads, delta_io.shard_schema(ERROR))
    standing = (
        rows.groupBy(KEY, *ERROR.names).agg(F.sum(DIFF).alias(DIFF)).where(F.col(DIFF) != 0)
    )
    wanted = local_frame(
        spark,
        [(key, path) for key in reads for path in flagged[key]],
        f"{KEY} string, file string",
    )
    named = standing.join(F.broadcast(wanted), [KEY, "file"]).select(KEY, "file").distinct()
    reported: dict[str, set[str]] = {}
    for row in named.collect():
        reported.setdefault(row[KEY], set()).add(row["file"])
    return reported


def _accounted_outcome(
    question: AccountedQuestion,
    ranges: Sequence[tuple[int, int, int, int, int, str]],
    found: Mapping[int, int],
    flagged: Sequence[str],
    reported: Collection[str],
) -> CheckOutcome:
    """The verdict from the records found per range and the flagged files reported."""
    short = [
        {"file": path, "partition": p, "offsets": f"{low}..{high}", "registered": n,
         "reclocked": found.get(index, 0)}
        for index, p, low, high, n, path in ranges
        if found.get(index, 0) < n
    ]  # fmt: skip
    unreported = [path for path in flagged if path not in reported]
    stalled = question.stalled
    problems = []
    if short:
        problems.append(
            f"{len(short)} registered range(s) below the frontier miss records in reclocked: "
            + "; ".join(f"{s['file']} partition {s['partition']} offsets {s['offsets']}"
                        for s in short[:MAX_EXAMPLES])
        )  # fmt: skip
    if unreported:
        problems.append(
            f"{len(unreported)} dump file(s) with bad lines, damage or no record, "
            "without an errors row: "
            + ", ".join(unreported[:MAX_EXAMPLES])
        )
    if stalled:
        problems.append(
            f"{len(stalled)} partition(s) stalled, registered offsets unbound past "
            "stall_after: " + "; ".join(held.describe() for held in stalled[:MAX_EXAMPLES])
        )
    return CheckOutcome(
        not problems,
        "; ".join(problems)
        or f"{len(ranges)} registered range(s) in reclocked, {len(flagged)} flagged file(s) "
        "in errors, no partition stalled",
        {"ranges": len(ranges), "short": short[:MAX_EXAMPLES], "flagged_files": len(flagged),
         "unreported": unreported[:MAX_EXAMPLES],
         "stalled": [held.describe() for held in stalled[:MAX_EXAMPLES]]},
    )  # fmt: skip


@dataclass(frozen=True)
class StateQuestion:
    """Whether the state ``changes`` publishes at ``as_of`` holds each row as often as its
    envelope allows: keyed by ``key_columns``, or a bag (none)."""

    changes: ShardReader
    key_columns: Sequence[str]
    as_of: int


def state_counts_together(
    spark: SparkSession, questions: Sequence[StateQuestion]
) -> list[CheckOutcome]:
    """Each question's verdict, in order: the published state (``changes`` consolidated at
    ``as_of``) holds each row as often as its envelope allows. Keyed (upsert,
    debezium-upsert, debezium): every row's count is 1 and every key holds one row. A
    bag (no key columns: none, materialize), whose equal records are counted each: every
    count is at least 1. A negative or zero count means a retraction matched no row.

    One Spark job per table layout and key: rows consolidated by key and value
    fingerprint, then per key its rows and their counts, then one summary row per table.
    The updates are shuffled once, by key, which both groupings share (a bag's rows are
    their own keys)."""
    by_layout: dict[tuple[str, tuple[str, ...]], dict[str, RangeRead]] = {}
    for index, question in enumerate(questions):
        layout = (question.changes.data_schema.json(), tuple(question.key_columns))
        reads = by_layout.setdefault(layout, {})
        reads[str(index)] = RangeRead(question.changes, None, question.as_of)
    summaries: dict[str, Row] = {}
    for (_, keys), reads in by_layout.items():
        data = next(iter(reads.values())).shard.data_schema
        summaries.update(_state_summaries(read_together(spark, reads, delta_io.shard_schema(data)),
                                          data.names, list(keys)))  # fmt: skip
    return [
        _state_outcome(bool(question.key_columns), summaries.get(str(index)))
        for index, question in enumerate(questions)
    ]


def _state_summaries(updates: DataFrame, names: Sequence[str], keys: list[str]) -> dict[str, Row]:
    """Per read of ``updates`` (its ``KEY``: a table's rows), its rows, rows of a bad count,
    their least count and its keys holding other than one row."""
    keyed = bool(keys)
    is_bad = F.col(DIFF) != 1 if keyed else F.col(DIFF) < 1
    values = [name for name in names if name not in keys]
    group = [KEY, *keys]
    consolidated = (
        (updates.repartition(*group) if keyed else updates)
        .groupBy(*group, fingerprint(values).alias("_value"))
        .agg(F.sum(DIFF).alias(DIFF))
        .where(F.col(DIFF) != 0)
    )
    per_key = consolidated.groupBy(*group, *([] if keyed else ["_value"])).agg(
        F.count("*").alias("rows"),
        F.sum(DIFF).alias("count"),
        F.sum(F.when(is_bad, 1).otherwise(0)).alias("bad_rows"),
        F.min(F.when(is_bad, F.col(DIFF))).alias("min_diff"),
    )
    summary = per_key.groupBy(KEY).agg(
        F.sum("rows").alias("rows"),
        F.sum("bad_rows").alias("bad_rows"),
        F.min("min_diff").alias("min_diff"),
        F.count(F.when(F.col("count") != 1, 1)).alias("bad_keys"),
    )
    return {row[KEY]: row for row in summary.collect()}


def _state_outcome(keyed: bool, summary: Row | None) -> CheckOutcome:
    """The verdict from a table's summary (None: its state holds no row)."""
    rows = summary["rows"] if summary else 0
    bad_rows = summary["bad_rows"] if summary else 0
    bad_keys = summary["bad_keys"] if summary and keyed else 0
    problems = []
    if bad_rows:
        assert summary is not None
        allowed = "other than 1" if keyed else "below 1"
        problems.append(f"{bad_rows} row(s) with count {allowed} (min {summary['min_diff']})")
    if bad_keys:
        problems.append(f"{bad_keys} key(s) holding more than one row")
    held = "every key holds at most one row, counted once" if keyed else "no count below 1"
    return CheckOutcome(
        not problems,
        "; ".join(problems) or held,
        {"rows": rows, "bad_counts": bad_rows, "bad_keys": bad_keys},
    )


def constraints_hold(errors: ShardReader, as_of: int) -> CheckOutcome:
    """No error of the ``constraint violated`` category (the classic DEBEZIUM envelope's:
    a partial or mismatched before image, a missing source position, a broken re-send)
    stands in ``errors`` at ``as_of``: such an event changed nothing, so the table lacks
    what it would have done. They stand until the source is rebuilt; only counts and a
    few examples reach the driver."""
    standing = constraint_violations(errors.snapshot(as_of)).where(F.col("diff") > 0)
    examples = [
        {"partition": r["partition"], "offset": r["offset"], "reason": r["reason"]}
        for r in standing.orderBy("partition", "offset").limit(MAX_EXAMPLES).collect()
    ]
    if not examples:
        return CheckOutcome(True, "no constraint violation stands in errors", {"violations": 0})
    count = standing.count()
    first = examples[0]
    return CheckOutcome(
        False,
        f"{count} constraint violation(s) stand in errors; the first, partition "
        f"{first['partition']} offset {first['offset']}: {first['reason']}",
        {"violations": count, "examples": examples},
    )


def window_rows(shard: ShardReader, lower: int, upper: int) -> DataFrame:
    """The updates at times in ``[lower, upper)`` (what data expectations judge)."""
    return shard.listen(lower - 1, upper - 1) if lower > 0 else shard.snapshot(upper - 1)


def transactions_settled(
    pending: PendingTransactions | None, group: str, timeout: str
) -> CheckOutcome:
    """No transaction of ``group`` has waited longer than ``timeout`` for its records:
    those ``pending`` calls overdue (announced more than the timeout before the window's
    end, still not admitted) fail the check, named oldest first."""
    if pending is None:
        return CheckOutcome(True, f"no binding of group {group} to judge yet")
    figures = {"pending": pending.count, "overdue": pending.overdue_count,
               "oldest_pending": iso(pending.oldest_ms) if pending.oldest_ms else None,
               "overdue_ids": list(pending.overdue)}
    if pending.overdue_count:
        named = ", ".join(pending.overdue)
        more = pending.overdue_count - len(pending.overdue)
        return CheckOutcome(
            False,
            f"{pending.overdue_count} transaction(s) of group {group} incomplete for longer "
            f"than {timeout}: {named}" + (f" and {more} more" if more else ""),
            figures,
        )
    return CheckOutcome(True, f"{pending.count} transaction(s) of group {group} waiting, "
                        f"none longer than {timeout}", figures)
