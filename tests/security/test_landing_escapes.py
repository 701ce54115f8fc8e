"""Dumps that try to climb out of the landing zone: links (to a file, to a folder, from a
topic's folder into another's) and a topic folder that is itself a link out, through one
real run and a retire of every source; a folder swapped for a link out after
registration, and an archive holding a link out, at retire; object keys with ``..``.

The rule: a topic's dumps are the files inside its folder, links resolved, and the
folder lies inside the landing zone. A link leading out is never followed: it is an
``errors`` row of its source (``LEADS_OUT``), and retire moves or deletes the link
itself, never what it points at. Retire refuses (``OutsideFolder``, before anything
moves) a file that leads out of the landing zone or a target that leads out of the
archive. Every case must leave the folder outside the landing zone and the lake as it
was, byte for byte, and read nothing from it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
import yaml
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.config import Config, load_config
from cdc_core.ingest import DumpFileChanged, Registry, list_dump_files
from cdc_core.ingest.registry import RegisteredFile
from cdc_core.source import SourcePipeline
from cdc_core.source.resumption import RetireReport, retire_files
from cdc_core.source.upkeep import retire_source
from cdc_core.storage import Location
from cdc_core.storage.files import LEADS_OUT, OutsideFolder
from pipelines.run import materialize
from tests.security.outside import tree_state
from tests.source.test_bad_inputs import T0, click, kcat, user

SECRET = "SECRET"  # in every record outside the landing zone: no output may hold it

# The tables every source has (a kept history aside).
TABLES = ("remap", "reclocked", "changes", "state", "errors")


@dataclass(frozen=True)
class Escapes:
    """The run's config, the folder outside, its state before the run, after the run and
    after the retire, and each source's retire report."""

    config: Config
    outside: Path
    before: dict[str, str]
    after_run: dict[str, str]
    after_retire: dict[str, str]
    retired: dict[str, RetireReport]


def write_config(work: Path) -> Config:
    def source(name: str, key: dict, value: dict, envelope: str, retire: str) -> dict:
        return {"name": name, "topic": name, "key": key, "value": value, "envelope": envelope,
                "reclock": "event-time", "retire": retire}  # fmt: skip

    config = {
        "lake": "lake", "landing": "landing", "window": "1m",
        "start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:02:00Z",
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4"}},
        "sources": [
            source("users", {"id": "bigint"}, {"name": "string", "n": "bigint"}, "upsert",
                   "archive"),
            source("clicks", {}, {"page": "string", "n": "bigint"}, "none", "archive"),
            source("orders", {"id": "bigint"}, {"name": "string"}, "upsert", "delete"),
        ],
    }  # fmt: skip
    (work / "reclock.yaml").write_text(yaml.safe_dump(config))
    return load_config(work / "reclock.yaml")


def write_files(work: Path) -> Path:
    """Good dumps in the landing zone, records marked SECRET outside it, and the links."""
    outside, landing = work / "outside", work / "landing"
    (outside / "folder").mkdir(parents=True)
    (outside / "clicks").mkdir()
    (outside / "secret.json").write_bytes(user(5, 0, 666, f"{SECRET}-file"))
    (outside / "folder" / "d.json").write_bytes(user(6, 0, 667, f"{SECRET}-folder"))
    (outside / "clicks" / "c.json").write_bytes(click(0, 0, f"/{SECRET}-topic"))
    users, orders = landing / "users", landing / "orders"
    (users / "sub").mkdir(parents=True)
    orders.mkdir()
    (users / "good.json").write_bytes(user(0, 0, 1, "a") + user(0, 1, 2, "b"))
    (users / "sub" / "more.json").write_bytes(user(0, 2, 3, "c"))
    (orders / "good.json").write_bytes(kcat("orders", 0, 0, '{"id": 1}', '{"name": "o"}'))
    os.symlink(outside / "secret.json", users / "file-link.json")  # absolute
    os.symlink("../../outside/folder", users / "folder-link")  # relative
    os.symlink("../orders", users / "to-orders")  # inside the landing zone, out of users
    os.symlink(outside / "clicks", landing / "clicks")  # the topic folder itself
    return outside


@pytest.fixture(scope="module")
def escapes(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> Escapes:
    work = tmp_path_factory.mktemp("escapes")
    outside = write_files(work)
    config = write_config(work)
    before = tree_state(outside)
    pipelines = [SourcePipeline.from_config(spark, config, s) for s in config.sources]
    for pipeline in pipelines:  # landed at the start: retire may take the unreadable paths
        pipeline.register_dumps(arrival_ms=T0)
    assert materialize(config, exports=False), "links out never fail a run"
    after_run = tree_state(outside)
    now_ms = int(time.time() * 1000)
    retired = {p.source.name: retire_source(p, now_ms) for p in pipelines}
    return Escapes(config, outside, before, after_run, tree_state(outside), retired)


def rows(config: Config, source: str, table: str) -> list[dict]:
    return DeltaTable(str(config.lake / source / table)).to_pyarrow_table().to_pylist()


def test_each_link_out_is_an_error_row_and_nothing_behind_it_is_read(escapes: Escapes) -> None:
    config, landing = escapes.config, escapes.config.landing
    reasons = {row["file"]: row["reason"] for row in rows(config, "users", "errors")}
    assert reasons == {
        str(landing / "users" / "file-link.json"): LEADS_OUT,
        str(landing / "users" / "folder-link"): LEADS_OUT,
        str(landing / "users" / "to-orders"): LEADS_OUT,
    }
    assert [(r["file"], r["reason"]) for r in rows(config, "clicks", "errors")] == [
        (str(landing / "clicks"), LEADS_OUT)
    ]
    users = {(r["id"], r["name"]) for r in rows(config, "users", "state")}
    assert users == {(1, "a"), (2, "b"), (3, "c")}
    assert rows(config, "clicks", "state") == []
    every_row = [row for s in config.sources for name in TABLES
                 for row in rows(config, s.name, name)]  # fmt: skip
    assert every_row and not [row for row in every_row if SECRET in repr(row)]


def test_the_clean_source_is_unaffected(escapes: Escapes) -> None:
    assert [(r["id"], r["name"]) for r in rows(escapes.config, "orders", "state")] == [(1, "o")]
    assert rows(escapes.config, "orders", "errors") == []


def test_neither_the_run_nor_retire_changes_anything_outside(escapes: Escapes) -> None:
    assert escapes.before == escapes.after_run == escapes.after_retire
    assert len(escapes.before) == 5  # 2 folders, 3 files: the state compares something


def test_retire_moves_or_deletes_the_links_themselves(escapes: Escapes) -> None:
    config, landing = escapes.config, escapes.config.landing
    archive = config.lake / "users" / "archive" / "users"
    users = escapes.retired["users"].archived
    assert users == {str(landing / "users" / name): str(archive / name) for name in
                     ("good.json", "sub/more.json", "file-link.json", "folder-link",
                      "to-orders")}  # fmt: skip
    assert os.readlink(archive / "file-link.json") == str(escapes.outside / "secret.json")
    assert os.readlink(archive / "folder-link") == "../../outside/folder"
    clicks = config.lake / "clicks" / "archive" / "clicks"
    assert escapes.retired["clicks"].archived == {str(landing / "clicks"): str(clicks)}
    assert clicks.is_symlink() and not os.path.lexists(landing / "clicks")
    assert escapes.retired["orders"].deleted == [str(landing / "orders" / "good.json")]
    assert (landing / "orders").is_dir()  # the link into it was moved, not followed


def test_retire_never_moves_or_deletes_through_a_link_out(
    escapes: Escapes, spark: SparkSession
) -> None:
    """After registration, a writer swaps a registered file for a link out, or its
    folder: the next registration refuses (a run reads nothing), and so does retire;
    a link out where retire would archive the file: retire refuses, moving nothing."""
    config, outside = escapes.config, escapes.outside
    late = config.landing / "users" / "late"
    late.mkdir()
    (late / "new.json").write_bytes(user(0, 3, 4, "d"))
    pipeline = SourcePipeline.from_config(spark, config, config.source("users"))
    assert pipeline.register_dumps(arrival_ms=T0) == 1
    [registered] = [f for f in pipeline.registry.live_files() if f.path.endswith("new.json")]
    victims = outside / "victims"
    victims.mkdir()
    (victims / "new.json").write_bytes(b"not reclock's\n")
    archive = config.lake / "users" / "archive"

    (late / "new.json").rename(late / ".new.json")  # the file itself swapped for a link out
    (late / "new.json").symlink_to(victims / "new.json")
    with pytest.raises(DumpFileChanged, match="became unreadable after registration"):
        pipeline.register_dumps(arrival_ms=T0)
    (late / "new.json").unlink()
    (late / ".new.json").rename(late / "new.json")

    late.rename(late.with_name(".late"))
    late.symlink_to(victims)
    before = tree_state(outside)
    with pytest.raises(DumpFileChanged, match="behind a link leading out"):
        pipeline.register_dumps(arrival_ms=T0)  # a run stops here, before any read
    for mode in ("delete", "archive"):
        with pytest.raises(OutsideFolder, match="leads out of .* through a link"):
            retire_files(pipeline.registry, [registered], mode=mode, landing=config.landing,
                         archive=archive, now_ms=T0)  # fmt: skip
    assert tree_state(outside) == before

    late.unlink()
    late.with_name(".late").rename(late)
    (archive / "users" / "late").symlink_to(victims)
    with pytest.raises(OutsideFolder, match="leads out of .* through a link"):
        retire_files(pipeline.registry, [registered], mode="archive", landing=config.landing,
                     archive=archive, now_ms=T0)  # fmt: skip
    assert tree_state(outside) == before
    assert (late / "new.json").read_bytes() == user(0, 3, 4, "d")
    assert registered in pipeline.registry.live_files()


def test_object_keys_with_dot_segments_are_never_listed_or_retired(
    s3_bucket: str, s3_endpoint: str, tmp_path: Path
) -> None:
    """An object store has no links, but a key may hold ``..`` literally: such a key is
    hidden like any dot name, and retire refuses a path that holds one."""
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    keys = ["landing/users/good.json", "landing/users/../../lake/users/state/x.json",
            "landing/users/a/../b.json", "landing/users/./c.json"]  # fmt: skip
    for key in keys:
        client.put_object(Bucket=s3_bucket, Key=key, Body=user(0, 0, 1, "a"))
    landing = f"s3://{s3_bucket}/landing"
    listed = list_dump_files(Location.parse(landing), "users")
    assert [dump.path for dump in listed] == [f"{landing}/users/good.json"]

    climbing = RegisteredFile(f"{landing}/users/../../lake/users/state/x.json", 1, 1, T0, ())
    registry = Registry(tmp_path / "dumps", "users")
    for mode in ("delete", "archive"):
        with pytest.raises(OutsideFolder, match="does not lie under"):
            retire_files(registry, [climbing], mode=mode, landing=landing,
                         archive=f"s3://{s3_bucket}/archive", now_ms=T0)  # fmt: skip
    stored = sorted(o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket)["Contents"])
    assert stored == sorted(keys)
