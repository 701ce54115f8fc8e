"""Composite keys with null fields through the pipeline: a key whose fields are null
upserts, deletes and has its error retracted across runs, where the prior state comes
back from the Delta shards (null-safe key equality), and ``state`` holds one row per key."""

from __future__ import annotations

import json
from pathlib import Path

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.config import parse_config
from cdc_core.reclock import Windows
from cdc_core.source import SourcePipeline

T0 = 1_767_225_600_000
WIDTH = 60_000


def line(offset: int, window: int, key: dict | None, value: dict | str | None) -> str:
    payload = value if isinstance(value, str) or value is None else json.dumps(value)
    return json.dumps(
        {"topic": "pairs", "partition": 0, "offset": offset, "ts": T0 + window * WIDTH + offset,
         "key": None if key is None else json.dumps(key), "payload": payload}
    )  # fmt: skip


def test_null_field_keys_upsert_delete_and_retract_across_runs(
    spark: SparkSession, tmp_path: Path
) -> None:
    yin, yang = {"f3": None, "f4": "yin"}, {"f3": "yang", "f4": None}
    both = {"f3": None, "f4": None}
    lines = [
        line(0, 0, yin, {"n": 1}),
        line(1, 0, yang, {"n": 2}),
        line(2, 0, both, {"n": 3}),
        line(3, 1, yin, {"n": 10}),  # run 2: updates a row written by run 1
        line(4, 1, both, None),  # deletes it
        line(5, 1, yang, "{oops"),  # an error replaces the row
        line(6, 2, yang, {"n": 20}),  # run 3: a good value retracts the error
    ]
    (tmp_path / "landing" / "pairs").mkdir(parents=True)
    (tmp_path / "landing" / "pairs" / "dump.json").write_text("\n".join(lines) + "\n")
    config = parse_config(
        {"lake": "lake", "landing": "landing", "window": "1m", "start": "2026-01-01T00:00:00Z",
         "sources": [{"name": "pairs", "topic": "pairs", "key": {"f3": "string", "f4": "string"},
                      "value": {"n": "int"}, "envelope": "upsert", "reclock": "event-time"}]},
        tmp_path,
    )  # fmt: skip
    pipeline = SourcePipeline.from_config(spark, config, config.sources[0])
    pipeline.register_dumps(arrival_ms=T0)
    for window in range(3):  # one run per window: each reads the previous runs' shards
        pipeline.run_windows(Windows(T0 + window * WIDTH, T0 + (window + 1) * WIDTH, WIDTH))
    pipeline.finish()

    lake = tmp_path / "lake" / "pairs"
    state = DeltaTable(str(lake / "state")).to_pyarrow_table().to_pylist()
    assert sorted((r["f3"] or "", r["f4"] or "", r["n"]) for r in state) == [
        ("", "yin", 10), ("yang", "", 20)
    ]
    errors = DeltaTable(str(lake / "errors")).to_pyarrow_table().to_pylist()
    assert sorted((r["offset"], r["time"], r["diff"]) for r in errors) == [
        (5, T0 + 2 * WIDTH, 1), (5, T0 + 3 * WIDTH, -1)
    ]
    changes = DeltaTable(str(lake / "changes")).to_pyarrow_table().to_pylist()
    assert sum(r["diff"] for r in changes) == 2
