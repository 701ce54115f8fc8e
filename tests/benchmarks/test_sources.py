"""The many-sources benchmark's workload and counters, without Spark: the dumps it lands
hold what its docstring promises (read back as plain JSON lines), its configs load, and
it counts Spark jobs and Delta commits from the files alone."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

from benchmarks.sources import FIRST_WINDOWS, Case, JobCount, delta_commits
from cdc_core.config import load_config


def dump_lines(folder: Path) -> dict[str, list[dict]]:
    """Each dump file's lines, by file name."""
    return {
        path.name: [json.loads(line) for line in path.read_text().splitlines()]
        for path in sorted(folder.iterdir())
    }


def test_upsert_topics_hold_200_records_over_10_windows_then_20_a_window(tmp_path: Path) -> None:
    case = Case(tmp_path / "case", "upsert", 3, windows=12)
    config = load_config(case.config("own", None))
    case.land(FIRST_WINDOWS + 2)

    assert [s.envelope.value for s in config.sources] == ["upsert"] * 3
    assert config.transactions == ()
    for source in config.sources:
        files = dump_lines(case.landing / source.topic)
        counts = [len(lines) for lines in files.values()]
        assert len(counts) == FIRST_WINDOWS + 2
        assert sum(counts[:FIRST_WINDOWS]) == 200 and counts[FIRST_WINDOWS:] == [20, 20]
        offsets = defaultdict(list)
        for lines in files.values():
            for line in lines:
                assert line["topic"] == source.topic
                offsets[line["partition"]].append(line["offset"])
        assert set(offsets) == {0, 1, 2, 3}
        assert all(found == list(range(len(found))) for found in offsets.values())


def test_debezium_tables_are_one_transaction_group_whose_ends_count_their_events(
    tmp_path: Path,
) -> None:
    case = Case(tmp_path / "case", "debezium", 6, windows=11)
    config = load_config(case.config("attached", "sc://localhost:15002"))
    case.land(FIRST_WINDOWS + 1)

    assert config.spark.remote == "sc://localhost:15002"
    (group,) = config.transactions
    assert sorted(group.sources) == [s.name for s in config.sources]
    events: Counter[tuple[str, str]] = Counter()  # (transaction, data collection)
    for source in config.sources:
        files = dump_lines(case.landing / source.topic)
        assert [len(lines) for lines in files.values()][FIRST_WINDOWS:] == [20]
        for lines in files.values():
            for line in lines:
                value = json.loads(line["payload"])
                assert value["op"] in ("c", "u") and value["after"]["id"] == json.loads(
                    line["key"]
                )["id"]
                events[value["transaction"]["id"], group.sources[source.name]] += 1
    announced: Counter[tuple[str, str]] = Counter()
    for lines in dump_lines(case.landing / group.topic).values():
        for line in lines:
            record = json.loads(line["payload"])
            for collection in record["data_collections"] or ():
                announced[record["id"], collection["data_collection"]] += collection[
                    "event_count"
                ]
    assert announced == events
    assert {width for _, width in Counter(tx for tx, _ in events).items()} == {4}


def test_jobs_are_counted_from_the_lines_appended_since_the_last_count(tmp_path: Path) -> None:
    start = '{"Event":"SparkListenerJobStart","Job ID":%d}\n'
    log = tmp_path / "app-1.inprogress"
    log.write_text(start % 0 + '{"Event":"SparkListenerJobEnd"}\n' + start % 1)
    jobs = JobCount(tmp_path)
    assert jobs.count() == 2
    with log.open("a") as more:
        more.write(start % 2 + '{"Event":"SparkListenerJobSt')  # a line still being written
    assert jobs.count() == 3
    with log.open("a") as more:
        more.write('art","Job ID":3}\n')
    assert jobs.count() == 4


def test_delta_commits_are_the_logs_json_files(tmp_path: Path) -> None:
    for table, versions in (("a/changes", 3), ("b/remap", 1)):
        log = tmp_path / table / "_delta_log"
        log.mkdir(parents=True)
        for version in range(versions):
            (log / f"{version:020d}.json").write_text("{}")
        (log / "_last_checkpoint").write_text("{}")
    (tmp_path / "a" / "cdcv2").mkdir()
    (tmp_path / "a" / "cdcv2" / "updates.json").write_text("{}")
    assert delta_commits(tmp_path) == 4
