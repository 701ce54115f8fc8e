"""A run plans its queries for its input: a small run (a scheduled one-minute window)
statically, with few shuffle partitions, and interpreted (no generated code); a large one
(a backfill, a large state) with adaptive execution and generated code. The steps after
the run (publishing, the pending transactions, the checks, the export) plan the same way
by the size of the tables they read. The session's own settings come back after each
either way, a config that decides adaptive execution or code generation itself is
obeyed, and both plans write the same tables."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession

import cdc_core.source.planning
import cdc_core.spark
from cdc_core.config import Config, load_config
from cdc_core.ingest import list_dump_files
from cdc_core.ingest import registering as registering_module
from cdc_core.ingest.dumps import DumpScan
from cdc_core.phases import PhaseEvent, observing
from cdc_core.reclock import Windows
from cdc_core.shard import existing_table
from cdc_core.source import SourcePipeline
from cdc_core.spark import (
    ADAPTIVE,
    CODEGEN_FACTORY,
    SHUFFLE_PARTITIONS,
    WHOLE_STAGE_CODEGEN,
    planned_as,
    planned_for_input,
    planned_together,
    session_conf,
)
from pipelines.run import materialize
from pipelines.sample import write_sample
from tests.lake_rows import SampleLake, run_through, table_rows

SETTINGS = (ADAPTIVE, SHUFFLE_PARTITIONS, WHOLE_STAGE_CODEGEN, CODEGEN_FACTORY)
SMALL = {ADAPTIVE: "false", SHUFFLE_PARTITIONS: "2", WHOLE_STAGE_CODEGEN: "false",
         CODEGEN_FACTORY: "NO_CODEGEN"}  # fmt: skip


def settings(spark: SparkSession) -> dict[str, str]:
    return {key: spark.conf.get(key) for key in SETTINGS}


def first_window_planned(spark: SparkSession, config: Config) -> dict[str, dict[str, str]]:
    """Run the first window of the sample's ``users``; the settings each phase ran with."""
    seen: dict[str, dict[str, str]] = {}

    def record(event: PhaseEvent) -> None:
        if not event.ended:
            seen[event.name] = settings(spark)

    pipeline = SourcePipeline.from_config(spark, config, config.source("users"))
    with observing(record):
        pipeline.register_dumps(config.start_ms + config.window_ms)
        pipeline.run_windows(Windows.one(config.start_ms, config.start_ms + config.window_ms))
    return seen


GROUP = ("orders", "order_lines")  # the sample's transaction group


def sample(
    folder: Path, spark_conf: dict[str, str] | None = None, sources: tuple[str, ...] = ()
) -> Config:
    """The bundled sample (only ``sources`` when given), with ``spark_conf`` when given."""
    config_file = write_sample(folder)
    raw = yaml.safe_load(config_file.read_text())
    if spark_conf:
        raw["spark"] = {"conf": spark_conf}
    if sources:
        raw["sources"] = [s for s in raw["sources"] if s["name"] in sources]
    config_file.write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_config(config_file)


def users_dump_bytes(spark: SparkSession, config: Config) -> int:
    """The stored bytes of every dump of ``users``: what its first run reads."""
    pipeline = SourcePipeline.from_config(spark, config, config.source("users"))
    pipeline.register_dumps(config.start_ms + config.window_ms)
    return sum(f.size for f in pipeline.registry.files())


def registrations_planned(
    spark: SparkSession, config: Config, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, dict[str, str]], list[dict[str, str]]]:
    """``first_window_planned``, with the settings each registration's scan ran with
    (observed as the scan of new dumps is called; the call itself is the real one)."""
    registering: list[dict[str, str]] = []
    scan = registering_module.scan_new_dumps

    def observed(session: SparkSession, *rest: Any) -> DumpScan:
        registering.append(settings(session))
        return scan(session, *rest)

    monkeypatch.setattr(registering_module, "scan_new_dumps", observed)
    return first_window_planned(spark, config), registering


def test_a_small_run_plans_statically_and_gives_the_session_its_settings_back(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = settings(spark)
    assert before[ADAPTIVE] == "true" and before[WHOLE_STAGE_CODEGEN] == "true"
    seen, registering = registrations_planned(spark, sample(tmp_path), monkeypatch)
    for step in ("bind windows", "append reclocked", "plan envelope", "append changes"):
        assert seen[step] == SMALL, step
    assert registering and all(s == SMALL for s in registering), "a few KiB of dumps scanned"
    assert settings(spark) == before


@pytest.mark.parametrize("below", [0, 1])
def test_the_dumps_a_registration_scans_decide_its_plan(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, below: int
) -> None:
    """With the bound at the bytes of the dumps not registered yet, the registration's
    scan (a cold process's first Spark job) is planned small; one byte lower, large."""
    config = sample(tmp_path)
    landed = list_dump_files(config.landing, config.source("users").topic)
    monkeypatch.setattr(cdc_core.spark, "SMALL_RUN_BYTES", sum(d.size for d in landed) - below)
    before = settings(spark)
    _, registering = registrations_planned(spark, config, monkeypatch)
    assert registering == [SMALL if below == 0 else before]
    assert settings(spark) == before


@pytest.mark.parametrize("below", [0, 1])
def test_the_dumps_a_run_reads_decide_its_size(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, below: int
) -> None:
    """With the bound at the bytes of the dumps the first run reads (it holds no prior
    outputs yet), the run is small; one byte lower, it is large."""
    config = sample(tmp_path)
    monkeypatch.setattr(cdc_core.spark, "SMALL_RUN_BYTES", users_dump_bytes(spark, config) - below)
    before = settings(spark)
    seen = first_window_planned(spark, config)
    assert (seen["bind windows"][ADAPTIVE] == "false") == (below == 0)
    assert seen["append changes"] == seen["bind windows"]
    assert settings(spark) == before


def test_a_config_that_sets_adaptive_execution_itself_is_obeyed(
    spark: SparkSession, tmp_path: Path
) -> None:
    before = settings(spark)
    seen = first_window_planned(spark, sample(tmp_path, {ADAPTIVE: "true"}))
    assert seen["bind windows"] == before
    assert seen["append changes"] == before


def test_a_config_that_decides_code_generation_keeps_it_in_a_small_run(
    spark: SparkSession, tmp_path: Path
) -> None:
    before = settings(spark)
    seen = first_window_planned(spark, sample(tmp_path, {WHOLE_STAGE_CODEGEN: "true"}))
    for step in ("bind windows", "append changes"):
        assert seen[step] == {**SMALL, WHOLE_STAGE_CODEGEN: "true",
                              CODEGEN_FACTORY: before[CODEGEN_FACTORY]}, step  # fmt: skip
    assert settings(spark) == before


@pytest.mark.parametrize("configured", [{}, {SHUFFLE_PARTITIONS: "4"}, {ADAPTIVE: "true"}])
def test_the_settings_come_back_when_the_block_fails(
    spark: SparkSession, configured: dict[str, str]
) -> None:
    """A config's shuffle partitions (a backfill's tuning) leave a small run static."""
    before = settings(spark)
    with pytest.raises(RuntimeError, match="in the run"), planned_for_input(
        spark, 0, configured
    ) as static:
        assert static == (ADAPTIVE not in configured)
        assert settings(spark) == (SMALL if static else before)
        raise RuntimeError("in the run")
    assert settings(spark) == before


def test_a_run_above_the_bound_keeps_adaptive_execution(spark: SparkSession) -> None:
    before = settings(spark)
    with planned_for_input(spark, cdc_core.spark.SMALL_RUN_BYTES + 1, {}) as static:
        assert not static
        assert settings(spark) == before


@pytest.mark.parametrize("input_bytes", [0, cdc_core.spark.SMALL_RUN_BYTES + 1])
def test_a_plan_fixed_for_sources_served_together_holds_in_every_thread(
    spark: SparkSession, input_bytes: int
) -> None:
    """Sources served side by side share the session's plan settings: inside
    ``planned_together`` a source's own small or large plan, asked from any thread,
    changes nothing and gets the plan fixed for all; the settings come back after."""
    before = settings(spark)
    with planned_together(spark, input_bytes, {}) as fixed:
        assert fixed == (input_bytes == 0)
        during = settings(spark)
        assert during == (SMALL if fixed else before)

        def own_plan(small: bool) -> tuple[bool, dict[str, str]]:
            with planned_as(spark, small, {}) as static:
                return static, settings(spark)

        with ThreadPoolExecutor(2) as pool:
            asked = list(pool.map(own_plan, [True, False, True, False]))
        assert asked == [(fixed, during)] * 4
    assert settings(spark) == before


# The sample's sources of every kind of envelope: users (upsert), orders and order_lines
# (DEBEZIUM members of a transaction group), payments (upsert of Avro values).
COMPARED = ("users", "orders", "order_lines", "payments")
TABLES = ("remap", "reclocked", "changes", "errors", "state")


def test_a_run_planned_large_writes_what_the_small_runs_wrote(
    spark: SparkSession, sample_lake: SampleLake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plans change, never results: the sample's first run planned large (adaptive,
    generated code) writes the tables the shared sample lake's first run wrote planned
    small (static, interpreted: its dumps are a few KiB)."""
    monkeypatch.setattr(cdc_core.spark, "SMALL_RUN_BYTES", -1)
    config = sample(tmp_path)
    planned: list[dict[str, str]] = []

    def record(event: PhaseEvent) -> None:
        if event.name == "append changes" and not event.ended:
            planned.append(settings(spark))

    with observing(record):
        for name in COMPARED:
            run_through(spark, config, name, sample_lake.first_run_ms)
    assert planned and all(p[ADAPTIVE] == p[WHOLE_STAGE_CODEGEN] == "true" for p in planned)
    for name in COMPARED:
        for table in TABLES:
            expected = sample_lake.rows(name, table, first_run=True)
            assert table_rows(config, name, table) == expected, f"{name}/{table}"


def rows_after(config: Config, source: str, table: str, published: int | None) -> int:
    """The rows of ``source``'s ``table`` (all, or those at times after ``published``),
    read here with deltalake."""
    found = existing_table(str(config.lake / source / table))
    if found is None:
        return 0
    rows = found.to_pyarrow_table()
    if published is None:
        return rows.num_rows
    return sum(time > published for time in rows["time"].to_pylist())


@pytest.mark.parametrize("published", [False, True])
@pytest.mark.parametrize("below", [0, 1])
def test_the_rows_publishing_reads_decide_its_plan(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, below: int,
    published: bool,
) -> None:
    """With the bound at the rows publishing reads, publishing ``state`` and ``history``
    is planned small; one row lower, large. Before the first publish that is all of
    ``changes`` and ``reclocked`` (the source keeps history); after one, ``state`` and
    ``history`` whole and the rows of ``changes`` and ``reclocked`` written since."""
    config = sample(tmp_path)
    first_window_planned(spark, config)
    pipeline = SourcePipeline.from_config(spark, config, config.source("users"))
    as_of = None
    if published:
        pipeline.finish()
        as_of = config.start_ms + config.window_ms  # the first window's time: its end
        width = config.window_ms
        second = Windows.one(config.start_ms + width, config.start_ms + 2 * width)
        pipeline.register_dumps(second.end)
        pipeline.run_windows(second)
    read = sum(rows_after(config, "users", t, as_of) for t in ("changes", "reclocked"))
    read += sum(rows_after(config, "users", t, None) for t in ("state", "history"))
    monkeypatch.setattr(cdc_core.source.planning, "SMALL_STEP_ROWS", read - below)
    before = settings(spark)
    seen: dict[str, dict[str, str]] = {}

    def record(event: PhaseEvent) -> None:
        if not event.ended:
            seen[event.name] = settings(spark)

    with observing(record):
        pipeline.finish()
    expected = SMALL if below == 0 else before
    assert seen["publish state"] == seen["publish history"] == expected
    assert settings(spark) == before


def test_a_small_run_publishes_checks_and_exports_planned_small(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The sample's first window through Dagster: every step after the run (publishing,
    a transaction group member's pending transactions, each check in its thread, the
    CDCv2 export) ran static and interpreted, and the session has its settings back.
    ``users`` (history, expectations) and the transaction group's two members have every
    kind of step after a run; the sample's other sources would only repeat them."""
    config = sample(tmp_path, sources=("users", *GROUP))
    seen: dict[tuple[str, str], dict[str, str]] = {}

    def record(event: PhaseEvent) -> None:
        if not event.ended:
            seen[(event.source, event.name)] = settings(spark)

    # The run's session takes the deployment's settings (its resource applies them, the
    # same in every run of the process): the planning must give exactly those back.
    configured = session_conf(config.spark.master, config.spark.conf)
    for key in SETTINGS:
        spark.conf.set(key, configured.get(key, spark.conf.get(key)))
    before = settings(spark)
    with observing(record):
        assert materialize(config, config.start_ms + config.window_ms)
    after_run = ("publish state", "publish history", "pending transactions", "export CDCv2")
    names = {name for _, name in seen}
    assert set(after_run) <= names and any(name.startswith("check ") for name in names)
    unplanned = [
        step for step, planned in seen.items()
        if (step[1] in after_run or step[1].startswith("check ")) and planned != SMALL
    ]  # fmt: skip
    assert not unplanned
    # The session's settings are back at the end (the sources were served together, so
    # the run planned once for all of them, registration included).
    assert seen[("users", "register dumps")] == SMALL
    assert settings(spark) == before != SMALL
