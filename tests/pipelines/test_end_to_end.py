"""The bundled demo through real Dagster runs, against an oracle in plain Python.

The oracle reads the dump files itself (json + gzip, Kafka Connect sink files by their
names, Avro with fastavro; no Spark, no reclock code), keeps one copy per (partition,
offset), and applies each envelope's rule in Kafka order: the final ``state`` of every
source must equal it exactly, included metadata columns too.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import logging
import os
import re
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import fastavro
import pytest
from dagster import AssetKey, DagsterInstance
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from benchmarks.screenshot import find_chromium, rendered_text, running_webserver
from cdc_core.config import Config, SourceConfig, load_config
from cdc_core.source import published_tables
from pipelines.cli import main
from pipelines.run import materialize
from tests.connect_server import client_env

SINK_NAME = re.compile(r"(.+)\+(\d+)\+(\d+)\.(json|avro)(\.gz)?")


def sink_records(path: Path) -> list[dict]:
    """The records of a Kafka Connect sink file: offsets from its name, values only."""
    topic, partition, start, kind, gz = SINK_NAME.fullmatch(path.name).groups()
    data = gzip.decompress(path.read_bytes()) if gz else path.read_bytes()
    if kind == "avro":
        values = [json.dumps(v) for v in fastavro.reader(io.BytesIO(data))]
    else:
        values = [None if line == "null" else line for line in data.decode().splitlines()]
    ts = path.stat().st_mtime_ns // 1_000_000
    return [
        {"topic": topic, "partition": int(partition), "offset": int(start) + i, "ts": ts,
         "key": None, "payload": value}
        for i, value in enumerate(values)
    ]  # fmt: skip


def dump_records(landing: Path, topic: str) -> list[dict]:
    """Every well-formed record of a topic, one copy per (partition, offset)."""
    records: dict[tuple[int, int], dict] = {}
    for path in sorted((landing / topic).rglob("*")):
        if not path.is_file() or path.name.startswith((".", "_")):
            continue
        if SINK_NAME.fullmatch(path.name):
            for record in sink_records(path):
                records.setdefault((record["partition"], record["offset"]), record)
            continue
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as lines:
            for line in lines:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if not isinstance(record, dict) or record.get("topic") != topic:
                    continue
                records.setdefault((record["partition"], record["offset"]), record)
    return [records[position] for position in sorted(records)]


def decode(text: str | None) -> object:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return ValueError(text)


def typed(row: dict, columns: dict[str, str]) -> tuple:
    casts = {"bigint": int, "double": float, "string": str}
    return tuple(
        None if row.get(name) is None else casts[kind](row[name]) for name, kind in columns.items()
    )


def confluent(text: str | None, schema_path: Path, schema_id: int) -> object:
    """A base64 Confluent-framed Avro value decoded by hand (ValueError when it is not one)."""
    if text is None:
        return None
    payload = base64.b64decode(text)
    if payload[0] != 0 or int.from_bytes(payload[1:5], "big") != schema_id:
        return ValueError("another schema")
    body = io.BytesIO(payload[5:])
    entry = json.loads(schema_path.read_text())
    schema = fastavro.parse_schema(json.loads(entry["schema"]) if "schema" in entry else entry)
    try:
        value = fastavro.schemaless_reader(body, schema, schema)
    except (EOFError, ValueError, IndexError):
        return ValueError("cut short")
    return value if body.tell() == len(payload) - 5 else ValueError("bytes left")


def metadata(record: dict, source: SourceConfig) -> tuple:
    moment = datetime.fromtimestamp(record["ts"] / 1000, tz=UTC)
    fields = {"partition": record["partition"], "offset": record["offset"], "timestamp": moment,
              "key": record["key"]}  # fmt: skip
    return tuple(fields[str(name)] for name in source.include)


def upsert_oracle(records: list[dict], source: SourceConfig, config: Config) -> Counter:
    state: dict[object, tuple] = {}
    for record in sorted(records, key=lambda r: r["offset"]):  # each key lives in one partition
        key, value = decode(record["key"]), decode(record["payload"])
        if source.key_encoding == "avro":  # the demo's payments: a long key, a record value
            key = {"id": confluent(record["key"], source.key_avro_schema.file,
                                   source.key_avro_schema.id)}  # fmt: skip
            value_schema = config.schema_folder / "payments-value" / "1.json"
            value = confluent(record["payload"], value_schema, 102)
        if not isinstance(key, dict):
            continue  # null or undecodable key: an error, never a row
        key_tuple = typed(key, dict(source.key))
        if source.envelope == "debezium-upsert":
            if isinstance(value, dict) and "payload" in value and "op" not in value:
                value = value["payload"]
            value = value.get("after") if isinstance(value, dict) else value
        if isinstance(value, dict):
            row = typed(key, dict(source.key)) if source.envelope == "upsert" else ()
            state[key_tuple] = row + typed(value, dict(source.value)) + metadata(record, source)
        else:
            state.pop(key_tuple, None)  # delete, tombstone, or an error replacing the row
    return Counter(state.values())


def append_oracle(records: list[dict], source: SourceConfig) -> Counter:
    rows: Counter = Counter()
    for record in records:
        value = decode(record["payload"])
        if isinstance(value, dict):
            rows[typed(value, dict(source.value)) + metadata(record, source)] += 1
    return rows


def state_rows(config: Config, source: SourceConfig) -> Counter:
    table = DeltaTable(str(config.lake / source.name / "state")).to_pyarrow_table()
    names = source.output_schema.fieldNames()
    return Counter(tuple(row[name] for name in names) for row in table.to_pylist())


@pytest.fixture(scope="module")
def demo_run(
    tmp_path_factory: pytest.TempPathFactory, spark, connect_server: str
) -> tuple[Config, subprocess.CompletedProcess]:
    """``reclock demo`` as ``make demo`` runs it, in its own process, attached to the
    suite's warm Spark Connect server by ``SPARK_REMOTE`` as under ``make ui`` (the sample's
    config names no master): the end-to-end demo over Connect. The demo's engine in
    process is the shared sample lake's (``tests/conftest.py``), and a ``reclock``
    process starting its own JVM is tested by the quick start, the cluster run and the
    concurrent runs."""
    workdir = tmp_path_factory.mktemp("demo")
    env = {**client_env(), "SPARK_REMOTE": connect_server}
    run = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "demo", "--workdir", str(workdir)],
        capture_output=True, text=True, timeout=900, env=env,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return load_config(workdir / "reclock.yaml"), run


@pytest.fixture(scope="module")
def demo(demo_run: tuple[Config, subprocess.CompletedProcess]) -> Config:
    return demo_run[0]


def test_the_demo_prints_its_progress_and_a_summary_and_keeps_the_event_log(
    demo_run: tuple[Config, subprocess.CompletedProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a terminal (its output captured here): one plain line per source as its
    windows are written, the run's outcome and the summary; no Dagster events, no beta
    notes, no telemetry banner, no pandas warning. The events stay in the instance."""
    config, run = demo_run
    windows = (config.end_ms - config.start_ms) // config.window_ms
    lines = run.stdout.splitlines()
    progress = {line for line in lines if line.endswith("windows written")}
    assert progress == {f"{s.name}: {windows}/{windows} windows written" for s in config.sources}
    assert any(line.startswith("Materialized windows") and "success" in line for line in lines)
    assert lines[-len(config.sources) - 1].split() == ["source", "windows", "upper",
                                                        "state", "rows", "errors"]  # fmt: skip
    assert len(lines) == len(config.sources) * 2 + 2
    for noise in (" - dagster - ", "DEBUG", "BetaWarning", "Telemetry", "FutureWarning"):
        assert noise not in run.stdout + run.stderr, noise
    monkeypatch.setenv("DAGSTER_HOME", str(config.lake.parent / "dagster"))
    instance = DagsterInstance.get()
    (record,) = instance.get_runs()
    levels = Counter(entry.level for entry in instance.all_logs(record.run_id))
    assert levels[logging.DEBUG] > 0 and levels[logging.INFO] > 0


def test_the_demo_records_every_window_in_its_own_dagster_instance(
    demo: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(demo.lake.parent / "dagster"))
    instance = DagsterInstance.get()
    windows = {
        record.partition_key
        for record in instance.fetch_materializations(
            AssetKey(["users", "changes"]), limit=1000
        ).records
    }
    assert len(windows) == (demo.end_ms - demo.start_ms) // demo.window_ms == 8


def test_a_fresh_clone_validates_its_definitions_without_a_config(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RECLOCK_CONFIG", "DAGSTER_HOME")}
    run = subprocess.run(
        [str(Path(sys.executable).with_name("dagster")), "definitions", "validate",
         "-m", "pipelines.definitions"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "All code locations passed validation" in run.stderr + run.stdout


def test_every_state_equals_the_plain_python_oracle(demo: Config) -> None:
    for source in demo.sources:
        records = dump_records(demo.landing, source.topic)
        oracle = (
            append_oracle(records, source)
            if source.envelope == "none"
            else upsert_oracle(records, source, demo)
        )
        assert oracle, f"the sample gives {source.name} rows"
        assert state_rows(demo, source) == oracle, source.name


def test_the_demo_keeps_every_version_of_its_users(demo: Config) -> None:
    """The sample's ``users`` keep a history: its open versions are exactly ``state``, and
    the updates and deletes of the sample left closed versions behind."""
    users = demo.source("users")
    names = users.output_schema.fieldNames()
    history = DeltaTable(str(demo.lake / "users" / "history")).to_pyarrow_table().to_pylist()
    open_versions = Counter(tuple(v[n] for n in names) for v in history if v["valid_to"] is None)
    assert open_versions == state_rows(demo, users)
    closed = [v for v in history if v["valid_to"] is not None]
    assert len(closed) > 100 and all(v["valid_from"] < v["valid_to"] for v in closed)


def test_bad_records_land_in_errors_with_their_position(demo: Config) -> None:
    errors = DeltaTable(str(demo.lake / "users" / "errors")).to_pyarrow_table().to_pylist()
    reasons = " | ".join(sorted({e["reason"] for e in errors}))
    assert any(e["file"] for e in errors), "the malformed dump line is reported with its file"
    assert any(e["offset"] is not None and e["partition"] is not None for e in errors)
    assert "key" in reasons.lower()  # the null-key record


def test_rerunning_every_window_writes_no_new_version(
    demo: Config, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [demo.lake / s.name / t for s in demo.sources for t in published_tables(s)]
    before = {p: DeltaTable(str(p)).version() for p in paths}
    capsys.readouterr()

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("nothing to do must not need Spark")

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", refuse)
    assert materialize(demo)
    assert {p: DeltaTable(str(p)).version() for p in paths} == before
    # Nothing to do is said in one line, from the Delta logs alone: no Spark, no run.
    assert capsys.readouterr().out == (
        "Nothing to materialize: every source is complete through 2026-01-01T00:08:00Z.\n"
    )


# By hand: the demo has 8 one-minute windows; `users/changes` has four checks.
DEMO_WINDOWS = 8
USERS_CHANGES_CHECKS = ("complete", "expectations", "readers", "state_is_set")


def test_the_ui_shows_every_demo_window_materialized_and_its_checks_passed(demo: Config) -> None:
    """Headless Chromium on the asset page of ``users/changes``, served from the demo's own
    Dagster instance, as a user opens it after ``make demo``."""
    if find_chromium() is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium; "
                    "`make test` installs it when run as root)")
    config = demo.lake.parent / "reclock.yaml"
    with running_webserver(config, demo.lake.parent / "dagster") as base_url:
        partitions = page_text(rendered_text(f"{base_url}/assets/users/changes?view=partitions"))
        checks = page_text(rendered_text(f"{base_url}/assets/users/changes?view=checks"))
    assert f"{DEMO_WINDOWS} Partitions" in partitions
    assert f"Materialized ({DEMO_WINDOWS})" in partitions
    assert "Missing (0)" in partitions and "Failed (0)" in partitions
    assert f"Checks ({len(USERS_CHANGES_CHECKS)})" in checks
    for name in USERS_CHANGES_CHECKS:
        assert f"{name} {name} Succeeded" in checks, name
    assert "Failed" not in checks


def page_text(html: str) -> str:
    """The visible words of a page, one space apart (scripts and styles dropped)."""
    html = re.sub(r"<(style|script)[^>]*>.*?</\1>", " ", html, flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_retire_names_the_source_each_file_and_where_it_went(
    demo: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    """Last in this file: it archives the demo's dumps."""
    capsys.readouterr()
    config = demo.lake.parent / "reclock.yaml"
    assert main(["retire", "--config", str(config), "--source", "users"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("users: committed [2026-01-01T00:")
    archived = [line.split(" -> ") for line in lines[1:] if line.startswith("  archived ")]
    assert archived, lines
    for source, target in archived:
        source = Path(source.removeprefix("  archived "))
        assert source.is_relative_to(demo.landing / "users") and not source.exists()
        assert Path(target).exists()
