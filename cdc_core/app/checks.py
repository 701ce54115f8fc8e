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
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from pyspark.sql import SparkSession

from cdc_core.checks import history_versions, transactions_settled, validate
from cdc_core.checks import invariants as checks
from cdc_core.config import Config, SourceConfig
from cdc_core.frontier import OffsetFrontier
from cdc_core.ingest.registry import sink_gaps
from cdc_core.phases import ALL_SOURCES, phase
from cdc_core.reclock import frontier_at, held_partitions, overdue, remap_updates
from cdc_core.reclock.remap import frontier_in
from cdc_core.source import SourceReader
from cdc_core.source.planning import is_small_step
from cdc_core.spark import planned_as
from cdc_core.storage import LocationLike
from cdc_core.vocabulary import Envelope

Q = TypeVar("Q")


class Severity(StrEnum):
    """How much a failed check matters."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class JointJudgement(Generic[Q]):
    """How one kind of check is judged for many sources with one Spark job: the question
    each source's tables ask (on the driver, from their logs), and the answers to many
    questions at once, in order."""

    ask: Callable[[SourceReader, int, int], Q]
    answer: Callable[[SparkSession, Sequence[Q]], list[checks.CheckOutcome]]

    def judge(self, reader: SourceReader, start: int, end: int) -> checks.CheckOutcome:
        """One source's verdict: its question answered alone."""
        return self.answer(reader.spark, [self.ask(reader, start, end)])[0]


@dataclass(frozen=True)
class SourceCheck:
    """One check of a source: the output it judges, its name, and how it judges: alone
    (``judge``), or with the same check of other sources (``joint``, when it has one)."""

    asset: str
    name: str
    judge: Callable[[SourceReader, int, int], checks.CheckOutcome]
    description: str
    blocking: bool = True
    severity: Severity | None = None  # None: error when blocking, else warning
    joint: JointJudgement[Any] | None = None

    @classmethod
    def jointly(
        cls, asset: str, name: str, joint: JointJudgement[Any], description: str
    ) -> SourceCheck:
        """A blocking check judged with the same check of other sources."""
        return cls(asset, name, joint.judge, description, joint=joint)

    @property
    def kind(self) -> tuple[str, str]:
        """What the same check of two sources shares: its output and its name."""
        return self.asset, self.name

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


@dataclass(frozen=True)
class JudgedChecks:
    """A source's selected checks as judged over ``window`` (None: nothing complete yet,
    or the source could not be read): each with its outcome, what it raised, or None
    when nothing was judged."""

    source: SourceConfig
    window: tuple[int, int] | None
    judged: list[tuple[SourceCheck, checks.CheckOutcome | Exception | None]]


@dataclass(frozen=True)
class ChecksToJudge:
    """What a run asks of one source: its ``chosen`` checks over ``window`` (a run's
    windows; None: the newest complete window), its tables under ``lake``; ``reader``:
    the source's read handle when the run holds one open already (its pipeline's, whose
    tables the run just wrote), else the judging opens its own."""

    source: SourceConfig
    lake: LocationLike
    window: tuple[int, int] | None
    chosen: Sequence[SourceCheck]
    reader: SourceReader | None = None


def newest_window(config: Config, reader: SourceReader) -> tuple[int, int] | None:
    """``(start, end)`` of the source's newest complete window; None when nothing is
    complete yet, or the source is finished (it has no newest window)."""
    upper = reader.outputs_upper().time
    if upper is None or upper <= config.start_ms + 1:
        return None
    return upper - 1 - config.window_ms, upper - 1


def judge_together(
    spark: SparkSession, config: Config, asked: Sequence[ChecksToJudge]
) -> list[JudgedChecks]:
    """Every source's checks judged, in ``asked``'s order, through each source's read
    handle: judging writes nothing, so it works on a lake it may not write.

    Why together: a run's checks are a few small Spark jobs per source, whose cost is the
    job, not the rows. So a check with a joint judgement (``SourceCheck.joint``) is one
    question per source, asked from its logs, and one answer for every source that
    asks it: one job per check kind and table layout, however many sources.

    Stages: each source's handle is opened once (or taken from the run), its window found
    and its questions asked, per source from ``CONCURRENT_CHECKS`` threads. Then each
    source's other checks are judged and the joint answers given, all side by side on
    those threads: each is a small Spark job or two, and on a session's few cores one
    job's planning overlaps another's tasks (a demo's checks took 18 s one kind after
    another). Once asked, a handle is only read (a delta-rs table reads safely from
    several threads; nothing refreshes it), and a run of hundreds of sources opens each
    once.

    A source's check that raises is that check's outcome: the others, its own and other
    sources', are judged all the same. A joint answer that raises is every asking
    source's outcome of that check."""
    readers: dict[int, SourceReader] = {}
    windows: dict[int, tuple[int, int] | None] = {}
    questions: dict[tuple[str, str], dict[tuple[int, int], object]] = {}
    outcomes: dict[tuple[int, int], checks.CheckOutcome | Exception] = {}
    lock = threading.Lock()

    def ask(index: int) -> int:
        """Open the source, find its window and ask its joint questions; the rows its
        checks read."""
        request = asked[index]
        at = [(index, position) for position in range(len(request.chosen))]
        with _outcome_of(outcomes, at):
            reader = readers[index] = request.reader or SourceReader.open(
                spark, config, request.source, request.lake
            )
            window = windows[index] = request.window or newest_window(config, reader)
            if window is None or not request.chosen:
                return 0
            for position, check in enumerate(request.chosen):
                if check.joint is not None:
                    with _outcome_of(outcomes, [(index, position)]):
                        question = check.joint.ask(reader, *window)
                        with lock:
                            questions.setdefault(check.kind, {})[(index, position)] = question
            judged_from = {"reclocked": window[0], "errors": window[0]}
            return reader.rows_to_read(*CHECKED_TABLES, after=judged_from)
        return 0

    def judge_alone(index: int) -> None:
        """Judge the source's checks that have no joint judgement."""
        window = windows.get(index)
        for position, check in enumerate(asked[index].chosen if window else ()):
            if check.joint is None and (index, position) not in outcomes:
                assert window is not None
                with _outcome_of(outcomes, [(index, position)]), phase(
                    asked[index].source.name, f"check {check.asset}.{check.name}"
                ):
                    outcomes[(index, position)] = check.judge(readers[index], *window)

    def answer(kind: tuple[str, str], asking: dict[tuple[int, int], object]) -> None:
        """Answer every source's question of one kind at once, in the sources' order."""
        asking = dict(sorted(asking.items()))
        index, position = next(iter(asking))
        joint = asked[index].chosen[position].joint
        assert joint is not None
        source = asked[index].source.name if len(asked) == 1 else ALL_SOURCES
        with _outcome_of(outcomes, list(asking)), phase(source, f"check {'.'.join(kind)}"):
            outcomes.update(zip(asking, joint.answer(spark, list(asking.values())), strict=True))

    sources = range(len(asked))
    with ThreadPoolExecutor(CONCURRENT_CHECKS, thread_name_prefix="check") as pool:
        rows = sum(pool.map(ask, sources))
        with planned_as(spark, is_small_step(rows), config.spark.conf):
            judging = [pool.submit(judge_alone, index) for index in sources]
            judging += [pool.submit(answer, *asked_kind) for asked_kind in questions.items()]
            for future in judging:
                future.result()
    return [
        JudgedChecks(
            request.source,
            windows.get(index),
            [(check, outcomes.get((index, position)))
             for position, check in enumerate(request.chosen)],  # fmt: skip
        )
        for index, request in enumerate(asked)
    ]


@contextmanager
def _outcome_of(
    outcomes: dict[tuple[int, int], checks.CheckOutcome | Exception], at: Sequence[tuple[int, int]]
) -> Iterator[None]:
    """What the block raises becomes the outcome of every check ``at``."""
    try:
        yield
    except Exception as failure:  # noqa: BLE001 - the checks' outcome, reported as theirs
        outcomes.update((key, failure) for key in at)


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

    def completeness_of(output: str) -> JointJudgement[checks.CompletenessQuestion]:
        def ask(reader: SourceReader, start: int, end: int) -> checks.CompletenessQuestion:
            # The remap is metadata: a few bindings per window, recounted on the driver.
            shard = reader.shards[output]
            return checks.CompletenessQuestion(shard, start + 1, end + 1, output == "remap")

        return JointJudgement(ask, checks.completeness_together)

    def exactly_once(reader: SourceReader, start: int, end: int) -> checks.ExactlyOnceQuestion:
        # Bindings before the remap's since are compacted (retired): those windows were
        # judged when they ran, so the range judged starts at the since (and is empty
        # when the window lies before it).
        start = min(max(start, reader.remap.refresh().since.time or 0), end)
        empty = OffsetFrontier()
        before, after = (
            (frontier_at(reader.remap, start), frontier_at(reader.remap, end))
            if start < end
            else (empty, empty)
        )
        return checks.ExactlyOnceQuestion(
            reader.reclocked,
            before,
            after,
            dict(source.start_offsets.offsets),
            start + 1,
            end + 1,
            source.allow_offset_gaps,
            reader.errors,
            sink_gaps(reader.registry.files(reaching=before.offsets)) if start < end else {},
        )

    def accounted(reader: SourceReader, start: int, end: int) -> checks.AccountedQuestion:
        # As exactly_once: windows before the remap's since were judged when they ran.
        start = max(start, reader.remap.refresh().since.time or 0)
        updates = remap_updates(reader.remap, end)
        checked, frontier = frontier_in(updates, start), frontier_in(updates, end)
        files = reader.registry.files(reaching=checked.offsets)
        held = held_partitions(source, files, frontier, group=reader.group_name)
        return checks.AccountedQuestion(
            reader.reclocked,
            reader.errors,
            files,
            frontier,
            dict(source.start_offsets.offsets),
            end,
            stalled=overdue(held, end, source.stall_after_ms),
            checked=checked,
            bindings=[(p, o, t) for p, o, t, d in updates if d > 0],
        )

    def state_counts(reader: SourceReader, _start: int, end: int) -> checks.StateQuestion:
        key_columns = list(source.key_schema.fieldNames()) if source.envelope.keyed else []
        return checks.StateQuestion(reader.changes, key_columns, end)

    state_of_changes = JointJudgement(state_counts, checks.state_counts_together)

    def expectations(reader: SourceReader, start: int, end: int) -> checks.CheckOutcome:
        rows = checks.window_rows(reader.changes, start + 1, end + 1).where("diff > 0")
        report = validate(rows, source.expectations, name=f"{name}_changes")
        return checks.CheckOutcome(
            report.success,
            report.summary(),
            {o.type: dict(o.observed) for o in report.results},
        )

    definitions = [
        SourceCheck.jointly(
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
        SourceCheck.jointly(
            "reclocked",
            "exactly_once",
            JointJudgement(exactly_once, checks.exactly_once_together),
            "The run's windows reclocked exactly the offsets between their bindings, each "
            "once (judged per run: every window once means every offset once).",
        )
    )
    definitions.append(
        SourceCheck.jointly(
            "errors",
            "accounted",
            JointJudgement(accounted, checks.accounted_together),
            "Every registered dump record is in reclocked (or beyond the frontier, as lag), "
            "and every dump file read with bad lines, damage or no record is in errors.",
        )
    )
    if source.envelope.keyed:
        definitions.append(
            SourceCheck.jointly(
                "changes",
                "state_is_set",
                state_of_changes,
                "Every row's accumulated count is 0 or 1, and every key holds at most one row.",
            )
        )
    else:
        definitions.append(
            SourceCheck.jointly(
                "changes",
                "state_is_bag",
                state_of_changes,
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
