"""The driver's file operations behave the same on a local folder and on S3."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from cdc_core.storage import LocationUnreachable, files


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "root")
    return f"s3://{request.getfixturevalue('s3_bucket')}/root"


def test_written_files_list_read_copy_and_delete_alike(root: str) -> None:
    files.write_bytes(files.join(root, "t", "b.json"), b"bb")
    files.write_bytes(files.join(root, "t", "a", "x.json"), b"x")
    files.write_bytes(files.join(root, "other.json"), b"o")

    listed = files.list_files(files.join(root, "t"))
    assert [(e.path, e.size) for e in listed] == [
        (files.join(root, "t", "a", "x.json"), 1),
        (files.join(root, "t", "b.json"), 2),
    ]
    assert all(e.mtime_ms > 0 for e in listed)
    assert files.list_names(files.join(root, "t")) == ["b.json"]
    assert files.read_bytes(files.join(root, "t", "b.json")) == b"bb"
    assert files.exists(files.join(root, "t")) and files.exists(files.join(root, "t", "b.json"))
    assert not files.exists(files.join(root, "nothing"))
    assert files.list_files(files.join(root, "nothing")) == []

    files.copy_file(files.join(root, "t", "b.json"), files.join(root, ".archive", "b.json"))
    files.delete_file(files.join(root, "t", "b.json"))
    files.delete_file(files.join(root, "t", "b.json"))  # gone already: no error
    assert files.read_bytes(files.join(root, ".archive", "b.json")) == b"bb"
    assert [e.path for e in files.list_files(files.join(root, "t"))] == [
        files.join(root, "t", "a", "x.json")
    ]
    files.delete_tree(files.join(root, "t"))
    assert not files.exists(files.join(root, "t"))
    assert files.exists(files.join(root, "other.json"))


def test_gzip_files_are_read_raw(root: str) -> None:
    packed = gzip.compress(b'{"a": 1}\n')
    files.write_bytes(files.join(root, "d.json.gz"), packed)
    with files.open_input(files.join(root, "d.json.gz")) as stream:
        assert stream.read() == packed


def test_a_listable_folder_passes_and_a_missing_one_is_named(root: str) -> None:
    files.make_folder(root)
    files.write_bytes(files.join(root, "f"), b"")  # an S3 prefix exists through its objects
    files.require_listable(root)
    if "://" not in root:
        with pytest.raises(LocationUnreachable, match="does not exist"):
            files.require_listable(files.join(root, "missing"))
        with pytest.raises(LocationUnreachable, match="not a folder"):
            files.require_listable(files.join(root, "f"))


def test_an_empty_prefix_of_an_existing_bucket_is_listable_and_a_missing_bucket_is_not(
    s3_bucket: str,
) -> None:
    files.require_listable(f"s3://{s3_bucket}/landing")
    with pytest.raises(LocationUnreachable, match="bucket nosuchbucket does not exist"):
        files.require_listable("s3://nosuchbucket/landing")
