"""Keeping a deployment bounded and mended: maintain, retire and rebuild its sources.

Maintenance runs beside the windows (``reclock maintain`` and the daily Dagster job call
the same ``maintain``): each source's tables back within their bounds and its CDCv2
export's windows before its retention horizon deleted. Every function takes ``now`` from
its caller.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from cdc_core.app.session import config_spark
from cdc_core.calendar import Windows
from cdc_core.cdcv2.export_folder import EXPORT_FOLDER, expire_exports, exportable
from cdc_core.config import Config
from cdc_core.frontier import iso
from cdc_core.source import RebuildReport, RetireReport, SourcePipeline, rebuild
from cdc_core.source.maintenance import MaintenanceReport
from cdc_core.source.upkeep import maintain_source, retire_source


@dataclass(frozen=True)
class SourceUpkeep:
    """One source's maintenance, and the windows of its CDCv2 export deleted before its
    retention horizon (None: the source has no export)."""

    report: MaintenanceReport
    horizon: int
    expired_exports: tuple[str, ...] | None

    def describe(self) -> str:
        """What ``reclock maintain`` prints for the source: one line per part."""
        described = self.report.describe()
        if self.expired_exports is None:
            return described
        gone = f"{len(self.expired_exports)} window folder(s) before {iso(self.horizon)} deleted"
        return f"{described}\n  {EXPORT_FOLDER:<14} {gone}"


def maintain(pipeline: SourcePipeline, now_ms: int) -> SourceUpkeep:
    """Maintain one source (``cdc_core.source.upkeep.maintain_source``) and expire its
    CDCv2 export's windows before its retention horizon."""
    report = maintain_source(pipeline, now_ms)
    horizon = pipeline.config.calendar.source_horizon(pipeline.source.name, now_ms)
    if not exportable(pipeline.source.output_schema):
        return SourceUpkeep(report, horizon, None)
    expired = expire_exports(pipeline.root / EXPORT_FOLDER, horizon)
    return SourceUpkeep(report, horizon, tuple(expired))


def maintain_sources(config: Config, only: str | None, now_ms: int) -> Iterator[SourceUpkeep]:
    """``maintain`` every source (or the one named ``only``), one after the other."""
    spark = config_spark(config)
    for source in config.sources:
        if only in (None, source.name):
            yield maintain(SourcePipeline.from_config(spark, config, source), now_ms)


def retire_sources(
    config: Config, only: str | None, now_ms: int
) -> Iterator[tuple[str, RetireReport]]:
    """Retire the dumps no run needs again, of every source (or the one named ``only``)."""
    spark = config_spark(config)
    for source in config.sources:
        if only in (None, source.name):
            pipeline = SourcePipeline.from_config(spark, config, source)
            yield source.name, retire_source(pipeline, now_ms)


def rebuild_through(
    config: Config, name: str, through_ms: int | None, now_ms: int
) -> tuple[RebuildReport, int] | None:
    """Rebuild source ``name`` through its windows closed by ``through_ms`` (now, at the
    latest): the report and the last window end; None when no window has closed yet."""
    closed = config.calendar.closed_windows(-1, min(through_ms or now_ms, now_ms))
    if not closed:
        return None
    end = closed[-1][1]
    windows = Windows(config.start_ms, end, config.window_ms)
    return rebuild(config_spark(config), config, config.source(name), windows), end
