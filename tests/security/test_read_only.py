"""The read-only commands write nothing: on a lake they may not write they succeed, and
afterwards every file of the lake is as it was.

``reclock inspect``, ``snapshot``, ``readers`` (listing), ``config check`` and every
source's checks open sources through the read handle (``cdc_core.source.SourceReader``).
The lake is the shared sample lake, seen through a read-only bind mount (the test runs
as root, as CI does; elsewhere a copy whose files have no write permission), and a copy
of it on the S3-protocol test server read with keys whose IAM policy allows reads alone.
The config also names a source no run has created yet, whose tables a write handle would
create.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError
from pyspark.sql import SparkSession

from cdc_core.app.checks import ChecksToJudge, judge_together, source_checks
from cdc_core.checks.invariants import CheckOutcome
from cdc_core.config import load_config
from cdc_core.frontier import iso
from cdc_core.spark_server import free_port, listening
from pipelines.cli import main
from tests.connect_server import REPO, client_env
from tests.lake_rows import SampleLake


@contextmanager
def read_only(lake: Path, mount: Path) -> Iterator[Path]:
    """``lake`` seen read-only at ``mount``: a read-only bind mount as root, else a copy
    without write permission (which root would ignore)."""
    mount.mkdir()
    if os.getuid() == 0:
        subprocess.run(["mount", "--bind", str(lake), str(mount)], check=True)
        try:
            subprocess.run(["mount", "-o", "remount,ro,bind", str(mount)], check=True)
            yield mount
        finally:
            subprocess.run(["umount", str(mount)], check=True)
        return
    shutil.copytree(lake, mount, dirs_exist_ok=True)
    for folder, _, names in os.walk(mount):
        for name in names:
            os.chmod(Path(folder, name), 0o444)
        os.chmod(folder, 0o555)
    yield mount


def fingerprint(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``folder``: its modification time and content hash."""
    return {
        str(path.relative_to(folder)): (path.stat().st_mtime_ns,
                                        hashlib.sha256(path.read_bytes()).hexdigest())
        for path in sorted(folder.rglob("*")) if path.is_file()
    }  # fmt: skip


def readable_config(sample: SampleLake, lake: str, landing: str, **top: object) -> dict:
    """The sample's config on ``lake`` and ``landing``, with a source ``fresh`` no run has
    created (its schema paths made absolute: the copy lives elsewhere)."""
    folder = Path(sample.config.lake).parent  # the sample's: its config, landing, schemas
    settings = yaml.safe_load((folder / "reclock.yaml").read_text())
    for source in settings["sources"]:
        for part in ("key_avro_schema", "value_avro_schema"):
            if "file" in source.get(part, {}):
                source[part]["file"] = str(folder / source[part]["file"])
    users = next(s for s in settings["sources"] if s["name"] == "users")
    settings["sources"].append({**users, "name": "fresh", "topic": "fresh"})
    return {**settings, "lake": lake, "landing": landing,
            "schema_folder": str(sample.config.schema_folder), **top}  # fmt: skip


def read_only_commands(config_file: Path, as_of: str) -> list[list[str]]:
    return [
        ["config", "check", str(config_file)],
        ["inspect", "--config", str(config_file)],
        ["snapshot", "--config", str(config_file), "--source", "users", "--as-of", as_of],
        ["readers", "--config", str(config_file)],
    ]


def test_inspect_snapshot_readers_and_config_check_change_nothing(
    sample_lake: SampleLake, spark: SparkSession, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    config = sample_lake.config
    before = fingerprint(config.lake)
    as_of = iso(sample_lake.first_run_ms - 1)
    with read_only(config.lake, tmp_path / "lake") as lake:
        with pytest.raises(OSError):
            (lake / "probe").write_text("written")
        config_file = tmp_path / "reclock.yaml"
        settings = readable_config(sample_lake, str(lake), str(config.landing))
        config_file.write_text(yaml.safe_dump(settings, sort_keys=False))
        runs = read_only_commands(config_file, as_of)
        for args in runs:
            assert main(args) == 0, args
        shown = capsys.readouterr().out
        # Every check of every source, judged through the read handle: the sample's
        # newest window passes all of them; the source no run created has none to judge.
        readable = load_config(config_file)
        asked = [ChecksToJudge(source, lake, None, source_checks(readable, source))
                 for source in readable.sources]  # fmt: skip
        for source, judged in zip(readable.sources, judge_together(spark, readable, asked),
                                  strict=True):  # fmt: skip
            chosen = source_checks(readable, source)
            outcomes = [outcome for _, outcome in judged.judged]
            if source.name == "fresh":
                assert judged.window is None and outcomes == [None] * len(chosen)
            else:
                assert judged.window is not None and len(outcomes) == len(chosen) >= 7
                assert all(isinstance(o, CheckOutcome) and o.passed for o in outcomes), outcomes
        assert fingerprint(lake) == before
    assert fingerprint(config.lake) == before
    assert "source fresh: remap upper" in shown
    fresh = shown[shown.index("source fresh:"):]
    assert "changes    version   -1  rows         0" in fresh
    assert f"users as of {as_of}:" in shown
    assert "source users:" in shown and "no registered readers or writers" in shown


# Grants of the S3 test server's IAM: a writer, and a reader that may get and list only.
WRITER = ["*"]
# (The test server asks HEAD of a bucket as s3:HeadBucket, where AWS asks s3:ListBucket.)
READER = ["s3:Get*", "s3:List*", "s3:HeadBucket"]
USERS = 2  # requests before the server checks credentials: 3 per user (user, key, policy)


@pytest.fixture
def s3_with_iam() -> Iterator[str]:
    """An S3-protocol server of its own that authorizes every request against IAM
    policies (moto's ``INITIAL_NO_AUTH_ACTION_COUNT``: the first requests, which create
    the users, are not checked)."""
    port = free_port()
    env = {**client_env(), "INITIAL_NO_AUTH_ACTION_COUNT": str(3 * USERS)}
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        while not listening(port):
            assert server.poll() is None, "the S3 server did not start"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(30)


def iam_user(endpoint: str, name: str, actions: list[str]) -> dict[str, str]:
    """A user allowed ``actions`` on every resource; its keys."""
    iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1",
                       aws_access_key_id="setup", aws_secret_access_key="setup")  # fmt: skip
    iam.create_user(UserName=name)
    key = iam.create_access_key(UserName=name)["AccessKey"]
    policy = {"Version": "2012-10-17",
              "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}  # fmt: skip
    iam.put_user_policy(UserName=name, PolicyName=name, PolicyDocument=json.dumps(policy))
    return {"access_key_id": key["AccessKeyId"], "secret_access_key": key["SecretAccessKey"]}


def test_the_read_only_commands_run_on_s3_with_keys_that_may_only_read(
    sample_lake: SampleLake, s3_with_iam: str, tmp_path: Path
) -> None:
    writer = iam_user(s3_with_iam, "writer", WRITER)
    reader = iam_user(s3_with_iam, "reader", READER)
    store = boto3.client("s3", endpoint_url=s3_with_iam, region_name="us-east-1",
                         aws_access_key_id=writer["access_key_id"],
                         aws_secret_access_key=writer["secret_access_key"])  # fmt: skip
    store.create_bucket(Bucket="lake-read-only")
    config = sample_lake.config
    for name, folder in (("lake", config.lake), ("landing", config.landing)):
        for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
            key = f"{name}/{path.relative_to(folder)}"
            store.put_object(Bucket="lake-read-only", Key=key, Body=path.read_bytes())
    as_read = {"Bucket": "lake-read-only", "Key": "lake/users/changes/_delta_log/probe"}
    refused = boto3.client("s3", endpoint_url=s3_with_iam, region_name="us-east-1",
                           aws_access_key_id=reader["access_key_id"],
                           aws_secret_access_key=reader["secret_access_key"])  # fmt: skip
    with pytest.raises(ClientError, match="AccessDenied"):
        refused.put_object(**as_read, Body=b"written")

    def stored() -> dict[str, str]:
        pages = store.get_paginator("list_objects_v2").paginate(Bucket="lake-read-only")
        return {entry["Key"]: entry["ETag"] for page in pages for entry in page["Contents"]}

    before = stored()
    settings = readable_config(
        sample_lake, "s3://lake-read-only/lake", "s3://lake-read-only/landing",
        storage={"endpoint": s3_with_iam, **reader},
    )  # fmt: skip
    config_file = tmp_path / "reclock.yaml"
    config_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    commands = read_only_commands(config_file, iso(sample_lake.first_run_ms - 1))
    script = "import sys; from pipelines.cli import main\n" + "".join(
        f"assert main({args!r}) == 0, {args!r}\n" for args in commands
    )
    env = {k: v for k, v in client_env().items() if not k.startswith("AWS_")}
    run = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "source fresh: remap upper" in run.stdout
    assert "users as of" in run.stdout
    assert stored() == before
