"""``include: [headers]`` end to end, on real dump files and Delta tables: each row carries
its record's Kafka headers as a list of {key, value bytes} in Kafka order, duplicates kept
(the winning record's for upsert, its own for none); a record without headers has an empty
list, a Kafka Connect sink record null (unknown); malformed headers are a named error at the
record's position; adding headers under existing outputs is drift, which a rebuild clears."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from assets.cdcv2_export import export_key
from assets.source_assets import output_key
from cdc_core.config import parse_config
from cdc_core.envelopes import ConfigDriftError
from cdc_core.reclock import Windows
from cdc_core.source import SourcePipeline
from cdc_core.source.rebuild import rebuild
from pipelines.build import build_definitions
from pipelines.run import materialize

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
WINDOW = 60_000


def config_of(
    root: Path, envelope: str = "upsert", include: tuple[str, ...] = ("headers",),
    end: str | None = None,
):
    source = {"name": "users", "topic": "users", "value": {"name": "string"},
              "envelope": envelope, "reclock": "event-time", "include": list(include)}
    if envelope != "none":
        source |= {"key": {"id": "bigint"}, "history": True}
    data = {"lake": "lake", "landing": "landing", "window": "1m",
            "start": "2026-01-01T00:00:00Z", "sources": [source]}  # fmt: skip
    if end is not None:
        data["end"] = end
    return parse_config(data, root)


def line(offset: int, window: int, key: int | None, name: str | None, **extra: object) -> str:
    """A kcat -J line; ``extra`` holds ``headers`` as kcat writes them (absent if not given)."""
    record = {"topic": "users", "partition": 0, "offset": offset,
              "ts": T0 + window * WINDOW + 1 + offset,
              "key": None if key is None else json.dumps({"id": key}),
              "payload": None if name is None else json.dumps({"name": name}), **extra}  # fmt: skip
    return json.dumps(record) + "\n"


def land(config, name: str, lines: list[str]) -> None:
    folder = config.landing / "users"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(lines))


def run(spark: SparkSession, config, first: int, last: int) -> SourcePipeline:
    pipeline = SourcePipeline.from_config(spark, config, config.sources[0])
    pipeline.register_dumps(arrival_ms=T0)
    pipeline.run_windows(Windows(T0 + (first - 1) * WINDOW, T0 + last * WINDOW, WINDOW))
    pipeline.finish()
    return pipeline


def rows(path: Path) -> list[dict]:
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def pairs(*items: tuple[str, bytes | None]) -> list[dict]:
    return [{"key": key, "value": value} for key, value in items]


def test_upsert_rows_carry_the_winning_records_headers(spark: SparkSession, tmp_path) -> None:
    config = config_of(tmp_path)
    land(config, "a.json", [
        line(0, 0, 1, "a", headers=["trace", "t0"]),
        line(1, 0, 1, "a", headers=["trace", "t1", "trace", "t2", "empty", None]),  # wins
        line(2, 0, 2, "b"),  # no headers field: an empty list
        line(3, 0, 3, "c", headers=["enc", "\u00e9"]),
        line(4, 1, 2, "b", headers=["k", "v"]),  # same value, new headers: a new row
    ])  # fmt: skip
    root = config.lake / "users"
    run(spark, config, 1, 1)
    state = {r["id"]: r["headers"] for r in rows(root / "state")}
    assert state == {
        1: pairs(("trace", b"t1"), ("trace", b"t2"), ("empty", None)),
        2: [],
        3: pairs(("enc", "\u00e9".encode())),
    }
    run(spark, config, 2, 2)
    changes = sorted(
        (r["time"], r["diff"], r["headers"]) for r in rows(root / "changes") if r["id"] == 2
    )
    t1, t2 = T0 + WINDOW, T0 + 2 * WINDOW
    assert changes == [(t1, 1, []), (t2, -1, []), (t2, 1, pairs(("k", b"v")))]
    history = sorted(
        (r["valid_from"], r["valid_to"], r["offset"], r["headers"])
        for r in rows(root / "history") if r["id"] == 2
    )
    assert history == [(t1, t2, 2, []), (t2, None, 4, pairs(("k", b"v")))]
    # The reclocked shard keeps the dump's headers text; delta-spark reads the output type.
    assert {r["offset"]: r["headers"] for r in rows(root / "reclocked")}[2] == "[]"
    schema = spark.read.format("delta").load(str(root / "state")).schema["headers"]
    assert schema.dataType.simpleString() == "array<struct<key:string,value:binary>>"
    assert rows(root / "errors") == []


def test_none_rows_carry_their_own_headers(spark: SparkSession, tmp_path) -> None:
    config = config_of(tmp_path, envelope="none")
    land(config, "a.json", [
        line(0, 0, None, "x", headers=["a", "1", "a", "2"]),
        line(1, 0, None, "x", headers=["a", None]),
        line(2, 0, None, "x", headers=[]),
        line(3, 0, None, "y"),
    ])  # fmt: skip
    run(spark, config, 1, 1)
    got = sorted((r["name"], json.dumps(r["headers"], default=repr)) for r in
                 rows(config.lake / "users" / "changes"))  # fmt: skip
    expected = [
        ("x", json.dumps(pairs(("a", b"1"), ("a", b"2")), default=repr)),
        ("x", json.dumps(pairs(("a", None)), default=repr)),
        ("x", "[]"),
        ("y", "[]"),
    ]
    assert got == sorted(expected)


@pytest.mark.parametrize("envelope", ["none", "upsert"])
def test_malformed_headers_are_named_errors_at_the_records_position(
    spark: SparkSession, tmp_path, envelope: str
) -> None:
    config = config_of(tmp_path, envelope=envelope)
    key = None if envelope == "none" else 1
    land(config, "a.json", [
        line(0, 0, key, "x", headers=["a", "1", "b"]),
        line(1, 0, None if key is None else 2, "x", headers=[7, "1"]),
        line(2, 0, None if key is None else 3, "x", headers=["a", 7]),
        line(3, 0, None if key is None else 4, "x", headers={"a": "1"}),
        line(4, 0, None if key is None else 5, "ok", headers=["a", "1"]),
    ])  # fmt: skip
    run(spark, config, 1, 1)
    root = config.lake / "users"
    errors = sorted((r["partition"], r["offset"], r["reason"]) for r in rows(root / "errors"))
    assert errors == [
        (0, 0, 'headers decode error: headers hold an odd number of items (3), so the last '
               'name has no value: ["a","1","b"]'),
        (0, 1, 'headers decode error: headers item 1 is a name that is not a string: [7,"1"]'),
        (0, 2, 'headers decode error: headers item 2 is a value that is neither a string nor '
               'null: ["a",7]'),
        (0, 3, 'headers decode error: headers are not a JSON array of alternating names and '
               'values: {"a":"1"}'),
    ]  # fmt: skip
    assert [(r["name"], r["headers"]) for r in rows(root / "changes")] == [
        ("ok", pairs(("a", b"1")))
    ]


def test_a_malformed_winner_replaces_the_row_until_good_headers_come(
    spark: SparkSession, tmp_path
) -> None:
    config = config_of(tmp_path)
    land(config, "a.json", [
        line(0, 0, 1, "a", headers=["h", "1"]),
        line(1, 1, 1, "a", headers=["h"]),
        line(2, 2, 1, "a", headers=["h", "3"]),
    ])  # fmt: skip
    root = config.lake / "users"
    run(spark, config, 1, 2)
    assert rows(root / "state") == []
    [error] = rows(root / "errors")
    assert (error["offset"], error["diff"]) == (1, 1)
    run(spark, config, 3, 3)
    assert [r["headers"] for r in rows(root / "state")] == [pairs(("h", b"3"))]
    current = {}
    for r in rows(root / "errors"):
        current[r["offset"]] = current.get(r["offset"], 0) + r["diff"]
    assert current == {1: 0}  # retracted by the good record


def test_redelivered_copies_must_agree_on_headers(spark: SparkSession, tmp_path) -> None:
    config = config_of(tmp_path)
    land(config, "a.json", [line(0, 0, 1, "a", headers=["h", "1"])])
    land(config, "b.json", [line(0, 0, 1, "a", headers=["h", "2"])])
    run(spark, config, 1, 1)
    [conflict] = rows(config.lake / "users" / "errors")
    assert "ts/key/payload/headers differ" in conflict["reason"]
    assert conflict["file"].endswith("b.json")


def test_connect_sink_records_have_null_headers(spark: SparkSession, tmp_path) -> None:
    config = config_of(tmp_path, envelope="none")
    sink = config.landing / "users" / "partition=0"
    sink.mkdir(parents=True)
    (sink / "users+0+0.json").write_text('{"name": "s0"}\n{"name": "s1"}\n')
    os.utime(sink / "users+0+0.json", ns=((T0 + 1000) * 1_000_000,) * 2)  # its records' ts
    land(config, "kcat.json", [line(2, 0, None, "k2")])
    run(spark, config, 1, 1)
    got = {r["name"]: r["headers"] for r in rows(config.lake / "users" / "changes")}
    assert got == {"s0": None, "s1": None, "k2": []}


def test_a_source_without_headers_keeps_no_headers_column(spark: SparkSession, tmp_path) -> None:
    config = config_of(tmp_path, include=("timestamp",))
    land(config, "a.json", [line(0, 0, 1, "a", headers=["h", "1"])])
    run(spark, config, 1, 1)
    for table in ("reclocked", "changes", "state"):
        names = DeltaTable(str(config.lake / "users" / table)).schema().to_arrow().names
        assert "headers" not in names, table


def test_headers_added_under_existing_outputs_are_drift_until_rebuilt(
    spark: SparkSession, tmp_path
) -> None:
    old = config_of(tmp_path, include=())
    land(old, "a.json", [line(0, 0, 1, "a", headers=["h", "1"]), line(1, 1, 2, "b")])
    root = old.lake / "users"
    run(spark, old, 1, 2)
    tables = ("reclocked", "changes", "state", "errors")
    before = {t: DeltaTable(str(root / t)).version() for t in tables}
    new = config_of(tmp_path)
    with pytest.raises(ConfigDriftError, match=r"include changed from \[\] to \['headers'\]"):
        SourcePipeline.from_config(spark, new, new.sources[0])
    assert {t: DeltaTable(str(root / t)).version() for t in tables} == before
    rebuild(spark, new, new.sources[0], Windows(T0, T0 + 2 * WINDOW, WINDOW))
    state = {r["id"]: r["headers"] for r in rows(root / "state")}
    assert state == {1: pairs(("h", b"1")), 2: []}
    assert "headers" in DeltaTable(str(root / "reclocked")).schema().to_arrow().names


def test_a_source_with_headers_has_no_cdcv2_export_asset(tmp_path: Path) -> None:
    """The CDCv2 encodings carry scalar columns only: the export asset is left out for a
    source with headers (it could only fail), and kept for one without."""
    with_headers = build_definitions(config_of(tmp_path))
    without = build_definitions(config_of(tmp_path, include=("timestamp",)))
    keys = {
        name: {spec.key for spec in d.resolve_all_asset_specs()}
        for name, d in (("with", with_headers), ("without", without))
    }
    assert export_key("users") not in keys["with"] and export_key("users") in keys["without"]
    assert output_key("users", "changes") in keys["with"]


def test_a_rerun_of_a_source_without_export_materializes_nothing(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No export folder ever appears for a source with headers: a rerun over windows its
    outputs hold must not take their absence for work left to do."""
    config = config_of(tmp_path, end="2026-01-01T00:02:00Z")
    land(config, "a.json", [line(0, 0, 1, "a"), line(1, 1, 2, "b")])
    assert materialize(config)
    capsys.readouterr()
    assert materialize(config)
    assert capsys.readouterr().out == (
        "Nothing to materialize: every source is complete through 2026-01-01T00:02:00Z.\n"
    )
