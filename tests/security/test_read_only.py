"""The read-only commands write nothing: on a lake mounted read-only they succeed, and
afterwards every file of the lake is as it was.

``reclock inspect``, ``snapshot``, ``readers`` (listing) and ``config check`` open sources
through the read handle (``cdc_core.source.SourceReader``). The lake is the shared sample
lake, seen through a read-only bind mount (the test runs as root, as CI does; elsewhere a
copy whose files have no write permission); the config also names a source no run has
created yet, whose tables a write handle would create.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from pyspark.sql import SparkSession

from cdc_core.frontier import iso
from pipelines.cli import main
from tests.lake_rows import SampleLake


@contextmanager
def read_only(lake: Path, mount: Path) -> Iterator[Path]:
    """``lake`` seen read-only at ``mount``: a read-only bind mount as root, else a copy
    without write permission (which root would ignore)."""
    mount.mkdir()
    if os.getuid() == 0:
        subprocess.run(["mount", "--bind", str(lake), str(mount)], check=True)
        try:
            subprocess.run(["mount", "-o", "remount,ro,bind", str(mount)], check=True)
            yield mount
        finally:
            subprocess.run(["umount", str(mount)], check=True)
        return
    shutil.copytree(lake, mount, dirs_exist_ok=True)
    for folder, _, names in os.walk(mount):
        for name in names:
            os.chmod(Path(folder, name), 0o444)
        os.chmod(folder, 0o555)
    yield mount


def fingerprint(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``folder``: its modification time and content hash."""
    return {
        str(path.relative_to(folder)): (path.stat().st_mtime_ns,
                                        hashlib.sha256(path.read_bytes()).hexdigest())
        for path in sorted(folder.rglob("*")) if path.is_file()
    }  # fmt: skip


def test_inspect_snapshot_readers_and_config_check_change_nothing(
    sample_lake: SampleLake, spark: SparkSession, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    config = sample_lake.config
    before = fingerprint(config.lake)
    folder = Path(config.lake).parent  # the sample's: its config, landing zone, schemas
    settings = yaml.safe_load((folder / "reclock.yaml").read_text())
    for source in settings["sources"]:  # the copy lives elsewhere: paths made absolute
        for part in ("key_avro_schema", "value_avro_schema"):
            if "file" in source.get(part, {}):
                source[part]["file"] = str(folder / source[part]["file"])
    users = next(s for s in settings["sources"] if s["name"] == "users")
    settings["sources"].append({**users, "name": "fresh", "topic": "fresh"})
    settings["landing"] = str(config.landing)
    settings["schema_folder"] = str(config.schema_folder)
    with read_only(config.lake, tmp_path / "lake") as lake:
        with pytest.raises(OSError):
            (lake / "probe").write_text("written")
        settings["lake"] = str(lake)
        config_file = tmp_path / "reclock.yaml"
        config_file.write_text(yaml.safe_dump(settings, sort_keys=False))
        as_of = iso(sample_lake.first_run_ms - 1)
        runs = [
            ["config", "check", str(config_file)],
            ["inspect", "--config", str(config_file)],
            ["snapshot", "--config", str(config_file), "--source", "users", "--as-of", as_of],
            ["readers", "--config", str(config_file)],
        ]
        for args in runs:
            assert main(args) == 0, args
        shown = capsys.readouterr().out
        assert fingerprint(lake) == before
    assert fingerprint(config.lake) == before
    assert "source fresh: remap upper" in shown
    fresh = shown[shown.index("source fresh:"):]
    assert "changes    version   -1  rows         0" in fresh
    assert f"users as of {as_of}:" in shown
    assert "source users:" in shown and "no registered readers or writers" in shown
