"""A transaction group's members bound by their group, reclocked together and their
DEBEZIUM UPSERT envelopes applied together ahead of their runs (``RunsTogether``), beside
a source of no group: every table of every source equals the one the source writes run
alone, row for row, and no window splits a transaction."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import SparkSession

from cdc_core.config import Config, parse_config
from cdc_core.reclock import Windows
from cdc_core.source import RunsTogether, SourcePipeline
from cdc_core.source.state import published_as_of
from tests.lake_rows import table_rows
from tests.reclock.test_transactions import (
    LINE_RECORDS,
    LINES,
    ORDER_RECORDS,
    ORDERS,
    T0,
    TXN_RECORDS,
    TXN_TOPIC,
    write_lines,
)

MINUTE = 60_000
WINDOWS = Windows(T0, T0 + 4 * MINUTE, MINUTE)
TABLES = ("remap", "reclocked", "changes", "errors", "state")
MEMBERS = ("orders", "order_lines")
ALONE = "users"


def deployment(workdir: Path) -> Config:
    member = {"key": {"id": "bigint"}, "envelope": "debezium-upsert", "reclock": "event-time"}
    return parse_config(
        {"lake": "lake", "landing": "../landing", "window": "1m",
         "start": "2026-01-01T00:00:00Z", "spark": {"master": "local[2]"},
         "sources": [
             {"name": "orders", "topic": ORDERS, "value": {"id": "bigint", "total": "bigint"},
              **member},
             {"name": "order_lines", "topic": LINES,
              "value": {"id": "bigint", "order_id": "bigint"}, **member},
             {"name": ALONE, "topic": "users", "key": {"id": "bigint"},
              "value": {"name": "string"}, "envelope": "upsert", "reclock": "event-time"},
         ],
         "transactions": [{"name": "shop", "topic": TXN_TOPIC,
                           "sources": {"orders": ORDERS, "order_lines": LINES}}]},
        workdir,
    )  # fmt: skip


def land(landing: Path) -> None:
    write_lines(landing / ORDERS / "a.json", ORDER_RECORDS)
    write_lines(landing / LINES / "l.json", LINE_RECORDS)
    write_lines(landing / TXN_TOPIC / "t.json", TXN_RECORDS)
    users = [
        {"topic": "users", "partition": 0, "offset": i, "ts": T0 + i * 20_000,
         "key": json.dumps({"id": i % 3}), "payload": json.dumps({"name": f"u{i}"})}
        for i in range(8)
    ]  # fmt: skip
    write_lines(landing / "users" / "u.json", users)


def test_a_groups_members_reclocked_together_write_what_each_writes_alone(
    spark: SparkSession, tmp_path: Path
) -> None:
    land(tmp_path / "landing")
    together, alone = deployment(tmp_path / "together"), deployment(tmp_path / "alone")
    pipelines = [
        [SourcePipeline.from_config(spark, config, s) for s in config.sources]
        for config in (together, alone)
    ]
    for pipeline in pipelines[0] + pipelines[1]:
        pipeline.register_dumps(arrival_ms=T0 + 5 * MINUTE)

    shared = RunsTogether(envelopes_from=1)
    try:
        # ``users`` binds alone (a source alone reclocks from its own read when it runs).
        assert shared.prepare(spark, [(p, WINDOWS) for p in pipelines[0]]) == 2
        assert shared.reclocked == set(MEMBERS)
        # The members' windows are bound and reclocked, their DEBEZIUM UPSERT envelopes
        # applied together and their ``state`` published, before their runs start.
        for name in MEMBERS:
            assert table_rows(together, name, "reclocked"), name
            assert table_rows(together, name, "changes"), name
            assert published_as_of(str(together.lake / name / "state")) == WINDOWS.end
        reports = [
            [(r.frontier, r.records_in, r.updates_out) for r in p.run_windows(WINDOWS)]
            for p in pipelines[0]
        ]
        for pipeline in pipelines[0]:
            pipeline.finish()
    finally:
        shared.release()
    alone_reports = [
        [(r.frontier, r.records_in, r.updates_out) for r in p.run_windows(WINDOWS)]
        for p in pipelines[1]
    ]
    for pipeline in pipelines[1]:
        pipeline.finish()

    assert reports == alone_reports
    for name in (*MEMBERS, ALONE):
        for table in TABLES:
            assert table_rows(together, name, table) == table_rows(alone, name, table), (
                f"{name}/{table}"
            )
    # The group held transaction T2 (its line a window late) back to its second window,
    # and T3 (an END announcing a line never sent) for good.
    windows = {name: [f for f, _, _ in reports[i]] for i, name in enumerate(MEMBERS)}
    assert [dict(f.offsets) for f in windows["orders"]] == [
        {0: 2}, {0: 2, 1: 1}, {0: 2, 1: 1}, {0: 2, 1: 1}
    ]
