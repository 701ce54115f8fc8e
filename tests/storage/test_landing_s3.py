"""A landing zone on S3: its dumps are listed with the local rules, and the gzip damage
check and the salvage of a truncated file run on Spark's Python workers, which get the
driver's storage settings with the function (their environment does not name the server)."""

from __future__ import annotations

import gzip

from pyspark.sql import SparkSession

from cdc_core.ingest.dumps import _salvaged_lines, find_damaged_files, list_dump_files
from cdc_core.storage import Location, files


def test_dumps_on_s3_are_listed_like_local_ones(s3_bucket: str) -> None:
    landing = Location.parse(f"s3://{s3_bucket}/landing")
    topic = files.join(str(landing), "users")
    kept = [files.join(topic, name) for name in ["a.json", "2026/01/b.json.gz", "deep/any name"]]
    ignored = [".hidden.json", "_SUCCESS", "c.json.tmp", "d.json.partial", "_archive/old.json",
               ".staging/e.json", "x/.y/f.json"]  # fmt: skip
    for path in [*kept, *(files.join(topic, name) for name in ignored)]:
        files.write_bytes(path, b"x\n")
    files.write_bytes(files.join(str(landing), "orders", "o.json"), b"x\n")

    listed = list_dump_files(landing, "users")

    assert [dump.path for dump in listed] == sorted(kept)
    assert all(dump.size == 2 and dump.mtime_ms > 0 and dump.problem is None for dump in listed)
    assert list_dump_files(landing, "missing") == []


def test_gzip_damage_is_found_and_salvaged_on_workers_from_s3(
    spark: SparkSession, s3_bucket: str
) -> None:
    root = f"s3://{s3_bucket}/landing/users"
    lines = b"".join(b'{"offset":%d}\n' % offset for offset in range(2000))
    whole = gzip.compress(lines, compresslevel=1)
    good, cut, garbage = (files.join(root, n) for n in ["good.gz", "cut.gz", "garbage.gz"])
    files.write_bytes(good, whole)
    files.write_bytes(cut, whole[: len(whole) // 2])
    files.write_bytes(garbage, b"definitely not gzip\n")

    damaged = find_damaged_files(spark, [good, cut, garbage])

    assert set(damaged) == {cut, garbage}
    assert damaged[cut].salvaged and not damaged[garbage].salvaged
    assert damaged[garbage].reason.startswith("corrupt gzip file: ")
    salvaged = [(row.file, row.value) for row in _salvaged_lines(spark, [cut]).collect()]
    assert 0 < len(salvaged) < 2000
    assert salvaged == [(cut, f'{{"offset":{offset}}}') for offset in range(len(salvaged))]
