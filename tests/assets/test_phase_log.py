"""The step's log of the engine's phases, read back from a real Dagster run's event log:
a line as each phase starts and ends for a run of a few sources, one line per source
beyond ``PHASE_LINES_UP_TO`` (no Spark)."""

import pytest
from dagster import AssetExecutionContext, DagsterInstance, asset, materialize

from assets.partitions import window_key
from assets.source_assets import PHASE_LINES_UP_TO, PhaseLog
from cdc_core.config import Config, load_config
from cdc_core.phases import ALL_SOURCES, PhaseEvent
from tests.upsert_config import write_upsert_config

FLUSHED = "-- flushed --"


def phase_lines(config: Config, sources: int, events: list[PhaseEvent]) -> list[str]:
    """What a step that logs ``events`` for a run of ``sources`` sources, then flushes,
    writes to its run's log (``FLUSHED`` marks the flush)."""

    @asset
    def step(context: AssetExecutionContext) -> None:
        phases = PhaseLog(context, config, sources)
        for event in events:
            phases.log(event)
        context.log.info(FLUSHED)
        phases.flush()

    instance = DagsterInstance.ephemeral()
    result = materialize([step], instance=instance)
    assert result.success
    return [e.user_message for e in instance.all_logs(result.run_id) if e.dagster_event is None]


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Config:
    return load_config(write_upsert_config(tmp_path_factory.mktemp("phases")))


def run_of(config: Config) -> list[PhaseEvent]:
    end = config.start_ms + config.window_ms
    return [
        PhaseEvent(ALL_SOURCES, "register dumps"),
        PhaseEvent(ALL_SOURCES, "register dumps", 1.25, {"files": 4}),
        PhaseEvent("a", "append reclocked"),
        PhaseEvent("b", "status"),
        PhaseEvent("a", "append reclocked", 0.5, {"rows": 3, "rows_per_time": {end: 3}}),
        PhaseEvent("b", "status", 0.25),
        PhaseEvent("a", "status", 0.75),
    ]


def test_a_few_sources_log_each_phase_as_it_starts_and_ends(config: Config) -> None:
    window = window_key(config, config.start_ms + config.window_ms)
    assert phase_lines(config, PHASE_LINES_UP_TO, run_of(config)) == [
        "all sources: register dumps ...",
        "all sources: register dumps done in 1.2 s; files: 4",
        "a: append reclocked ...",
        "b: status ...",
        "a: append reclocked done in 0.5 s; rows: 3",
        f"a: append reclocked: window {window}: 3 row(s)",
        "b: status done in 0.2 s",
        "a: status done in 0.8 s",
        FLUSHED,
    ]


def test_beyond_the_limit_each_sources_phases_are_one_line_once_flushed(config: Config) -> None:
    assert phase_lines(config, PHASE_LINES_UP_TO + 1, run_of(config)) == [
        "all sources: register dumps ...",
        "all sources: register dumps done in 1.2 s; files: 4",
        FLUSHED,
        "a: 2 phase(s) done in 1.2 s: append reclocked 0.5 s, rows: 3; status 0.8 s",
        "b: 1 phase(s) done in 0.2 s: status 0.2 s",
    ]
