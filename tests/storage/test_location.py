from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdc_core.storage import Location, NotLocal, UnsupportedScheme, from_spark_path, spark_path


def test_a_path_resolves_against_the_base_folder_and_stays_local(tmp_path: Path) -> None:
    lake = Location.parse("lake", tmp_path)
    assert lake.is_local and str(lake) == str(tmp_path / "lake")
    assert Path(lake / "users" / "changes") == tmp_path / "lake" / "users" / "changes"
    assert Location.parse(f"file://{tmp_path}/x") == Location.parse(tmp_path / "x")
    with pytest.raises(ValueError, match="needs a base folder"):
        Location.parse("relative")


def test_an_s3_url_is_a_bucket_and_a_prefix_and_has_no_local_path() -> None:
    lake = Location.parse("s3://lake-bucket//tables/")
    assert (lake.bucket, lake.path, str(lake)) == ("lake-bucket", "tables", "s3://lake-bucket/tables")
    table = lake / "users" / "changes"
    assert str(table) == "s3://lake-bucket/tables/users/changes"
    assert Location.parse(str(table)) == table
    assert (table.name, str(table.parent)) == ("changes", "s3://lake-bucket/tables/users")
    assert str(Location.parse("s3://lake-bucket") / "x") == "s3://lake-bucket/x"
    with pytest.raises(NotLocal):
        os.fspath(table)
    with pytest.raises(NotLocal):
        Path(table)


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("gs://bucket/lake", UnsupportedScheme),
        ("abfss://c@account.dfs.core.windows.net/lake", UnsupportedScheme),
        ("hdfs://namenode/lake", UnsupportedScheme),
        ("s3://Not_A_Bucket/lake", ValueError),
        ("s3:///lake", ValueError),
    ],
)
def test_other_schemes_and_malformed_buckets_are_refused(url: str, error: type) -> None:
    with pytest.raises(error):
        Location.parse(url)


def test_spark_names_s3_through_s3a_and_its_paths_map_back() -> None:
    assert spark_path("s3://b/k/f.json") == "s3a://b/k/f.json"
    assert spark_path("/data/f.json") == "/data/f.json"
    assert Location.parse("s3://bkt/x").spark_path == "s3a://bkt/x"
    assert from_spark_path("s3a://b/k/f.json") == "s3://b/k/f.json"
    assert from_spark_path("file:/a%20b/c+d.json") == "/a b/c+d.json"
    assert from_spark_path("file:///a/b.json") == "/a/b.json"
