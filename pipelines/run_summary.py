"""What ``reclock materialize`` and ``reclock demo`` print once a run ends: each source's
windows done, upper, state rows and current errors.

Why from the run: each source's ``status`` phase announces its summary as the run
computes it (``summaries_heard``), so only a source the run did not finish is looked up
again. Why two shapes: a line per source reads well for a handful, but a database's
two hundred tables would scroll past what matters. Beyond ``LINES_UP_TO`` sources the
summary gives totals, the upper most sources reached, and by name only the sources that
need a look: at another upper, or holding current errors.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from cdc_core.app import status
from cdc_core.config import Config
from cdc_core.phases import PhaseEvent, observing

# Sources up to which the summary has a line each, and names listed per kind after that.
LINES_UP_TO = 20


@contextmanager
def summaries_heard() -> Iterator[dict[str, Mapping[str, Any]]]:
    """The summary each source's ``status`` phase announces during the block, by source:
    a run computes every source's status as it ends, so its summary need not again."""
    heard: dict[str, Mapping[str, Any]] = {}

    def keep(event: PhaseEvent) -> None:
        if event.ended and event.name == "status":
            heard[event.source] = event.figures

    with observing(keep):
        yield heard


def print_summary(config: Config, heard: Mapping[str, Mapping[str, Any]]) -> None:
    """The run's summary (``summary_lines``) from what the run's ``status`` phases
    announced (``heard``); a source the run did not finish is looked up."""
    missing = [s.name for s in config.sources if s.name not in heard]
    looked = {found.source: found.summary() for found in status.statuses(config, missing)}
    for line in summary_lines({s.name: heard.get(s.name) or looked[s.name]
                               for s in config.sources}):  # fmt: skip
        print(line)


def summary_lines(sources: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The summary of ``sources`` (by name, in config order: windows, upper, state rows,
    current errors): a line each up to ``LINES_UP_TO`` sources, else totals and the
    sources at another upper than most, or with current errors, by name."""
    if len(sources) <= LINES_UP_TO:
        return [f"{'source':<12}{'windows':>9}  {'upper':<26}{'state rows':>11}{'errors':>8}"] + [
            f"{name:<12}{line['windows']:>9}  {line['upper']:<26}"
            f"{line['state rows']:>11}{line['current errors']:>8}"
            for name, line in sources.items()
        ]  # fmt: skip
    upper, at_upper = Counter(line["upper"] for line in sources.values()).most_common(1)[0]
    elsewhere = [f"{name} {line['upper']} ({line['windows']} windows)"
                 for name, line in sources.items() if line["upper"] != upper]  # fmt: skip
    with_errors = [f"{name} ({line['current errors']:,})"
                   for name, line in sources.items() if line["current errors"]]  # fmt: skip
    rows = sum(line["state rows"] for line in sources.values())
    errors = sum(line["current errors"] for line in sources.values())
    return [
        f"{len(sources)} sources: {at_upper} at upper {upper}; state rows {rows:,} in all; "
        f"current errors {errors:,} in all",
        *_named("at another upper", elsewhere),
        *_named("with current errors", with_errors),
        "each source: reclock inspect --config CONFIG [--source NAME]",
    ]


def _named(what: str, names: Sequence[str]) -> list[str]:
    """``names`` under a heading saying how many are ``what``: up to ``LINES_UP_TO``,
    then how many more (none when there are none)."""
    if not names:
        return []
    more = len(names) - LINES_UP_TO
    return [
        f"{len(names)} {'source' if len(names) == 1 else 'sources'} {what}:",
        *(f"  {name}" for name in names[:LINES_UP_TO]),
        *([f"  ... and {more} more"] if more > 0 else []),
    ]
