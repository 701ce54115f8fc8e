"""Every source's assets in multi-assets: a run's steps share one serving of the sources
it selects.

A deployment holds tens to hundreds of sources. Each source's tables stay assets of their
own (each with its per-window figures, its checks and its lineage in the UI), but
multi-assets that can be subset define them, as dbt's assets define a project's models:
one per ``SOURCES_PER_STEP`` sources. The definitions then cost Dagster one op per that
many sources instead of four per source (ops and their outputs are what loading the
definitions and resolving the job cost), and the step of each stays small enough that
Dagster's work per output (which grows with the step's outputs and keys) stays flat. A
run that selects some assets (a UI pick of one source's tables, or of one table, one
check, one export) serves only their sources.

The run's first step serves every source the run selects (``assets.run_serving``): their
windows several at once (``cdc_core.app.materialize``); then every source's selected
checks judged together (one Spark job per check kind,
``cdc_core.app.checks.judge_together``); then their exports. Each step reports its own
sources. Each source stays on its own: a source that fails (damaged dumps, a drifted
config, a held window) or whose blocking check fails never stops the others.
Only a step's own thread reports to Dagster (its context is not thread-safe): the
sources' progress is passed on from there, then each source's results. A step reports
each of its sources that did not fail, then fails naming those that did. A source's
export is left out when one of its blocking checks failed: a consumer never receives a
stream the lake itself judged incomplete.
"""

import dataclasses
import functools
import json
import queue
import time
import traceback
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    MaterializeResult,
    Output,
    TimeWindowPartitionsDefinition,
    multi_asset,
)
from dagster_pyspark import PySparkResource
from pyspark.sql import SparkSession

from assets.cdcv2_export import export_key, export_spec, export_windows_of, report_export
from assets.checks import CheckReports, check_specs, checks_to_judge, report_judged
from assets.partitions import contiguous_windows
from assets.reader_checks import READERS_CHECK, judge_readers, readers_spec
from assets.run_serving import RunServing, Selection
from assets.source_assets import (
    ARRIVALS_TAG,
    PhaseLog,
    output_key,
    report_windows,
    table_specs,
)
from cdc_core.app.checks import ChecksToJudge, JudgedChecks, blocks_export, judge_together
from cdc_core.app.errors import STATED_ERRORS
from cdc_core.app.export import ExportRun, SourceExport, export_sources, exportable
from cdc_core.app.materialize import (
    LandedDumps,
    ListedLanding,
    MaterializedWindows,
    RegisteredAhead,
    Served,
    SourceRun,
    materialize_windows,
    open_source,
    serve_together,
)
from cdc_core.app.status import Backlog
from cdc_core.calendar import Windows
from cdc_core.config import Config, SourceConfig
from cdc_core.phases import PhaseEvent, observing
from resources.lake import LakeResource

# The name of the op (and step) of the sources' assets: ``sources`` for a deployment of
# one op, ``sources_01``, ``sources_02``, ... for more.
SOURCES_STEP = "sources"

# Sources per op. Dagster's work for each output of a step grows with the step's outputs
# and keys (about fifteen of each per source): 200 sources in one step took 100 s to
# report, in steps of 16 they take about a third of that (docs/guides/many-topics.md).
SOURCES_PER_STEP = 16

Event = MaterializeResult | AssetCheckResult | AssetCheckEvaluation | Output


class SourcesFailed(RuntimeError):
    """Sources of the run failed, each named with why; every other source of the run
    reported its results before."""


@dataclass
class Picked:
    """What a run selected of one source: tables, checks, its export."""

    tables: set[str] = field(default_factory=set)
    checks: set[AssetCheckKey] = field(default_factory=set)
    export: bool = False


def picked_sources(
    assets: Iterable[AssetKey], checks: Iterable[AssetCheckKey]
) -> dict[str, Picked]:
    """The sources a selection touches (an asset key is ``[source, table]``), with what
    it selected of each."""
    picked: dict[str, Picked] = {}
    for key in assets:
        name, table = key.path
        of = picked.setdefault(name, Picked())
        if key == export_key(name):
            of.export = True
        else:
            of.tables.add(table)
    for check in checks:
        picked.setdefault(check.asset_key.path[0], Picked()).checks.add(check)
    return picked


def deployment_assets(
    config: Config, partitions: TimeWindowPartitionsDefinition
) -> list[AssetsDefinition]:
    """Every source's tables, checks and CDCv2 export: one multi-asset (and step) per
    ``SOURCES_PER_STEP`` sources in config order, served once for the whole run
    (``assets.run_serving``)."""
    groups = [config.sources[i : i + SOURCES_PER_STEP]
              for i in range(0, len(config.sources), SOURCES_PER_STEP)]  # fmt: skip
    defined = [_source_specs(config, group) for group in groups]
    every = Selection(
        frozenset(spec.key for specs, _ in defined for spec in specs),
        frozenset(check.key for _, checks in defined for check in checks),
    )
    serving: RunServing[SourceServed] = RunServing()
    width = len(str(len(groups)))
    return [
        _step_assets(config, partitions, specs, checks, every, serving,
                     SOURCES_STEP if len(groups) == 1 else f"{SOURCES_STEP}_{k:0{width}d}")
        for k, (specs, checks) in enumerate(defined, 1)
    ]  # fmt: skip


def _source_specs(
    config: Config, sources: Sequence[SourceConfig]
) -> tuple[list[AssetSpec], list[AssetCheckSpec]]:
    """The sources' tables and exports as asset specs, and their checks."""
    specs: list[AssetSpec] = []
    checks: list[AssetCheckSpec] = []
    for source in sources:
        specs += table_specs(config, source)
        if exportable(source.output_schema):
            specs.append(export_spec(source))
        checks += [*check_specs(config, source), readers_spec(config, source)]
    return specs, checks


def _step_assets(
    config: Config,
    partitions: TimeWindowPartitionsDefinition,
    specs: list[AssetSpec],
    checks: list[AssetCheckSpec],
    every: Selection,
    serving: RunServing["SourceServed"],
    name: str,
) -> AssetsDefinition:
    """The multi-asset of some sources' tables, checks and exports: its step reports the
    sources it owns, which the run's first step served with every other source of the
    run."""
    reports = CheckReports()

    @multi_asset(
        name=name,
        specs=specs,
        check_specs=checks,
        partitions_def=partitions,
        backfill_policy=BackfillPolicy.single_run(),
        can_subset=True,
    )
    def sources(
        context: AssetExecutionContext, pyspark: PySparkResource, lake: LakeResource
    ) -> Iterator[Event]:
        own = picked_sources(context.selected_asset_keys, context.selected_asset_check_keys)
        run_wide = every.of_run(context.run)
        picked = {**picked_sources(run_wide.assets, run_wide.checks), **own}
        spark = pyspark.spark_session
        # A run of checks alone may have no partition (nor windows to run).
        windowed = any(of.tables or of.export for of in picked.values())
        keys = list(context.partition_keys) if windowed else []
        run = RunWindows(
            runs=contiguous_windows(partitions, keys, config.window_ms),
            keys=keys,
            run_id=context.run_id,
            now_ms=int(time.time() * 1000),
            arrived=json.loads(context.run.tags.get(ARRIVALS_TAG, "{}")),
        )

        def open_step(name: str) -> SourceStep:
            source = config.source(name)
            return SourceStep(context, config, source, picked[name], spark, lake, partitions, run)

        progress: queue.SimpleQueue[PhaseEvent] = queue.SimpleQueue()
        phases = PhaseLog(context, config, len(picked))

        def pass_on_progress() -> None:
            while not progress.empty():
                phases.log(progress.get())

        def serve(names: list[str]) -> Iterator[Served[SourceServed]]:
            try:
                with observing(progress.put):
                    finish = functools.partial(finish_sources, spark, config)
                    yield from serve_together(
                        spark, config, names, open_step, idle=pass_on_progress, finish=finish
                    )
            finally:  # a serving that raised still logs what its sources did
                pass_on_progress()
                phases.flush()

        failed: list[str] = []
        for served in serving.for_step(context.run_id, own, picked, serve):
            pass_on_progress()
            phases.flush()  # the sources are served by now: each source's phases, kept
            try:
                if served.failure is not None:
                    raise served.failure
                assert served.result is not None
                failed += yield from served.result.report(context, reports)
            except Exception as failure:
                if isinstance(failure, STATED_ERRORS):  # its message says what and where
                    context.log.error(f"{served.source} failed: {failure}")
                else:
                    trace = "".join(traceback.format_exception(failure))
                    context.log.error(f"{served.source} failed:\n{trace}")
                failed.append(f"{served.source}: {type(failure).__name__}: {failure}")
        if failed:
            raise SourcesFailed(
                f"{len(failed)} of {len(own)} source(s) failed; the others' results are "
                "reported:\n" + "\n".join(failed)
            )

    return reports.of(sources)


@dataclass(frozen=True)
class RunWindows:
    """The windows of a run, the same for every source it serves: runs of adjacent
    windows, their partition keys, the run's id and start time, and the arrival times a
    sensor saw (by path). Read once from the step's context, in its own thread."""

    runs: list[Windows]
    keys: list[str]
    run_id: str
    now_ms: int
    arrived: dict[str, int]


class SourceStep:
    """One source's part of the step: its windows (when any of its tables is selected),
    its selected checks, then its export (unless a blocking check failed).

    ``serve`` does the work and talks to no one, so sources are served side by side
    (``cdc_core.app.materialize.serve_together``); ``report`` then reports it from the
    step's own thread, the only one Dagster's context may be used from."""

    def __init__(
        self,
        context: AssetExecutionContext,
        config: Config,
        source: SourceConfig,
        picked: Picked,
        spark: SparkSession,
        lake: LakeResource,
        partitions: TimeWindowPartitionsDefinition,
        run: RunWindows,
    ) -> None:
        self.context, self.config, self.source, self.picked = context, config, source, picked
        self.spark, self.lake, self.partitions, self.run = spark, lake, partitions, run
        # The source opened on the run's lake, to be written: for its windows when any of its
        # tables is picked (the export then uses the same handle), else for its export.
        self.open = functools.partial(open_source, spark, config, source, lake.root, lake.landing)
        self.pipeline = self.open() if picked.tables else None

    def input_bytes(self, listed: ListedLanding) -> int:
        """What its windows read (nothing when only its checks or export are picked),
        the landing listed through ``listed``, which the run's sources share."""
        return 0 if self.pipeline is None else self.pipeline.input_bytes(listed)

    def landed_dumps(self) -> list[LandedDumps]:
        """What its windows register first (nothing when only its checks or export are
        picked)."""
        if self.pipeline is None:
            return []
        return self.pipeline.landed_dumps(self.run.now_ms, self.run.arrived)

    def registered_ahead(self, registered: RegisteredAhead) -> None:
        """What the run registered before serving it: its windows' registration skips it."""
        if self.pipeline is not None:
            self.pipeline.registered_ahead(registered)

    def binding(self) -> SourceRun | None:
        """Its windows, to bind with the run's other sources' (a run of one range only)."""
        if self.pipeline is None or len(self.run.runs) != 1:
            return None
        return self.pipeline, self.run.runs[0]

    @property
    def readers_check(self) -> AssetCheckKey:
        """The key of the source's readers check (judged from the lease table alone)."""
        return AssetCheckKey(output_key(self.source.name, "changes"), READERS_CHECK)

    def serve(self) -> "SourceServed":
        """Run the source's windows and judge its readers check; its other checks and its
        export wait for every source of the run (``finish_sources``)."""
        served = SourceServed(self)
        if self.pipeline is not None:
            served.windows = materialize_windows(
                self.pipeline, self.run.runs, now_ms=self.run.now_ms, arrived=self.run.arrived
            )
            served.backlog = Backlog.of(self.pipeline.registry)
        if self.readers_check in self.picked.checks:
            served.readers = judge_readers(self.config, self.source, self.lake)
        return served

    def checks_to_judge(self) -> ChecksToJudge | None:
        """The source's picked checks, to judge with the run's other sources' (None: none
        picked beyond its readers check)."""
        if not self.picked.checks - {self.readers_check}:
            return None
        asked = checks_to_judge(self.context, self.config, self.source, self.lake,
                                self.picked.checks)  # fmt: skip
        if self.pipeline is None:
            return asked
        # The run's own read handle: its tables are open, and just written.
        return dataclasses.replace(asked, reader=self.pipeline.reader)

    def exporting(self) -> ExportRun:
        """What the source's CDCv2 export of the run's windows reads: its tables (the run's
        own handle when its windows ran: its tables are open) and the windows."""
        pipeline = self.pipeline or self.open()
        return pipeline, export_windows_of(self.partitions, self.run.keys)


def finish_sources(
    spark: SparkSession, config: Config, served: list[Served["SourceServed"]]
) -> list[Served["SourceServed"]]:
    """Every served source's picked checks, judged together (``judge_together``: one
    job per check kind, not per source), then the exports of those whose blocking checks
    passed (``export_sources``: one job for all of them); a source whose export fails
    fails alone."""
    ready = [s.result for s in served if s.result is not None]
    failed: dict[str, Exception] = {}
    asking = []
    for result in ready:
        try:
            if ask := result.step.checks_to_judge():
                asking.append((result, ask))
        except Exception as failure:  # noqa: BLE001 - reported as the source's failure
            failed[result.step.source.name] = failure
    judged = judge_together(spark, config, [ask for _, ask in asking])
    for (result, _), verdict in zip(asking, judged, strict=True):
        result.judged = verdict

    exporting: dict[str, ExportRun] = {}
    for result in ready:
        name = result.step.source.name
        try:
            if name not in failed and result.step.picked.export and not result.blocking_failed():
                exporting[name] = result.step.exporting()
        except Exception as failure:  # noqa: BLE001 - reported as the source's failure
            failed[name] = failure
    run_id = ready[0].step.run.run_id if ready else ""
    exported = export_sources(config, list(exporting.values()), run_id) if exporting else []
    for name, outcome in zip(exporting, exported, strict=True):
        if isinstance(outcome, Exception):
            failed[name] = outcome
        else:
            next(r for r in ready if r.step.source.name == name).export = outcome
    finished = {
        r.step.source.name: Served(r.step.source.name, failure=failed[r.step.source.name])
        if r.step.source.name in failed else Served(r.step.source.name, result=r)
        for r in ready
    }  # fmt: skip
    return [finished.get(s.source, s) for s in served]


@dataclass
class SourceServed:
    """What serving a source gave, to be reported."""

    step: SourceStep
    windows: MaterializedWindows | None = None
    backlog: Backlog | None = None
    readers: AssetCheckResult | None = None
    judged: JudgedChecks | None = None
    export: SourceExport | None = None

    def blocking_failed(self) -> bool:
        """Whether the export must wait on the judged checks (before they are reported)."""
        return self.judged is not None and blocks_export(self.judged)

    def report(
        self, context: AssetExecutionContext, reports: CheckReports
    ) -> Generator[Event, None, list[str]]:
        """Yield the source's results; returns what failed without raising: the
        blocking checks that failed."""
        step = self.step
        name = step.source.name
        if self.windows is not None and self.backlog is not None:
            yield from report_windows(
                context, step.config, step.source, self.windows, self.backlog,
                step.picked.tables, step.run.keys,
            )  # fmt: skip
        if self.readers is not None:
            yield from reports.report(context, self.readers)
        blocked: list[str] = []
        if self.judged is not None:
            blocked = yield from report_judged(context, step.config, self.judged, reports)
        if blocked:
            if step.picked.export:
                context.log.warning(f"{name}: CDCv2 export not built: a blocking check failed")
            return [f"{name}: blocking check(s) failed: {', '.join(blocked)}"]
        if self.export is not None:
            yield report_export(context, self.export, step.run.keys)
        return []
