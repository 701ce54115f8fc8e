"""Many UPSERT sources' envelopes applied together ahead of their runs
(``RunsTogether``, ``upserts_together``): over two runs, each source's tables and window
reports equal those of the source run alone, row for row, with keys of several shapes,
updates, deletes, bad values and null keys. Their ``changes`` are written before their
runs start, from their published ``state`` and the errors their keys held in the
second run, and their ``state`` published anew."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.types import IntegerType, StructField, StructType

from cdc_core.config import Config
from cdc_core.envelopes.upsert_together import UpsertSource
from cdc_core.reclock import Windows
from cdc_core.source import RunsTogether, SourcePipeline
from cdc_core.source.state import published_as_of
from cdc_core.source.upserts_together import UpsertRun, truncating
from cdc_core.vocabulary import Envelope
from tests.lake_rows import table_rows
from tests.source.test_together import lake_config

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MINUTE = 60_000
RUNS = (Windows(T0, T0 + MINUTE, MINUTE), Windows(T0 + MINUTE, T0 + 2 * MINUTE, MINUTE))
ARRIVALS = (T0 + 10_000, T0 + 70_000)  # when each run's dumps land
ID = {"id": "int"}
ID_KEY = StructType([StructField("id", IntegerType())])
NAMED = {"name": "string", "n": "bigint"}
SOURCES = [
    {"name": "orders", "topic": "o", "key": ID, "value": NAMED},
    {"name": "users", "topic": "u", "key": {"k": "string", "j": "int"},
     "value": {"flag": "boolean", "at": "timestamp", "amount": "double"}},
    {"name": "items", "topic": "i", "key": ID, "value": NAMED},
    {"name": "flawed", "topic": "f", "key": ID, "value": NAMED},
]  # fmt: skip
TABLES = ("remap", "reclocked", "changes", "errors", "state")
# Per run, per topic: (key, payload) texts at consecutive offsets of partition 0.
RECORDS = (
    {
        "o": [("1", '{"name": "a", "n": 1}'), ('{"id": 2}', '{"name": "b", "n": 2}'),
              ("1", '{"name": "c", "n": 3}'), ("3", '{"name": "d", "n": 4}')],
        "u": [('{"k": "a", "j": 1}', '{"flag": true, "at": "2026-01-01T00:00:00Z"}'),
              ('{"k": "a", "j": null}', '{"flag": false, "amount": -0.0}')],
        "i": [("1", '{"name": "x", "n": 9}')],
        "f": [("1", '{"name": "a", "n": 1}'), ("2", '{"name": "b", "n": "bad"}')],
    },
    {
        "o": [("1", None), ("2", '{"name": "b", "n": 2}'), (None, '{"name": "z", "n": 0}'),
              ("3", '{"name": "e", "n": 5}')],
        "u": [('{"k": "a", "j": 1}', '{"flag": true, "amount": 2.5}'),
              ('{"k": "b", "j": 2}', None)],
        "i": [("1", '{"name": "x", "n": 1.5}')],
        "f": [("2", '{"name": "b", "n": 2}'), ("1", None)],
    },
)  # fmt: skip


def deployment(workdir: Path) -> Config:
    return lake_config(workdir, [{**s, "envelope": "upsert", "reclock": "arrival"}
                                 for s in SOURCES])  # fmt: skip


def land(landing: Path, run: int) -> None:
    for topic, records in RECORDS[run].items():
        first = sum(len(r[topic]) for r in RECORDS[:run])
        lines = [
            json.dumps({"topic": topic, "partition": 0, "offset": first + i,
                        "ts": ARRIVALS[run], "key": key, "payload": payload})
            for i, (key, payload) in enumerate(records)
        ]  # fmt: skip
        (landing / topic).mkdir(parents=True, exist_ok=True)
        (landing / topic / f"{topic}{run}.json").write_text("\n".join(lines) + "\n")


def test_upserts_applied_together_write_what_each_source_writes_alone(
    spark: SparkSession, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    together, alone = deployment(tmp_path / "together"), deployment(tmp_path / "alone")
    pipelines = [
        [SourcePipeline.from_config(spark, config, s) for s in config.sources]
        for config in (together, alone)
    ]
    every = {s["name"] for s in SOURCES}
    for run, windows in enumerate(RUNS):
        land(landing, run)
        for pipeline in pipelines[0] + pipelines[1]:
            pipeline.register_dumps(arrival_ms=ARRIVALS[run])
        before = {s["name"]: table_rows(together, s["name"], "changes") for s in SOURCES}
        shared = RunsTogether(envelopes_from=1)
        try:
            shared.prepare(spark, [(pipeline, windows) for pipeline in pipelines[0]])
            # The envelopes were applied before the runs start: their changes are written.
            now = {s["name"]: table_rows(together, s["name"], "changes") for s in SOURCES}
            written = {name for name, rows in now.items() if rows != before[name]}
            assert written == every
            # So is each ``state``, published as of the window's end by one job.
            assert {published_as_of(str(together.lake / name / "state")) for name in every} == {
                windows.end
            }
            reports = [
                [(r.records_in, r.updates_out, r.errors_out) for r in pipeline.run_windows(windows)]
                for pipeline in pipelines[0]
            ]
            for pipeline in pipelines[0]:
                pipeline.finish()
        finally:
            shared.release()
        alone_reports = [
            [(r.records_in, r.updates_out, r.errors_out) for r in pipeline.run_windows(windows)]
            for pipeline in pipelines[1]
        ]
        for pipeline in pipelines[1]:
            pipeline.finish()
        assert reports == alone_reports
        for source in SOURCES:
            for table in TABLES:
                name = source["name"]
                mine, theirs = table_rows(together, name, table), table_rows(alone, name, table)
                assert mine == theirs, f"run {run}: {name}/{table}"
    # ``flawed`` held an error from its first run: its second replaced it.
    assert {dict(row)["diff"] for row in table_rows(alone, "flawed", "errors")} == {1, -1}
    assert table_rows(alone, "users", "state")


def test_a_debezium_source_whose_batch_may_truncate_applies_its_own_envelope(
    spark: SparkSession,
) -> None:
    def run(number: int, envelope: Envelope) -> UpsertRun:
        source = UpsertSource("t", ID_KEY, ID_KEY, envelope)
        return UpsertRun(number, source, None, None, "", (), erred=False)  # type: ignore[arg-type]

    truncate = '{"op": "t", "after": null}'
    records = spark.createDataFrame(
        [(0, '{"op": "c", "after": {"id": 1}}'), (1, truncate), (2, truncate),
         (3, '{"schema": {}, "payload": {"op" : "t"}}')],
        "_source int, payload string",
    )  # fmt: skip
    runs = [run(0, Envelope.DEBEZIUM_UPSERT), run(1, Envelope.DEBEZIUM_UPSERT),
            run(2, Envelope.UPSERT), run(3, Envelope.DEBEZIUM_UPSERT)]  # fmt: skip
    assert truncating(records, runs) == {1, 3}
