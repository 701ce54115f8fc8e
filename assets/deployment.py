"""Every source's assets in one multi-asset: one step serves the sources a run selects.

A deployment holds tens to hundreds of sources. Each source's tables stay assets of their
own (each with its per-window figures, its checks and its lineage in the UI), but one
``multi_asset`` that can be subset defines them all, as dbt's assets define a project's
models: the definitions then cost Dagster one op for the deployment instead of four per
source (ops and their outputs are what loading the definitions and resolving the job
cost), and a run is one step. A run that selects some assets (a UI pick of one source's
tables, or of one table, one check, one export) serves only their sources.

In the step the selected sources run one after another, each whole (its windows, then
its selected checks, then its export) and each on its own: a source that fails (damaged
dumps, a drifted config, a held window) or whose blocking check fails never stops the
others. The step reports every other source's results, then fails naming the sources
that failed. A source's export is left out when one of its blocking checks failed: a
consumer never receives a stream the lake itself judged incomplete.
"""

import traceback
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckResult,
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    BackfillPolicy,
    MaterializeResult,
    Output,
    TimeWindowPartitionsDefinition,
    multi_asset,
)
from dagster_pyspark import PySparkResource
from pyspark.sql import SparkSession

from assets.cdcv2_export import export_changes, export_key, export_spec, exportable
from assets.checks import CheckReports, check_specs, judge_source
from assets.reader_checks import READERS_CHECK, judge_readers, readers_spec
from assets.source_assets import materialize_windows, output_key, table_specs
from cdc_core.config import Config, SourceConfig
from resources.lake import LakeResource

# The one op (and step) of every source's assets.
SOURCES_STEP = "sources"

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
) -> AssetsDefinition:
    """The multi-asset of every source's tables, checks and CDCv2 export."""
    specs, checks = [], []
    for source in config.sources:
        specs += table_specs(config, source)
        if exportable(source):
            specs.append(export_spec(source))
        checks += [*check_specs(config, source), readers_spec(config, source)]
    reports = CheckReports()

    @multi_asset(
        name=SOURCES_STEP,
        specs=specs,
        check_specs=checks,
        partitions_def=partitions,
        backfill_policy=BackfillPolicy.single_run(),
        can_subset=True,
    )
    def sources(
        context: AssetExecutionContext, pyspark: PySparkResource, lake: LakeResource
    ) -> Iterator[Event]:
        picked = picked_sources(context.selected_asset_keys, context.selected_asset_check_keys)
        failed: list[str] = []
        for source in config.sources:
            if source.name not in picked:
                continue
            try:
                failed += yield from serve_source(
                    context, config, source, picked[source.name],
                    pyspark.spark_session, lake, partitions, reports,
                )  # fmt: skip
            except Exception as failure:
                context.log.error(f"{source.name} failed:\n{traceback.format_exc()}")
                failed.append(f"{source.name}: {type(failure).__name__}: {failure}")
        if failed:
            raise SourcesFailed(
                f"{len(failed)} of {len(picked)} source(s) failed; the others' results are "
                "reported:\n" + "\n".join(failed)
            )

    return reports.of(sources)


def serve_source(
    context: AssetExecutionContext,
    config: Config,
    source: SourceConfig,
    picked: Picked,
    spark: SparkSession,
    lake: LakeResource,
    partitions: TimeWindowPartitionsDefinition,
    reports: CheckReports,
) -> Generator[Event, None, list[str]]:
    """One source's part of a run: its windows (when any of its tables is selected), its
    selected checks, then its export (unless a blocking check failed). Returns what
    failed without raising: the blocking checks that failed."""
    if picked.tables:
        pipeline = lake.open(spark, config, source)
        yield from materialize_windows(context, config, pipeline, partitions, picked.tables)
    readers = AssetCheckKey(output_key(source.name, "changes"), READERS_CHECK)
    if readers in picked.checks:
        yield from reports.report(context, judge_readers(config, source, lake))
    blocked: list[str] = []
    if picked.checks - {readers}:
        blocked = yield from judge_source(
            context, config, source, lake, spark, picked.checks, reports
        )
    if blocked:
        if picked.export:
            context.log.warning(f"{source.name}: CDCv2 export not built: a blocking check failed")
        return [f"{source.name}: blocking check(s) failed: {', '.join(blocked)}"]
    if picked.export:
        yield export_changes(context, config, lake.open(spark, config, source), partitions)
    return []
