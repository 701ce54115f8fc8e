"""``reclock rebuild``: a source whose config changed beyond evolution is built anew from its
dumps beside the old tables, with the old bindings, and swapped in once complete; killed at
any point (while building, between the two renames of the swap), the old tables stay
complete and in place or the source refuses to open until a rebuild run finishes the swap."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.config import load_config
from cdc_core.envelopes import ConfigDriftError
from cdc_core.reclock import Windows
from cdc_core.source import RebuildUnfinished, SourcePipeline
from cdc_core.storage import files
from pipelines.cli import main
from tests.source.test_evolution import BASE, DUMP, rows
from tests.source.test_history import T0, WINDOW, run

ROOT = Path(__file__).parents[2]
THROUGH = "2026-01-01T00:02:00Z"  # two windows
RETYPED = {"name": "string", "n": "string"}  # not an evolution: needs a rebuild


def write_config(root: Path, value: dict[str, str], **places: str) -> Path:
    """The config of ``users`` with value columns ``value``; ``places``: ``lake`` and
    ``landing`` elsewhere than in ``root``."""
    data = {
        "lake": "lake", "landing": "landing", "window": "1m", "start": "2026-01-01T00:00:00Z",
        "sources": [{"name": "users", "topic": "users", "key": {"id": "bigint"},
                     "value": value, "envelope": "upsert", "reclock": "arrival",
                     "history": True}],
        **places,
    }  # fmt: skip
    if "landing" not in places:
        (root / "landing" / "users").mkdir(parents=True, exist_ok=True)
    (root / "reclock.yaml").write_text(yaml.safe_dump(data))
    return root / "reclock.yaml"


def build_old_source(spark: SparkSession, root: Path, **places: str) -> Path:
    """Two windows built with the old config (arrival reclocking: bindings depend on when
    each dump arrived, so a rebuild that re-bound them would differ); returns the path of
    the new config, which needs a rebuild."""
    config = load_config(write_config(root, BASE, **places))
    landing = config.landing / "users"
    files.write_bytes(str(landing / "dump.json"), "".join(DUMP[:3]).encode())
    pipeline = SourcePipeline.from_config(spark, config, config.sources[0])
    for window, dump in enumerate(("dump.json", "late.json")):
        if window:
            files.write_bytes(str(landing / dump), "".join(DUMP[3:]).encode())
        pipeline.register_dumps(arrival_ms=T0 + window * WINDOW + 1)
        pipeline.run_windows(Windows.one(T0 + window * WINDOW, T0 + (window + 1) * WINDOW))
        pipeline.finish()
    return write_config(root, RETYPED, **places)


@pytest.fixture
def old_source(spark: SparkSession, tmp_path: Path) -> Path:
    return build_old_source(spark, tmp_path)


def rebuild_killed_after(config_file: Path, phase: str) -> None:
    """``reclock rebuild`` in its own process, SIGKILLed when ``phase`` of users ends."""
    script = (
        "import os, signal, sys\n"
        "from cdc_core.phases import observing\n"
        "from pipelines.cli import main\n"
        "def kill(e):\n"
        f"    if e.ended and e.name == {phase!r}: os.kill(os.getpid(), signal.SIGKILL)\n"
        "with observing(kill):\n"
        f"    main(['rebuild', '--config', {str(config_file)!r}, '--source', 'users',"
        f" '--through', {THROUGH!r}])\n"
        "sys.exit(3)\n"
    )
    killed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]


def rebuild_now(config_file: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["rebuild", "--config", str(config_file), "--source", "users",
                 "--through", THROUGH]) == 0  # fmt: skip
    return capsys.readouterr().out


def test_a_rebuild_keeps_the_bindings_swaps_in_complete_tables_and_keeps_the_old(
    spark: SparkSession, old_source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = load_config(old_source)
    lake = config.lake / "users"
    old_remap = sorted(map(repr, rows(lake / "remap")))
    old_state = {(r["id"], r["name"], r["n"]) for r in rows(lake / "state")}
    with pytest.raises(ConfigDriftError, match="value column 'n' changed from bigint"):
        SourcePipeline.from_config(spark, config, config.sources[0])

    # Killed once the new tables are complete, before the swap: the old ones are untouched.
    rebuild_killed_after(old_source, "publish history")
    assert {(r["id"], r["name"], r["n"]) for r in rows(lake / "state")} == old_state

    out = rebuild_now(old_source, capsys)
    assert "users: rebuilt through 2026-01-01T00:02:00Z (2 windows)" in out
    kept = Path(out.rsplit("kept in ", 1)[1].strip())
    assert {(r["id"], r["name"], r["n"]) for r in rows(kept / "state")} == old_state
    assert sorted(map(repr, rows(lake / "remap"))) == old_remap  # the same bindings
    assert {(r["id"], r["name"], r["n"]) for r in rows(lake / "state")} == {
        (i, name, str(n)) for i, name, n in old_state
    }
    b1, b2 = T0 + WINDOW, T0 + 2 * WINDOW
    history = {(r["id"], r["name"], r["n"], r["valid_from"], r["valid_to"])
               for r in rows(lake / "history")}  # fmt: skip
    # Bound by arrival: offsets 0-2 at window 1 (by event time, "a1" would be window 2's).
    assert history == {(1, "a1", "1", b1, None), (2, "b", "2", b1, None), (3, "c", "3", b2, None)}

    # The rebuilt source runs on: windows 3 and 4, then nothing more to write.
    pipeline = SourcePipeline.from_config(spark, config, config.sources[0])
    run(pipeline, 3, 4)
    versions = {t: DeltaTable(str(lake / t)).version() for t in ("changes", "history")}
    run(pipeline, 1, 4)
    assert {t: DeltaTable(str(lake / t)).version() for t in ("changes", "history")} == versions


def test_a_rebuild_killed_between_the_renames_is_refused_until_finished(
    spark: SparkSession, old_source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = load_config(old_source)
    rebuild_killed_after(old_source, "move old tables aside")
    assert not (config.lake / "users").exists()
    with pytest.raises(RebuildUnfinished, match="reclock rebuild --source users"):
        SourcePipeline.from_config(spark, config, config.sources[0])
    assert main(["inspect", "--config", str(old_source)]) == 2  # refused, named, no tables
    assert not (config.lake / "users").exists()

    assert "rebuilt" in rebuild_now(old_source, capsys)
    assert {r["id"] for r in rows(config.lake / "users" / "state")} == {1, 2, 3}
