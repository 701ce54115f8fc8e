"""Named phases of a run, announced to whoever listens.

The engine marks each phase of a run (register dumps, bind, append each shard, publish
state, ...) with ``with phase(source, name):``. Observers registered with ``observing``
hear every start and end as it happens: the Dagster assets log progress with it, the
benchmark times steps and counts Spark jobs with it, fault tests stop a run at a phase
with it. The engine never depends on an observer: with none registered a phase costs
two empty loops.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ALL_SOURCES", "PhaseEvent", "observing", "phase"]

# The source name of a phase that works for several sources of a run at once.
ALL_SOURCES = "all sources"


@dataclass(frozen=True)
class PhaseEvent:
    """A phase starting (``seconds is None``) or ending (its wall time in ``seconds``).
    ``figures`` holds what the phase reports at its end (e.g. ``rows`` written, and
    ``rows_per_time``: rows per binding time, i.e. per window, for the appends)."""

    source: str
    name: str
    seconds: float | None = None
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        """True for the event that closes a phase (it carries the phase's seconds)."""
        return self.seconds is not None


Observer = Callable[[PhaseEvent], None]
_observers: list[Observer] = []


@contextmanager
def observing(observer: Observer) -> Iterator[None]:
    """Call ``observer`` with every phase event until the block ends."""
    _observers.append(observer)
    try:
        yield
    finally:
        _observers.remove(observer)


@contextmanager
def phase(source: str, name: str) -> Iterator[dict[str, Any]]:
    """Announce phase ``name`` of ``source``; the yielded dict collects its figures, which
    the end event carries. A phase that raises announces no end."""
    figures: dict[str, Any] = {}
    _announce(PhaseEvent(source, name))
    started = time.perf_counter()
    yield figures
    _announce(PhaseEvent(source, name, time.perf_counter() - started, figures))


def _announce(event: PhaseEvent) -> None:
    for observer in list(_observers):
        observer(event)
