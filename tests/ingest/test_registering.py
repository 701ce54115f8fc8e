"""Registering many registries at once: one scan, and each registry holds what it would
hold registered alone; one that refuses its dumps fails alone."""

from __future__ import annotations

import os
from pathlib import Path

from pyspark.sql import SparkSession

from cdc_core.ingest import DumpFileChanged, Registry, list_dump_files
from cdc_core.ingest.registering import LandedDumps, register_landed
from cdc_core.ingest.registry import PartitionStats
from tests.reclock.test_reclock_support import Rec, write_dump


def landed(registry: Registry, landing: Path, arrival_ms: int) -> LandedDumps:
    return LandedDumps(registry, list_dump_files(landing, registry.topic), arrival_ms)


def test_each_registry_holds_its_own_files_judged_by_its_own_topic(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A line naming the other topic is no record of the file it lies in, though that
    topic's registry is registered in the same scan; arrival times come per file."""
    landing = tmp_path / "landing"
    stray = Rec(0, 3, 13).line("b") + "\n"  # a line of topic b in a dump of topic a
    a1 = write_dump(landing, "a", "1.json", [Rec(0, 0, 10), Rec(0, 1, 11), Rec(0, 2, 12)],
                    extra=stray)  # fmt: skip
    a2 = write_dump(landing, "a", "2.json", [Rec(1, 7, 20)], extra="not json\n")
    b1 = write_dump(landing, "b", "1.json", [Rec(1, 5, 30), Rec(1, 6, 31)])
    a, b = Registry(tmp_path / "a", "a"), Registry(tmp_path / "b", "b")
    arrived_early = LandedDumps(a, list_dump_files(landing, "a"), 200, {str(a1): 100})

    outcome = register_landed(spark, [arrived_early, landed(b, landing, 200)])

    assert [(o.files, o.failure) for o in outcome] == [(2, None), (1, None)]
    files_a = Registry(tmp_path / "a", "a").files()  # fresh handles: it is durable
    assert [(f.path, f.arrival_ms, f.partitions, f.bad_lines) for f in files_a] == [
        (str(a1), 100, (PartitionStats(0, 0, 2, 10, 12, 3),), 1),
        (str(a2), 200, (PartitionStats(1, 7, 7, 20, 20, 1),), 1),
    ]
    files_b = Registry(tmp_path / "b", "b").files()
    assert [(f.path, f.partitions, f.bad_lines) for f in files_b] == [
        (str(b1), (PartitionStats(1, 5, 6, 30, 31, 2),), 0)
    ]
    # Nothing new: nothing registered again, and no scan.
    again = register_landed(spark, [landed(a, landing, 300), landed(b, landing, 300)])
    assert [(o.files, o.failure) for o in again] == [(0, None), (0, None)]


def test_a_registry_refusing_a_changed_dump_fails_alone(
    spark: SparkSession, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    changed = write_dump(landing, "a", "1.json", [Rec(0, 0, 10)])
    a, b = Registry(tmp_path / "a", "a"), Registry(tmp_path / "b", "b")
    register_landed(spark, [landed(a, landing, 100)])
    changed.write_text(changed.read_text() + Rec(0, 1, 11).line("a") + "\n")
    os.utime(changed, ns=(1, 1))
    b1 = write_dump(landing, "b", "1.json", [Rec(0, 4, 40)])

    refused, registered = register_landed(spark, [landed(a, landing, 200), landed(b, landing, 200)])

    assert isinstance(refused.failure, DumpFileChanged) and str(changed) in str(refused.failure)
    assert (registered.files, registered.failure) == (1, None)
    assert [(f.path, f.partitions) for f in Registry(tmp_path / "b", "b").files()] == [
        (str(b1), (PartitionStats(0, 4, 4, 40, 40, 1),))
    ]
    assert [f.partitions for f in Registry(tmp_path / "a", "a").files()] == [
        (PartitionStats(0, 0, 0, 10, 10, 1),)
    ]
