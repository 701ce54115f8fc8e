"""The software-defined assets of one source: remap, reclocked, changes, state, errors.

All five are produced by one multi-asset step because a run's outputs are committed
together, in order, by the engine (``cdc_core.pipeline``); splitting them into separate
steps would only re-read the same shards. A backfill is one run (single-run backfill
policy) and its windows are reclocked in one pass; across runs the remap shard's
upper decides: a window at or below it reuses its durable binding, a window beyond
it first binds the skipped windows, so running windows out of order never reorders
bindings.
"""


import time
from collections.abc import Iterator

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetSpec,
    BackfillPolicy,
    MaterializeResult,
    MetadataValue,
    TableColumn,
    TableSchema,
    TimeWindowPartitionsDefinition,
    multi_asset,
)
from dagster_pyspark import PySparkResource
from pyspark.sql.types import StructType

from assets.partitions import contiguous_windows, to_datetime
from cdc_core.config import Config, SourceConfig
from cdc_core.phases import PhaseEvent, observing
from cdc_core.pipeline import OUTPUTS, SourcePipeline, SourceStatus, WindowReport
from resources.lake import LakeResource
from resources.landing import LandingZone

DESCRIPTIONS = {
    "remap": "Durable bindings: at each window end, the Kafka offset frontier per partition.",
    "reclocked": "Each Kafka record exactly once, at the first window whose binding covers it.",
    "changes": "Differential changes (data, time, diff) after the source's envelope.",
    "state": "Current rows: the snapshot of `changes` at the newest complete time.",
    "errors": "Definite errors of the source, with topic/partition/offset and a reason.",
}


def output_key(source: str, output: str) -> AssetKey:
    return AssetKey([source, output])


def source_output_keys(config: Config) -> list[AssetKey]:
    """The assets the sources' window runs materialize (no exports)."""
    return [output_key(source.name, name) for source in config.sources for name in OUTPUTS]


def source_assets(
    config: Config, source: SourceConfig, partitions: TimeWindowPartitionsDefinition
):
    """Build the multi-asset that materializes one source window by window."""
    upstream = {
        "reclocked": "remap",
        "changes": "reclocked",
        "state": "changes",
        "errors": "reclocked",
    }
    specs = [
        AssetSpec(
            output_key(source.name, name),
            description=DESCRIPTIONS[name],
            deps=[output_key(source.name, upstream[name])] if name in upstream else [],
            group_name=source.name,
            kinds={"spark", "delta"},
            metadata={"topic": source.topic, "envelope": source.envelope.value},
        )
        for name in OUTPUTS
    ]

    @multi_asset(
        name=f"{source.name}_windows",
        specs=specs,
        partitions_def=partitions,
        backfill_policy=BackfillPolicy.single_run(),
        can_subset=False,
    )
    def materialize_windows(
        context: AssetExecutionContext,
        pyspark: PySparkResource,
        lake: LakeResource,
        landing: LandingZone,
    ) -> Iterator[MaterializeResult]:
        pipeline = SourcePipeline(
            pyspark.spark_session, config, source, lake.source_root(source.name), landing.root
        )
        with observing(lambda event: log_phase(context, event)):
            pipeline.register_dumps(arrival_ms=int(time.time() * 1000))
            runs = contiguous_windows(partitions, list(context.partition_keys), config.window_ms)
            reports: list[WindowReport] = []
            for windows in runs:
                reports.extend(pipeline.run_windows(windows))
            for index, report in enumerate(reports, start=1):
                context.log.info(f"[{index}/{len(reports)}] {report.summary()}")
            status = pipeline.finish()
        for name in OUTPUTS:
            yield MaterializeResult(
                asset_key=output_key(source.name, name),
                metadata=output_metadata(name, status, reports),
            )

    return materialize_windows


def log_phase(context: AssetExecutionContext, event: PhaseEvent) -> None:
    """A step log line as each engine phase starts and ends, so a long step is never silent."""
    if not event.ended:
        context.log.debug(f"{event.source}: {event.name} ...")
        return
    figures = "".join(f"; {name}: {value}" for name, value in event.figures.items())
    context.log.info(f"{event.source}: {event.name} done in {event.seconds:.1f} s{figures}")


def output_metadata(
    output: str, status: SourceStatus, reports: list[WindowReport]
) -> dict[str, object]:
    """Stable numeric keys so the UI can plot them per partition."""
    table = status.tables[output]
    metadata: dict[str, object] = {
        "dagster/row_count": table.rows,
        "dagster/column_schema": column_schema(table.schema),
        "path": MetadataValue.path(str(table.path)),
        "delta_version": table.version,
        "finished": table.upper is None,
        "windows": len(reports),
        "records_in": sum(r.records_in for r in reports),
        "updates_out": sum(r.updates_out for r in reports),
        "errors_new": sum(r.errors_out for r in reports),
        "lag_offsets": sum(status.lag.values()),
        "damaged_files": len(status.inspection.damaged),
        "caught_up": status.inspection.caught_up,
    }
    # Frontiers are IntoTimes while open; a finished frontier (empty antichain) has none.
    if table.upper is not None:
        metadata["upper"] = MetadataValue.timestamp(to_datetime(table.upper))
    if table.since is not None:
        metadata["since"] = MetadataValue.timestamp(to_datetime(table.since))
    if output == "remap":
        for partition, offset in status.frontier.offsets.items():
            metadata[f"frontier/partition_{partition}"] = offset
        for partition, lag in status.lag.items():
            metadata[f"lag/partition_{partition}"] = lag
    return metadata


def column_schema(schema: StructType) -> TableSchema:
    return TableSchema(
        columns=[
            TableColumn(name=field.name, type=field.dataType.simpleString()) for field in schema
        ]
    )
