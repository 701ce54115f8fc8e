"""Asset checks of one source, each saying which IntoTime window(s) it judged.

The checks that guard correctness are blocking: when one fails, the source's CDCv2
export of ``changes`` is not built on the failed window, and the run fails.
The transactions check of a group member fails with severity error but does not block:
what its bindings hold back is waiting, and what they bound stays consistent.
A run covers a range of windows; the checks judge that whole range (every time in it
for completeness, the last window's time for the others). Without partition tags
(a check run on its own) they judge the newest complete window.
"""


import threading
from collections.abc import Callable, Collection, Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetsDefinition,
    MetadataValue,
    Output,
)
from pyspark.sql import SparkSession

from assets.source_assets import output_key
from cdc_core.calendar import to_datetime
from cdc_core.checks import history_versions, transactions_settled, validate
from cdc_core.checks import invariants as checks
from cdc_core.config import Config, SourceConfig
from cdc_core.ingest.connect_files import sink_gaps
from cdc_core.phases import phase
from cdc_core.reclock import frontier_at, held_partitions, overdue, remap_updates
from cdc_core.reclock.remap import frontier_in
from cdc_core.source import SourcePipeline
from cdc_core.vocabulary import Envelope
from resources.lake import LakeResource
from resources.run_tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PARTITION_NAME_TAG,
)


def judged_range(
    context: AssetExecutionContext, config: Config, pipeline: SourcePipeline
) -> tuple[int, int] | None:
    """``(first window start, last window end)`` of the run, else the newest complete
    window; None when nothing is complete yet."""
    calendar = config.calendar
    tags = context.run.tags
    first = tags.get(ASSET_PARTITION_RANGE_START_TAG) or tags.get(PARTITION_NAME_TAG)
    last = tags.get(ASSET_PARTITION_RANGE_END_TAG) or tags.get(PARTITION_NAME_TAG)
    if first and last:
        return calendar.key_window(first)[0], calendar.key_window(last)[1]
    upper = pipeline.outputs_upper().time
    if upper is None or upper <= config.start_ms + 1:
        return None  # nothing complete yet, or finished (no newest window)
    return upper - 1 - config.window_ms, upper - 1


def judged_partitions(config: Config, window: tuple[int, int]) -> str:
    """The partition key(s) judged, as text: ``K`` for one window, ``K1 .. Kn`` for a range.

    Dagster attaches a partition to a check result only when its run has exactly one
    partition; a range run records one result per check, so the keys go in its metadata.
    """
    start, end = window
    calendar = config.calendar
    first, last = calendar.window_key(start + calendar.window_ms), calendar.window_key(end)
    return first if first == last else f"{first} .. {last}"


def to_result(
    outcome: checks.CheckOutcome,
    window: tuple[int, int],
    severity: AssetCheckSeverity,
    config: Config,
    key: AssetCheckKey,
) -> AssetCheckResult:
    """A check outcome as Dagster's result for check ``key``, naming the window(s) it
    judged."""
    start, end = window
    return AssetCheckResult(
        asset_key=key.asset_key,
        check_name=key.name,
        passed=outcome.passed,
        severity=severity,
        description=outcome.description,
        metadata={
            "partition": judged_partitions(config, window),
            "windows": (end - start) // config.window_ms,
            "window_start": MetadataValue.timestamp(to_datetime(start)),
            "window_end": MetadataValue.timestamp(to_datetime(end)),
            "judged_time": MetadataValue.timestamp(to_datetime(end)),
            "figures": MetadataValue.json(outcome.figures),
        },
    )


@dataclass(frozen=True)
class SourceCheck:
    """One check of a source: the output it judges, its name, and how it judges."""

    asset: str
    name: str
    judge: Callable[[SourcePipeline, int, int], checks.CheckOutcome]
    description: str
    blocking: bool = True
    severity: AssetCheckSeverity | None = None  # None: error when blocking, else warning


class CheckReports:
    """How the checks report their results without Dagster listing every window.

    Dagster turns an ``AssetCheckResult`` into an evaluation pointing at the materialization
    the check judged. In a run of one window it finds it by that window; in any other run
    (a range of windows, or none) it lists every partition key of the asset first, since
    an unpartitioned check depends on all of them: minutes for a year of one-minute
    windows. So outside one-window runs the step reports the evaluation itself (with the
    check's output), without that pointer; the check's status in the UI is the same.
    """

    def __init__(self) -> None:
        self._outputs: dict[AssetCheckKey, tuple[str, AssetCheckSpec]] = {}

    def of(self, definition: AssetsDefinition) -> AssetsDefinition:
        """``definition``, whose output names (one per check) the reports now know."""
        self._outputs = {
            spec.key: (output, spec)
            for output, spec in definition.check_specs_by_output_name.items()
        }
        return definition

    def report(
        self, context: AssetExecutionContext, result: AssetCheckResult
    ) -> Iterator[AssetCheckResult | Output | AssetCheckEvaluation]:
        """What the step yields for ``result``."""
        if context.run.tags.get(PARTITION_NAME_TAG):
            yield result
            return
        # Every result built here names its asset and check.
        assert result.asset_key is not None and result.check_name is not None
        output, spec = self._outputs[AssetCheckKey(result.asset_key, result.check_name)]
        yield Output(None, output_name=output)
        yield AssetCheckEvaluation(
            asset_key=spec.asset_key, check_name=spec.name, passed=result.passed,
            metadata=result.metadata, severity=result.severity,
            description=result.description, blocking=spec.blocking,
        )  # fmt: skip


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


def check_specs(config: Config, source: SourceConfig) -> list[AssetCheckSpec]:
    """The checks of ``source`` as Dagster specs, each on the table it judges."""
    return [
        AssetCheckSpec(
            c.name, asset=output_key(source.name, c.asset), blocking=c.blocking,
            description=c.description,
        )
        for c in _source_checks(config, source)
    ]  # fmt: skip


@dataclass(frozen=True)
class JudgedChecks:
    """A source's selected checks as judged over ``window`` (None: nothing complete yet,
    and nothing judged): each with its outcome, or what it raised."""

    source: SourceConfig
    window: tuple[int, int] | None
    judged: list[tuple[SourceCheck, checks.CheckOutcome | Exception | None]]


def judge_source(
    context: AssetExecutionContext,
    config: Config,
    source: SourceConfig,
    lake: LakeResource,
    spark: SparkSession,
    selected: Collection[AssetCheckKey],
) -> JudgedChecks:
    """Completeness of every shard, monotone remap, exactly-once reclocking, every
    registered record accounted for, the state's counts (a set per key for a keyed
    envelope, positive for a bag), no standing constraint violation (classic DEBEZIUM),
    well-formed history (when kept),
    no transaction waiting past its group's timeout (for a member of a transaction group),
    and the source's data expectations: those of them in ``selected`` (any subset, e.g.
    one picked in the UI).

    It reports nothing itself (``report_judged`` does, from the step's own thread), so a
    source's checks can be judged beside other sources' work. They are judged at once
    (``judge_concurrently``): the source is opened once per checking thread, not once per
    check."""
    name = source.name
    keys = {AssetCheckKey(output_key(name, c.asset), c.name): c
            for c in _source_checks(config, source)}  # fmt: skip
    chosen = [keys[key] for key in sorted(selected, key=str) if key in keys]
    # Opened here first: an open settles the tables' schema (it may commit), which the
    # checking threads' own opens below must find done, not race on.
    pipeline = lake.open(spark, config, source)
    window = judged_range(context, config, pipeline)
    if window is None:
        return JudgedChecks(source, None, [(check, None) for check in chosen])
    opened = threading.local()  # a pipeline per thread: its table handles are its own

    def judge(check: SourceCheck) -> checks.CheckOutcome:
        if not hasattr(opened, "pipeline"):
            opened.pipeline = lake.open(spark, config, source)
        return check.judge(opened.pipeline, *window)

    # Planned once for every checking thread (the plan settings are the session's).
    judged_from = {"reclocked": window[0], "errors": window[0]}
    with pipeline.planned_by_tables(*CHECKED_TABLES, after=judged_from):
        judged = judge_concurrently(name, chosen, judge)
    return JudgedChecks(source, window, list(zip(chosen, judged, strict=True)))


def report_judged(
    context: AssetExecutionContext,
    config: Config,
    judged: JudgedChecks,
    reports: CheckReports,
) -> Generator[AssetCheckResult | Output | AssetCheckEvaluation, None, list[str]]:
    """Report each judged check; returns the names of the blocking checks that failed. A
    check that raised does not keep the others from reporting; the call raises after
    they did."""
    name = judged.source.name
    failures: list[Exception] = []
    blocked: list[str] = []
    for check, outcome in judged.judged:
        key = AssetCheckKey(output_key(name, check.asset), check.name)
        if judged.window is None or outcome is None:
            yield from reports.report(context, AssetCheckResult(
                asset_key=key.asset_key, check_name=check.name,
                passed=True, description="no complete window yet",
            ))  # fmt: skip
            continue
        if isinstance(outcome, Exception):  # re-raised once every other check reported
            context.log.error(f"check {check.asset}.{check.name} failed to run: {outcome}")
            failures.append(outcome)
            continue
        if _blocks(check, outcome):
            blocked.append(f"{check.asset}.{check.name}")
        result = to_result(outcome, judged.window, _severity(check), config, key)
        yield from reports.report(context, result)
    if failures:
        raise failures[0]
    return blocked


def blocks_export(judged: JudgedChecks) -> bool:
    """Whether the source's export must wait: a blocking check failed, or a check could
    not be judged."""
    return any(
        isinstance(outcome, Exception)
        or (isinstance(outcome, checks.CheckOutcome) and _blocks(check, outcome))
        for check, outcome in judged.judged
    )


def _severity(check: SourceCheck) -> AssetCheckSeverity:
    default = AssetCheckSeverity.ERROR if check.blocking else AssetCheckSeverity.WARN
    return check.severity or default


def _blocks(check: SourceCheck, outcome: checks.CheckOutcome) -> bool:
    """Whether ``outcome`` fails a blocking check with severity error."""
    return check.blocking and _severity(check) == AssetCheckSeverity.ERROR and not outcome.passed


def _source_checks(config: Config, source: SourceConfig) -> list[SourceCheck]:
    """The checks that apply to ``source`` (its envelope, history, transaction group and
    expectations)."""
    name = source.name

    def completeness_of(output: str) -> Callable[[SourcePipeline, int, int], checks.CheckOutcome]:
        def judge(pipeline: SourcePipeline, start: int, end: int) -> checks.CheckOutcome:
            shard = getattr(pipeline, output)
            # The remap is metadata: a few bindings per window, recounted on the driver.
            return checks.completeness(shard, start + 1, end + 1, on_driver=output == "remap")

        return judge

    def exactly_once(pipeline: SourcePipeline, start: int, end: int) -> checks.CheckOutcome:
        # Bindings before the remap's since are compacted (retired): those windows were
        # judged when they ran, so the range judged starts at the since.
        start = max(start, pipeline.remap.refresh().since.time or 0)
        if start >= end:
            return checks.CheckOutcome(True, "the range is compacted: judged when it ran")
        before, after = frontier_at(pipeline.remap, start), frontier_at(pipeline.remap, end)
        starts = dict(source.start_offsets.offsets)
        return checks.exactly_once(
            pipeline.reclocked,
            before,
            after,
            starts,
            start + 1,
            end + 1,
            gaps_allowed=source.allow_offset_gaps,
            errors=pipeline.errors,
            holes=sink_gaps(pipeline.registry.files(reaching=before.offsets)),
        )

    def accounted(pipeline: SourcePipeline, start: int, end: int) -> checks.CheckOutcome:
        # As exactly_once: windows before the remap's since were judged when they ran.
        start = max(start, pipeline.remap.refresh().since.time or 0)
        updates = remap_updates(pipeline.remap, end)
        checked, frontier = frontier_in(updates, start), frontier_in(updates, end)
        files = pipeline.registry.files(reaching=checked.offsets)
        held = held_partitions(source, files, frontier, group=pipeline.reader.group_name)
        bindings = [(p, o, t) for p, o, t, d in updates if d > 0]
        return checks.accounted(
            pipeline.reclocked,
            pipeline.errors,
            files,
            frontier,
            dict(source.start_offsets.offsets),
            end,
            stalled=overdue(held, end, source.stall_after_ms),
            checked=checked,
            bindings=bindings,
        )

    def state_counts(pipeline: SourcePipeline, _start: int, end: int) -> checks.CheckOutcome:
        key_columns = list(source.key_schema.fieldNames()) if source.envelope.keyed else []
        return checks.state_counts(pipeline.changes, key_columns, end)

    def expectations(pipeline: SourcePipeline, start: int, end: int) -> checks.CheckOutcome:
        rows = checks.window_rows(pipeline.changes, start + 1, end + 1).where("diff > 0")
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
                    p.reader.pending_transactions([end]).get(end), group.name, group.timeout
                ),
                f"No transaction of group {group.name} stays incomplete longer than "
                f"{group.timeout} (the bindings hold it back until it completes).",
                blocking=False,
                severity=AssetCheckSeverity.ERROR,
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
