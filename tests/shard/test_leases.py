"""Leased reader and writer capabilities on real Spark and real Delta tables: holds on the
since, on compaction and on gc; writers' staging; the registration table in the log.

Leases that must run out are 1 ms long and the test sleeps a few ms before expiring them:
expiry is then decided by the log's own timestamps, which is what is under test."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdc_core.frontier import TimeFrontier
from cdc_core.ingest import Registry
from cdc_core.shard import Shard, ShardUsageError, delta_io
from cdc_core.shard.leases import (
    LEASES_KEY,
    READER,
    WRITER,
    LeaseBook,
    LeaseExpired,
    Leases,
    LeaseUsageError,
    Registration,
    holds,
    read_leases,
    reading,
    writing,
)
from cdc_core.source.resumption import UpstreamCommit, retire
from pipelines.cli import main
from tests.lake_rows import commit_info
from tests.reclock.test_reclock_support import (
    Options,
    Rec,
    open_shards,
    register_new,
    run_windows,
    write_dump,
)

KV = StructType([StructField("k", StringType()), StructField("v", LongType())])
HOUR_MS = 3_600_000


def at(time_: int) -> TimeFrontier:
    return TimeFrontier.at(time_)


def updates(spark: SparkSession, rows: list[tuple]) -> DataFrame:
    return spark.createDataFrame(rows, "k string, v long, time long, diff long")


def collected(df: DataFrame) -> list[tuple]:
    return sorted(tuple(row) for row in df.collect())


def files_on_disk(path: str) -> set[str]:
    return {str(p.relative_to(path)) for p in Path(path, "data").rglob("*") if p.is_file()}


def let_lease_run_out() -> None:
    """Leases in these tests are 1 ms: a later commit's log time is past them."""
    time.sleep(0.02)


@pytest.fixture
def history(spark: SparkSession, tmp_path: Path) -> Shard:
    """a: +1@1, -1@4; b: +2@2; c: +1@5 (upper 6), in two commits (two files)."""
    shard = Shard.open(spark, str(tmp_path / "shard"), KV)
    shard.compare_and_append(updates(spark, [("a", 1, 1, 1), ("b", 2, 2, 2)]), at(0), at(3))
    shard.compare_and_append(updates(spark, [("a", 1, 4, -1), ("c", 3, 5, 1)]), at(3), at(6))
    return shard


# ---- readers hold the since -------------------------------------------------------------


def test_a_reader_holds_the_since_through_compaction_and_gc_until_its_lease_runs_out(
    spark, history
):
    book = LeaseBook.of(history)
    reader = book.register("report", since=2, lease_ms=HOUR_MS)
    old = Shard.open(spark, history.path, KV)  # a read planned on the reader's version
    assert old.version == reader.version
    before = collected(old.snapshot(2))

    assert history.downgrade_since(at(5)) == at(2)
    history.compact()
    history.gc(retention_hours=0)
    assert history.since == at(2)
    assert collected(history.snapshot(2)) == before == [("a", 1, 2, 1), ("b", 2, 2, 2)]
    assert collected(old.snapshot(2)) == before  # its files were not collected

    book.heartbeat("report", lease_ms=1)  # the reader's last word: a short lease
    let_lease_run_out()
    assert book.expire() == ["report"]
    assert history.downgrade_since(at(5)) == at(5)
    history.compact()
    assert collected(history.snapshot(5)) == [("b", 2, 5, 2), ("c", 3, 5, 1)]
    assert history.gc(retention_hours=0)  # the expired reader's version is collected now
    live = {f.path for f in delta_io.live_files(DeltaTable(history.path))}
    assert files_on_disk(history.path) == live


def test_a_lease_read_reads_each_commit_once_per_table_object(history, monkeypatch):
    """Reading the lease table again at a version already read costs no read of its
    commits; a new commit is read once; another table object reads for itself."""
    book = LeaseBook.of(history)
    book.register("r", since=1, lease_ms=HOUR_MS)
    read: list[int] = []
    actions = delta_io.commit_actions

    def counted(path: str, version: int) -> list[dict]:
        read.append(version)
        return actions(path, version)

    monkeypatch.setattr(delta_io, "commit_actions", counted)
    table = DeltaTable(history.path)
    first = read_leases(table)
    assert first.registrations["r"].renewed_version == table.version()
    assert read == [table.version()]  # the newest commit holds the lease table itself
    assert read_leases(table) == first and read == [table.version()]
    book.heartbeat("r")  # the book reads through its own table object
    read.clear()
    table.update_incremental()
    renewed = read_leases(table)
    assert renewed.registrations["r"].renewed_version == table.version() == first.version + 1
    assert read == [table.version()]  # only the new commit
    assert read_leases(DeltaTable(history.path)) == renewed
    assert read == [table.version(), table.version()]


def test_the_since_is_the_meet_of_the_live_readers_and_the_request(history):
    book = LeaseBook.of(history)
    book.register("slow", since=3, lease_ms=HOUR_MS)
    book.register("fast", since=4, lease_ms=HOUR_MS)
    assert history.downgrade_since(at(5)) == at(3)
    moved = book.downgrade_since("slow", 4, version=history.version)
    assert (moved.since, moved.version) == (4, history.version - 1)  # pinned before its commit
    with pytest.raises(LeaseUsageError, match="may pin only versions"):
        book.downgrade_since("slow", 4, version=moved.version - 1)
    assert history.downgrade_since(at(5)) == at(4)
    book.release("fast")
    book.release("slow")
    assert history.downgrade_since(at(5)) == at(5)


def test_a_reader_moves_only_forward_and_cannot_register_before_the_since(history):
    book = LeaseBook.of(history)
    book.register("r", since=3, lease_ms=HOUR_MS)
    with pytest.raises(LeaseUsageError, match="only move its since forward"):
        book.downgrade_since("r", 2)
    with pytest.raises(LeaseUsageError, match="registered already"):
        book.register("r", since=3, lease_ms=HOUR_MS)
    book.release("r")
    history.downgrade_since(at(4))
    with pytest.raises(LeaseUsageError, match="before the shard's since"):
        book.register("late", since=3, lease_ms=HOUR_MS)


def test_heartbeat_renews_from_its_own_commit_and_an_expired_lease_cannot_be_renewed(history):
    book = LeaseBook.of(history)
    first = book.register("r", since=0, lease_ms=HOUR_MS)
    renewed = book.heartbeat("r")
    assert renewed.renewed_version > first.version
    assert renewed.expires_ms == renewed.renewed_ms + HOUR_MS >= first.expires_ms
    book.heartbeat("r", lease_ms=1)
    let_lease_run_out()
    book.expire()
    with pytest.raises(LeaseExpired):
        book.heartbeat("r")
    with pytest.raises(LeaseExpired):
        book.downgrade_since("r", 1)


def test_a_live_lease_is_not_expired_however_often_expire_runs(history):
    book = LeaseBook.of(history)
    book.register("r", since=0, lease_ms=HOUR_MS)
    assert book.expire() == []
    assert book.expire() == []
    assert [r.holder for r in book.read().live()] == ["r"]


def test_bad_ids_and_leases_are_refused(history):
    book = LeaseBook.of(history)
    with pytest.raises(LeaseUsageError, match="holder id"):
        book.register("../x", since=0, lease_ms=HOUR_MS)
    with pytest.raises(LeaseUsageError, match="positive"):
        book.register("r", since=0, lease_ms=0)


def test_registrations_live_in_the_log_and_change_by_compare_and_set(spark, history):
    stale = LeaseBook(history.path)  # opened before the register
    stale.read()
    LeaseBook.of(history).register("r", since=1, lease_ms=HOUR_MS)
    with pytest.raises(LeaseUsageError, match="registered already"):
        stale.register("r", since=1, lease_ms=HOUR_MS)  # re-decided on the newer log
    table = DeltaTable(history.path)
    leases = read_leases(table)
    assert leases.registrations["r"].since == 1
    last = commit_info(history.path, table.version())
    assert last[LEASES_KEY] == {READER: {"r": {"lease_ms": HOUR_MS, "renewed": table.version(),
                                                 "since": 1, "version": table.version()}},
                                WRITER: {}}
    assert not [p for p in os.listdir(history.path) if p not in ("_delta_log", "data")]


def test_reading_releases_its_hold_even_when_the_block_fails(history):
    with pytest.raises(RuntimeError), reading(history, "job", since=1, lease_ms=HOUR_MS):
        assert history.downgrade_since(at(4)) == at(1)
        raise RuntimeError("the job failed")
    assert LeaseBook.of(history).read().registrations == {}
    assert history.downgrade_since(at(4)) == at(4)


def test_reading_longer_than_the_lease_keeps_its_hold(history):
    """Renewed every third of its lease while the block runs: a commit made after the
    first lease would have run out still finds the reader live, and holding history."""
    lease_ms = 1_500
    with reading(history, "slow", since=1, lease_ms=lease_ms):
        time.sleep(2.5 * lease_ms / 1000)
        LeaseBook.of(history).register("other", since=1, lease_ms=HOUR_MS)  # the log moves on
        assert {r.holder for r in LeaseBook.of(history).read().live()} == {"slow", "other"}
        assert history.downgrade_since(at(4)) == at(1)
    assert set(LeaseBook.of(history).read().registrations) == {"other"}


# ---- writers -----------------------------------------------------------------------------


def test_gc_never_collects_a_live_writers_staging_and_collects_it_once_the_lease_ran_out(
    spark, history
):
    collector = Shard.open(spark, history.path, KV)
    LeaseBook.of(collector).register_writer("compactor", lease_ms=HOUR_MS)
    writer = Shard.open(spark, history.path, KV)
    LeaseBook.of(writer).register_writer("ingest", lease_ms=1)
    staged = writer.stage(updates(spark, [("d", 4, 6, 1)]))
    time.sleep(0.02)  # past the lease by this machine's clock, but not by the log's

    assert collector.gc(retention_hours=0) == []  # the log has not moved past the lease
    assert {f.path for f in staged.files} <= files_on_disk(history.path)

    let_lease_run_out()
    LeaseBook.of(collector).expire()
    removed = collector.gc(retention_hours=0)
    assert {f.path for f in staged.files} <= set(removed)
    with pytest.raises(LeaseExpired):  # the fenced writer cannot commit its lost staging
        writer.commit(staged, at(6), at(7))
    assert collector.refresh().upper == at(6)


def test_an_unregistered_writers_staging_is_kept_for_the_retention(spark, history):
    orphan = history.stage(updates(spark, [("d", 4, 6, 1)]))
    assert history.gc(retention_hours=1) == []
    assert set(history.gc(retention_hours=0)) >= {f.path for f in orphan.files}


# ---- the algebra of holds ----------------------------------------------------------------

registrations = st.lists(
    st.tuples(st.integers(0, 100), st.integers(1, 50), st.integers(0, 60)), max_size=6
)


@given(registrations, st.integers(0, 120))
def test_the_hold_is_the_meet_of_exactly_the_live_readers_sinces(entries, log_ms):
    regs = {
        f"r{i}": Registration(f"r{i}", READER, lease, i, renewed, since, i)
        for i, (since, lease, renewed) in enumerate(entries)
    }
    leases = Leases(version=len(entries), log_ms=log_ms, pointer=0, registrations=regs)
    live = [since for since, lease, renewed in entries if renewed + lease > log_ms]
    assert leases.hold() == (TimeFrontier.at(min(live)) if live else TimeFrontier.empty())
    assert {r.holder for r in leases.expired()} | {r.holder for r in leases.live()} == set(regs)


# ---- retire and remap compaction -----------------------------------------------------------


def test_retire_leaves_a_held_remap_exact_and_compacts_once_the_reader_expired(
    spark: SparkSession, tmp_path: Path
) -> None:
    landing, lake, archive = tmp_path / "landing", tmp_path / "lake", tmp_path / "archive"
    write_dump(landing, "t", "f1.json", [Rec(0, o, 10 * o) for o in range(8)])
    registry = Registry(lake / "dumps", "t")
    register_new(spark, registry, landing, arrival_ms=0)
    remap, reclocked = open_shards(spark, lake)
    upstream = UpstreamCommit(lake / "upstream")
    run_windows(spark, Options(), registry, remap, reclocked, (25, 50), 25)
    book = LeaseBook.of(remap)
    book.register("audit", since=25, lease_ms=HOUR_MS)
    bindings_at_25 = collected(remap.snapshot(25))

    def retire_now() -> TimeFrontier:
        return retire(
            remap, [reclocked], registry, upstream,
            mode="archive", landing=landing, archive=archive, now_ms=1_000,
        ).remap_since

    assert retire_now() == at(25)  # the resumption frontier wants 50; the reader holds 25
    assert collected(remap.snapshot(25)) == bindings_at_25
    remap.gc(retention_hours=0)
    assert collected(remap.snapshot(25)) == bindings_at_25

    book.heartbeat("audit", lease_ms=1)
    let_lease_run_out()
    book.expire()
    assert retire_now() == at(50)
    with pytest.raises(ShardUsageError, match="before since"):
        remap.snapshot(25)


# ---- the command line --------------------------------------------------------------------

CONFIG_YAML = """\
lake: lake
landing: landing
window: 1m
start: 2026-01-01T00:00:00Z
readers: {lease: 1h}
sources:
  - {name: users, topic: users, key: {k: string}, value: {v: bigint}, envelope: upsert,
     reclock: arrival}
"""
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def test_the_readers_command_registers_lists_renews_and_releases(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "reclock.yaml"
    config.write_text(CONFIG_YAML)
    changes = str(tmp_path / "lake" / "users" / "changes")
    Shard.open(spark, changes, KV)

    def reclock(*args: str) -> tuple[int, str, str]:
        code = main(["readers", *args, "--config", str(config)])
        out, err = capsys.readouterr()
        return code, out, err

    assert reclock() == (0, "source users:\n  no registered readers or writers\n", "")
    holder = ("--source", "users", "--reader", "audit")
    code, out, _ = reclock("register", *holder, "--since", "2026-01-01T00:00:00Z")
    assert code == 0 and "audit holds users/changes from 2026-01-01T00:00:00Z" in out
    registered = read_leases(DeltaTable(changes)).registrations["audit"]
    assert (registered.since, registered.lease_ms) == (T0, HOUR_MS)  # the config's lease

    code, out, _ = reclock()
    assert code == 0 and "reader audit" in out and "since 2026-01-01T00:00:00Z" in out
    assert "(live); pins 0 version(s), 0 byte(s)" in out

    assert reclock("heartbeat", *holder, "--lease", "2h")[0] == 0
    renewed = read_leases(DeltaTable(changes)).registrations["audit"]
    assert renewed.lease_ms == 2 * HOUR_MS and renewed.renewed_version > registered.version

    code, _, err = reclock("register", *holder, "--since", "2026-01-01T00:00:00Z")
    assert code == 2 and "registered already" in err
    with pytest.raises(SystemExit):
        reclock("heartbeat", *holder, "--lease", "0m")
    assert reclock("release", *holder)[0] == 0
    assert reclock()[1] == "source users:\n  no registered readers or writers\n"


def test_holds_names_every_live_registration_and_nothing_once_they_are_released(spark, tmp_path):
    shard = Shard.open(spark, str(tmp_path / "shard"), KV)
    assert holds(shard.path) == []

    def registered() -> set[tuple[str, str]]:
        return {(h.registration.kind, h.registration.holder) for h in holds(shard.path)}

    with writing([shard], "run-1", HOUR_MS):
        assert shard.compare_and_append(updates(spark, [("a", 1, 0, 1)]), at(0), at(1)) is None
        with reading(shard, "reader-1", 0, HOUR_MS):
            assert registered() == {(WRITER, "run-1"), (READER, "reader-1")}
            # Another writer's commit on top carries no lease pointer: the log says the same.
            table = DeltaTable(shard.path)
            table.create_write_transaction([], "append", table.schema())
            assert registered() == {(WRITER, "run-1"), (READER, "reader-1")}
        assert registered() == {(WRITER, "run-1")}
    assert holds(shard.path) == []


def test_a_writers_last_commit_releases_it_with_the_data_and_keeps_the_other_holds(
    spark, history
):
    """A block told the upper it takes the shard to: the commit that gets there carries
    the lease table without the writer, so no release commit follows; a reader registered
    meanwhile keeps its hold. A commit short of that upper releases nothing."""
    def append(row: tuple, lower: int, upper: int) -> None:
        assert history.compare_and_append(updates(spark, [row]), at(lower), at(upper)) is None

    with reading(history, "reader-1", 3, HOUR_MS):
        with writing([history], "run-1", HOUR_MS, through=at(9)):
            registered = history.version
            append(("d", 4, 6, 1), 6, 8)
            assert {h.registration.holder for h in holds(history.path)} == {"run-1", "reader-1"}
            append(("e", 5, 8, 1), 8, 9)
            released = history.version
            assert holds(history.path)[0].registration.holder == "reader-1"
            assert [h.registration.kind for h in holds(history.path)] == [READER]
            # What it stages after its release is anonymous: gc judges it by its age.
            assert history.writer is None
        assert history.version == released == registered + 2  # no release commit
        info = commit_info(history.path, released)
        assert list(info[LEASES_KEY][READER]) == ["reader-1"] and info[LEASES_KEY][WRITER] == {}
    assert holds(history.path) == []
    assert collected(history.snapshot(8)) == [("b", 2, 8, 2), ("c", 3, 8, 1), ("d", 4, 8, 1),
                                              ("e", 5, 8, 1)]  # fmt: skip


def test_a_block_that_fails_short_of_its_upper_releases_when_it_ends(spark, history):
    with pytest.raises(RuntimeError), writing([history], "run-1", HOUR_MS, through=at(9)):
        assert history.compare_and_append(updates(spark, [("d", 4, 6, 1)]), at(6), at(8)) is None
        raise RuntimeError("the run failed before its last window")
    after = history.version
    assert holds(history.path) == []
    assert commit_info(history.path, after)[LEASES_KEY][WRITER] == {}
    assert "releasing" not in commit_info(history.path, after - 1)["userMetadata"]


def test_a_shard_already_at_the_blocks_upper_is_not_registered(spark, history):
    before = history.version
    with writing([history], "run-1", HOUR_MS, through=at(6)):
        assert holds(history.path) == []
    assert history.version == before
