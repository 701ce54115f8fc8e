"""``reclock rebuild`` of a source whose lake is on S3, which has no rename: the swap
copies the folders object by object, under a marker that keeps the source closed until
the swap is done; killed after the old tables moved aside, the source refuses to open
until a rebuild run finishes the swap, and then holds the rebuilt tables, the old ones
kept aside."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.config import load_config
from cdc_core.source import RebuildUnfinished, SourcePipeline
from cdc_core.storage import delta_options, files
from tests.source.test_history import T0, WINDOW
from tests.source.test_rebuild import build_old_source, rebuild_killed_after, rebuild_now


def rows(path: str) -> list[dict]:
    return DeltaTable(path, storage_options=delta_options(path)).to_pyarrow_table().to_pylist()


def test_a_rebuild_on_s3_cut_short_mid_swap_is_refused_then_finished_by_copies(
    s3_spark: SparkSession, s3_bucket: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = f"s3://{s3_bucket}"
    config_file = build_old_source(
        s3_spark, tmp_path, lake=f"{bucket}/lake", landing=f"{bucket}/landing"
    )
    config = load_config(config_file)
    live = f"{bucket}/lake/users"
    old_remap = sorted(map(repr, rows(f"{live}/remap")))
    old_state = {(r["id"], r["name"], r["n"]) for r in rows(f"{live}/state")}

    rebuild_killed_after(config_file, "move old tables aside")
    assert not files.exists(live)
    with pytest.raises(RebuildUnfinished, match="reclock rebuild --source users"):
        SourcePipeline.from_config(s3_spark, config, config.sources[0])

    out = rebuild_now(config_file, capsys)
    assert "users: rebuilt through 2026-01-01T00:02:00Z (2 windows)" in out
    kept = out.rsplit("kept in ", 1)[1].strip()
    assert kept.startswith(f"{bucket}/lake/.replaced/users-")
    assert {(r["id"], r["name"], r["n"]) for r in rows(f"{kept}/state")} == old_state
    assert sorted(map(repr, rows(f"{live}/remap"))) == old_remap  # the same bindings
    assert {(r["id"], r["name"], r["n"]) for r in rows(f"{live}/state")} == {
        (i, name, str(n)) for i, name, n in old_state
    }
    b1, b2 = T0 + WINDOW, T0 + 2 * WINDOW
    history = {(r["id"], r["name"], r["n"], r["valid_from"], r["valid_to"])
               for r in rows(f"{live}/history")}  # fmt: skip
    assert history == {(1, "a1", "1", b1, None), (2, "b", "2", b1, None), (3, "c", "3", b2, None)}
    assert not files.exists(f"{bucket}/lake/.rebuild/users"), "the rebuilt folder moved in"
    SourcePipeline.from_config(s3_spark, config, config.sources[0])  # open again
