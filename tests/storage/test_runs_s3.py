"""Two ``reclock materialize`` processes of one config whose lake and landing zone are on
S3, started together: both succeed, and the lake holds what one run of the same dumps
writes in local folders (the commits of both race through conditional creates on the
store); each window's CDCv2 export reads as that window of ``changes``."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.cdcv2 import DataColumns
from cdc_core.cdcv2.stream_files import is_progress_file
from cdc_core.config import Config, load_config
from cdc_core.frontier import TimeFrontier
from cdc_core.storage import delta_options, files
from pipelines.cli import main
from pipelines.run import materialize
from tests.connect_server import REPO, client_env
from tests.source.test_reliability import (
    EARLY,
    FINAL_STATE,
    KEYS,
    LATE,
    dump,
    run_job,
    write_config,
)
from tests.storage.test_export_s3 import window_facts
from tests.upsert_config import write_upsert_config

TABLES = ("remap", "reclocked", "changes", "errors", "history")


def table_rows(config: Config, table: str) -> Counter:
    """A table's rows with their summed ``diff`` (zeros dropped; a table without ``diff``
    counts each row), file names spelled relative to the landing zone."""
    path = str(config.lake / "users" / table)
    landing = str(config.landing)
    totals: Counter = Counter()
    for row in DeltaTable(path, storage_options=delta_options(path)).to_pyarrow_table().to_pylist():
        diff = row.pop("diff", 1)
        if isinstance(row.get("file"), str):
            row["file"] = row["file"].replace(landing, "<landing>")
        totals[tuple(sorted(row.items()))] += diff
    return Counter({key: diff for key, diff in totals.items() if diff})


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> Config:
    """Every dump at once, materialized once in local folders."""
    config = load_config(write_config(tmp_path_factory.mktemp("reference")))
    (config.landing / "users" / "early.json").write_text(dump(EARLY))
    (config.landing / "users" / "late.json").write_text(dump(LATE))
    assert run_job(config, KEYS[0], KEYS[-1]).success
    return config


def s3_config(bucket: str, workdir: Path) -> Path:
    """The reliability tests' config and dumps, with lake and landing zone in ``bucket``."""
    files.write_bytes(f"{bucket}/landing/users/early.json", dump(EARLY).encode())
    files.write_bytes(f"{bucket}/landing/users/late.json", dump(LATE).encode())
    return write_upsert_config(
        workdir, end="2026-01-01T00:04:00Z", source={"history": True},
        lake=f"{bucket}/lake", landing=f"{bucket}/landing",
    )  # fmt: skip


def start(*command: str) -> subprocess.Popen[bytes]:
    """A process of this interpreter from the project's root, the AWS environment set."""
    env = {**client_env(), "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, *command], env=env, cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def assert_tables_equal(config: Config, reference: Config) -> None:
    state = table_rows(config, "state")
    assert {(dict(row)["id"], dict(row)["name"]) for row in state} == FINAL_STATE
    for table in TABLES:
        assert table_rows(config, table) == table_rows(reference, table), table


def test_two_runs_of_one_config_on_s3_at_once_both_succeed_with_exact_outputs(
    reference: Config, s3_bucket: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = f"s3://{s3_bucket}"
    config_path = s3_config(bucket, tmp_path)
    config = load_config(config_path)
    runs = [start("-m", "pipelines.cli", "materialize", "--config", str(config_path))
            for _ in range(2)]  # fmt: skip
    outputs = [run.communicate(timeout=900)[0].decode(errors="replace") for run in runs]

    assert [run.returncode for run in runs] == [0, 0], [o[-3000:] for o in outputs]
    assert_tables_equal(config, reference)
    changes: Counter = Counter()
    for row, diff in table_rows(reference, "changes").items():
        fields = dict(row)
        changes[((fields["id"], fields["name"]), fields["time"], diff)] += 1
    columns = DataColumns(config.source("users").output_schema)
    for index, key in enumerate(KEYS):
        folder = f"{bucket}/lake/users/cdcv2/{key}"
        lower = config.start_ms + index * config.window_ms  # the window's start
        upper = lower + config.window_ms
        facts, frontier = window_facts(folder, columns, lower + 1)
        assert frontier == TimeFrontier.at(upper + 1), key
        assert facts == Counter({f: n for f, n in changes.items() if lower < f[1] <= upper}), key
        # One progress file per export still live when the other published.
        assert sum(is_progress_file(name) for name in files.list_names(folder)) in (1, 2)
    assert_commands_read_the_store(config_path, reference, tmp_path, capsys)


def assert_commands_read_the_store(
    config_path: Path, reference: Config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``reclock snapshot --as-of`` of the S3 lake writes the rows the local lake's gives;
    ``reclock readers`` registers, lists and releases a reader on the store."""
    as_of = "2026-01-01T00:02:00Z"
    reference_path = Path(str(reference.lake)).parent / "reclock.yaml"
    for name, config in (("s3", config_path), ("local", reference_path)):
        out = tmp_path / f"snapshot-{name}"
        argv = ["snapshot", "--config", str(config), "--source", "users", "--as-of", as_of]
        assert main([*argv, "--out", str(out)]) == 0
    on_s3, local = (sorted(pq.read_table(tmp_path / f"snapshot-{n}").to_pylist(),
                           key=lambda row: row["id"]) for n in ("s3", "local"))  # fmt: skip
    assert on_s3 == local and on_s3  # the state through 00:02, not empty

    reader = ["--config", str(config_path), "--source", "users", "--reader", "audit-1"]
    assert main(["readers", "register", *reader, "--since", as_of]) == 0
    capsys.readouterr()
    assert main(["readers", "--config", str(config_path)]) == 0
    assert "audit-1" in capsys.readouterr().out
    assert main(["readers", "release", *reader]) == 0
    capsys.readouterr()
    assert main(["readers", "--config", str(config_path)]) == 0
    assert "audit-1" not in capsys.readouterr().out


def test_a_run_on_s3_killed_after_appending_changes_then_rerun_equals_a_clean_run(
    reference: Config, s3_bucket: str, tmp_path: Path
) -> None:
    config_path = s3_config(f"s3://{s3_bucket}", tmp_path)
    script = REPO / "tests" / "source" / "kill_at_phase.py"
    killed = start(str(script), str(config_path), "users", "append changes")
    output = killed.communicate(timeout=900)[0].decode(errors="replace")
    assert killed.returncode == -signal.SIGKILL, output[-3000:]

    # The re-run in this process: what is tested is that it finds what the kill left.
    config = load_config(config_path)
    assert materialize(config)
    assert_tables_equal(config, reference)
