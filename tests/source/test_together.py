"""Many sources' windows bound and reclocked together (``RunsTogether``) before their
runs: each source's tables equal those of the source run alone, row for row, whatever its
policy (arrival, event time, offset gaps, a start offset, a topic another source reads
too, damaged lines and conflicting copies), and a source that cannot bind is left to fail
on its own while the others go on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdc_core.config import Config, parse_config
from cdc_core.reclock import Windows
from cdc_core.reclock.remap import UnexpectedStartOffset
from cdc_core.source import RunsTogether, SourcePipeline
from tests.lake_rows import table_rows
from tests.reclock.test_reclock_support import Rec

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MINUTE = 60_000
WINDOWS = Windows(T0, T0 + 3 * MINUTE, MINUTE)
FIRST, SECOND = T0 + 10_000, T0 + 70_000  # the two moments dumps arrive

SOURCES = [
    {"name": "arrivals", "topic": "a", "reclock": "arrival"},
    {"name": "events", "topic": "e", "reclock": "event-time"},
    {"name": "events_later", "topic": "e", "reclock": "event-time",
     "start_offsets": {"0": 2}},
    {"name": "gaps", "topic": "g", "reclock": "arrival", "allow_offset_gaps": True},
    {"name": "refused", "topic": "r", "reclock": "event-time"},
]  # fmt: skip
TABLES = ("remap", "reclocked", "changes", "errors", "state")

# topic -> the dumps landing at each moment: file name -> lines
DUMPS = {
    FIRST: {
        "a": {"a1.json": [Rec(0, o, T0 + o) for o in range(4)] + [Rec(1, 0, T0)]},
        "e": {"e1.json": [Rec(0, 0, T0 + 5_000), Rec(0, 1, T0 + 61_000), Rec(0, 2, T0 + 2_000),
                          Rec(1, 0, T0), Rec(1, 1, T0), Rec(1, 3, T0)]},
        "g": {"g1.json": [Rec(0, o, T0) for o in (0, 1, 3)]},
        "r": {"r1.json": [Rec(0, o, T0) for o in (5, 6)]},
    },
    SECOND: {
        "a": {"a2.json": [Rec(0, o, T0 + o) for o in range(3, 7)]},
        "e": {"e2.json": [Rec(0, 3, T0 + 65_000), Rec(0, 1, T0 + 61_000, payload="other")]},
        "g": {"g2.json": [Rec(0, 5, T0)]},
    },
}  # fmt: skip
# A damaged line with a position: bound like a record, reported as an error.
DAMAGED = json.dumps({"topic": "e", "partition": 0, "offset": 4, "ts": "soon", "key": None,
                      "payload": None})  # fmt: skip


def deployment(workdir: Path) -> Config:
    return lake_config(workdir, [
        {**s, "key": {"k": "bigint"}, "value": {"v": "string"}, "envelope": "upsert"}
        for s in SOURCES
    ])  # fmt: skip


def lake_config(workdir: Path, sources: list[dict]) -> Config:
    """A deployment of ``sources`` in ``workdir``, one-minute windows from T0."""
    return parse_config(
        {"lake": "lake", "landing": "../landing", "window": "1m",
         "start": "2026-01-01T00:00:00Z", "spark": {"master": "local[2]"},
         "sources": sources},
        workdir,
    )  # fmt: skip


def land(landing: Path, moment: int) -> None:
    for topic, files in DUMPS[moment].items():
        for name, records in files.items():
            lines = [r.line(topic) for r in records]
            if name == "e2.json":
                lines.append(DAMAGED)
            (landing / topic).mkdir(parents=True, exist_ok=True)
            (landing / topic / name).write_text("\n".join(lines) + "\n")


def test_sources_bound_and_reclocked_together_write_what_each_writes_alone(
    spark: SparkSession, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    together, alone = deployment(tmp_path / "together"), deployment(tmp_path / "alone")
    pipelines = [
        [SourcePipeline.from_config(spark, config, s) for s in config.sources]
        for config in (together, alone)
    ]
    for moment in (FIRST, SECOND):
        land(landing, moment)
        for pipeline in pipelines[0] + pipelines[1]:
            pipeline.register_dumps(arrival_ms=moment)

    # A dump of ``gaps`` lands unregistered: its run would register it before binding, so
    # it is left to bind on its own (here it never registers it, in either lake).
    (landing / "g" / "g3.json").write_text(Rec(0, 6, T0).line("g") + "\n")
    shared = RunsTogether(envelopes_from=1)
    try:
        runs = [(pipeline, WINDOWS) for pipeline in pipelines[0]]
        assert shared.prepare(spark, runs) == len(SOURCES) - 2  # not ``gaps``, ``refused``
        # Their reclocked records are written before their runs start.
        assert {s["name"]: bool(table_rows(together, s["name"], "reclocked"))
                for s in SOURCES[:-1]} == {"arrivals": True, "events": True,
                                           "events_later": True, "gaps": False}  # fmt: skip
        for lake in pipelines:
            for pipeline in lake:
                if pipeline.source.name == "refused":
                    refused = "partition 0 starts at offset 5"
                    with pytest.raises(UnexpectedStartOffset, match=refused):
                        pipeline.run_windows(WINDOWS)
                    continue
                reports = pipeline.run_windows(WINDOWS)
                # The run took the bindings minted for it as its own.
                assert [r.minted for r in reports] == [True] * 3
                pipeline.finish()
    finally:
        shared.release()

    for source in SOURCES[:-1]:
        name = source["name"]
        for table in TABLES:
            assert table_rows(together, name, table) == table_rows(alone, name, table), (
                f"{name}/{table}"
            )
    # The policies did bind differently: arrival waits for the second dump, event time
    # for the late timestamps, gaps pass a missing offset, a start offset skips offsets.
    bound = {
        p.source.name: dict(p.reader.inspect().frontier.offsets) for p in pipelines[0][:-1]
    }
    assert bound == {"arrivals": {0: 7, 1: 1}, "events": {0: 5, 1: 2},
                     "events_later": {0: 5, 1: 2}, "gaps": {0: 6}}  # fmt: skip
