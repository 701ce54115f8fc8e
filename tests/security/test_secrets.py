"""A run on S3 with known credentials leaves the secret nowhere it can be read back.

The config's ``storage`` block holds an access key and a secret key (no AWS environment
at all); a ``reclock spark-server`` started for that config (as ``make ui`` starts one,
with its UI and event log on) serves a ``reclock materialize`` (one Dagster run in a
Dagster instance on disk) and ``reclock inspect``. The secret must then appear in none of:
their output, the Dagster instance's storage, the lake and landing zone on the store, the
server's log, its event log, its UI's environment page, any process's command line, or the
message of an S3 call that fails.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
import yaml

from cdc_core.config import ConfigError, parse_config
from cdc_core.spark_server import free_port, listening
from tests.connect_server import REPO, client_env
from tests.source.test_reliability import EARLY, dump
from tests.upsert_config import write_upsert_config

ACCESS_KEY = "AKIARECLOCK" + uuid.uuid4().hex[:9].upper()
SECRET = "reclock-secret-" + uuid.uuid4().hex
AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION")  # fmt: skip


def environment(**extra: str) -> dict[str, str]:
    """The test's subprocess environment without any AWS credential: the config's block
    is the only place the keys are given."""
    env = {k: v for k, v in client_env().items() if k not in AWS_VARIABLES}
    return {**env, "PYTHONPATH": str(REPO), **extra}


def reclock(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def config_file(workdir: Path, bucket: str, endpoint: str, *, remote: str | None) -> Path:
    """The small upsert config on ``bucket``, its keys in the ``storage`` block."""
    events = workdir / "events"
    events.mkdir(exist_ok=True)
    path = write_upsert_config(
        workdir, end="2026-01-01T00:02:00Z", lake=f"s3://{bucket}/lake",
        landing=f"s3://{bucket}/landing",
        storage={"endpoint": endpoint, "access_key_id": ACCESS_KEY, "secret_access_key": SECRET},
    )  # fmt: skip
    settings = yaml.safe_load(path.read_text())
    spark = settings["spark"]
    spark["conf"] |= {"spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri()}
    if remote is not None:
        spark.pop("master")
        spark["remote"] = remote
    named = path.with_name(f"{'attached' if remote else 'local'}.yaml")
    named.write_text(yaml.safe_dump(settings))
    return named


@pytest.fixture
def server(tmp_path: Path, s3_bucket: str, s3_endpoint: str) -> Iterator[tuple[str, int, Path]]:
    """A ``reclock spark-server`` for the config, its UI on: (address, UI port, log)."""
    port, ui = free_port(), free_port()
    log = tmp_path / "server.log"
    config = config_file(tmp_path, s3_bucket, s3_endpoint, remote=None)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "pipelines.cli", "spark-server", "--port", str(port),
             "--config", str(config), "--conf", "spark.driver.memory=1g",
             "--conf", "spark.ui.enabled=true", "--conf", f"spark.ui.port={ui}"],
            cwd=REPO, env=environment(), stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        while not listening(port):
            assert process.poll() is None, log.read_text()[-3000:]
        yield f"sc://localhost:{port}", ui, log
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def every_file_under(folder: Path) -> Iterator[Path]:
    return (path for path in folder.rglob("*") if path.is_file())


def test_the_secret_key_appears_nowhere_a_run_writes_or_shows(
    tmp_path: Path, s3_bucket: str, s3_endpoint: str, server: tuple[str, int, Path]
) -> None:
    remote, ui_port, server_log = server
    store = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1",
                         aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET)  # fmt: skip
    store.put_object(Bucket=s3_bucket, Key="landing/users/early.json", Body=dump(EARLY).encode())
    attached = config_file(tmp_path, s3_bucket, s3_endpoint, remote=remote)
    home = tmp_path / "dagster"
    home.mkdir()
    env = environment(DAGSTER_HOME=str(home))
    shown: list[str] = []

    run = reclock("materialize", "--config", str(attached),
                  "--through", "2026-01-01T00:02:00Z", env=env)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    inspected = reclock("inspect", "--config", str(attached), env=env)
    assert inspected.returncode == 0, inspected.stderr[-3000:]
    assert "users" in inspected.stdout
    shown += [run.stdout, run.stderr, inspected.stdout, inspected.stderr]

    # A failing S3 call (a bucket that does not exist) names the bucket, not the keys.
    settings = yaml.safe_load(attached.read_text())
    settings["lake"] = "s3://no-such-bucket-reclock/lake"
    missing = attached.with_name("missing.yaml")
    missing.write_text(yaml.safe_dump(settings))
    failed = reclock("inspect", "--config", str(missing), env=env)
    assert failed.returncode != 0
    assert "no-such-bucket-reclock" in failed.stdout + failed.stderr
    shown += [failed.stdout, failed.stderr]

    # The server's UI shows its settings redacted.
    base = f"http://127.0.0.1:{ui_port}/api/v1/applications"
    with urllib.request.urlopen(base, timeout=30) as answer:
        application = json.load(answer)[0]["id"]
    with urllib.request.urlopen(f"{base}/{application}/environment", timeout=30) as answer:
        page = answer.read().decode()
    assert "fs.s3a.secret.key" in page  # the setting is there, its value is not
    shown.append(page)

    # No process of the machine carries the secret in its arguments.
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            assert SECRET.encode() not in cmdline.read_bytes(), cmdline
        except OSError:
            continue

    for text in shown:
        assert SECRET not in text
    event_logs = list(every_file_under(tmp_path / "events"))
    assert event_logs, "the server wrote no event log"
    written = [*every_file_under(home), server_log, *event_logs]
    objects = store.list_objects_v2(Bucket=s3_bucket)["Contents"]
    assert any(o["Key"].startswith("lake/users/changes/_delta_log/") for o in objects)
    for path in written:
        assert SECRET.encode() not in path.read_bytes(), path
    for listed in objects:
        body = store.get_object(Bucket=s3_bucket, Key=listed["Key"])["Body"].read()
        assert SECRET.encode() not in body, listed["Key"]


def test_credentials_in_the_spark_settings_are_refused_at_load(tmp_path: Path) -> None:
    settings = yaml.safe_load(write_upsert_config(tmp_path).read_text())
    settings["spark"]["conf"]["spark.hadoop.fs.s3a.secret.key"] = SECRET
    with pytest.raises(ConfigError) as refused:
        parse_config(settings, tmp_path)
    assert "spark.hadoop.fs.s3a.secret.key" in str(refused.value)
    assert "storage" in str(refused.value)
    assert SECRET not in str(refused.value)
