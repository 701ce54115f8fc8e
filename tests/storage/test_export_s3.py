"""The CDCv2 export of windows into a lake on S3, which has no rename: each window's
folder ends up holding one stream, the same as an export into local folders writes; a
re-export removes the files of an export whose registration has ended and keeps those of
one still live."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pyspark.sql import SparkSession

from cdc_core.app.export import Window, _stale, export_windows
from cdc_core.cdcv2 import DataColumns, codec_json
from cdc_core.cdcv2.export_folder import expire_exports
from cdc_core.cdcv2.reference import read_all
from cdc_core.cdcv2.stream_files import file_owner, is_progress_file
from cdc_core.frontier import TimeFrontier
from cdc_core.shard import Shard
from cdc_core.shard.leases import LeaseBook
from cdc_core.storage import files
from tests.lake_rows import SampleLake
from tests.storage.test_pipeline_s3 import upload

WINDOWS = 3


def window_facts(folder: str, columns: DataColumns, start: int) -> tuple[Counter, TimeFrontier]:
    """A window folder's stream read by the reference reader from ``start``: its updates
    (as a multiset of ``(data, time, diff)``) and the frontier it is complete through."""
    messages = [
        codec_json.decode(line, columns)
        for name in files.list_names(folder)
        if not name.startswith(".")
        for line in files.read_bytes(files.join(folder, name)).decode().splitlines()
    ]
    updates, frontier = read_all(messages, TimeFrontier.at(start))
    return Counter(updates), frontier


def owners(folder: str) -> Counter:
    """How many progress and update files each export owns in a window folder."""
    return Counter(
        (file_owner(name), "progress" if is_progress_file(name) else "updates")
        for name in files.list_names(folder)
        if not name.startswith(".")
    )


def test_an_export_to_s3_writes_each_window_as_to_a_folder_and_replaces_only_dead_exports(
    s3_spark: SparkSession, sample_lake: SampleLake, s3_bucket: str, tmp_path: Path
) -> None:
    config = sample_lake.config
    schema = config.source("users").output_schema
    columns = DataColumns(schema)
    remote = f"s3://{s3_bucket}/lake/users"
    upload(config.lake / "users" / "changes", f"{remote}/changes")
    on_s3 = Shard.open(s3_spark, f"{remote}/changes", schema)
    in_folder = Shard.open(s3_spark, str(config.lake / "users" / "changes"), schema)
    windows = [
        Window(f"w{i}", config.start_ms + i * config.window_ms,
               config.start_ms + (i + 1) * config.window_ms)
        for i in range(WINDOWS)
    ]  # fmt: skip
    local = export_windows(in_folder, tmp_path / "cdcv2", windows)
    expected = {
        w.key: window_facts(str(tmp_path / "cdcv2" / w.key), columns, w.start + 1)
        for w in windows
    }
    assert sum(len(facts) for facts, _ in expected.values()) > 0
    assert [e.updates for e in local] == [len(facts) for facts, _ in expected.values()]

    first = export_windows(on_s3, f"{remote}/cdcv2", windows, "cdcv2-export-ended")
    for window, export in zip(windows, first, strict=True):
        folder = f"{remote}/cdcv2/{window.key}"
        assert export.folder == folder
        assert window_facts(folder, columns, window.start + 1) == expected[window.key]
        held = owners(folder)
        assert held[("cdcv2-export-ended", "progress")] == 1 and set(held) <= {
            ("cdcv2-export-ended", "progress"), ("cdcv2-export-ended", "updates")
        }  # fmt: skip

    # A concurrent export of the first window, still registered, has written its updates.
    LeaseBook.of(on_s3).register("cdcv2-export-live", since=config.start_ms, lease_ms=3_600_000)
    first_folder = f"{remote}/cdcv2/{windows[0].key}"
    [its_updates] = [n for n in files.list_names(first_folder) if not is_progress_file(n)]
    live_copy = files.join(first_folder, "updates.cdcv2-export-live.0.jsonl")
    files.write_bytes(live_copy, files.read_bytes(files.join(first_folder, its_updates)))
    # Uploads not yet moved into place under their published names: the live export's and
    # an unregistered export's (young: it may still be moving), and one the ended export
    # left behind when it died; and a hidden file that is no upload at all.
    upload_of = "." + "{}.jsonl." + "0" * 32 + ".tmp"
    uploading = [files.join(first_folder, upload_of.format(name))
                 for name in ("updates.cdcv2-export-live.1", "updates.unregistered-x.2")]
    left_behind = files.join(first_folder, upload_of.format("updates.cdcv2-export-ended.7"))
    unrelated = files.join(first_folder, ".keep")
    for path in [*uploading, left_behind, unrelated]:
        files.write_bytes(path, b"")

    second = export_windows(on_s3, f"{remote}/cdcv2", windows, "cdcv2-export-next")
    assert [e.updates for e in second] == [e.updates for e in first]
    for window in windows:
        folder = f"{remote}/cdcv2/{window.key}"
        assert window_facts(folder, columns, window.start + 1) == expected[window.key]
        held = owners(folder)
        assert ("cdcv2-export-ended", "progress") not in held, "the ended export's files stay"
        assert ("cdcv2-export-ended", "updates") not in held
        assert held[("cdcv2-export-next", "progress")] == 1
    assert files.exists(live_copy), "the live export's file was removed"
    assert all(files.exists(path) for path in uploading), "an upload in flight was removed"
    assert files.exists(unrelated)
    assert not files.exists(left_behind), "the ended export's upload stays"


def test_an_unregistered_exports_upload_is_stale_only_once_abandoned() -> None:
    name = ".updates.unregistered-x.2.jsonl." + "a" * 32 + ".tmp"
    now_ms = 10 * 3_600_000
    assert not _stale(name, now_ms, {"cdcv2-export-live"}, now_ms - 1)  # young: in flight
    assert _stale(name, 0, {"cdcv2-export-live"}, now_ms - 1)  # untouched for long
    assert not _stale(name, 0, {"unregistered-x"}, now_ms - 1)  # its own (the export itself)
    assert not _stale(".updates.x.2.jsonl.2.tmp", 0, set(), now_ms)  # no upload of ours


def test_expiry_deletes_the_window_folders_before_the_horizon_in_folders_and_on_s3(
    s3_bucket: str, tmp_path: Path
) -> None:
    """What maintenance does to an export once a source's horizon moved: every window
    folder that starts before it goes, with its files; later windows, hidden staging and
    folders not named as windows stay."""
    keys = ["2026-01-01T23:58:00", "2026-01-01T23:59:00", "2026-01-02T00:00:00",
            "2026-01-02T00:01:00"]  # fmt: skip
    midnight = 1_767_312_000_000  # 2026-01-02T00:00:00Z
    for root in (str(tmp_path / "cdcv2"), f"s3://{s3_bucket}/lake/users/cdcv2"):
        for name in [*keys, ".work", "consumer-notes"]:
            files.write_bytes(files.join(root, name, "part-0.json"), b"{}\n")
            files.write_bytes(files.join(root, name, "progress-0.json"), b"{}\n")
        assert expire_exports(root, midnight) == keys[:2]
        assert files.list_folders(root) == sorted([*keys[2:], ".work", "consumer-notes"])
        assert not files.exists(files.join(root, keys[0], "part-0.json"))
        assert expire_exports(root, midnight) == []  # repeatable
