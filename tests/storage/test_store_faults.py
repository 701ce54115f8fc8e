"""A store that misbehaves (tests/storage/faults.py): every client reached through
toxiproxy and the HTTP fault proxy, each fault provoked for real, none mocked.

Which fault comes from where: the store down, latency and a reset in mid-upload from
toxiproxy; ``503 SlowDown`` bursts and a listing cut short without saying so from the
HTTP fault proxy (toxiproxy works on TCP and cannot answer HTTP)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable, write_deltalake

from cdc_core.config import Config, load_config
from cdc_core.shard import delta_io
from cdc_core.shard.log import existing_table, log_mark, read_to_newest
from cdc_core.storage import RetryPolicy, S3Settings, StorageFailure, files, settings
from pipelines.run import materialize
from tests.storage.conftest import FaultyStore
from tests.storage.test_runs_s3 import assert_tables_equal, reference, s3_config, start

__all__ = ["reference"]  # the module fixture: every dump materialized in local folders

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
    # Every listing cut to its first half, saying nothing: each listing's end is confirmed
    # by one that starts after its last key (3 of 6 shown, then 2 of 3, 1 of 1, none).
    store.http.truncate(100)
    store.http.clear()
    assert [e.path for e in files.list_files(f"s3://{bucket}/landing")] == names
    assert store.http.counts() == {"ListObjectsV2": 4}
    store.http.clear()  # from the third: 2 of 4 shown, 1 of 2, 1 of 1, none
    assert [e.path for e in files.list_after(f"s3://{bucket}/landing", names[1])] == names[2:]
    assert store.http.counts() == {"ListObjectsV2": 4}
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
    assert "Could not connect to the endpoint" in caught.value.cause  # one GET, by boto3


def committed_table(
    faulty_store: tuple[FaultyStore, str], monkeypatch: pytest.MonkeyPatch, name: str,
    commits: int, configuration: dict[str, str | None] | None = None,
) -> tuple[FaultyStore, str, dict[str, str]]:
    """The store, and the Delta table ``name`` on it after ``commits`` appends (commit n
    adds the row ``id`` = n), with the quick policy in force; and the tables' options."""
    store, bucket = faulty_store
    use_policy(monkeypatch, QUICK)
    table = f"s3://{bucket}/lake/{name}"
    options = settings.current().delta_options()
    for n in range(commits):
        write_deltalake(table, pa.table({"id": [n]}), mode="append", storage_options=options,
                        configuration=configuration)  # fmt: skip
    return store, table, options


def test_a_cut_listing_of_a_delta_log_leaves_no_table_behind_its_newest_commit(
    faulty_store: tuple[FaultyStore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, table, options = committed_table(faulty_store, monkeypatch, "t", 6)  # commits 0-5
    # Every listing cut to its first half: delta-rs alone takes the log to end early.
    store.http.truncate(100)
    assert DeltaTable(table, storage_options=options).version() < 5
    # Opened by reclock, the commit after the one listed last is looked up, found, and
    # the table refused with the storage error naming it.
    with pytest.raises(StorageFailure) as caught:
        existing_table(table)
    assert caught.value.location.startswith(f"{table}/_delta_log/0000")
    assert "ended at commit" in caught.value.cause
    store.http.truncate(0)
    opened = existing_table(table)
    assert opened is not None and opened.version() == 5
    assert sorted(opened.to_pyarrow_table()["id"].to_pylist()) == list(range(6))
    for n in range(6, 9):  # commits 6 to 8, by another writer
        write_deltalake(table, pa.table({"id": [n]}), mode="append", storage_options=options)
    store.http.truncate(100)  # a read on from commit 5 lists 6 to 8, cut to 6 and 7
    with pytest.raises(StorageFailure):
        read_to_newest(opened, table)
    store.http.truncate(0)
    assert read_to_newest(opened, table).version() == 8


def test_a_look_at_a_long_log_lists_it_from_its_newest_checkpoint(
    faulty_store: tuple[FaultyStore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, table, _ = committed_table(faulty_store, monkeypatch, "long", 12,
                                      {"delta.checkpointInterval": "10"})  # fmt: skip
    checkpoint = json.loads(files.read_bytes(f"{table}/_delta_log/_last_checkpoint"))["version"]
    assert checkpoint >= 9
    store.http.clear()
    mark = log_mark(table)
    assert mark is not None and mark.version == 11
    # Every listing starts after the commit before the checkpoint: the commits before it,
    # which a log that never expires holds by the hundred thousand, cost no request.
    started = [parse_qs(urlsplit(path).query).get("start-after", [""])[0]
               for path in store.http.paths("ListObjectsV2")]  # fmt: skip
    assert min(started) == f"lake/long/_delta_log/{checkpoint - 1:020d}.json"
    assert any(path.endswith("_delta_log/_last_checkpoint")
               for path in store.http.paths("GetObject"))  # fmt: skip


def test_a_file_of_a_metadata_table_is_read_once_per_process(
    faulty_store: tuple[FaultyStore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, table, options = committed_table(faulty_store, monkeypatch, "remap", 2)
    chosen = delta_io.live_files(DeltaTable(table, storage_options=options))
    schema = pa.schema([("id", pa.int64())])
    store.http.clear()
    assert sorted(delta_io.read_arrow(table, chosen, schema)["id"].to_pylist()) == [0, 1]
    first = [p for p in store.http.paths("GetObject") if p.endswith(".parquet")]
    assert len({p.split("?")[0] for p in first}) == 2
    store.http.clear()  # a Delta data file never changes: read again, it costs no request
    assert sorted(delta_io.read_arrow(table, chosen, schema)["id"].to_pylist()) == [0, 1]
    assert store.http.counts() == {}


# The runs below: the reliability tests' config and dumps (one source, four windows) on a
# bucket behind the chain, against the same dumps materialized in local folders.
DOWN_AFTER_REQUESTS = 1200  # of about 2,700 a clean run of this config makes
SLOW_DOWN_EVERY = 40
LATENCY_FROM, LATENCY_UNTIL = 20, 80
QUICK_RETRIES = {"attempts": 2, "base_backoff": "100ms", "max_backoff": "1s",
                 "request_timeout": "5s", "deadline": "31s"}  # fmt: skip


def faulty_config(bucket: str, workdir: Path, retries: dict[str, str] | None) -> Path:
    """The config of ``test_runs_s3`` on ``bucket``, with ``retries`` as its policy."""
    path = s3_config(f"s3://{bucket}", workdir)
    if retries is not None:
        data = yaml.safe_load(path.read_text())
        path.write_text(yaml.safe_dump({**data, "storage": {"retries": retries}}))
    return path


def test_a_store_down_past_the_deadline_fails_the_run_named_and_a_rerun_is_exact(
    reference: Config, faulty_store: tuple[FaultyStore, str], tmp_path: Path
) -> None:
    store, bucket = faulty_store
    config_path = faulty_config(bucket, tmp_path, QUICK_RETRIES)
    store.http.clear()
    store.http.schedule(actions={DOWN_AFTER_REQUESTS: "down"}, toxiproxy_api=store.tcp.api_port)
    began = time.monotonic()
    run = start("-m", "pipelines.cli", "materialize", "--config", str(config_path))
    output = run.communicate(timeout=900)[0].decode(errors="replace")
    print(f"run: {time.monotonic() - began:.1f} s; requests: {store.http.counts()}")
    assert store.http.counts()["scheduled down"] == 1, "the run made too few requests"
    assert run.returncode != 0, output[-3000:]
    named = re.findall(rf"failed at the object store \(s3://{bucket}/[^)]*\)", output)
    assert named, output[-3000:]

    # The store back: nothing the failed run left is visible as a partial write, and a
    # re-run ends where a run that never saw a fault ends, row for row.
    store.tcp.up()
    store.http.schedule()
    config = load_config(config_path)
    assert materialize(config)
    assert_tables_equal(config, reference)


def test_slow_downs_latency_and_a_reset_upload_leave_the_run_exact(
    reference: Config, faulty_store: tuple[FaultyStore, str], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store, bucket = faulty_store
    config = load_config(faulty_config(bucket, tmp_path, None))  # the default policy

    store.http.reset_uploads(1)  # the first upload over 2 KiB cut halfway by a TCP reset
    store.http.clear()
    store.http.schedule(burst_every=SLOW_DOWN_EVERY,
                        actions={LATENCY_FROM: "latency", LATENCY_UNTIL: "no latency"},
                        toxiproxy_api=store.tcp.api_port)  # fmt: skip
    completed = materialize(config)
    counts = store.http.counts()
    assert counts["503 SlowDown"] >= 2 and counts["reset upload"] == 1, counts
    if not completed:  # allowed only as a named failure, and a re-run then ends exact
        assert "failed at the object store" in capsys.readouterr().err
        store.http.schedule()
        assert materialize(config)
    assert_tables_equal(config, reference)


def test_a_landing_listing_cut_short_binds_no_window_early(
    reference: Config, faulty_store: tuple[FaultyStore, str], tmp_path: Path
) -> None:
    store, bucket = faulty_store
    config = load_config(faulty_config(bucket, tmp_path, None))
    # Every listing of the landing zone shows the first of its two dumps only.
    store.http.truncate(10_000, under="landing/")
    materialize(config)  # succeeds or not: what it binds must hold for the later dump
    store.http.truncate(0)
    assert materialize(config)
    assert_tables_equal(config, reference)
