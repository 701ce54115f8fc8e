"""What a person sees of an in-process run of ``reclock materialize`` or ``reclock demo``.

On a terminal: a progress bar per source (the engine phase under way, the windows written
out of the windows to do) and one for the whole run with the time left; then what went
wrong, if anything (failed steps, failed checks). Without a terminal: one plain line per
source as its windows are written. Dagster's event log (every step's DEBUG and INFO
events) stays in the Dagster instance, where the UI shows it; it reaches the terminal
only when asked (``-v``). The engine's phases (``cdc_core.phases``) drive the progress,
so nothing here reads the run's events as they happen.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dagster import BetaWarning, ExecuteInProcessResult, PreviewWarning
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from cdc_core.config import Config
from cdc_core.phases import PhaseEvent, observing
from cdc_core.vocabulary import Envelope

# The phase that ends a batch of windows (each of their outputs is appended), and the one
# that ends a source's run (its state published, whether or not it had windows to write).
BATCH_WRITTEN, SOURCE_DONE = "append errors", "publish state"
# A new instance folder's settings: no first-visit dialog (it would cover the UI the demo
# opens) and no telemetry (whose first use prints a banner in the middle of a run).
QUIET_INSTANCE = "nux:\n  enabled: false\ntelemetry:\n  enabled: false\n"


def dagster_run_config(verbose: bool) -> dict[str, Any]:
    """The run config that sets Dagster's console logger: every event with ``verbose``,
    else warnings and errors only (the instance stores every event either way)."""
    level = "DEBUG" if verbose else "WARNING"
    return {"loggers": {"console": {"config": {"log_level": level}}}}


def quiet_instance(dagster_home: Path) -> None:
    """Give an instance folder without settings a ``dagster.yaml`` that turns off the
    first-visit dialog and telemetry; an existing ``dagster.yaml`` is left as it is."""
    dagster_home.mkdir(parents=True, exist_ok=True)
    settings = dagster_home / "dagster.yaml"
    if not settings.exists():
        settings.write_text(QUIET_INSTANCE)


@contextmanager
def quiet_warnings(verbose: bool) -> Iterator[None]:
    """Dagster's notes that an API reclock uses is in beta or preview are for reclock's
    developers, not its users: hidden unless ``verbose``."""
    with warnings.catch_warnings():
        if not verbose:
            warnings.simplefilter("ignore", BetaWarning)
            warnings.simplefilter("ignore", PreviewWarning)
        yield


class RunProgress:
    """Windows written per source, told by the engine's phase events.

    A run writes a source's windows in one batch (the classic DEBEZIUM envelope: one batch
    per window), so a source's count moves when a batch's last append ends, and reaches
    its total when its state is published."""

    def __init__(self, config: Config, windows: int) -> None:
        self.windows = windows
        self.done = {source.name: 0 for source in config.sources}
        self.per_batch = {
            source.name: 1 if source.envelope == Envelope.DEBEZIUM else windows
            for source in config.sources
        }

    def heard(self, event: PhaseEvent) -> bool:
        """Count ``event``; whether it moved its source's count of windows written."""
        before = self.done.get(event.source)
        if before is None or not event.ended:
            return False
        if event.name == BATCH_WRITTEN:
            self.done[event.source] = min(self.windows, before + self.per_batch[event.source])
        elif event.name == SOURCE_DONE:
            self.done[event.source] = self.windows
        return self.done[event.source] != before

    @property
    def total_done(self) -> int:
        """Windows written over every source."""
        return sum(self.done.values())


# Up to this many sources, a run shows a bar (or a line) per source; beyond it one bar for
# them all on a terminal, and a line per tenth of them written elsewhere: two hundred
# bars fit no terminal, and two hundred lines bury what went wrong.
BARS_UP_TO = 12


@contextmanager
def progress_bar(config: Config, windows: int, console: Console | None = None) -> Iterator[None]:
    """Progress of a run over ``windows`` windows of every source of ``config``: bars on a
    terminal, plain lines elsewhere (e.g. output piped to a file)."""
    console = console or Console()
    counts = RunProgress(config, windows)
    if not console.is_terminal:
        with observing(lambda event: _plain_line(console, counts, event)):
            yield
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn())  # fmt: skip
    with Progress(*columns, console=console) as bar:
        sources = len(counts.done)
        tasks = ({name: bar.add_task(f"{name}: waiting", total=windows) for name in counts.done}
                 if sources <= BARS_UP_TO else {})  # fmt: skip
        # With a bar per source the overall one counts windows; alone, it names the phase.
        first = "windows written" if tasks else "waiting"
        overall = (bar.add_task(f"{sources} sources: {first}", total=sources * windows)
                   if sources > 1 else None)  # fmt: skip

        def show(event: PhaseEvent) -> None:
            if event.source not in counts.done:
                return
            task = tasks.get(event.source)  # a task id may be 0
            if task is not None:
                bar.update(task, description=f"{event.source}: {event.name}")
            elif overall is not None:
                bar.update(overall, description=f"{sources} sources: {event.name}")
            if counts.heard(event):
                if task is not None:
                    bar.update(task, completed=counts.done[event.source])
                if overall is not None:
                    bar.update(overall, completed=counts.total_done)

        with observing(show):
            yield


def _plain_line(console: Console, counts: RunProgress, event: PhaseEvent) -> None:
    """A line as a source's windows are all written, for output that is no terminal; with
    more than ``BARS_UP_TO`` sources, a line as each further tenth of them is."""
    if not (counts.heard(event) and counts.done[event.source] == counts.windows):
        return
    sources = len(counts.done)
    if sources <= BARS_UP_TO:
        console.print(f"{event.source}: {counts.windows}/{counts.windows} windows written",
                      highlight=False)  # fmt: skip
        return
    written = sum(done == counts.windows for done in counts.done.values())
    if written * 10 // sources > (written - 1) * 10 // sources:
        console.print(f"{written}/{sources} sources: {counts.windows}/{counts.windows} "
                      "windows written", highlight=False)  # fmt: skip


def print_problems(result: ExecuteInProcessResult, console: Console | None = None) -> None:
    """What went wrong in a run, one line each: failed steps, then failed checks (with
    their severity and what they say). Nothing when all went well."""
    console = console or Console(stderr=True, highlight=False)
    for event in result.get_step_failure_events():
        error = event.step_failure_data.error
        message = error.message.strip() if error is not None else "failed"
        console.print(f"step {event.step_key} failed: {message}", highlight=False)
    failed = [check for check in result.get_asset_check_evaluations() if not check.passed]
    for check in failed:
        what = f" {check.description}" if check.description else ""
        console.print(
            f"check {check.asset_key.to_user_string()} {check.check_name} failed "
            f"({check.severity.value.lower()}):{what}",
            highlight=False,
        )
