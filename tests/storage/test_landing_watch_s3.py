"""The sensor's incremental listing of an S3 landing zone (Kafka Connect's sink layout):
a tick lists only after what earlier ticks saw, a full listing every so often finds what
sorts elsewhere, and a local landing zone is always listed whole."""

from __future__ import annotations

import json
import time
from pathlib import Path

from cdc_core.ingest.landing_watch import (
    ACTIVE_FOR_MS,
    FULL_LISTING_EVERY_MS,
    LandingWatch,
)
from cdc_core.storage import files

LINE = (json.dumps({"topic": "users", "partition": 0, "offset": 0, "ts": 0}) + "\n").encode()


def land(landing: str, *names: str) -> list[str]:
    paths = [f"{landing}/users/{name}" for name in names]
    for path in paths:
        files.write_bytes(path, LINE)
    return paths


def connect_name(partition: int, offset: int) -> str:
    return f"partition={partition}/users+{partition}+{offset:010d}.json"


def test_a_listing_can_start_after_a_key_in_the_store_and_on_disk(
    s3_bucket: str, tmp_path: Path
) -> None:
    for root in (f"s3://{s3_bucket}/f", str(tmp_path / "f")):
        for name in ("a", "b", "c", "sub/d"):
            files.write_bytes(f"{root}/{name}", b"x")
        paths = [entry.path for entry in files.list_after(root, f"{root}/b")]
        assert paths == [f"{root}/c", f"{root}/sub/d"]
        flat = [entry.path for entry in files.list_after(root, f"{root}/a", recursive=False)]
        assert flat == [f"{root}/b", f"{root}/c"]
        assert len(files.list_after(root, None)) == 4


def test_a_tick_lists_each_active_folder_after_the_dumps_it_has_seen(s3_bucket: str) -> None:
    landing = f"s3://{s3_bucket}/topics"
    first = land(landing, connect_name(0, 0), connect_name(0, 10), connect_name(1, 0))
    now = int(time.time() * 1000)
    watch = LandingWatch(None, now)
    assert watch.landed(landing, "users", []) == first  # the first tick lists whole

    # The next tick: a dump that sorts after its folder's mark is seen; one copied in
    # under an earlier name is not (the listing starts after the mark), nor a partition
    # folder that sorts between the known ones.
    later = land(landing, connect_name(1, 5))
    late_copy = land(landing, connect_name(0, 5))
    middle = land(landing, "partition=05/users+5+0000000000.json")
    watch = LandingWatch(json.loads(json.dumps(watch.state())), now + 1_000)
    assert watch.landed(landing, "users", [first[0]]) == [first[0], *later]

    # A folder that sorts after every other (a time-based partitioner's next hour) is
    # seen at once, and joins the folders listed after their marks.
    last = land(landing, "partition=9/users+9+0000000000.json")
    assert watch.landed(landing, "users", []) == last
    beyond = land(landing, "partition=9/users+9+0000000007.json")
    assert watch.landed(landing, "users", []) == beyond

    # Once a full listing is due, everything landed is listed again, the stragglers too.
    watch = LandingWatch(watch.state(), now + FULL_LISTING_EVERY_MS)
    listed = watch.landed(landing, "users", [])
    assert {*late_copy, *middle} <= set(listed)
    assert sorted(listed) == sorted([*first, *later, *late_copy, *middle, *last, *beyond])


def test_names_in_progress_move_no_mark(s3_bucket: str) -> None:
    landing = f"s3://{s3_bucket}/landing"
    land(landing, "a.json")
    now = int(time.time() * 1000)
    watch = LandingWatch(None, now)
    watch.landed(landing, "users", [])
    land(landing, "b.json.tmp", "_staging/c.json")
    assert watch.landed(landing, "users", []) == []
    done = land(landing, "b.json")  # sorts before its in-progress name
    assert watch.landed(landing, "users", []) == done


def test_a_folder_quiet_for_a_day_is_left_to_the_full_listing(s3_bucket: str) -> None:
    landing = f"s3://{s3_bucket}/topics"
    land(landing, connect_name(0, 0), connect_name(1, 0))
    a_day_on = int(time.time() * 1000) + ACTIVE_FOR_MS + 60_000
    watch = LandingWatch(None, a_day_on)
    watch.landed(landing, "users", [])
    assert watch.state()["users"]["folders"] == {}  # no folder got a dump in the last day
    woken = land(landing, connect_name(0, 1))
    assert watch.landed(landing, "users", []) == []
    watch = LandingWatch(watch.state(), a_day_on + FULL_LISTING_EVERY_MS)
    assert set(woken) <= set(watch.landed(landing, "users", []))


def test_a_local_landing_zone_is_listed_whole_every_tick(tmp_path: Path) -> None:
    landing = str(tmp_path / "landing")
    first = land(landing, "b.json")
    watch = LandingWatch(None, int(time.time() * 1000))
    assert watch.landed(landing, "users", []) == first
    earlier = land(landing, "a.json")
    assert watch.landed(landing, "users", []) == [*earlier, *first]
    assert watch.state() == {}


def test_a_value_files_key_and_header_files_are_seen_though_they_sort_around_it(
    s3_bucket: str,
) -> None:
    """The sink writes a value file, then its keys, then its headers; ``x.headers.json``
    sorts before ``x.json``, so a folder's listing after the value file would miss it:
    the listing starts at the value file's stem until both have been seen."""
    landing = f"s3://{s3_bucket}/topics"
    stem = "partition=0/users+0+0000000010"
    land(landing, connect_name(0, 0))
    now = int(time.time() * 1000)
    watch = LandingWatch(None, now)
    watch.landed(landing, "users", [])
    [value] = land(landing, f"{stem}.json")
    assert watch.landed(landing, "users", []) == [value]
    [keys] = land(landing, f"{stem}.keys.json")
    assert keys in watch.landed(landing, "users", [])
    [headers] = land(landing, f"{stem}.headers.json")
    watch = LandingWatch(json.loads(json.dumps(watch.state())), now + 1_000)
    assert headers in watch.landed(landing, "users", [])
    # Both seen: the folder's listing starts after its greatest dump again.
    later = land(landing, connect_name(0, 20))
    assert watch.landed(landing, "users", []) == later
