"""One retry policy from the config: validated at load, and honoured by delta-rs, pyarrow and
boto3 against a store that resets every connection (a real listening socket, no mock);
what they fail with then: a StorageFailure naming the operation, the bucket and the key."""

from __future__ import annotations

import dataclasses
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema

from cdc_core.config import ConfigError, parse_config
from cdc_core.shard.log import ShardStorageError, open_or_create
from cdc_core.storage import RetryPolicy, S3Settings, StorageFailure, files, settings

BASE = {"lake": "lake", "landing": "landing", "window": "1m",
        "start": "2026-01-01T00:00:00Z",
        "sources": [{"name": "users", "topic": "users", "key": {"id": "bigint"},
                     "value": {"name": "string"}, "envelope": "upsert",
                     "reclock": "arrival"}]}  # fmt: skip


def policy_of(tmp_path: Path, retries: dict[str, object] | None) -> RetryPolicy:
    storage = {} if retries is None else {"storage": {"retries": retries}}
    return parse_config({**BASE, **storage}, tmp_path).storage.s3.retries


def refusal(tmp_path: Path, retries: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as caught:
        policy_of(tmp_path, retries)
    (problem,) = caught.value.problems
    return str(problem)


def test_the_documented_defaults_and_what_each_client_is_told(tmp_path: Path) -> None:
    policy = policy_of(tmp_path, None)
    assert policy == RetryPolicy(attempts=5, base_backoff_ms=100, max_backoff_ms=5000,
                                 request_timeout_ms=20_000, deadline_ms=180_000)  # fmt: skip
    # The bound, by hand: 5 tries of 20 s, and before the 4 retries the larger of
    # delta-rs's min(5 s, 100 ms * 2**i) and the AWS SDKs' 1 s * 2**i: 1 + 2 + 4 + 8 s.
    assert policy.worst_case_ms == 5 * 20_000 + 15_000
    settings = S3Settings(endpoint="http://127.0.0.1:9", retries=policy)
    delta = settings.delta_options()
    assert (delta["max_retries"], delta["retry_timeout"], delta["timeout"]) == (
        "4", "180000ms", "20000ms")  # fmt: skip
    assert delta["backoff_config.init_backoff"] == "100ms"
    assert delta["backoff_config.max_backoff"] == "5000ms"
    conf = settings.spark_conf()
    assert conf["spark.hadoop.fs.s3a.attempts.maximum"] == "4"
    assert conf["spark.hadoop.fs.s3a.retry.limit"] == "0"
    assert conf["spark.hadoop.fs.s3a.retry.throttle.limit"] == "0"
    assert conf["spark.hadoop.fs.s3a.connection.request.timeout"] == "20000ms"


def test_settings_that_cannot_hold_are_refused_at_load(tmp_path: Path) -> None:
    assert refusal(tmp_path, {"attempts": 0}).startswith(
        "storage.retries: attempts must be at least 1 (got 0)")  # fmt: skip
    assert refusal(tmp_path, {"base_backoff": "10s"}).startswith(
        "storage.retries: base_backoff (10000 ms) exceeds max_backoff (5000 ms)")  # fmt: skip
    # 5 tries of 20 s and 15 s of backoff (see above) cannot fit in one minute.
    assert refusal(tmp_path, {"deadline": "1m"}).startswith(
        "storage.retries: 5 attempts of up to 20000 ms each, with backoff between them, can "
        "take 115000 ms, longer than the deadline (60000 ms)")  # fmt: skip
    assert refusal(tmp_path, {"timeout": "1s"}).startswith("storage.retries.timeout: ")
    # One try and no backoff: 15 s however short the timeout, since s3a waits at least
    # that long for a try (hadoop-aws's minimum).
    assert refusal(tmp_path, {"attempts": 1, "request_timeout": "1s", "deadline": "14s"}
                   ).startswith("storage.retries: 1 attempts of up to 1000 ms each, with "
                                "backoff between them, can take 15000 ms")  # fmt: skip
    assert policy_of(tmp_path, {"attempts": 1, "request_timeout": "1s", "deadline": "15s"}) == (
        RetryPolicy(attempts=1, request_timeout_ms=1000, deadline_ms=15_000))  # fmt: skip


@pytest.fixture
def resetting_store() -> Iterator[tuple[str, list[int]]]:
    """A loopback endpoint that accepts every connection and resets it at once (RST), and
    the count of connections it took."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    taken = [0]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            taken[0] += 1
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}", taken
    stop.set()
    thread.join()
    server.close()


POLICY = RetryPolicy(attempts=2, base_backoff_ms=10, max_backoff_ms=50,
                     request_timeout_ms=1000, deadline_ms=60_000)  # fmt: skip
KEYS = {"access_key_id": "testing", "secret_access_key": "testing", "region": "us-east-1"}


def test_each_client_tries_a_reset_request_as_often_as_the_policy_says(
    resetting_store: tuple[str, list[int]],
) -> None:
    endpoint, taken = resetting_store
    settings = S3Settings(endpoint=endpoint, retries=POLICY, **KEYS)
    tries = {}
    with pytest.raises(OSError):
        settings.filesystem().get_file_info("bucket/key")
    tries["pyarrow"], taken[0] = taken[0], 0
    with pytest.raises(Exception, match="Could not connect|Connection"):
        settings.client().head_object(Bucket="bucket", Key="key")
    tries["boto3"], taken[0] = taken[0], 0
    with pytest.raises(OSError):
        DeltaTable("s3://bucket/table", storage_options=settings.delta_options())
    tries["delta-rs"] = taken[0]
    assert tries == {"pyarrow": 2, "boto3": 2, "delta-rs": 2}



def test_a_failing_store_is_named_by_operation_bucket_and_key_never_by_credential(
    resetting_store: tuple[str, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, _ = resetting_store
    secret = "s3cr3t-never-shown"
    once = dataclasses.replace(POLICY, attempts=1)
    monkeypatch.setattr(settings, "_configured", S3Settings(
        endpoint=endpoint, retries=once, access_key_id="AKIDNEVERSHOWN",
        secret_access_key=secret, region="us-east-1"))  # fmt: skip
    failures = []
    # pyarrow (a read, a write), boto3 (a listing after a key), delta-rs (a table opened).
    for attempt in (
        lambda: files.read_bytes("s3://bucket/lake/users/dump.json"),
        lambda: files.write_bytes("s3://bucket/lake/users/new.json", b"{}"),
        lambda: files.list_after("s3://bucket/landing", "s3://bucket/landing/a"),
        lambda: open_or_create("s3://bucket/lake/users/changes",
                               DeltaSchema.from_arrow(pa.schema([("id", pa.int64())])),
                               detail="test"),
    ):
        with pytest.raises(StorageFailure) as caught:
            attempt()
        failures.append(caught.value)
    assert [(f.operation, f.location) for f in failures] == [
        ("read", "s3://bucket/lake/users/dump.json"),
        ("write", "s3://bucket/lake/users/new.json"),
        ("listing", "s3://bucket/landing"),
        ("opening s3://bucket/lake/users/changes",
         "s3://bucket/lake/users/changes/_delta_log"),
    ]
    assert str(failures[0]).startswith(
        "read failed at the object store (s3://bucket/lake/users/dump.json): ")
    # A shard cleans up after it as after any failed storage step.
    assert isinstance(failures[3], ShardStorageError)
    assert not any(secret in str(f) or "AKIDNEVERSHOWN" in str(f) for f in failures)
