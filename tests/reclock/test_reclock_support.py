"""Helpers shared by the reclocking tests: kcat-style dump files, source options, and a
plain-Python oracle of the event-time policy (independent of the Spark code)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import SparkSession

from cdc_core.ingest import Registry, list_dump_files
from cdc_core.reclock import ReclockedWindows, Windows, reclock_windows
from cdc_core.schemas import RECLOCKED, REMAP
from cdc_core.shard import Shard


@dataclass(frozen=True)
class Options:
    """The per-source options reclocking reads (a stand-in for SourceConfig's fields)."""

    topic: str = "t"
    reclock: str = "event-time"
    allow_offset_gaps: bool = False
    start_offsets: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Rec:
    partition: int
    offset: int
    ts: int
    payload: str = ""

    def line(self, topic: str) -> str:
        body = self.payload or f"v{self.partition}-{self.offset}"
        return json.dumps(
            {"topic": topic, "partition": self.partition, "offset": self.offset, "ts": self.ts,
             "key": json.dumps({"k": self.offset}), "payload": json.dumps({"v": body})}
        )


def write_dump(
    landing: Path, topic: str, name: str, records: Iterable[Rec], extra: str = ""
) -> Path:
    """Write one kcat ``-J`` style dump file under ``<landing>/<topic>/``."""
    path = landing / topic / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(r.line(topic) + "\n" for r in records) + extra)
    return path


def register_new(spark: SparkSession, registry: Registry, landing: Path, arrival_ms: int) -> int:
    """Register every dump of the registry's topic not registered yet."""
    return len(registry.register(spark, list_dump_files(landing, registry.topic), arrival_ms))


def oracle_bindings(
    records: Sequence[Rec],
    ends: Sequence[int],
    allow_gaps: bool = False,
    arrivals: Mapping[tuple[int, int], int] | None = None,
) -> list[dict[int, int]]:
    """Frontiers at each window end, window after window, in plain Python: event-time, or
    arrival when ``arrivals`` gives each offset's earliest arrival."""
    by_partition: dict[int, dict[int, int]] = {}
    for r in records:
        by_partition.setdefault(r.partition, {})[r.offset] = r.ts
    frontier: dict[int, int] = {}
    bindings = []
    for end in ends:
        for p, offsets in by_partition.items():
            nxt = frontier.get(p, 0)
            running = -1
            for o in sorted(o for o in offsets if o >= frontier.get(p, 0)):
                if arrivals is None:
                    running = max(running, offsets[o])
                    blocked = running >= end
                else:
                    blocked = arrivals[(p, o)] >= end
                    if blocked and allow_gaps:
                        continue  # the frontier jumps to the highest arrived offset
                if blocked or (not allow_gaps and o != nxt):
                    break
                nxt = o + 1
            if nxt:
                frontier[p] = nxt
        bindings.append(dict(frontier))
    return bindings


def oracle_times(records: Sequence[Rec], ends: Sequence[int], bindings: Sequence[dict[int, int]]):
    """Each distinct (partition, offset) -> the first window end whose binding covers it."""
    times = {}
    for r in records:
        for end, frontier in zip(ends, bindings, strict=True):
            if r.offset < frontier.get(r.partition, 0):
                times[(r.partition, r.offset)] = end
                break
    return times


def run_windows(
    spark: SparkSession,
    source: Options,
    registry: Registry,
    remap: Shard,
    reclocked: Shard,
    ends: Sequence[int],
    width: int,
    *,
    batch: bool = False,
) -> list[ReclockedWindows]:
    """Reclock the adjacent windows ending at ``ends``: one after another, as scheduled
    runs do, or (``batch``) all in one pass, as a backfill does."""
    runs = [Windows(ends[0] - width, ends[-1], width)] if batch else [
        Windows.one(end - width, end) for end in ends
    ]
    done = []
    reported: set[str] = set()  # what an errors shard would hold
    for windows in runs:
        lower = reclocked.refresh().upper.time or 0
        run = reclock_windows(
            spark, source, registry, remap, lower, windows, reported=frozenset(reported)
        )
        reclocked.append(run.reclocked.records, lower, windows.end + 1)
        errors = run.reclocked.errors.select("file").collect()
        witness = run.reclocked.error_witness
        assert not errors or witness is None or not witness.isEmpty(), "the witness hid errors"
        reported |= {row["file"] for row in errors}
        done.append(run)
    return done


def remap_history(remap: Shard) -> dict[int, dict[int, int]]:
    """The remap frontier after each binding time, folded in Python from its updates.

    Asserts the stored collection is well formed: at every time each partition has
    exactly one element of multiplicity one.
    """
    updates = sorted(
        (r["time"], r["partition"], r["offset"], r["diff"]) for r in remap.listen(0).collect()
    )
    elements: dict[tuple[int, int], int] = {}
    history: dict[int, dict[int, int]] = {}
    for time, partition, offset, diff in updates:
        elements[(partition, offset)] = elements.get((partition, offset), 0) + diff
        live = {k: v for k, v in elements.items() if v}
        assert all(v == 1 for v in live.values()), live
        frontier = {p: o for p, o in live}
        assert len(frontier) == len(live), live
        history[time] = frontier
    return history


def open_shards(spark: SparkSession, root: Path) -> tuple[Shard, Shard]:
    return (
        Shard.open(spark, str(root / "remap"), REMAP),
        Shard.open(spark, str(root / "reclocked"), RECLOCKED),
    )


def reclocked_rows(reclocked: Shard) -> list[tuple[int, int, int, int, str | None]]:
    """Every update of the reclocked shard: (partition, offset, time, diff, payload)."""
    return sorted(
        (r["partition"], r["offset"], r["time"], r["diff"], r["payload"])
        for r in reclocked.listen(0).collect()
    )
