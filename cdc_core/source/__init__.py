"""A source end to end: one run of windows, its published state, its resumption.

Invariant: every step of a run is an idempotent append keyed by binding time, so a run
repeated or resumed after a crash at any point writes nothing twice and equals a run
never interrupted.

Modules: ``pipeline`` (the per-source run: the write handle), ``reader`` (the read
handle: status, inspect and snapshots, writing nothing), ``layout`` (which tables a source
has, and where), ``state`` (the published
current rows), ``history`` (the SCD type 2 versions, when a source keeps them),
``resumption`` (bounded input reliance: inspect and retire), ``evolution`` (appended value
columns; other drift refused), ``rebuild`` and ``swap`` (new tables beside the old, swapped in),
``together`` (many sources' windows bound and reclocked in one job each before their runs).
"""

from cdc_core.source.history import history_upper
from cdc_core.source.layout import published_tables, stored_outputs_upper
from cdc_core.source.pipeline import SourcePipeline, WindowReport, unregistered_dumps
from cdc_core.source.reader import SourceReader, SourceStatus
from cdc_core.source.rebuild import RebuildRefused, RebuildReport, rebuild
from cdc_core.source.resumption import RetireReport
from cdc_core.source.state import published_as_of
from cdc_core.source.swap import RebuildUnfinished
from cdc_core.source.together import RunsTogether

__all__ = [
    "RebuildRefused",
    "RebuildReport",
    "RebuildUnfinished",
    "RetireReport",
    "RunsTogether",
    "SourcePipeline",
    "SourceReader",
    "SourceStatus",
    "WindowReport",
    "history_upper",
    "published_as_of",
    "published_tables",
    "rebuild",
    "stored_outputs_upper",
    "unregistered_dumps",
]
