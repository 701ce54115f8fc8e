"""IntoTime windows as Dagster partitions (UTC), and conversions to epoch milliseconds."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from dagster import TimeWindow, TimeWindowPartitionsDefinition

from cdc_core.config import Config
from cdc_core.reclock import Windows
from resources.run_tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

PARTITION_FORMAT = "%Y-%m-%dT%H:%M:%S"


def window_partitions(config: Config, now_ms: int | None = None) -> TimeWindowPartitionsDefinition:
    """One partition per IntoTime window ``[start, end)``; its binding time is ``end``.

    The partitions start where ``Config.first_window_start`` puts them at ``now_ms`` (the
    time the definitions load, by default): about the launchable span's windows, however
    long ago ``start`` lies and however long the tables are kept.
    """
    return TimeWindowPartitionsDefinition(
        cron_schedule=config.cron,
        start=to_datetime(config.first_window_start(now_ms)),
        end=to_datetime(config.end_ms) if config.end_ms is not None else None,
        fmt=PARTITION_FORMAT,
        timezone="UTC",
    )


def to_datetime(ms: int) -> datetime:
    """Epoch milliseconds as an aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def to_ms(moment: datetime) -> int:
    """An aware datetime as epoch milliseconds (IntoTime)."""
    return int(moment.timestamp() * 1000)


def window_bounds(window: TimeWindow) -> tuple[int, int]:
    """A Dagster time window as IntoTime bounds ``(start, end)``."""
    return to_ms(window.start), to_ms(window.end)


def contiguous_windows(
    partitions: TimeWindowPartitionsDefinition, keys: list[str], width: int
) -> list[Windows]:
    """The windows of ``keys`` grouped into runs of adjacent windows, in order: each run is
    reclocked in one pass (a backfill range is one run; a hand-picked set may be several)."""
    runs: list[Windows] = []
    for start, end in sorted(
        window_bounds(partitions.time_window_for_partition_key(key)) for key in keys
    ):
        if runs and runs[-1].end == start:
            runs[-1] = Windows(runs[-1].start, end, width)
        else:
            runs.append(Windows(start, end, width))
    return runs


def window_key(config: Config, end_ms: int) -> str:
    """The partition key of the window that binds at ``end_ms`` (keys name window starts)."""
    return to_datetime(end_ms - config.window_ms).strftime(PARTITION_FORMAT)


def range_tags(first_key: str, last_key: str) -> dict[str, str]:
    """Run tags that make one run cover the windows ``first_key .. last_key``."""
    return {ASSET_PARTITION_RANGE_START_TAG: first_key, ASSET_PARTITION_RANGE_END_TAG: last_key}


def closed_windows(config: Config, after_ms: int, through_ms: int) -> list[tuple[str, int]]:
    """``(key, end)`` of the windows whose end lies in ``(after_ms, through_ms]``, in order.

    Computed from the fixed window width (windows tile the UTC day from ``start``), not by
    listing every partition key: a sensor tick must stay cheap however many windows lie
    behind it.
    """
    first, last = _closed_indexes(config, after_ms, through_ms)
    return [(window_key(config, end), end) for end in _ends(config, range(first, last + 1))]


def closed_span(
    config: Config, after_ms: int, through_ms: int
) -> tuple[tuple[str, int], tuple[str, int]] | None:
    """The first and the last of ``closed_windows(config, after_ms, through_ms)`` (None when
    there is none), without the windows between: a range is named by its ends."""
    first, last = _closed_indexes(config, after_ms, through_ms)
    if last < first:
        return None
    start, end = _ends(config, (first, last))
    return (window_key(config, start), start), (window_key(config, end), end)


def _closed_indexes(config: Config, after_ms: int, through_ms: int) -> tuple[int, int]:
    """The first and last index ``i`` (window end ``start + i * width``) of the windows
    whose end lies in ``(after_ms, through_ms]``; last < first when there is none."""
    width = config.window_ms
    last_end = through_ms if config.end_ms is None else min(through_ms, config.end_ms)
    first = max(1, (after_ms - config.start_ms) // width + 1)
    return first, (last_end - config.start_ms) // width


def _ends(config: Config, indexes: Iterable[int]) -> list[int]:
    return [config.start_ms + index * config.window_ms for index in indexes]
