"""Tables registered in AWS Glue (the S3-protocol test server's Glue API, moto's): created
with their description, reclock's properties and columns; re-runs leave every Glue table at
its one version; an evolution updates the columns (one new version), a rebuild that drops
the history drops its registration; a second deployment sharing the catalog keeps to its
own database, and one that would take another's names is refused before it writes; a
Glue that does not answer fails the run before any table is written."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from pyspark.sql import SparkSession

from cdc_core.calendar import Windows
from cdc_core.catalog import CatalogClash, CatalogUnreachable
from cdc_core.config import Config
from cdc_core.source import SourcePipeline, rebuild
from cdc_core.storage import S3Settings, settings
from tests.source.test_evolution import BASE, DUMP, config_of
from tests.source.test_history import T0, WINDOW, run
from tests.storage.conftest import KEYS, s3_endpoint  # noqa: F401 (a fixture)

DATABASE = "shop"
REGISTERED = ("users_state", "users_changes", "users_errors", "users_history")


@pytest.fixture(scope="module")
def glue(s3_endpoint: str) -> Iterator[boto3.client]:  # noqa: F811
    """Every AWS client of the module (reclock's too) reaches the test server's Glue."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {**KEYS, "AWS_ENDPOINT_URL_GLUE": s3_endpoint}.items():
            patch.setenv(name, value)
        patch.setattr(settings, "_configured", S3Settings())
        yield boto3.client("glue", endpoint_url=s3_endpoint, region_name="us-east-1")


def glue_config(root: Path, value: dict[str, str], database: str = DATABASE, **source) -> Config:
    config = config_of(root, value, **source)
    catalog = {"kind": "glue", "database": database}
    return config.model_copy(update={"catalog": type(config.catalog)(**catalog)})


def landed(root: Path) -> None:
    (root / "landing" / "users").mkdir(parents=True, exist_ok=True)
    (root / "landing" / "users" / "dump.json").write_text("".join(DUMP))


def columns(table: dict) -> list[tuple[str, str]]:
    return [(c["Name"], c["Type"]) for c in table["StorageDescriptor"]["Columns"]]


def versions(glue, name: str) -> int:  # noqa: ANN001
    return len(glue.get_table_versions(DatabaseName=DATABASE, TableName=name)["TableVersions"])


@pytest.fixture(scope="module")
def deployment(
    glue, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Config]:
    """Windows 1 and 2 of users (upsert, with a history), registered in Glue."""
    root = tmp_path_factory.mktemp("glue-deployment")
    landed(root)
    config = glue_config(root, BASE)
    run(SourcePipeline.from_config(spark, config, config.sources[0]), 1, 2)
    return root, config


def test_tables_are_registered_with_their_description_properties_and_columns(
    glue, deployment: tuple[Path, Config]
) -> None:
    root, config = deployment
    found = glue.get_tables(DatabaseName=DATABASE)["TableList"]
    assert sorted(t["Name"] for t in found) == sorted(REGISTERED)  # no remap, no reclocked
    state = glue.get_table(DatabaseName=DATABASE, Name="users_state")["Table"]
    assert state["TableType"] == "EXTERNAL_TABLE"
    assert state["StorageDescriptor"]["Location"] == f"file:{config.lake}/users/state"
    assert state["Description"].startswith("Current rows")
    assert columns(state) == [("id", "bigint"), ("name", "string"), ("n", "bigint")]
    parameters = state["Parameters"]
    assert parameters["table_type"] == "DELTA"
    assert parameters["spark.sql.sources.provider"] == "delta"
    assert {k: parameters[k] for k in ("reclock.source", "reclock.topic", "reclock.envelope")} == {
        "reclock.source": "users", "reclock.topic": "users", "reclock.envelope": "upsert"
    }  # fmt: skip
    assert "reclock.state_as_of" in parameters["reclock.upper"]
    changes = glue.get_table(DatabaseName=DATABASE, Name="users_changes")["Table"]
    assert "reclock.upper" in changes["Parameters"]["reclock.upper"]
    assert columns(changes)[-2:] == [("time", "bigint"), ("diff", "bigint")]


def test_reruns_keep_one_version_and_evolution_and_rebuild_follow(
    glue, spark: SparkSession, deployment: tuple[Path, Config]
) -> None:
    root, config = deployment
    run(SourcePipeline.from_config(spark, config, config.sources[0]), 1, 3)  # one new window
    assert {name: versions(glue, name) for name in REGISTERED} == dict.fromkeys(REGISTERED, 1)

    evolved = glue_config(root, {**BASE, "email": "string"})
    run(SourcePipeline.from_config(spark, evolved, evolved.sources[0]), 4, 4)
    state = glue.get_table(DatabaseName=DATABASE, Name="users_state")["Table"]
    assert columns(state) == [("id", "bigint"), ("name", "string"), ("n", "bigint"),
                              ("email", "string")]  # fmt: skip
    assert versions(glue, "users_state") == 2

    # Retyped (a rebuild's change) and without its history: the registration goes too.
    rebuilt = glue_config(root, {"name": "string", "n": "string"}, history=False)
    rebuild(spark, rebuilt, rebuilt.sources[0], Windows(T0, T0 + 4 * WINDOW, WINDOW))
    names = sorted(t["Name"] for t in glue.get_tables(DatabaseName=DATABASE)["TableList"])
    assert names == ["users_changes", "users_errors", "users_state"]
    state = glue.get_table(DatabaseName=DATABASE, Name="users_state")["Table"]
    assert columns(state) == [("id", "bigint"), ("name", "string"), ("n", "string")]
    assert state["StorageDescriptor"]["Location"] == f"file:{config.lake}/users/state"


def test_a_second_deployment_keeps_to_its_own_database_and_never_takes_names(
    glue, spark: SparkSession, deployment: tuple[Path, Config], tmp_path: Path
) -> None:
    first_root, first = deployment
    landed(tmp_path)
    clashing = glue_config(tmp_path, BASE)  # the same source name, in the same database
    with pytest.raises(CatalogClash, match="shop.users_state is registered at file:"):
        SourcePipeline.from_config(spark, clashing, clashing.sources[0])
    assert not (clashing.lake / "users").exists()  # refused before anything was written

    second = glue_config(tmp_path, BASE, database="shop_eu")
    run(SourcePipeline.from_config(spark, second, second.sources[0]), 1, 1)
    ours = glue.get_table(DatabaseName="shop_eu", Name="users_state")["Table"]
    theirs = glue.get_table(DatabaseName=DATABASE, Name="users_state")["Table"]
    assert ours["StorageDescriptor"]["Location"] == f"file:{second.lake}/users/state"
    assert theirs["StorageDescriptor"]["Location"] == f"file:{first.lake}/users/state"


def test_a_glue_that_does_not_answer_fails_the_run_before_any_table_is_written(
    glue, spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL_GLUE", f"http://127.0.0.1:{closed}")
    landed(tmp_path)
    config = glue_config(tmp_path, BASE)
    with pytest.raises(CatalogUnreachable, match="glue: opening database shop failed") as error:
        SourcePipeline.from_config(spark, config, config.sources[0])
    assert error.value.definitely_not_written
    assert not (config.lake / "users").exists()
