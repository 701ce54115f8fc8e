"""A real S3-protocol server (moto's, on a free loopback port) and a fresh bucket per
test, reached through the standard AWS environment; the same server behind the fault
chain (``tests/storage/faults.py``: toxiproxy, then an HTTP fault proxy) for the tests of
a store that misbehaves.

The server runs in a process of its own: delta-rs holds the interpreter's lock while it
waits for a response, so a server thread in this process (moto's ThreadedMotoServer)
could never answer it."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import boto3
import pytest
from pyspark.sql import SparkSession

from cdc_core.spark import get_spark
from cdc_core.storage import Location, S3Settings, settings
from tests.storage.faults import (
    FaultControl,
    Toxiproxy,
    fault_proxy,
    free_port,
    toxiproxy,
    wait_for_port,
)

KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1"}  # fmt: skip


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for_port(port, server, "the S3 server")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        assert server.wait(timeout=30) in (0, -15)


@pytest.fixture
def s3_bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new, empty bucket; the environment points every AWS client at the server, and
    no config's storage block is in force."""
    for name, value in {**KEYS, "AWS_ENDPOINT_URL": s3_endpoint}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(settings, "_configured", S3Settings())
    bucket = f"b{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    return bucket


@pytest.fixture
def s3_spark(s3_bucket: str) -> SparkSession:
    """The suite's session, with the s3a settings of the test's server."""
    return get_spark("local[2]", {"spark.sql.shuffle.partitions": "4"},
                     places=[Location.parse(f"s3://{s3_bucket}/lake")])  # fmt: skip


@dataclass(frozen=True)
class FaultyStore:
    """The S3 server behind the fault chain: ``endpoint`` (toxiproxy's listening port),
    ``tcp`` (toxiproxy: latency, resets, down), ``http`` (503 bursts, cut listings, the
    request log), and ``direct``, the server itself (to look at what a client left)."""

    endpoint: str
    direct: str
    tcp: Toxiproxy
    http: FaultControl


@pytest.fixture(scope="session")
def store_chain(s3_endpoint: str) -> Iterator[FaultyStore]:
    port = urlsplit(s3_endpoint).port
    assert port is not None
    with fault_proxy(port) as http, toxiproxy(http.port) as tcp:
        yield FaultyStore(f"http://127.0.0.1:{tcp.port}", s3_endpoint, tcp, http)


@pytest.fixture
def faulty_store(
    store_chain: FaultyStore, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[FaultyStore, str]]:
    """A new, empty bucket (made directly on the server), and the environment pointing
    every AWS client at the fault chain; the chain is healthy again afterwards."""
    for name, value in {**KEYS, "AWS_ENDPOINT_URL": store_chain.endpoint}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(settings, "_configured", S3Settings())
    bucket = f"b{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=store_chain.direct).create_bucket(Bucket=bucket)
    store_chain.http.clear()
    try:
        yield store_chain, bucket
    finally:
        store_chain.tcp.up()
        store_chain.http.slow_down(0)
        store_chain.http.truncate(0)
        store_chain.http.schedule()
        store_chain.http.reset_uploads(0)
