"""The dump registry: idempotent registration with arrival times, canonical copies."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from cdc_core.ingest import DumpFileChanged, MissingDumpFile, Registry, list_dump_files
from cdc_core.ingest import registry as registry_module
from cdc_core.ingest.canonical import SourceFiles, read_canonical
from cdc_core.ingest.registry import (
    FILES_SCHEMA,
    PATH_ROW_GROUP,
    PartitionStats,
    RegisteredPaths,
    fold_registry,
)
from cdc_core.shard import delta_io
from tests.reclock.test_reclock_support import Rec, register_new, write_dump


def test_registration_is_durable_idempotent_and_keeps_stats(
    spark: SparkSession, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    a = write_dump(landing, "t", "a.json", [Rec(0, 0, 10), Rec(0, 1, 30), Rec(1, 5, 20)])
    registry = Registry(tmp_path / "registry", "t")
    assert register_new(spark, registry, landing, arrival_ms=100) == 1
    b = write_dump(landing, "t", "b.json", [Rec(0, 2, 40)], extra="not json\n")
    assert register_new(spark, registry, landing, arrival_ms=200) == 1
    assert register_new(spark, registry, landing, arrival_ms=300) == 0

    files = Registry(tmp_path / "registry", "t").files()  # a fresh handle: it is durable
    assert [(f.path, f.arrival_ms) for f in files] == [(str(a), 100), (str(b), 200)]
    assert files[0].partitions == (
        PartitionStats(0, 0, 1, 10, 30, 2),
        PartitionStats(1, 5, 5, 20, 20, 1),
    )
    assert files[1].partitions == (PartitionStats(0, 2, 2, 40, 40, 1),)
    assert registry.end_offsets().offsets == {0: 3, 1: 6}


def test_a_run_reads_the_files_it_reaches_and_the_live_ones_with_errors(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``files(reaching=...)`` leaves out files wholly below the offsets a run reads
    from (a year of them would cost every run), unless live with errors to report; it
    keeps a retired one holding offsets at or above them (the run must fail loudly on
    it). The same handle sees a registration and a retire made after its first read."""
    landing = tmp_path / "landing"
    old = write_dump(landing, "t", "old.json", [Rec(0, 0, 1), Rec(1, 0, 1)])
    bad = write_dump(landing, "t", "old-bad.json", [Rec(1, 0, 1)], extra="not json\n")
    needed = write_dump(landing, "t", "needed.json", [Rec(0, 1, 2), Rec(0, 2, 2)])
    registry = Registry(tmp_path / "registry", "t")
    register_new(spark, registry, landing, arrival_ms=1)
    reaching = {0: 2, 1: 1}
    assert [f.path for f in registry.files(reaching=reaching)] == [str(needed), str(bad)]
    registry.mark_retired({str(old): None, str(needed): None}, retired_ms=2)
    live = write_dump(landing, "t", "live.json", [Rec(0, 3, 3)])
    register_new(spark, registry, landing, arrival_ms=3)
    assert [(f.path, f.retired) for f in registry.files(reaching=reaching)] == [
        (str(needed), True), (str(bad), False), (str(live), False)
    ]
    assert [f.path for f in registry.live_files()] == [str(bad), str(live)]
    assert {f.path for f in registry.files()} == {str(old), str(bad), str(needed), str(live)}
    other = str(landing / "t" / "other.json")
    paths = [str(old), other, str(bad), str(needed), str(live)]
    assert registry.unregistered(paths) == [other]
    assert registry.newest_ts() == 3


def test_a_registry_created_again_in_the_same_place_is_read_anew(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The process keeps the last read of each registry, for every handle on it; a
    registry replaced by another (written elsewhere, as by another process, and moved
    into place) at the same Delta version is another table, not the one read before."""
    landing = tmp_path / "landing"
    first = write_dump(landing, "t", "first.json", [Rec(0, 0, 1)])
    register_new(spark, Registry(tmp_path / "registry", "t"), landing, arrival_ms=1)
    assert [f.path for f in Registry(tmp_path / "registry", "t").files()] == [str(first)]
    first.unlink()
    second = write_dump(landing, "t", "second.json", [Rec(0, 7, 2)])
    register_new(spark, Registry(tmp_path / "elsewhere", "t"), landing, arrival_ms=2)
    shutil.rmtree(tmp_path / "registry")
    shutil.move(tmp_path / "elsewhere", tmp_path / "registry")
    again = Registry(tmp_path / "registry", "t")
    assert [f.path for f in again.files()] == [str(second)]
    assert again.end_offsets().offsets == {0: 8}


def test_a_look_for_unregistered_paths_reads_only_the_files_registered_since(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The sensor asks every tick which landed paths are not registered, through a new
    handle each time; a year of registrations must not be read again per tick. Proved
    by damaging every data file read by the first look: the second look must not touch
    them, yet still see them registered and see the registration made since."""
    landing = tmp_path / "landing"
    a = write_dump(landing, "t", "a.json", [Rec(0, 0, 1)])
    root = tmp_path / "registry"
    register_new(spark, Registry(root, "t"), landing, arrival_ms=1)
    b = write_dump(landing, "t", "b.json", [Rec(0, 1, 2)])
    assert Registry(root, "t").unregistered([str(a), str(b)]) == [str(b)]
    read_before = list((root / "files").rglob("*.parquet"))
    register_new(spark, Registry(root, "t"), landing, arrival_ms=2)
    for data_file in read_before:
        data_file.write_bytes(b"not parquet")
    c = str(landing / "t" / "c.json")
    assert Registry(root, "t").unregistered([str(a), c, str(b)]) == [c]


def test_a_look_at_a_registry_whose_log_has_not_moved_opens_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The sensor asks every registry about the same landed paths tick after tick: while
    the registry's log ends where it did, the answer stands without opening the table.
    Proved by damaging the log's first commit, which any open reads."""
    landing = tmp_path / "landing"
    a = write_dump(landing, "t", "a.json", [Rec(0, 0, 1)])
    root = tmp_path / "registry"
    register_new(spark, Registry(root, "t"), landing, arrival_ms=1)
    b = str(landing / "t" / "b.json")
    assert Registry(root, "t").unregistered([str(a), b]) == [b]
    (root / "files" / "_delta_log" / f"{0:020d}.json").write_bytes(b"not a commit")
    assert Registry(root, "t").unregistered([str(a), b]) == [b]
    assert Registry(root, "t").unregistered([b, str(a)]) == [b]


def test_a_registry_created_anew_is_looked_at_anew(spark: SparkSession, tmp_path: Path) -> None:
    """A lake deleted and rebuilt under a running code server: paths of the old registry
    are not taken for registered (a new table id, other files)."""
    landing = tmp_path / "landing"
    a = write_dump(landing, "t", "a.json", [Rec(0, 0, 1)])
    b = write_dump(landing, "t", "b.json", [Rec(0, 1, 2)])
    root = tmp_path / "registry"
    assert Registry(root, "t").unregistered([str(a), str(b)]) == [str(a), str(b)]
    register_new(spark, Registry(root, "t"), landing, arrival_ms=1)
    register_new(spark, Registry(root, "t"), landing, arrival_ms=2)
    assert Registry(root, "t").unregistered([str(a), str(b)]) == []
    shutil.rmtree(root)
    a.unlink()
    register_new(spark, Registry(root, "t"), landing, arrival_ms=3)
    assert Registry(root, "t").unregistered([str(a), str(b)]) == [str(a)]


def test_file_without_valid_records_is_registered(spark: SparkSession, tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    write_dump(landing, "t", "junk.json", [], extra="{broken\n")
    registry = Registry(tmp_path / "registry", "t")
    register_new(spark, registry, landing, arrival_ms=5)
    [junk] = registry.files()
    assert junk.partitions == ()
    assert register_new(spark, registry, landing, arrival_ms=6) == 0


def test_a_changed_dump_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    path = write_dump(landing, "t", "a.json", [Rec(0, 0, 1)])
    registry = Registry(tmp_path / "registry", "t")
    register_new(spark, registry, landing, arrival_ms=1)
    write_dump(landing, "t", "a.json", [Rec(0, 0, 1), Rec(0, 1, 2)])
    with pytest.raises(DumpFileChanged, match=str(path)):
        registry.register(spark, list_dump_files(landing, "t"), 2)


def test_canonical_copy_is_earliest_arrival_and_conflicts_are_reported(
    spark: SparkSession, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    registry = Registry(tmp_path / "registry", "t")
    # The early file's name sorts last: arrival, not path, decides which copy is kept.
    early = write_dump(landing, "t", "z_early.json", [Rec(0, 0, 1), Rec(0, 1, 2), Rec(0, 2, 3)])
    register_new(spark, registry, landing, arrival_ms=10)
    late = write_dump(landing, "t", "a_late.json", [Rec(0, 0, 1), Rec(0, 1, 2, payload="other")])
    register_new(spark, registry, landing, arrival_ms=50)

    canonical = read_canonical(spark, [SourceFiles(registry.topic, registry.files(), {})])
    # Offset 1's copies differ: the kept payload is the early file's.
    kept = {(r["offset"], r["payload"]) for r in canonical.records.collect()}
    assert kept == {(0, '{"v": "v0-0"}'), (1, '{"v": "v0-1"}'), (2, '{"v": "v0-2"}')}
    conflicts = canonical.conflicts.collect()
    assert [(c["partition"], c["offset"], c["file"]) for c in conflicts] == [(0, 1, str(late))]
    assert str(early) in conflicts[0]["reason"]


def test_a_missing_needed_file_is_named_with_its_offsets(
    spark: SparkSession, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    path = write_dump(landing, "t", "a.json", [Rec(3, 7, 1), Rec(3, 8, 1)])
    registry = Registry(tmp_path / "registry", "t")
    register_new(spark, registry, landing, arrival_ms=1)
    path.unlink()
    with pytest.raises(MissingDumpFile, match=r"a\.json \(partition 3 offsets 7\.\.8\)"):
        read_canonical(spark, [SourceFiles(registry.topic, registry.files(), {})])


def _registrations(paths: list[str]) -> pa.Table:
    """Registry rows for ``paths`` (one record each), as registration writes them."""
    n = len(paths)
    return pa.table({
        "path": paths, "size": [10] * n, "mtime_ms": [1] * n, "arrival_ms": [1] * n,
        "partition": [0] * n, "min_offset": list(range(n)), "max_offset": list(range(n)),
        "min_ts": [1] * n, "max_ts": [1] * n, "records": [1] * n, "damaged_lines": [0] * n,
        "problem": [None] * n, "bad_lines": [0] * n,
    }, FILES_SCHEMA)  # fmt: skip


def test_a_year_of_paths_sorted_by_maintenance_costs_a_look_a_row_group(tmp_path: Path) -> None:
    """Maintenance rewrites the files table sorted by path in row groups; a look at the
    newest landed paths (and one old one) then reads only the row groups their names fall
    in, not every registered path, and still tells registered from new exactly."""
    names = [f"/landing/t/{i:07d}.json" for i in range(4 * PATH_ROW_GROUP + 100)]
    shuffled = names[1::2] + names[::2]  # registered out of name order, in two appends
    registry = Registry(tmp_path / "registry", "t")
    for part in (shuffled[: len(names) // 2], shuffled[len(names) // 2 :]):
        write_deltalake(registry.files_path, _registrations(part), mode="append")
    before = DeltaTable(registry.files_path).to_pyarrow_table().sort_by("path")

    fold_registry(registry)  # nothing retired: one file of live rows
    table = DeltaTable(registry.files_path)
    assert table.to_pyarrow_table().sort_by("path").equals(before)  # the same rows
    [data_file] = table.file_uris()
    layout = pq.ParquetFile(data_file)
    assert layout.metadata.num_row_groups == 5
    assert layout.read(columns=["path"])["path"].to_pylist() == names

    unknown = ["/landing/t/9999999.json", "/landing/t/-.json"]  # after, before them all
    asked = [names[2 * PATH_ROW_GROUP], *names[-10:], *unknown]
    look = RegisteredPaths(registry.files_path)
    assert look.missing(asked) == unknown
    assert look.rows_read == PATH_ROW_GROUP + 100  # the two row groups the names fall in


def _year_of_files(registry: Registry) -> dict[str, str | None]:
    """A registry of 40 files over Kafka partitions 0 and 1 (every fourth in 1 alone, one
    also in 2, with the newest timestamp), a
    file without records and a live one with bad lines; the first 30 and the file without
    records retired (the even ones archived). Returns path -> archive path."""
    paths = [f"/landing/t/{i:03d}.json" for i in range(40)]
    rows = _registrations(paths).to_pylist()
    for i, row in enumerate(rows):
        row.update(min_offset=10 * i, max_offset=10 * i + 9, min_ts=i, max_ts=i, arrival_ms=i)
        row["partition"] = 1 if i % 4 == 3 else 0
    rows += [{**row, "partition": 1, "max_ts": i + 1} for i, row in enumerate(rows) if i % 4 == 2]
    rows.append({**rows[5], "partition": 2, "max_ts": 100})  # a partition only retired files hold
    empty = {**rows[0], "path": "/landing/t/empty.json", "partition": None, "min_offset": None,
             "max_offset": None, "min_ts": None, "max_ts": None, "records": 0}  # fmt: skip
    bad = {**rows[-1], "path": "/landing/t/zz-bad.json", "bad_lines": 2, "arrival_ms": 99}
    for part in (rows[:20], rows[20:] + [empty, bad]):
        table = pa.Table.from_pylist(part, FILES_SCHEMA)
        write_deltalake(registry.files_path, table, mode="append")
    retired = {p: (f"/archive/{Path(p).name}" if i % 2 == 0 else None)
               for i, p in enumerate(paths[:30])}  # fmt: skip
    retired[empty["path"]] = None
    registry.mark_retired(retired, retired_ms=5)
    return retired


def _answers(registry: Registry) -> tuple:
    """Everything a run, ``inspect`` and the sensor ask of a registry."""
    return (
        registry.files(),
        registry.files(reaching={0: 300, 1: 300}),
        registry.files(reaching={0: 50}),  # reaches back into retired files
        registry.live_files(),
        registry.end_offsets(),
        registry.newest_ts(),
        registry._named({"/landing/t/001.json", "/landing/t/035.json", "/landing/t/new.json"}),
        registry.unregistered(["/landing/t/002.json", "/landing/t/new.json"]),
    )


def test_folding_a_registry_changes_no_answer_and_leaves_a_run_the_live_rows(
    tmp_path: Path,
) -> None:
    """Maintenance folds retired files' rows out of what a run reads: every answer stays
    the same (retired files with their archive paths, end offsets and newest timestamp
    from the folded files' statistics), the files a run reads hold the live rows alone,
    and a retire and a registration after the fold are seen."""
    registry = Registry(tmp_path / "registry", "t")
    retired = _year_of_files(registry)
    before = _answers(registry)
    assert {f.path: f.archived_to for f in before[0] if f.retired} == retired
    assert before[4].offsets == {0: 390, 1: 400, 2: 60} and before[5] == 100

    assert fold_registry(registry)
    assert _answers(Registry(tmp_path / "registry", "t")) == before
    assert _answers(registry) == before
    actions = pa.table(DeltaTable(registry.files_path).get_add_actions(flatten=True)).to_pylist()
    [live] = [a for a in actions if "/folded-" not in a["path"]]
    assert live["num_records"] == 14  # files 30..39 (30, 34, 38 in both) and zz-bad.json
    folded = {(a["min.partition"], a["max.partition"], a["num_records"])
              for a in actions if "/folded-" in a["path"]}  # fmt: skip
    assert folded == {(0, 0, 23), (1, 1, 14), (2, 2, 1), (None, None, 1)}
    assert [p for p in DeltaTable(registry.retired_path).file_uris() if "folded-" not in p] == []

    registry.mark_retired({"/landing/t/030.json": None}, retired_ms=6)
    write_deltalake(registry.files_path, _registrations(["/landing/t/new.json"]), mode="append")
    assert "/landing/t/030.json" not in {f.path for f in registry.live_files()}
    assert registry.unregistered(["/landing/t/new.json"]) == []
    assert fold_registry(registry)
    assert sorted(f.path for f in registry.live_files()) == [
        *(f"/landing/t/{i:03d}.json" for i in range(31, 40)), "/landing/t/new.json",
        "/landing/t/zz-bad.json",
    ]  # fmt: skip
    assert {f.path for f in registry.files() if f.retired} == {*retired, "/landing/t/030.json"}


def test_a_fold_cut_short_after_the_files_table_changes_no_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``files`` is folded before ``retired``: when the second commit is lost (a retire
    came first, or the process died), the retired rows of folded files are still read
    from ``retired``'s unfolded part and every answer stays the same. The lost commit is
    provoked by a stand-in for the rewrite, as a crash between two commits cannot be."""
    registry = Registry(tmp_path / "registry", "t")
    _year_of_files(registry)
    before = _answers(registry)
    rewrite = registry_module.rewrite_table
    monkeypatch.setattr(
        registry_module, "rewrite_table",
        lambda table, path, *rest: path != registry.retired_path and rewrite(table, path, *rest),
    )  # fmt: skip
    assert fold_registry(registry)
    assert not [a for a in DeltaTable(registry.retired_path).file_uris() if "folded-" in a]
    assert _answers(registry) == before
    monkeypatch.undo()
    assert fold_registry(registry)
    assert _answers(registry) == before


def test_a_registration_a_window_leaves_a_few_files_and_changes_no_answer(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service registers a dump a minute and retires as it goes; each append merges the
    small files it leaves (sorted by path, as maintenance lays them out) once they are
    ``MERGE_AT``, so a run between two maintenances reads a few files, and every answer a
    run, ``inspect`` or the sensor gets is the one a registry never merged gives. Folded
    files stay as maintenance left them."""
    landing = tmp_path / "landing"
    registries = {name: Registry(tmp_path / name, "t") for name in ("merged", "kept")}
    for registry in registries.values():
        _year_of_files(registry)
        fold_registry(registry)
    folded = {name: _folded_files(r.files_path) for name, r in registries.items()}
    unmerged = delta_io.MERGE_AT
    registrations = 2 * delta_io.MERGE_AT + 1
    for i in range(registrations):
        write_dump(landing, "t", f"new-{i:02d}.json", [Rec(0, 400 + i, 200 + i)])
        for name, registry in registries.items():
            if name == "kept":
                monkeypatch.setattr(delta_io, "MERGE_AT", 10**6)
            register_new(spark, registry, landing, arrival_ms=1_000 + i)
            registry.mark_retired({f"/landing/t/{30 + i % 10:03d}.json": None}, 2_000 + i)
            monkeypatch.setattr(delta_io, "MERGE_AT", unmerged)
        merged = registries["merged"]
        for path in (merged.files_path, merged.retired_path):
            assert len(_unfolded_files(path)) < delta_io.MERGE_AT
    assert len(_unfolded_files(registries["kept"].files_path)) == 1 + registrations
    assert {name: _folded_files(r.files_path) for name, r in registries.items()} == folded

    def answers(registry: Registry) -> tuple:
        """Everything asked of a registry, with the landing's paths named alike."""
        return _answers(registry), [(f.path, f.arrival_ms) for f in registry.files()]

    assert answers(Registry(tmp_path / "merged", "t")) == answers(registries["kept"])
    new = [str(landing / "t" / f"new-{i:02d}.json") for i in range(registrations)]
    assert registries["merged"].unregistered([*new, "/landing/t/other.json"]) == [
        "/landing/t/other.json"
    ]
    [merged_file] = [
        uri for uri in DeltaTable(registries["merged"].files_path).file_uris()
        if "/folded-" not in uri and pq.ParquetFile(uri).metadata.num_rows > 1
    ]  # fmt: skip
    paths = pq.ParquetFile(merged_file).read(columns=["path"])["path"].to_pylist()
    assert paths == sorted(paths)  # maintenance's layout


def _unfolded_files(path: str) -> list[str]:
    return [uri for uri in DeltaTable(path).file_uris() if "/folded-" not in uri]


def _folded_files(path: str) -> set[str]:
    return {uri for uri in DeltaTable(path).file_uris() if "/folded-" in uri}


def test_a_registry_whose_files_table_holds_no_file_yet_reads_as_empty(tmp_path: Path) -> None:
    """A run may find the files table created by another run that has not written its
    first files yet (two runs of one config at once): that registry holds no file."""
    write_deltalake(str(tmp_path / "registry" / "files"), FILES_SCHEMA.empty_table())
    registry = Registry(tmp_path / "registry", "t")
    assert registry.files() == [] and registry.live_files() == []
    assert registry.files(reaching={0: 5}) == [] and registry.newest_ts() is None
