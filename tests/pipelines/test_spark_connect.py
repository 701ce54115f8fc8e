"""reclock over Spark Connect equals reclock in process, table by table.

One real server for the test process (``connect_server``, tests/conftest.py):
``reclock spark-server`` on 127.0.0.1 and a free port, stopped with SIGTERM at the end
(and it must stop cleanly). Every Connect run is a
``reclock materialize`` process of its own, selected by the config's ``spark.remote``
alone (a process has one Spark session, and the suite's is in process); the in-process
reference runs in the suite's session. Small data: the demo cut to two sources (users:
upsert, history, expectations; pageviews: Kafka Connect sink files) over four windows,
and the bad-input corpus (damaged and truncated gzip files among others).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from unittest import mock

import pytest
import yaml

from cdc_core.app import status
from cdc_core.app.export import EXPORT_FOLDER
from cdc_core.config import Config, load_config
from cdc_core.spark_server import listening
from pipelines.cli import main
from pipelines.sample import write_sample
from tests.connect_server import REPO, attached, client_env
from tests.lake_rows import table_rows
from tests.source import test_bad_inputs as bad_inputs

TABLES = ("remap", "reclocked", "changes", "errors", "state")
SOURCES = ("users", "pageviews")
RUN_TIMEOUT_S = 900


def _small_sample(workdir: Path, remote: str | None = None) -> Path:
    """The demo's users and pageviews over four windows; over ``remote`` when given."""
    config_file = write_sample(workdir)
    settings = yaml.safe_load(config_file.read_text())
    settings["sources"] = [s for s in settings["sources"] if s["name"] in SOURCES]
    settings.pop("transactions", None)
    settings["end"] = "2026-01-01T00:04:00Z"
    config_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    return attached(config_file, remote) if remote else config_file


def _materialize(config_file: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "materialize", "--config", str(config_file)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=client_env(),
    )  # fmt: skip


def _finished(run: subprocess.Popen[str]) -> str:
    out, _ = run.communicate(timeout=RUN_TIMEOUT_S)
    assert run.returncode == 0, out[-4000:]
    return out


def _contents(config: Config) -> dict[str, Counter]:
    tables = {
        f"{source.name}/{table}": table_rows(config, source.name, table)
        for source in config.sources
        for table in (*TABLES, *(("history",) if source.history else ()))
    }
    for source in config.sources:
        exported = config.lake / source.name / EXPORT_FOLDER
        # A stream's updates, whatever lines its writers batched them into.
        tables[f"{source.name}/cdcv2"] = Counter(
            (window.name, json.dumps(update, sort_keys=True))
            for window in exported.iterdir()
            for part in window.glob("updates-*.jsonl")
            for line in part.read_text().splitlines()
            for update in json.loads(line)["updates"]
        )
    return tables


@pytest.fixture(scope="module")
def in_process(tmp_path_factory: pytest.TempPathFactory, spark) -> dict[str, Counter]:
    """The small sample materialized in the suite's own (in-process) session, by the
    command line; its summary is what a look at each source finds after the run, and
    comes from the run itself (no source is looked up again)."""
    config_file = _small_sample(tmp_path_factory.mktemp("in-process"))
    config = load_config(config_file)
    printed = io.StringIO()
    with (mock.patch.object(status, "statuses", wraps=status.statuses) as looked,
          contextlib.redirect_stdout(printed)):  # fmt: skip
        assert main(["materialize", "--config", str(config_file)]) == 0
    assert looked.call_args_list == [mock.call(config, [])]
    summary = {line.split()[0]: line.split()[1:] for line in printed.getvalue().splitlines()
               if line.split() and line.split()[0] in SOURCES}  # fmt: skip
    assert summary == {
        found.source: [str(found.windows_done), found.upper.iso(),
                       str(found.tables["state"].rows), str(found.current_errors)]
        for found in status.statuses(config)
    }  # fmt: skip
    assert summary["users"][0] == "4" and int(summary["users"][3]) > 0
    contents = _contents(config)
    for table in ("users/state", "users/history", "users/errors", "pageviews/state"):
        assert contents[table], f"{table} is empty: the comparison would prove little"
    return contents


def test_a_run_over_spark_connect_equals_the_in_process_run(
    connect_server: str, in_process: dict[str, Counter], tmp_path: Path
) -> None:
    config_file = _small_sample(tmp_path, connect_server)
    out = _finished(_materialize(config_file))
    assert "success" in out
    assert _contents(load_config(config_file)) == in_process


def test_a_client_killed_mid_run_leaves_the_server_up_and_the_rerun_exact(
    connect_server: str, in_process: dict[str, Counter], tmp_path: Path
) -> None:
    config_file = _small_sample(tmp_path, connect_server)
    config = load_config(config_file)
    run = _materialize(config_file)
    # Killed once the first source has appended a window's changes: mid-way, with
    # tables of that source written and the other source untouched or part-written.
    first_commits = [config.lake / s / "changes" / "_delta_log" / f"{1:020d}.json"
                     for s in SOURCES]  # fmt: skip
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not any(commit.exists() for commit in first_commits):
        assert run.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    run.kill()
    run.wait()
    half_done = _contents_so_far(config)
    assert half_done != in_process, "the kill came too late to interrupt anything"
    assert listening(int(connect_server.rsplit(":", 1)[1])), "the server died with its client"
    _finished(_materialize(config_file))
    assert _contents(config) == in_process


def _contents_so_far(config: Config) -> dict[str, Counter]:
    try:
        return _contents(config)
    except Exception:  # a table or an export folder not written yet
        return {}


def test_two_concurrent_runs_on_one_server_both_equal_the_in_process_run(
    connect_server: str, in_process: dict[str, Counter], tmp_path: Path
) -> None:
    config_files = [_small_sample(tmp_path / name, connect_server) for name in ("a", "b")]
    runs = [_materialize(config_file) for config_file in config_files]
    for run in runs:
        _finished(run)
    for config_file in config_files:
        assert _contents(load_config(config_file)) == in_process


PROBE = textwrap.dedent(
    """
    import json, sys
    from cdc_core.spark import get_spark, is_connect
    spark = get_spark(conf={"spark.remote": sys.argv[1]})
    if sys.argv[2] == "hold":
        spark.conf.set("spark.sql.shuffle.partitions", "3")
        spark.range(1).createOrReplaceTempView("reclock_probe")
        print("ready", flush=True)
        sys.stdin.readline()
    print(json.dumps({
        "connect": is_connect(spark),
        "partitions": spark.conf.get("spark.sql.shuffle.partitions"),
        "view": spark.catalog.tableExists("reclock_probe"),
        "timezone": spark.conf.get("spark.sql.session.timeZone"),
    }), flush=True)
    """
)


def test_each_client_process_has_a_session_of_its_own(connect_server: str) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", PROBE, connect_server, "hold"], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, cwd=REPO, env=client_env(),
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "ready"
        other = subprocess.run(
            [sys.executable, "-c", PROBE, connect_server, "look"], capture_output=True,
            text=True, cwd=REPO, env=client_env(), timeout=300,
        )  # fmt: skip
        assert other.returncode == 0, other.stderr[-3000:]
        seen = json.loads(other.stdout.strip().splitlines()[-1])
        holder.stdin.write("\n")
        holder.stdin.flush()
        own = json.loads(holder.stdout.readline())
    finally:
        holder.kill()
        holder.wait()
    assert own == {"connect": True, "partitions": "3", "view": True, "timezone": "UTC"}
    assert seen == {"connect": True, "partitions": "8", "view": False, "timezone": "UTC"}


def test_the_bad_input_corpus_over_spark_connect_equals_the_in_process_run(
    connect_server: str, tmp_path: Path, bad_input_lake: Config
) -> None:
    workdir = tmp_path / "connect"
    bad_inputs.write_landing(workdir / "landing")
    lakes = {"in-process": bad_input_lake, "connect": bad_inputs.write_config(workdir)}
    settings = yaml.safe_load((workdir / "reclock.yaml").read_text())
    settings["spark"] = {"remote": connect_server,
                         "conf": {"spark.sql.shuffle.partitions": "4"}}  # fmt: skip
    (workdir / "reclock.yaml").write_text(yaml.safe_dump(settings))
    _finished(_materialize(workdir / "reclock.yaml"))
    tables = [(source.name, table) for source in lakes["connect"].sources for table in TABLES]
    for source, table in tables:
        assert table_rows(lakes["connect"], source, table) == table_rows(
            lakes["in-process"], source, table
        ), f"{source}/{table}"
    # The damaged gzip files were judged and the truncated ones salvaged over Connect.
    errors = [row for row in bad_inputs.table(lakes["connect"], "users", "errors") if row["file"]]
    reasons = {name: " | ".join(row["reason"] for row in errors if Path(row["file"]).name == name)
               for name in ("cut.json.gz", "corrupt.json.gz")}  # fmt: skip
    assert "truncated gzip file" in reasons["cut.json.gz"]
    assert "corrupt gzip file" in reasons["corrupt.json.gz"]
    salvaged = [row for row in bad_inputs.table(lakes["connect"], "users", "state")
                if 200 <= row["id"] < 200 + bad_inputs.TRUNCATED_RECORDS]  # fmt: skip
    assert 0 < len(salvaged) < bad_inputs.TRUNCATED_RECORDS
