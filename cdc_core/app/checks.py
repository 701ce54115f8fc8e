"""A source's checks: which apply to it, judging them, and which failures block.

The checks judge a range of IntoTime windows from the tables alone (completeness of
every shard, a monotone remap, exactly-once reclocking, every registered record
accounted for, the state's counts, standing constraint violations, well-formed history,
transactions waiting past their group's timeout, and the source's data expectations).
The checks that guard correctness are blocking: when one fails, the source's CDCv2
export is not built on the failed window, and the run fails. The transactions check of a
group member fails with severity error but does not block: what its bindings hold back
is waiting, and what they bound stays consistent. Front ends show the outcomes (a
Dagster asset check per check); judging them knows nothing of the front end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum

from pyspark.sql import SparkSession

from cdc_core.checks import history_versions, transactions_settled, validate
from cdc_core.checks import invariants as checks
from cdc_core.config import Config, SourceConfig
from cdc_core.ingest.registry import sink_gaps
from cdc_core.phases import phase
from cdc_core.reclock import frontier_at, held_partitions, overdue, remap_updates
from cdc_core.reclock.remap import frontier_in
from cdc_core.source import SourceReader
from cdc_core.storage import LocationLike
from cdc_core.vocabulary import Envelope


class Severity(StrEnum):
    """How much a failed check matters."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class SourceCheck:
    """One check of a source: the output it judges, its name, and how it judges."""

    asset: str
    name: str
    judge: Callable[[SourceReader, int, int], checks.CheckOutcome]
    description: str
    blocking: bool = True
    severity: Severity | None = None  # None: error when blocking, else warning

    @property
    def level(self) -> Severity:
        """The check's severity: its own, else error when blocking and warning when not."""
        return self.severity or (Severity.ERROR if self.blocking else Severity.WARNING)

    def blocks(self, outcome: checks.CheckOutcome) -> bool:
        """Whether ``outcome`` fails a blocking check with severity error."""
        return self.blocking and self.level == Severity.ERROR and not outcome.passed


CONCURRENT_CHECKS = 4
# The tables the checks read with Spark (the registry and the remap's bindings are read
# on the driver), ``reclocked`` and ``errors`` from the judged range on, ``changes`` whole
# (a state's every key): their rows decide how the checks' queries are planned.
CHECKED_TABLES = ("reclocked", "changes", "errors", "history")


def judge_concurrently(
    source: str,
    selected: Sequence[SourceCheck],
    judge: Callable[[SourceCheck], checks.CheckOutcome],
) -> list[checks.CheckOutcome | Exception]:
    """Each check's outcome (or what it raised), in ``selected``'s order.

    The checks are independent reads, each a few small Spark jobs whose time is mostly
    the driver's planning and scheduling: judged from a few threads over the one session,
    their jobs overlap. ``judge`` must give each check its own table handles (a delta-rs
    handle is not shared between threads)."""

    def judged(check: SourceCheck) -> checks.CheckOutcome | Exception:
        try:
            with phase(source, f"check {check.asset}.{check.name}"):
                return judge(check)
        except Exception as failure:
            return failure

    with ThreadPoolExecutor(CONCURRENT_CHECKS, thread_name_prefix="check") as pool:
        return list(pool.map(judged, selected))


@dataclass(frozen=True)
class JudgedChecks:
    """A source's selected checks as judged over ``window`` (None: nothing complete yet,
    and nothing judged): each with its outcome, or what it raised."""

    source: SourceConfig
    window: tuple[int, int] | None
    judged: list[tuple[SourceCheck, checks.CheckOutcome | Exception | None]]


def newest_window(config: Config, reader: SourceReader) -> tuple[int, int] | None:
    """``(start, end)`` of the source's newest complete window; None when nothing is
    complete yet, or the source is finished (it has no newest window)."""
    upper = reader.outputs_upper().time
    if upper is None or upper <= config.start_ms + 1:
        return None
    return upper - 1 - config.window_ms, upper - 1


def judge_checks(
    spark: SparkSession,
    config: Config,
    source: SourceConfig,
    lake: LocationLike,
    window: tuple[int, int] | None,
    chosen: Sequence[SourceCheck],
) -> JudgedChecks:
    """The ``chosen`` checks of ``source`` (its tables under ``lake``) judged over
    ``window`` (a run's windows; None: the newest complete window), all at once
    (``judge_concurrently``), through the source's read handle: judging writes nothing,
    so it works on a lake it may not write. The handle is opened once per checking
    thread, not once per check: its table handles are its own."""

    def open_reader() -> SourceReader:
        return SourceReader.open(spark, config, source, lake)

    reader = open_reader()
    judged_window = window or newest_window(config, reader)
    if judged_window is None:
        return JudgedChecks(source, None, [(check, None) for check in chosen])
    opened = threading.local()

    def judge(check: SourceCheck) -> checks.CheckOutcome:
        if not hasattr(opened, "reader"):
            opened.reader = open_reader()
        return check.judge(opened.reader, *judged_window)

    # Planned once for every checking thread (the plan settings are the session's).
    judged_from = {"reclocked": judged_window[0], "errors": judged_window[0]}
    with reader.planned_by_tables(*CHECKED_TABLES, after=judged_from):
        judged = judge_concurrently(source.name, chosen, judge)
    return JudgedChecks(source, judged_window, list(zip(chosen, judged, strict=True)))


def blocks_export(judged: JudgedChecks) -> bool:
    """Whether the source's export must wait: a blocking check failed, or a check could
    not be judged."""
    return any(
        isinstance(outcome, Exception)
        or (isinstance(outcome, checks.CheckOutcome) and check.blocks(outcome))
        for check, outcome in judged.judged
    )


def source_checks(config: Config, source: SourceConfig) -> list[SourceCheck]:
    """The checks that apply to ``source`` (its envelope, history, transaction group and
    expectations)."""
    name = source.name

    def completeness_of(output: str) -> Callable[[SourceReader, int, int], checks.CheckOutcome]:
        def judge(reader: SourceReader, start: int, end: int) -> checks.CheckOutcome:
            shard = reader.shards[output]
            # The remap is metadata: a few bindings per window, recounted on the driver.
            return checks.completeness(shard, start + 1, end + 1, on_driver=output == "remap")

        return judge

    def exactly_once(reader: SourceReader, start: int, end: int) -> checks.CheckOutcome:
        # Bindings before the remap's since are compacted (retired): those windows were
        # judged when they ran, so the range judged starts at the since.
        start = max(start, reader.remap.refresh().since.time or 0)
        if start >= end:
            return checks.CheckOutcome(True, "the range is compacted: judged when it ran")
        before, after = frontier_at(reader.remap, start), frontier_at(reader.remap, end)
        starts = dict(source.start_offsets.offsets)
        return checks.exactly_once(
            reader.reclocked,
            before,
            after,
            starts,
            start + 1,
            end + 1,
            gaps_allowed=source.allow_offset_gaps,
            errors=reader.errors,
            holes=sink_gaps(reader.registry.files(reaching=before.offsets)),
        )

    def accounted(reader: SourceReader, start: int, end: int) -> checks.CheckOutcome:
        # As exactly_once: windows before the remap's since were judged when they ran.
        start = max(start, reader.remap.refresh().since.time or 0)
        updates = remap_updates(reader.remap, end)
        checked, frontier = frontier_in(updates, start), frontier_in(updates, end)
        files = reader.registry.files(reaching=checked.offsets)
        held = held_partitions(source, files, frontier, group=reader.group_name)
        bindings = [(p, o, t) for p, o, t, d in updates if d > 0]
        return checks.accounted(
            reader.reclocked,
            reader.errors,
            files,
            frontier,
            dict(source.start_offsets.offsets),
            end,
            stalled=overdue(held, end, source.stall_after_ms),
            checked=checked,
            bindings=bindings,
        )

    def state_counts(reader: SourceReader, _start: int, end: int) -> checks.CheckOutcome:
        key_columns = list(source.key_schema.fieldNames()) if source.envelope.keyed else []
        return checks.state_counts(reader.changes, key_columns, end)

    def expectations(reader: SourceReader, start: int, end: int) -> checks.CheckOutcome:
        rows = checks.window_rows(reader.changes, start + 1, end + 1).where("diff > 0")
        report = validate(rows, source.expectations, name=f"{name}_changes")
        return checks.CheckOutcome(
            report.success,
            report.summary(),
            {o.type: dict(o.observed) for o in report.results},
        )

    definitions = [
        SourceCheck(
            output,
            "complete",
            completeness_of(output),
            "Distinct updates per time equal the counts committed with them.",
        )
        for output in ("remap", "reclocked", "changes", "errors")
    ]
    definitions.append(
        SourceCheck(
            "remap",
            "monotone",
            lambda p, _s, end: checks.remap_monotone(p.remap, end),
            "Bindings never move backwards and cover the window.",
        )
    )
    definitions.append(
        SourceCheck(
            "reclocked",
            "exactly_once",
            exactly_once,
            "The run's windows reclocked exactly the offsets between their bindings, each "
            "once (judged per run: every window once means every offset once).",
        )
    )
    definitions.append(
        SourceCheck(
            "errors",
            "accounted",
            accounted,
            "Every registered dump record is in reclocked (or beyond the frontier, as lag), "
            "and every dump file read with bad lines, damage or no record is in errors.",
        )
    )
    if source.envelope.keyed:
        definitions.append(
            SourceCheck(
                "changes",
                "state_is_set",
                state_counts,
                "Every row's accumulated count is 0 or 1, and every key holds at most one row.",
            )
        )
    else:
        definitions.append(
            SourceCheck(
                "changes",
                "state_is_bag",
                state_counts,
                "No row's accumulated count is negative (equal records each add 1).",
            )
        )
    if source.envelope == Envelope.DEBEZIUM:
        definitions.append(
            SourceCheck(
                "errors",
                "constraints",
                lambda p, _s, end: checks.constraints_hold(p.errors, end),
                "No classic DEBEZIUM constraint violation (a partial or mismatched before "
                "image, a missing source position, a broken re-send) stands in errors.",
            )
        )
    if source.history:
        definitions.append(
            SourceCheck(
                "history",
                "versions",
                lambda p, _s, end: history_versions(
                    str(p.root / "history"),
                    p.changes,
                    source.output_schema,
                    source.key_schema.names,
                    end,
                ),
                "At most one open version per key, no overlapping versions, published "
                "through the window, and the open versions are the rows of changes.",
            )
        )
    group = config.transaction_group(name)
    if group is not None:
        definitions.append(
            SourceCheck(
                "remap",
                "transactions",
                lambda p, _s, end: transactions_settled(
                    p.pending_transactions([end]).get(end), group.name, group.timeout
                ),
                f"No transaction of group {group.name} stays incomplete longer than "
                f"{group.timeout} (the bindings hold it back until it completes).",
                blocking=False,
                severity=Severity.ERROR,
            )
        )
    if source.expectations:
        definitions.append(
            SourceCheck(
                "changes",
                "expectations",
                expectations,
                "The source's great-expectations suite on the window's new rows.",
                blocking=False,
            )
        )
    return definitions
