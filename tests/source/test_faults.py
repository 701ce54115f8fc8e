"""Faults a run must survive: killed (SIGKILL) right after any phase of the engine, a full
disk, a read-only table. After each, running again leaves exactly the tables of a run that
never failed; a storage fault is a ShardStorageError naming the table.

Each phase is found by the engine's phase announcements (``cdc_core.phases``): the kill
lands after that phase's commit and before the next one starts. Between every pair of
commits there is a phase end, so every crash point between commits is covered.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from cdc_core.config import Config, load_config
from cdc_core.reclock import Windows
from cdc_core.shard import ShardStorageError
from cdc_core.source import SourcePipeline, published_tables
from pipelines.run import materialize
from pipelines.sample import write_sample
from tests.connect_server import REPO, attached, client_env
from tests.lake_rows import SampleLake, table_rows

SOURCE = "users"
PHASES = (
    "register dumps",
    "bind windows",
    "append reclocked",
    "plan envelope",
    "append changes",
    "append errors",
    "publish state",
    "publish history",
)


def one_source_sample(workdir: Path) -> Path:
    """The bundled sample, with only its upsert source configured (a shorter run)."""
    config_file = write_sample(workdir)
    settings = yaml.safe_load(config_file.read_text())
    settings["sources"] = [s for s in settings["sources"] if s["name"] == SOURCE]
    del settings["transactions"]  # its sources are not configured here
    config_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    return config_file


def contents(config: Config) -> dict[str, Counter]:
    tables = published_tables(config.source(SOURCE))
    assert "history" in tables  # the sample's upsert source keeps one
    return {table: table_rows(config, SOURCE, table) for table in tables}


@pytest.fixture(scope="module")
def never_killed(sample_lake: SampleLake) -> dict[str, Counter]:
    """A run that never failed: the shared sample lake's tables of ``SOURCE``. The other
    sources there change none of them (``SOURCE`` is in no transaction group), nor does
    the lake's cut of the windows into two runs (tests/source/test_pipeline_runs.py)."""
    return contents(sample_lake.config)


def killed_at(config_file: Path, source: str, phase: str) -> None:
    """A ``reclock materialize`` of ``config_file`` in a process of its own, SIGKILLed as
    ``source``'s ``phase`` ends (tests/source/kill_at_phase.py)."""
    script = Path(__file__).with_name("kill_at_phase.py")
    killed = subprocess.run(
        [sys.executable, str(script), str(config_file), source, phase],
        capture_output=True, text=True, timeout=600, cwd=REPO, env=client_env(),
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]


@pytest.mark.parametrize("phase", PHASES)
def test_a_run_killed_after_a_phase_then_rerun_equals_a_clean_run(
    phase: str, never_killed: dict[str, Counter], connect_server: str, tmp_path: Path
) -> None:
    """The killed run attaches to the suite's warm Spark Connect server: what dies is the
    run's process, which makes every commit (the engine commits from the driver), while
    its Spark work already ended with the phase. The rerun runs in process."""
    config_file = one_source_sample(tmp_path)
    killed_at(attached(config_file, connect_server), SOURCE, phase)
    config = load_config(config_file)
    assert materialize(config, exports=False)
    assert contents(config) == never_killed


GROUP = ("orders", "order_lines")  # the sample's transaction group "shop"


def group_sample(workdir: Path) -> Path:
    """The bundled sample with only the sources of its transaction group."""
    config_file = write_sample(workdir)
    settings = yaml.safe_load(config_file.read_text())
    settings["sources"] = [s for s in settings["sources"] if s["name"] in GROUP]
    config_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    return config_file


def group_contents(config: Config) -> dict[str, Counter]:
    """Every table of both members, and the group's own bindings."""
    tables = {
        f"{source}/{table}": table_rows(config, source, table)
        for source in GROUP
        for table in published_tables(config.source(source))
    }
    tables["bindings"] = table_rows(config, "_transactions", "shop/bindings")
    return tables


@pytest.fixture(scope="module")
def group_never_killed(sample_lake: SampleLake) -> dict[str, Counter]:
    """The group's tables in the shared sample lake: the sources outside the group change
    none of them."""
    return group_contents(sample_lake.config)


@pytest.mark.parametrize("source", GROUP)
def test_a_group_run_killed_after_one_member_bound_then_rerun_equals_a_clean_run(
    source: str, group_never_killed: dict[str, Counter], connect_server: str, tmp_path: Path
) -> None:
    """Killed once ``source`` copied the group's bindings (the other member may not have
    yet): the rerun finishes both from the same durable group bindings. The killed run
    attaches to the warm server, as the phase kills' do (the kill lands as a phase ends)."""
    config_file = group_sample(tmp_path)
    killed_at(attached(config_file, connect_server), source, "bind windows")
    config = load_config(config_file)
    assert materialize(config, exports=False)
    assert group_contents(config) == group_never_killed


@pytest.fixture
def mounts() -> Iterator[list[Path]]:
    """Mount points the test creates; unmounted at the end (lazily, should a file be open)."""
    if os.geteuid() != 0:
        pytest.skip("size-limited and read-only mounts need root")
    mounted: list[Path] = []
    yield mounted
    for point in reversed(mounted):
        subprocess.run(["umount", "-l", str(point)], check=False)


def mount(mounted: list[Path], *args: str) -> None:
    run = subprocess.run(["mount", *args], capture_output=True, text=True)
    if run.returncode:
        pytest.skip(f"cannot mount here: {run.stderr.strip()}")
    mounted.append(Path(args[-1]))


def windows_of(config: Config, first: int, last: int) -> Windows:
    """Windows ``first`` to ``last`` (1-based, inclusive) of the config."""
    width = config.window_ms
    return Windows(config.start_ms + (first - 1) * width, config.start_ms + last * width, width)


def pipeline_of(spark, config: Config) -> SourcePipeline:
    return SourcePipeline.from_config(spark, config, config.source(SOURCE))


def lake_on(tmp_path: Path, lake: Path) -> Config:
    config_file = one_source_sample(tmp_path)
    settings = yaml.safe_load(config_file.read_text())
    settings["lake"] = str(lake)
    config_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    return load_config(config_file)


def test_a_full_disk_is_a_named_storage_error_and_a_run_after_the_fix_is_exact(
    spark, tmp_path: Path, mounts: list[Path], never_killed: dict[str, Counter]
) -> None:
    lake = tmp_path / "lake"
    lake.mkdir()
    mount(mounts, "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(lake))
    config = lake_on(tmp_path, lake)
    pipeline = pipeline_of(spark, config)
    pipeline.register_dumps(arrival_ms=config.start_ms)
    pipeline.run_windows(windows_of(config, 1, 3))
    pipeline.finish()
    stats = os.statvfs(lake)
    used = (stats.f_blocks - stats.f_bfree) * stats.f_frsize
    subprocess.run(["mount", "-o", f"remount,size={used + 16 * 1024}", str(lake)], check=True)

    last = (config.end_ms - config.start_ms) // config.window_ms
    with pytest.raises(ShardStorageError) as full:
        pipeline_of(spark, config).run_windows(windows_of(config, 4, last))
    assert str(lake / SOURCE) in str(full.value)  # names the table
    assert full.value.definitely_not_written in (True, False)

    subprocess.run(["mount", "-o", "remount,size=64m", str(lake)], check=True)
    after = pipeline_of(spark, config)
    after.run_windows(windows_of(config, 4, last))
    after.finish()
    assert contents(config) == never_killed


def test_a_read_only_table_is_a_named_storage_error_and_a_run_after_the_fix_is_exact(
    spark, tmp_path: Path, mounts: list[Path], never_killed: dict[str, Counter]
) -> None:
    config = load_config(one_source_sample(tmp_path))
    pipeline = pipeline_of(spark, config)
    pipeline.register_dumps(arrival_ms=config.start_ms)
    pipeline.run_windows(windows_of(config, 1, 3))
    pipeline.finish()
    changes = config.lake / SOURCE / "changes"
    mount(mounts, "--bind", str(changes), str(changes))
    subprocess.run(["mount", "-o", "remount,ro,bind", str(changes)], check=True)

    last = (config.end_ms - config.start_ms) // config.window_ms
    with pytest.raises(ShardStorageError, match=str(changes)) as refused:
        pipeline_of(spark, config).run_windows(windows_of(config, 4, last))
    assert refused.value.definitely_not_written

    subprocess.run(["umount", str(changes)], check=True)
    mounts.clear()
    after = pipeline_of(spark, config)
    after.run_windows(windows_of(config, 4, last))
    after.finish()
    assert contents(config) == never_killed
