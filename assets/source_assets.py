"""The tables of one source as assets: remap, reclocked, changes, state, errors (and
history, for a source that keeps one), and what a run reports of them.

A source's tables are committed together, in order, by the engine
(``cdc_core.app.materialize``), so a run serves a source whole and reports every table of
it the run selected; the deployment's one multi-asset (``assets.deployment``) does so for
each source it serves.
"""

from collections.abc import Collection, Iterator, Mapping, Sequence

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetSpec,
    MaterializeResult,
    MetadataValue,
    TableColumn,
    TableRecord,
    TableSchema,
)
from pyspark.sql.types import StructType

from assets.partitions import to_datetime, window_key
from cdc_core.app.materialize import MaterializedWindows
from cdc_core.app.status import Backlog, SourceTable, source_tables
from cdc_core.config import Config, SourceConfig
from cdc_core.phases import ALL_SOURCES, PhaseEvent
from cdc_core.source import SourceStatus, WindowReport

# A table's metadata: Dagster's own values and the plain ones it takes as they are.
Metadata = dict[str, MetadataValue | TableSchema | int | float | str]

# Run tag: JSON ``{path: arrival_ms}`` of dump files a sensor saw land before the run.
ARRIVALS_TAG = "reclock/arrivals"


def output_key(source: str, output: str) -> AssetKey:
    """The asset key of one output table of a source: ``[source, output]``."""
    return AssetKey([source, output])


def source_output_keys(config: Config) -> list[AssetKey]:
    """The assets the sources' window runs materialize (no exports)."""
    return [
        output_key(source.name, table.name)
        for source in config.sources
        for table in source_tables(config, source)
    ]


def source_tags(source: SourceConfig) -> dict[str, str]:
    """Catalog filters: every asset of a source carries its envelope and reclock policy."""
    return {"reclock/envelope": source.envelope.value, "reclock/policy": source.reclock.value}


def table_identity(config: Config, table: SourceTable) -> dict[str, str]:
    """Dagster's standard keys for where a table lives: its URI, and for a table the
    config's catalog registers, its name there (the UI links tables to assets by it)."""
    identity = {"dagster/uri": table.uri}
    if table.catalog_name is not None:
        identity["dagster/table_name"] = table.catalog_name
        identity["dagster/storage_kind"] = str(config.catalog.kind)
    return identity


def table_specs(config: Config, source: SourceConfig) -> list[AssetSpec]:
    """The source's tables as assets, each with its description, its upstream table, the
    source's group, owners, catalog tags, and its URI and name (``table_identity``)."""
    return [
        AssetSpec(
            output_key(source.name, table.name),
            description=table.description,
            deps=[output_key(source.name, table.upstream)] if table.upstream else [],
            group_name=source.name,
            kinds={"spark", "delta"},
            owners=list(source.owners),
            tags=source_tags(source),
            metadata={
                "topic": source.topic,
                "envelope": source.envelope.value,
                **table_identity(config, table),
            },
        )
        for table in source_tables(config, source)
    ]


def report_windows(
    context: AssetExecutionContext,
    config: Config,
    source: SourceConfig,
    materialized: MaterializedWindows,
    backlog: Backlog,
    selected: Collection[str],
    run_keys: Sequence[str],
) -> Iterator[MaterializeResult]:
    """Report each of the source's tables named in ``selected`` after its part of a run
    of the windows ``run_keys`` (``cdc_core.app.materialize``): a materialization with the
    table as it stands, and per window that window's own figures. The engine commits all
    of a source's tables together, so the source runs whole when any of them is selected."""
    reports = materialized.reports
    for index, report in enumerate(reports, 1):
        context.log.info(f"[{index}/{len(reports)}] {report.summary()}")
    per_window = {window_key(config, r.end): window_metadata(r, backlog) for r in reports}
    for name in (t.name for t in source_tables(config, source) if t.name in selected):
        yield with_window_figures(
            context, output_key(source.name, name),
            output_metadata(name, materialized.status), per_window, run_keys,
        )  # fmt: skip


def with_window_figures(
    context: AssetExecutionContext,
    key: AssetKey,
    metadata: Metadata,
    per_window: Mapping[str, Metadata],
    run_keys: Sequence[str],
) -> MaterializeResult:
    """The materialization of asset ``key`` after a run of the windows ``run_keys``, with
    ``metadata`` (the same for every window), each window getting its own figures
    (``per_window``, by partition key) too.

    A run of one window gives them with the materialization itself, which Dagster records
    for that window alone. Any other run hands each window's to its partition
    (``add_asset_metadata``), which Dagster checks against the run's range at every call,
    a walk of its cron schedule: about 3 ms, and a scheduled window of 200 sources made
    1,200 such calls."""
    if len(run_keys) == 1 and list(per_window) == list(run_keys):
        return MaterializeResult(asset_key=key, metadata={**per_window[run_keys[0]], **metadata})
    for partition_key, figures in per_window.items():
        context.add_asset_metadata(figures, asset_key=key, partition_key=partition_key)
    return MaterializeResult(asset_key=key, metadata=metadata)


# Beyond this many sources in a run, each source's phases are logged in one line once
# it is served, not as they start and end (some twenty lines a source): each line is an
# event in Dagster's event log, about 3 ms on an instance's storage, and a window of 200
# sources logged 4,000 of them.
PHASE_LINES_UP_TO = 16


class PhaseLog:
    """The step's log of the engine's phases, so a long step is never silent.

    Each phase of the whole run (``ALL_SOURCES``) is logged as it starts and ends, with
    its counts. So is each source's, with a line per window for the phases that count
    rows per window, when the run serves at most ``PHASE_LINES_UP_TO`` sources; beyond,
    each source's phases wait, and ``flush`` logs them in one line per source: what each
    took and counted."""

    def __init__(self, context: AssetExecutionContext, config: Config, sources: int) -> None:
        self.context, self.config = context, config
        self.each_line = sources <= PHASE_LINES_UP_TO
        self._waiting: dict[str, list[PhaseEvent]] = {}

    def log(self, event: PhaseEvent) -> None:
        """Log ``event`` (a phase starting or ending), or keep it for ``flush``."""
        if not (self.each_line or event.source == ALL_SOURCES):
            if event.ended:
                self._waiting.setdefault(event.source, []).append(event)
            return
        if not event.ended:
            self.context.log.info(f"{event.source}: {event.name} ...")
            return
        self.context.log.info(f"{event.source}: {event.name} done in {event.seconds:.1f} s"
                              f"{_figures(event, '; ')}")  # fmt: skip
        for end, rows in sorted((event.figures.get("rows_per_time") or {}).items()):
            self.context.log.info(
                f"{event.source}: {event.name}: window {window_key(self.config, end)}: "
                f"{rows} row(s)"
            )

    def flush(self) -> None:
        """One line per source whose phases ``log`` kept: each phase with its seconds and
        counts, in the order they ended."""
        waiting, self._waiting = self._waiting, {}
        for source, events in waiting.items():
            total = sum(e.seconds or 0.0 for e in events)
            phases = "; ".join(
                f"{e.name} {e.seconds:.1f} s{_figures(e, ', ')}" for e in events
            )
            self.context.log.info(f"{source}: {len(events)} phase(s) done in {total:.1f} s: "
                                  f"{phases}")  # fmt: skip


def _figures(event: PhaseEvent, separator: str) -> str:
    """The counts a phase ended with, each after ``separator`` (rows per window left out)."""
    return "".join(
        f"{separator}{name}: {value}"
        for name, value in event.figures.items()
        if name != "rows_per_time"
    )


def window_metadata(report: WindowReport, backlog: Backlog) -> Metadata:
    """One window's own figures, under stable keys the Partitions view plots per window."""
    metadata: Metadata = {
        "window_start": MetadataValue.timestamp(to_datetime(report.start)),
        "window_end": MetadataValue.timestamp(to_datetime(report.end)),
        "bound_here": report.minted,
        "records_in": report.records_in,
        "updates_out": report.updates_out,
        "errors_new": report.errors_out,
        "lag_offsets": backlog.offsets_behind(report.frontier),
        "lag_seconds": backlog.seconds_behind(report.end),
        "coverage": backlog.coverage(report.frontier),
    }
    # The window's binding per Kafka partition: the next offset after it.
    for partition, offset in report.frontier.offsets.items():
        metadata[f"frontier/partition_{partition}"] = offset
    if report.held is not None:  # a run's last window: what its binding waits on
        metadata["held_partitions"] = len(report.held)
        if report.held:
            metadata["held"] = MetadataValue.md(
                "\n".join(f"- {held.describe()}" for held in report.held)
            )
    if report.pending is not None:  # a member of a transaction group
        metadata["transactions_pending"] = report.pending.count
        metadata["transactions_overdue"] = report.pending.overdue_count
        oldest = report.pending.oldest_ms
        metadata["transactions_oldest_age_seconds"] = (
            0.0 if oldest is None else (report.end - oldest) / 1000
        )
    return metadata


def output_metadata(output: str, status: SourceStatus) -> Metadata:
    """The table as it stands after the run (the same for every window of the run)."""
    table = status.tables[output]
    metadata: Metadata = {
        "dagster/row_count": table.rows,
        "dagster/column_schema": column_schema(
            table.schema, shard=output not in ("state", "history")
        ),
        "path": MetadataValue.path(str(table.path)),
        "delta_version": table.version,
        "finished": table.upper is None,
        "damaged_files": len(status.inspection.damaged),
        "caught_up": status.inspection.caught_up,
    }
    # Frontiers are IntoTimes while open; a finished frontier (empty antichain) has none.
    if table.upper is not None:
        metadata["upper"] = MetadataValue.timestamp(to_datetime(table.upper))
    if table.since is not None:
        metadata["since"] = MetadataValue.timestamp(to_datetime(table.since))
    if output == "remap":
        metadata["source_frontier"] = MetadataValue.table(
            [
                TableRecord(
                    {"partition": p, "frontier": status.frontier[p], "lag": status.lag.get(p, 0)}
                )
                for p in sorted(set(status.frontier.partitions) | set(status.lag))
            ],
            schema=TableSchema(
                columns=[
                    TableColumn("partition", "int", description="Kafka partition"),
                    TableColumn("frontier", "int", description="next offset to bind"),
                    TableColumn("lag", "int", description="registered offsets not bound yet"),
                ]
            ),
        )
    return metadata


# Every shard row carries its IntoTime and its multiplicity next to the data columns.
SHARD_COLUMNS = (
    TableColumn("time", "bigint", description="IntoTime: the binding time (epoch ms)"),
    TableColumn("diff", "bigint", description="multiplicity: +1 insert, -1 retraction"),
)


def column_schema(schema: StructType, *, shard: bool) -> TableSchema:
    """A table's columns for the UI (``time``/``diff`` appended for shards)."""
    columns = [TableColumn(name=f.name, type=f.dataType.simpleString()) for f in schema]
    return TableSchema(columns=columns + (list(SHARD_COLUMNS) if shard else []))
