"""`reclock config schema` and `reclock config check`: no Spark, exit codes, every problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark import SparkContext
from pyspark.sql import SparkSession

from cdc_core.config import config_schema
from pipelines.cli import main
from tests.test_config import VALID_YAML


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any attempt to start or reuse Spark: a new context starts its JVM in
    ``_ensure_initialized``, and sessions, new or active, come from ``getOrCreate``."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the config commands must not start Spark")

    monkeypatch.setattr(SparkContext, "_ensure_initialized", refuse)
    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", refuse)


def test_schema_prints_the_models_json_schema(
    no_spark: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "schema"]) == 0
    assert json.loads(capsys.readouterr().out) == config_schema()


def test_check_accepts_a_valid_file(
    no_spark: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "reclock.yaml"
    path.write_text(VALID_YAML)
    assert main(["config", "check", str(path)]) == 0
    assert capsys.readouterr().out == "ok: 2 sources\n"


def test_check_prints_every_problem_and_exits_2(
    no_spark: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "reclock.yaml"
    path.write_text(
        VALID_YAML.replace("window: 5m", "windw: 5m").replace("reclock: arrival", "reclock: x")
    )
    assert main(["config", "check", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "reclock: invalid config:",
        f"{path}: window: is required",
        f"{path}: sources[0].reclock: must be one of arrival, event-time (got 'x')",
        f"{path}: windw: unknown key; did you mean 'window'? "
        "(expected: lake, landing, window, start, end, retention, launchable, spark, storage, "
        "catalog, readers, "
        "schema_folder, sources, transactions)",
    ]


def test_no_spark_fixture_catches_a_session(no_spark: None) -> None:
    # The guard the tests above rely on: starting Spark is what it refuses.
    from cdc_core.spark import get_spark

    with pytest.raises(AssertionError, match="must not start Spark"):
        get_spark("local[1]", {})
