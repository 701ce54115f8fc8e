"""IntoTime windows as Dagster partitions (UTC), and conversions to epoch milliseconds."""

from __future__ import annotations

from datetime import UTC, datetime

from dagster import TimeWindow, TimeWindowPartitionsDefinition

from cdc_core.config import Config

PARTITION_FORMAT = "%Y-%m-%dT%H:%M:%S"


def window_partitions(config: Config) -> TimeWindowPartitionsDefinition:
    """One partition per IntoTime window ``[start, end)``; its binding time is ``end``."""
    return TimeWindowPartitionsDefinition(
        cron_schedule=config.cron,
        start=to_datetime(config.start_ms),
        end=to_datetime(config.end_ms) if config.end_ms is not None else None,
        fmt=PARTITION_FORMAT,
        timezone="UTC",
    )


def to_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def to_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def window_bounds(window: TimeWindow) -> tuple[int, int]:
    return to_ms(window.start), to_ms(window.end)
