"""IntoTime windows as Dagster partitions (UTC), built from the config's calendar."""

from __future__ import annotations

from dagster import TimeWindow, TimeWindowPartitionsDefinition

from cdc_core.calendar import PARTITION_FORMAT, Windows, contiguous, to_datetime, to_ms
from cdc_core.config import Config
from resources.run_tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG


def window_partitions(config: Config, now_ms: int) -> TimeWindowPartitionsDefinition:
    """One partition per IntoTime window ``[start, end)``; its binding time is ``end``.

    The partitions start where the calendar's ``first_window_start`` puts them at ``now_ms``
    (the time the definitions load): about the launchable span's windows, however long ago
    ``start`` lies and however long the tables are kept.
    """
    calendar = config.calendar
    return TimeWindowPartitionsDefinition(
        cron_schedule=calendar.cron,
        start=to_datetime(calendar.first_window_start(now_ms)),
        end=to_datetime(calendar.end_ms) if calendar.end_ms is not None else None,
        fmt=PARTITION_FORMAT,
        timezone="UTC",
    )


def window_bounds(window: TimeWindow) -> tuple[int, int]:
    """A Dagster time window as IntoTime bounds ``(start, end)``."""
    return to_ms(window.start), to_ms(window.end)


def contiguous_windows(
    partitions: TimeWindowPartitionsDefinition, keys: list[str], width: int
) -> list[Windows]:
    """The windows of ``keys`` grouped into runs of adjacent windows, in order (the
    calendar's ``contiguous``)."""
    return contiguous(
        (window_bounds(partitions.time_window_for_partition_key(key)) for key in keys), width
    )


def range_tags(first_key: str, last_key: str) -> dict[str, str]:
    """Run tags that make one run cover the windows ``first_key .. last_key``."""
    return {ASSET_PARTITION_RANGE_START_TAG: first_key, ASSET_PARTITION_RANGE_END_TAG: last_key}


def window_key(config: Config, end_ms: int) -> str:
    """The partition key of the window that binds at ``end_ms`` (the calendar's)."""
    return config.calendar.window_key(end_ms)
