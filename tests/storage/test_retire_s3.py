"""Retiring dumps from an S3 landing zone: archived (a server-side copy to the archive
prefix, then a delete) or deleted, and a retire cut short between the copy and the
delete, or between the delete and the registry's record, finished by the next one.

A kill at those two points leaves the store and the registry in states built here
directly (the copy made, the original kept, nothing recorded; the original gone,
nothing recorded): that is all a killed process leaves behind on a store with no
rename, so the next retire is tested from exactly what it would find."""

from __future__ import annotations

import json

from pyspark.sql import SparkSession

from cdc_core.ingest import Registry, list_dump_files
from cdc_core.ingest.registry import fold_registry
from cdc_core.source.resumption import retire_files
from cdc_core.storage import Location, files


def dump(offsets: range) -> bytes:
    return "".join(json.dumps({"topic": "t", "partition": 0, "offset": o, "ts": o}) + "\n"
                   for o in offsets).encode()  # fmt: skip


def test_retire_on_s3_archives_or_deletes_and_the_next_finishes_one_cut_short(
    s3_spark: SparkSession, s3_bucket: str
) -> None:
    bucket = f"s3://{s3_bucket}"
    landing, archive = f"{bucket}/landing", f"{bucket}/lake/t/archive"
    contents = {f"p=0/{name}.json": dump(range(i * 3, i * 3 + 3))
                for i, name in enumerate(("a", "b", "c", "d"))}  # fmt: skip
    for name, data in contents.items():
        files.write_bytes(f"{landing}/t/{name}", data)
    registry = Registry(f"{bucket}/lake/t/dumps", "t")
    registry.register(s3_spark, list_dump_files(Location.parse(landing), "t"), arrival_ms=1)
    a, b, c, d = sorted(registry.live_files(), key=lambda f: f.path)

    # Cut short after copying b to the archive, before deleting it; and after deleting c,
    # before the registry recorded it.
    files.copy_file(b.path, f"{archive}/t/p=0/b.json")
    files.copy_file(c.path, f"{archive}/t/p=0/c.json")
    files.delete_file(c.path)

    archived, deleted = retire_files(
        registry, [a, b, c], mode="archive", landing=landing, archive=archive, now_ms=5
    )
    assert archived == {f.path: f"{archive}/t/{n}" for f, n in
                        ((a, "p=0/a.json"), (b, "p=0/b.json"), (c, "p=0/c.json"))}  # fmt: skip
    assert deleted == []
    assert [e.path for e in files.list_files(f"{landing}/t")] == [d.path]
    for name in ("p=0/a.json", "p=0/b.json", "p=0/c.json"):
        assert files.read_bytes(f"{archive}/t/{name}") == contents[name]
    assert {f.path for f in registry.files() if f.retired} == {a.path, b.path, c.path}
    assert [f.path for f in registry.live_files()] == [d.path]
    # Maintenance folds the retired rows on the store: every answer stays the same.
    answers = (registry.files(), registry.files(reaching={0: 4}), registry.end_offsets())
    assert fold_registry(registry)
    assert any("/folded-" in e.path for e in files.list_files(f"{bucket}/lake/t/dumps/files"))
    folded = Registry(f"{bucket}/lake/t/dumps", "t")
    assert (folded.files(), folded.files(reaching={0: 4}), folded.end_offsets()) == answers
    assert [f.path for f in folded.live_files()] == [d.path]

    archived, deleted = retire_files(
        registry, [d], mode="delete", landing=landing, archive=archive, now_ms=6
    )
    assert (archived, deleted) == ({}, [d.path])
    assert files.list_files(f"{landing}/t") == []
    assert registry.live_files() == []
    assert not files.exists(f"{archive}/t/p=0/d.json")
