"""Asset checks of one source, each saying which IntoTime window(s) it judged.

The checks that guard correctness are blocking: when one fails, the source's CDCv2
export of ``changes`` is not built on the failed window, and the run fails.
The transactions check of a group member fails with severity error but does not block:
what its bindings hold back is waiting, and what they bound stays consistent.
A run covers a range of windows; the checks judge that whole range (every time in it
for completeness, the last window's time for the others). Without partition tags
(a check run on its own) they judge the newest complete window.
"""

from collections.abc import Collection, Generator, Iterator

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

from assets.source_assets import output_key
from cdc_core.app.checks import (
    ChecksToJudge,
    JudgedChecks,
    Severity,
    SourceCheck,
    source_checks,
)
from cdc_core.calendar import to_datetime
from cdc_core.checks.invariants import CheckOutcome
from cdc_core.config import Config, SourceConfig
from resources.lake import LakeResource
from resources.run_tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PARTITION_NAME_TAG,
)


def tagged_range(context: AssetExecutionContext, config: Config) -> tuple[int, int] | None:
    """``(first window start, last window end)`` of the run's partition tags; None without
    them (a check run on its own judges the newest complete window)."""
    calendar = config.calendar
    tags = context.run.tags
    first = tags.get(ASSET_PARTITION_RANGE_START_TAG) or tags.get(PARTITION_NAME_TAG)
    last = tags.get(ASSET_PARTITION_RANGE_END_TAG) or tags.get(PARTITION_NAME_TAG)
    if first and last:
        return calendar.key_window(first)[0], calendar.key_window(last)[1]
    return None


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
    outcome: CheckOutcome,
    window: tuple[int, int],
    severity: AssetCheckSeverity,
    config: Config,
    key: AssetCheckKey,
    partitions: str,
) -> AssetCheckResult:
    """A check outcome as Dagster's result for check ``key``, naming the window(s) it
    judged (``partitions``: their keys, as ``judged_partitions`` gives them)."""
    start, end = window
    return AssetCheckResult(
        asset_key=key.asset_key,
        check_name=key.name,
        passed=outcome.passed,
        severity=severity,
        description=outcome.description,
        metadata={
            "partition": partitions,
            "windows": (end - start) // config.window_ms,
            "window_start": MetadataValue.timestamp(to_datetime(start)),
            "window_end": MetadataValue.timestamp(to_datetime(end)),
            "judged_time": MetadataValue.timestamp(to_datetime(end)),
            "figures": MetadataValue.json(outcome.figures),
        },
    )


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


def check_specs(config: Config, source: SourceConfig) -> list[AssetCheckSpec]:
    """The checks of ``source`` as Dagster specs, each on the table it judges."""
    return [
        AssetCheckSpec(
            c.name, asset=output_key(source.name, c.asset), blocking=c.blocking,
            description=c.description,
        )
        for c in source_checks(config, source)
    ]  # fmt: skip


def checks_to_judge(
    context: AssetExecutionContext,
    config: Config,
    source: SourceConfig,
    lake: LakeResource,
    selected: Collection[AssetCheckKey],
) -> ChecksToJudge:
    """Completeness of every shard, monotone remap, exactly-once reclocking, every
    registered record accounted for, the state's counts (a set per key for a keyed
    envelope, positive for a bag), no standing constraint violation (classic DEBEZIUM),
    well-formed history (when kept),
    no transaction waiting past its group's timeout (for a member of a transaction group),
    and the source's data expectations: those of them in ``selected`` (any subset, e.g.
    one picked in the UI), over the run's windows.

    Judging them reports nothing (``report_judged`` does, from the step's own thread), so
    every source's checks of a run are judged together (``judge_together``)."""
    keys = {AssetCheckKey(output_key(source.name, c.asset), c.name): c
            for c in source_checks(config, source)}  # fmt: skip
    chosen = [keys[key] for key in sorted(selected, key=str) if key in keys]
    return ChecksToJudge(source, lake.root, tagged_range(context, config), chosen)


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
    # Once for all the source's checks: the config's calendar is made afresh at each ask.
    partitions = "" if judged.window is None else judged_partitions(config, judged.window)
    for check, outcome in judged.judged:
        key = AssetCheckKey(output_key(name, check.asset), check.name)
        if isinstance(outcome, Exception):  # re-raised once every other check reported
            context.log.error(f"check {check.asset}.{check.name} failed to run: {outcome}")
            failures.append(outcome)
            continue
        if judged.window is None or outcome is None:
            yield from reports.report(context, AssetCheckResult(
                asset_key=key.asset_key, check_name=check.name,
                passed=True, description="no complete window yet",
            ))  # fmt: skip
            continue
        if check.blocks(outcome):
            blocked.append(f"{check.asset}.{check.name}")
        result = to_result(outcome, judged.window, severity(check), config, key, partitions)
        yield from reports.report(context, result)
    if failures:
        raise failures[0]
    return blocked


def severity(check: SourceCheck) -> AssetCheckSeverity:
    """The check's severity as Dagster shows it."""
    return AssetCheckSeverity.ERROR if check.level == Severity.ERROR else AssetCheckSeverity.WARN
