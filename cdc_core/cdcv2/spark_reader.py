"""The data-parallel CDCv2 reader: the same judgement as the reference reader, over a
whole (duplicated, reordered, re-batched) stream at once.

Updates stay on the executors: one aggregation per ``(data, time)`` deduplicates them
and spots contradicting diffs, a second one tallies distinct updates per time. Only
those tallies and the progress statements (both tiny) meet on the driver, where the
shared chain decides the complete frontier.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_core.cdcv2.chain import ProgressChain, complete_frontier
from cdc_core.cdcv2.model import (
    DiffContradiction,
    MalformedMessage,
    Progress,
    UpdateBeforeStart,
)
from cdc_core.cdcv2.spark_counts import (
    TimeTally,
    data_columns,
    fact_columns,
    facts_by_key,
    tally_per_time,
)
from cdc_core.frontier import TimeFrontier


@dataclass(frozen=True)
class ImportedStream:
    """The complete part of a stream: one row per ``(data, time)`` at times before
    ``frontier`` (data columns + ``time`` + ``diff``), and that frontier.

    ``updates`` is lazy: writing it re-runs the per-key aggregation."""

    updates: DataFrame
    frontier: TimeFrontier


def read_stream(
    updates: DataFrame, progress: Iterable[Progress], start: TimeFrontier | None = None
) -> ImportedStream:
    """Import a CDCv2 stream given as update rows (data columns + ``time`` + ``diff``,
    in any order and with any duplication) and its progress statements.

    Raises ``MalformedMessage`` (zero diffs), ``UpdateBeforeStart``, and the
    contradictions ``DiffContradiction``, ``CountDisagreement``, ``CountExceeded``."""
    columns = data_columns(updates)
    facts = facts_by_key(updates, columns)
    tallies = tally_per_time(facts)
    chain = ProgressChain(start)
    _check_facts(tallies, chain.start)
    chain.add_all(progress)
    frontier = complete_frontier(chain, {t: tally.distinct for t, tally in tallies.items()})
    complete = facts if frontier.time is None else facts.filter(F.col("time") < frontier.time)
    return ImportedStream(fact_columns(complete, columns), frontier)


def _check_facts(tallies: Mapping[int, TimeTally], start: TimeFrontier) -> None:
    zero = [time for time, tally in tallies.items() if tally.zero_diffs]
    if zero:
        raise MalformedMessage("update diffs must be non-zero", zero)
    early = [time for time in tallies if not start.less_equal(time)]
    if early:
        raise UpdateBeforeStart(f"updates before the start {start}", early)
    contradicted = [time for time, tally in tallies.items() if tally.contradicted]
    if contradicted:
        raise DiffContradiction("some (data, time) carry two different diffs", contradicted)
