"""Object-store lakes and landing zones in the config: what is accepted, what is refused
at load (never an empty success), and what every component is told."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdc_core.config import ConfigError, load_config, parse_config, use_config
from cdc_core.spark_server import (
    config_server_conf,
    server_command,
    server_settings,
    write_properties,
)
from cdc_core.storage import Location, delta_options, settings, spark_conf

SOURCE = {"name": "users", "topic": "users", "key": {"id": "bigint"},
          "value": {"name": "string"}, "envelope": "upsert", "reclock": "arrival"}  # fmt: skip


def write(tmp_path: Path, **fields: Any) -> Path:
    data = {"lake": "lake", "landing": "landing", "window": "1m",
            "start": "2026-01-01T00:00:00Z", "sources": [SOURCE], **fields}  # fmt: skip
    path = tmp_path / "reclock.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return [str(problem) for problem in caught.value.problems]


@pytest.mark.parametrize("url", ["gs://bucket/lake", "abfss://c@a.dfs.core.windows.net/l"])
def test_an_unsupported_scheme_is_refused_naming_the_field(tmp_path: Path, url: str) -> None:
    (tmp_path / "landing").mkdir()
    assert problems(write(tmp_path, lake=url, landing=url)) == [
        f"lake: unsupported URL scheme {url.split(':')[0]}:// in {url!r}: a lake or landing "
        "zone is a local path or an s3://bucket/prefix URL",
        f"landing: unsupported URL scheme {url.split(':')[0]}:// in {url!r}: a lake or "
        "landing zone is a local path or an s3://bucket/prefix URL",
    ]
    assert not (tmp_path / "gs:").exists()


def test_a_local_landing_zone_that_is_no_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "landing").write_text("")
    assert problems(write(tmp_path)) == [f"landing: {tmp_path / 'landing'} is not a folder"]


def test_a_landing_zone_in_a_missing_bucket_is_refused(tmp_path: Path, s3_bucket: str) -> None:
    path = write(tmp_path, lake=f"s3://{s3_bucket}/lake", landing="s3://nosuchbucket/landing")
    assert problems(path) == ["landing: bucket nosuchbucket does not exist"]


def test_s3_locations_load_and_reach_delta_rs_and_spark_with_the_same_settings(
    tmp_path: Path, s3_bucket: str, s3_endpoint: str
) -> None:
    config = load_config(
        write(tmp_path, lake=f"s3://{s3_bucket}/lake", landing=f"s3://{s3_bucket}/landing")
    )
    assert str(config.lake / "users") == f"s3://{s3_bucket}/lake/users"
    assert delta_options(str(config.lake)) == {
        "AWS_ENDPOINT_URL": s3_endpoint, "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_ALLOW_HTTP": "true", **config.storage.retries.policy.delta_options(),
    }  # fmt: skip
    conf = spark_conf(config.lake, config.landing)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == s3_endpoint
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.access.key"] == "testing"
    assert spark_conf(Location.parse(tmp_path)) == {}

    # A Spark Connect server for this config starts with the same s3a settings (its
    # clients cannot hand it Hadoop settings), and with the config's own Spark settings.
    with_memory = {**yaml.safe_load(write(tmp_path).read_text()),
                   "lake": f"s3://{s3_bucket}/lake", "landing": f"s3://{s3_bucket}/landing",
                   "spark": {"remote": "sc://127.0.0.1:15002",
                             "conf": {"spark.driver.memory": "3g"}}}  # fmt: skip
    settings = server_settings(conf=config_server_conf(parse_config(with_memory, tmp_path)))
    assert conf.items() <= settings.items()
    assert settings["spark.driver.memory"] == "3g"
    assert "spark.remote" not in settings
    # The settings reach spark-submit in a file only this user reads, never on the command
    # line (every user of the machine can read a process's arguments).
    private = tmp_path / "private"
    private.mkdir()
    properties = write_properties(settings, private)
    assert stat.S_IMODE(properties.stat().st_mode) == 0o600
    assert f"spark.hadoop.fs.s3a.secret.key={conf['spark.hadoop.fs.s3a.secret.key']}" in (
        properties.read_text().splitlines()
    )
    command = server_command(settings, properties)
    assert command[command.index("--driver-memory") + 1] == "3g"
    assert not any("fs.s3a" in word or "testing" in word for word in command)
    local = parse_config(yaml.safe_load(write(tmp_path).read_text()), tmp_path)
    assert not any("fs.s3a" in key for key in server_settings(conf=config_server_conf(local)))


def test_the_config_block_overrides_the_environment(tmp_path: Path, s3_bucket: str) -> None:
    storage = {"endpoint": "http://localhost:9", "region": "eu-west-1",
               "access_key_id": "mine", "secret_access_key": "secret"}  # fmt: skip
    use_config(parse_config(
        {**yaml.safe_load(write(tmp_path).read_text()), "lake": "s3://bkt/lake",
         "storage": storage}, tmp_path,
    ))  # fmt: skip
    options = delta_options("s3://bkt/lake")
    assert options is not None
    assert (options["AWS_ENDPOINT_URL"], options["AWS_REGION"], options["AWS_ACCESS_KEY_ID"]) == (
        "http://localhost:9", "eu-west-1", "mine"
    )
    assert settings.current().spark_conf()["spark.hadoop.fs.s3a.secret.key"] == "secret"


def test_plain_http_to_another_machine_is_refused(tmp_path: Path) -> None:
    (tmp_path / "landing").mkdir()
    path = write(tmp_path, storage={"endpoint": "http://s3.example.com"})
    assert problems(path) == [
        "storage: endpoint http://s3.example.com is plain http to another machine: use https "
        "(plain http is allowed for a loopback endpoint only)"
    ]


@pytest.mark.parametrize(
    ("name", "value"),
    [("AWS_S3_ALLOW_UNSAFE_RENAME", "true"), ("AWS_CONDITIONAL_PUT", "disabled")],
)
def test_a_setting_that_makes_commits_unconditional_is_refused(
    tmp_path: Path, s3_bucket: str, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    path = write(tmp_path, lake=f"s3://{s3_bucket}/lake", landing=f"s3://{s3_bucket}/landing")
    (problem,) = problems(path)
    assert problem.startswith(f"storage: {name}={value} is set: delta-rs would commit without")
    # A local lake commits through the filesystem, whatever the environment says.
    (tmp_path / "landing").mkdir()
    load_config(write(tmp_path))
