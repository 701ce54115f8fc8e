"""Correctness checks over a source's shards, judged at one IntoTime.

Each check recomputes its verdict from the durable tables alone (never from what the
pipeline believes it wrote), so it catches damage done behind the pipeline's back.
Only aggregates reach the driver.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from cdc_core.cdcv2 import check_completeness
from cdc_core.cdcv2.completeness import Tallies, tallies_together
from cdc_core.envelopes import constraint_violations
from cdc_core.frontier import OffsetFrontier, TimeFrontier, iso
from cdc_core.ingest import RegisteredFile
from cdc_core.reclock import HeldPartition, frontier_of, remap_updates
from cdc_core.reclock.reclocking import first_covering
from cdc_core.reclock.transactions import PendingTransactions
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


def completeness(
    shard: ShardReader, lower: int, upper: int, *, on_driver: bool = False
) -> CheckOutcome:
    """Distinct ``(data, time)`` updates per time in ``[lower, upper)`` equal the counts
    announced by the progress statements committed with them (``completeness_together``
    for one shard)."""
    question = CompletenessQuestion(shard, lower, upper, on_driver)
    return completeness_together(shard.spark, [question])[0]


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


def exactly_once(
    reclocked: ShardReader,
    before: OffsetFrontier,
    after: OffsetFrontier,
    starts: Mapping[int, int],
    lower: int,
    upper: int,
    *,
    gaps_allowed: bool,
    errors: ShardReader | None = None,
    holes: Mapping[int, Sequence[tuple[int, int]]] | None = None,
) -> CheckOutcome:
    """The records reclocked at times in ``[lower, upper)`` are exactly the offsets from
    ``before`` (the remap at ``lower - 1``, or the configured start offsets) up to ``after``
    (the remap at ``upper - 1``), each once: nothing outside that interval (which includes
    an earlier window's record appearing again), no offset twice, none missing unless
    gaps are allowed, ``errors`` holds the offset at those times (a damaged line is
    bound at its position, as an error instead of a record) or it lies in one of the
    partition's ``holes`` (``[low, high)`` ranges known to hold no record: ``sink_gaps``).
    It reads only the range's updates, so a run pays for what it wrote; with every
    window judged once, every offset appears exactly once overall. Where the range starts
    below ``since`` it judges everything from the first offset."""
    rows = _range_updates(reclocked, lower, upper)
    if lower - 1 < (reclocked.since.time or 0):
        before = OffsetFrontier()
    per_record = rows.groupBy("partition", "offset").agg(F.sum("diff").alias("count"))

    def bound(frontier: OffsetFrontier) -> Column:
        ends = F.create_map(*[F.lit(x) for p, o in frontier.offsets.items() for x in (p, o)])
        return F.coalesce(ends[F.col("partition")], F.lit(0)) if frontier.offsets else F.lit(0)

    outside = (F.col("offset") < bound(before)) | (F.col("offset") >= bound(after))
    damaged: dict[int, int] = {}
    if errors is not None and not gaps_allowed and errors.holds_updates():
        # Positions of the range that only the errors hold: damaged lines bound there.
        first_placed = F.greatest(bound(before), bound(OffsetFrontier(dict(starts))))
        placed = _range_updates(errors, lower, upper).where(
            (F.col("offset") >= first_placed) & (F.col("offset") < bound(after))
        )
        only = placed.select("partition", "offset").distinct().join(
            per_record.select("partition", "offset"), ["partition", "offset"], "left_anti"
        )
        damaged = {r["partition"]: r["count"] for r in only.groupBy("partition").count().collect()}
    summary = per_record.groupBy("partition").agg(
        F.count("*").alias("records"),
        F.sum(F.when(F.col("count") != 1, 1).otherwise(0)).alias("not_once"),
        F.sum(F.when(outside, 1).otherwise(0)).alias("outside"),
    )
    problems = []
    figures: dict[str, object] = {}
    seen = {row["partition"]: row for row in summary.collect()}
    for partition in sorted(set(seen) | set(after.partitions)):
        row = seen.get(partition)
        records = row["records"] if row else 0
        low = max(before[partition], starts.get(partition, 0))
        high = after[partition]
        empty = sum(
            max(min(hi, high) - max(lo, low), 0) for lo, hi in (holes or {}).get(partition, ())
        )
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
        if not gaps_allowed and inside != expected:
            problems.append(
                f"partition {partition}: {inside} record(s) between offsets {low} and {high}, "
                f"expected {expected}"
            )
    return CheckOutcome(not problems, "; ".join(problems) or "exactly once", figures)


def _range_updates(shard: ShardReader, lower: int, upper: int) -> DataFrame:
    """The shard's updates at times ``[lower, upper)``; from its ``since`` on as a snapshot
    when the range starts below it (earlier times are compacted into the since)."""
    since = shard.since.time or 0
    if lower - 1 >= since:
        return shard.listen(lower - 1, upper - 1)
    return shard.snapshot(since).unionByName(shard.listen(since, upper - 1))


def accounted(
    reclocked: ShardReader,
    errors: ShardReader,
    files: Sequence[RegisteredFile],
    frontier: OffsetFrontier,
    starts: Mapping[int, int],
    as_of: int,
    stalled: Sequence[HeldPartition] = (),
    *,
    checked: OffsetFrontier | None = None,
    bindings: Sequence[tuple[int, int, int]] = (),
) -> CheckOutcome:
    """Nothing registered is in neither the outputs nor ``errors``, judged at ``as_of``:

    - every registered file's records of a partition, when its whole offset range lies
      between the partition's start and ``frontier`` (the remap at ``as_of``), are in
      ``reclocked``: at least the file's count of records in that range (records above
      the frontier are lag, which ``inspect`` shows);
    - every live dump file a run has read that is damaged or yields no record, or whose
      bad lines are bound, has an ``errors`` row naming it, since what it lost is
      counted nowhere else;
    - no partition is ``stalled``: registered offsets held back longer than the
      source's ``stall_after`` (the caller judges that from the registry, ``held``).
    One Spark job per table, over a broadcast list of ranges; only counts return.

    ``checked``: the remap where the judged windows start; ranges wholly below it were
    judged with earlier windows, so a year of them costs nothing. ``bindings``: the
    remap's ``(partition, next offset, time)``, dating the ranges judged, so reclocked
    is read from the earliest binding time among them, not from its beginning."""

    def read(registered: RegisteredFile) -> bool:
        """Whether a run has read the file: its first record of the source is below the
        frontier (a file without one is reported by the first run after it lands)."""
        lowest = [
            max(s.min_offset, starts.get(s.partition, 0)) < frontier[s.partition]
            for s in registered.partitions
            if s.max_offset >= starts.get(s.partition, 0)
        ]
        return not lowest or any(lowest)

    def owes_row(registered: RegisteredFile) -> bool:
        """Whether the file's errors are due: damage or lines without a position once it
        was read, damaged lines with a position once their partition's range is bound."""
        if registered.has_file_errors:
            return read(registered)
        return any(
            s.damaged_lines and s.max_offset < frontier[s.partition]
            for s in registered.partitions
        )

    ranges = [
        (index, s.partition, s.min_offset, s.max_offset, s.records, f.path)
        for index, (f, s) in enumerate((f, s) for f in files for s in f.partitions)
        if starts.get(s.partition, 0) <= s.min_offset and s.max_offset < frontier[s.partition]
        and (checked is None or s.max_offset >= checked[s.partition])
    ]
    found: dict[int, int] = {}
    if ranges:
        # Diffs summed per range need no consolidation by the (wide) data columns.
        records = _updates_from(
            reclocked, [first_covering(bindings, p, low) for _, p, low, *_ in ranges], as_of
        ).select("partition", "offset", "diff")
        wanted = local_frame(
            records.sparkSession,
            [r[:4] for r in ranges],
            "range int, partition int, low long, high long",
        )
        counted = (
            records.join(
                F.broadcast(wanted),
                (records["partition"] == wanted["partition"])
                & records["offset"].between(wanted["low"], wanted["high"]),
            )
            .groupBy("range")
            .agg(F.sum("diff").alias("count"))
            .collect()
        )
        found = {row["range"]: row["count"] for row in counted}
    short = [
        {"file": path, "partition": p, "offsets": f"{low}..{high}", "registered": n,
         "reclocked": found.get(index, 0)}
        for index, p, low, high, n, path in ranges
        if found.get(index, 0) < n
    ]  # fmt: skip
    flagged = [f.path for f in files if not f.retired and f.has_errors and owes_row(f)]
    reported: set[str] = set()
    if flagged:
        rows = errors.snapshot(as_of).where(F.col("file").isin(flagged)).select("file")
        reported = {row["file"] for row in rows.distinct().collect()}
    unreported = [path for path in flagged if path not in reported]
    problems = []
    if short:
        problems.append(
            f"{len(short)} registered range(s) below the frontier miss records in reclocked: "
            + "; ".join(f"{s['file']} partition {s['partition']} offsets {s['offsets']}"
                        for s in short[:MAX_EXAMPLES])
        )
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
    )


def _updates_from(shard: ShardReader, times: Sequence[int], as_of: int) -> DataFrame:
    """The shard's updates at times ``<= as_of`` from the earliest of ``times`` on (all of
    them when a time is unknown, -1, or before the shard's since)."""
    since = shard.since.time or 0
    earliest = min(times, default=-1)
    if earliest - 1 < since:
        return shard.updates_until(as_of)
    return shard.listen(earliest - 1, as_of)


@dataclass(frozen=True)
class StateQuestion:
    """Whether the state ``changes`` publishes at ``as_of`` holds each row as often as its
    envelope allows: keyed by ``key_columns``, or a bag (none)."""

    changes: ShardReader
    key_columns: Sequence[str]
    as_of: int


def state_counts(changes: ShardReader, key_columns: Sequence[str], as_of: int) -> CheckOutcome:
    """The published state holds each row as often as its envelope allows
    (``state_counts_together`` for one table)."""
    return state_counts_together(changes.spark, [StateQuestion(changes, key_columns, as_of)])[0]


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
    """Per ``target`` of ``updates`` (a table's rows), its rows, rows of a bad count,
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
