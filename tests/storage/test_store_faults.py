"""A store that misbehaves (tests/storage/faults.py): every client reached through
toxiproxy and the HTTP fault proxy, each fault provoked for real, none mocked.

Which fault comes from where: the store down, latency and a reset in mid-upload from
toxiproxy; ``503 SlowDown`` bursts and a listing cut short without saying so from the
HTTP fault proxy (toxiproxy works on TCP and cannot answer HTTP)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from cdc_core.storage import RetryPolicy, S3Settings, StorageFailure, files, settings
from tests.storage.conftest import FaultyStore

QUICK = RetryPolicy(attempts=3, base_backoff_ms=10, max_backoff_ms=100,
                    request_timeout_ms=2000, deadline_ms=30_000)  # fmt: skip


def use_policy(monkeypatch: pytest.MonkeyPatch, policy: RetryPolicy) -> None:
    monkeypatch.setattr(settings, "_configured", S3Settings(retries=policy))


def test_each_client_rides_out_a_slow_down_burst_shorter_than_its_tries(
    faulty_store: tuple[FaultyStore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, bucket = faulty_store
    use_policy(monkeypatch, QUICK)
    table = f"s3://{bucket}/lake/t"
    # Two 503 SlowDown answers before each client's request: 3 tries get through.
    store.http.slow_down(2)
    files.write_bytes(f"s3://{bucket}/lake/a.json", b"{}")
    store.http.slow_down(2)
    assert files.read_bytes(f"s3://{bucket}/lake/a.json") == b"{}"
    store.http.slow_down(2)
    assert [e.path for e in files.list_after(f"s3://{bucket}/lake", None)] == [
        f"s3://{bucket}/lake/a.json"]  # fmt: skip
    store.http.slow_down(2)
    options = settings.current().delta_options()
    write_deltalake(table, pa.table({"id": [1, 2]}), storage_options=options)
    rows = DeltaTable(table, storage_options=options).to_pyarrow_table()
    assert rows["id"].to_pylist() == [1, 2]
    # Every burst was answered, and each client tried again after it.
    assert store.http.counts()["503 SlowDown"] == 4 * 2


def test_a_cut_listing_hides_no_dump_and_a_store_down_fails_named(
    faulty_store: tuple[FaultyStore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, bucket = faulty_store
    use_policy(monkeypatch, QUICK)
    names = [f"s3://{bucket}/landing/users/{n:02d}.json" for n in range(6)]
    for name in names:
        files.write_bytes(name, b"{}")
    store.http.truncate(1)
    assert len(files.list_files(f"s3://{bucket}/landing")) == 3  # the fault is real
    # Whether a needed dump is still there (ingest.canonical.require_present) is asked of
    # each object, never of a listing: with every listing cut, each dump is still found.
    store.http.truncate(100)
    store.http.clear()
    assert all(files.exists(name) for name in names)
    assert set(store.http.counts()) == {"HeadObject"}
    store.tcp.down()
    with pytest.raises(StorageFailure) as caught:
        files.read_bytes(names[0])
    assert (caught.value.operation, caught.value.location) == ("read", names[0])
    assert "NETWORK_CONNECTION" in caught.value.cause
