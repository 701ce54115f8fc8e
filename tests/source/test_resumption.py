"""Bounded input reliance: commit the resumption frontier, retire dumps below it, go on
without them, and fail loudly when a still-needed dump is missing."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdc_core.frontier import OffsetFrontier, TimeFrontier
from cdc_core.ingest import MissingDumpFile, Registry
from cdc_core.reclock.remap import visible_at
from cdc_core.source.resumption import (
    ResumptionFrontiers,
    ResumptionRegression,
    UpstreamCommit,
    inspect_source,
    retire,
)
from tests.reclock.test_reclock_support import (
    Options,
    Rec,
    open_shards,
    reclocked_rows,
    register_new,
    run_windows,
    write_dump,
)

WIDTH = 25


def test_retire_archive_rerun_and_a_missing_needed_dump(
    spark: SparkSession, tmp_path: Path
) -> None:
    landing, lake, archive = tmp_path / "landing", tmp_path / "lake", tmp_path / "archive"
    records = [Rec(0, o, 10 * o) for o in range(12)]
    f1 = write_dump(landing, "t", "f1.json", records[0:4])
    f2 = write_dump(landing, "t", "f2.json", records[4:8])
    f3 = write_dump(landing, "t", "f3.json", records[8:12])
    junk = write_dump(landing, "t", "junk.json", [], extra="{bad\n")
    registry = Registry(lake / "dumps", "t")
    register_new(spark, registry, landing, arrival_ms=0)
    remap, reclocked = open_shards(spark, lake)
    upstream = UpstreamCommit(lake / "upstream")
    source = Options()

    run_windows(spark, source, registry, remap, reclocked, (25, 50), WIDTH)
    report = retire(
        remap, [reclocked], registry, upstream,
        mode="archive", landing=landing, archive=archive, now_ms=1_000,
    )

    # Both shards are at 51; remap[50] = {0: 5}: f1 (offsets 0..3) and the junk file go.
    expected = ResumptionFrontiers(TimeFrontier.at(51), OffsetFrontier({0: 5}))
    assert report.committed == expected == upstream.read()
    assert report.archived == {
        str(f1): str(archive / "t" / "f1.json"),
        str(junk): str(archive / "t" / "junk.json"),
    }
    assert not f1.exists() and (archive / "t" / "f1.json").exists() and f2.exists()
    assert report.remap_since == TimeFrontier.at(50)
    assert visible_at(remap, 0, 0) == 50  # bound at 25, compacted into the since
    assert {f.path for f in registry.files() if f.retired} == {str(f1), str(junk)}

    inspection = inspect_source(source, "t", remap, [reclocked], registry, upstream)
    assert (inspection.frontier, inspection.end_offsets, inspection.lag) == (
        OffsetFrontier({0: 5}), OffsetFrontier({0: 12}), {0: 7}
    )
    # The binding waits at offset 5 (in f2) for its records' event time.
    [held] = inspection.held
    assert (held.partition, held.waits_at, held.registered_end) == (0, 5, 12)
    assert held.reason.startswith("event time: the record at offset 5")
    assert inspection.resumption == expected
    described = inspection.describe()
    assert "lag" in described and "committed upstream: time [1970-01-01T00:00:00.051Z]" in described

    # The next windows run without the archived dump.
    run_windows(spark, source, registry, remap, reclocked, (75, 100), WIDTH)
    assert [(o, t) for _, o, t, _, _ in reclocked_rows(reclocked) if t > 50] == [
        (5, 75), (6, 75), (7, 75), (8, 100), (9, 100)
    ]

    report = retire(
        remap, [reclocked], registry, upstream,
        mode="delete", landing=landing, archive=archive, now_ms=2_000,
    )
    assert (report.deleted, report.archived) == ([str(f2)], {})
    assert not f2.exists()
    with pytest.raises(ResumptionRegression):
        upstream.commit(expected)

    f3.unlink()  # offsets 10 and 11 are not bound yet: f3 is still needed
    with pytest.raises(MissingDumpFile, match=r"f3\.json \(partition 0 offsets 8\.\.11\)"):
        run_windows(spark, source, registry, remap, reclocked, (125,), WIDTH)
