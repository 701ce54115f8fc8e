"""Planning a run: which closed windows a run through a moment must cover.

A run covers the windows from the first one some source still needs (its outputs do
not hold it, its state or history is not published as of them, or its CDCv2 export is
missing) through the last window closed, never earlier: a deployment that has run for
months adds one window, not every window since the horizon. The plan reads the Delta
logs and the export folders only, without starting Spark; ``now`` comes from the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdc_core.cdcv2.export_folder import EXPORT_FOLDER, exportable
from cdc_core.config import Config, SourceConfig
from cdc_core.frontier import TimeFrontier
from cdc_core.shard import stored_upper
from cdc_core.source import history_upper, published_as_of, stored_outputs_upper
from cdc_core.storage import files, located


@dataclass(frozen=True)
class RunPlan:
    """The windows of a run through ``through``: ``closed`` are the windows (partition
    key, end) closed since the partitions' start ``first_start``, in order; the run
    covers ``closed[first:]`` (none when ``first == len(closed)``). ``before_partitions``:
    windows closed, but only before the partitions' start (the launchable span and the
    retention), so none of them is a partition any more."""

    first_start: int
    through: int
    closed: tuple[tuple[str, int], ...]
    first: int
    before_partitions: bool

    @property
    def keys(self) -> list[str]:
        """The partition keys of the windows the run covers, in order."""
        return [key for key, _ in self.closed[self.first :]]


def plan_run(
    config: Config, through_ms: int | None, now_ms: int, *, exports: bool = True
) -> RunPlan:
    """The windows a run through ``through_ms`` (now, at the latest) must cover at
    ``now_ms``; ``exports``: a missing CDCv2 export makes its window needed too."""
    first_start = config.calendar.first_window_start(now_ms)
    through = min(through_ms or now_ms, now_ms)
    closed = config.calendar.closed_windows(first_start, through)
    first = 0
    if closed:
        first = min(first_needed(config, source, closed, exports=exports)
                    for source in config.sources)  # fmt: skip
    start = config.start_ms
    before = not closed and first_start > start and through > start
    return RunPlan(first_start, through, tuple(closed), first, before)


def first_needed(
    config: Config, source: SourceConfig, closed: list[tuple[str, int]], *, exports: bool
) -> int:
    """The index in ``closed`` of the first window a run must cover for ``source``
    (``len(closed)``: none, a run would write nothing): the first window its outputs do
    not hold; the last one when ``state`` (or ``history``, when kept) is not published as
    of them; with ``exports``, the first window after the last exported one. Judged from
    the Delta logs and the folders alone, never by listing the windows already done. A
    source that has no export (``exportable``) needs no export folder."""
    root = located(config.lake) / source.name
    upper = stored_outputs_upper(config.lake, source).time
    needed = next((i for i, (_, end) in enumerate(closed) if upper is not None and end >= upper),
                  len(closed))  # fmt: skip
    changes = stored_upper(str(root / "changes")).time
    published = changes is None or published_as_of(str(root / "state")) == changes - 1
    if source.history and history_upper(str(root / "history")).time != changes:
        published = False
    if not published:
        needed = min(needed, len(closed) - 1)
    if exports and exportable(source.output_schema):
        exported = next((i for i in range(len(closed) - 1, -1, -1)
                         if files.is_folder(str(root / EXPORT_FOLDER / closed[i][0]))),
                        -1)  # fmt: skip
        needed = min(needed, exported + 1)
    return needed


def windows_to_ask(
    config: Config, upper: TimeFrontier, now_ms: int, *, new_files: bool, asked_through: int
) -> tuple[tuple[str, int], tuple[str, int]] | None:
    """The first and last closed window (key, end) a run should be asked for at
    ``now_ms``, when every source's outputs stand at ``upper`` (their meet); None when
    none is.

    New dump files can change every closed window the outputs do not hold yet; without
    new files only windows closed after ``asked_through`` (the last end asked for) are
    new. Windows before the partitions' start are no partitions: none is asked for.
    """
    if upper.time is None:  # every output is finished
        return None
    after = max(upper.time - 1, config.calendar.first_window_start(now_ms))
    if not new_files:
        after = max(after, asked_through)
    return config.calendar.closed_span(after, now_ms)
