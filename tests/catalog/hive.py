"""What the Hive tests share: a standalone Hive metastore server (pyspark's own jars, backed
by Derby), deployments of the ``users`` source of tests/source/test_evolution.py registered
in a Hive catalog and run over a Spark Connect server started from their config, and a
client in its own process (``python -m tests.catalog.hive <action> <config> ...``) that runs
windows or rebuilds, or reads the tables by name and by path in a fresh session, printing
JSON."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyspark
import yaml

from tests.connect_server import REPO, client_env
from tests.source.test_evolution import BASE, DUMP

DATABASE = "shop"
PYSPARK_JARS = Path(pyspark.__file__).parent / "jars"
START_TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def connect_server_args(config: Path) -> list[str]:
    """A Connect server for ``config``'s runs: its settings (the catalog's among them),
    and Delta's log replays in one task, as the suite's own session does
    (``tests/conftest.py``): the time-travel reads are many small ones."""
    return ["--config", str(config), "--conf", "spark.databricks.delta.snapshotPartitions=1"]


@contextmanager
def metastore_server(folder: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A Hive metastore Thrift server on 127.0.0.1 (its Derby database and warehouse in
    ``folder``): its ``thrift://`` URI and its process."""
    port = free_port()
    command = [
        "java", "-Xmx512m", "-Dhive.async.log.enabled=false",  # no log4j async jars here
        "-cp", f"{PYSPARK_JARS}/*", "org.apache.hadoop.hive.metastore.HiveMetaStore",
        "-p", str(port),
        "--hiveconf",
        f"javax.jdo.option.ConnectionURL=jdbc:derby:;databaseName={folder}/db;create=true",
        "--hiveconf", "datanucleus.schema.autoCreateAll=true",
        "--hiveconf", "hive.metastore.schema.verification=false",
        "--hiveconf", f"hive.metastore.warehouse.dir={folder}/warehouse",
    ]  # fmt: skip
    log = folder / "metastore.log"
    with log.open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=folder)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not listening(port):
            assert server.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the metastore never listened"
            time.sleep(0.5)
        yield f"thrift://127.0.0.1:{port}", server
    finally:
        server.terminate()
        server.wait(60)


def write_config(
    root: Path,
    catalog: dict[str, Any],
    *,
    value: dict[str, str] = BASE,
    remote: str | None = None,
    history: bool = True,
    name: str = "reclock.yaml",
) -> Path:
    """The ``users`` deployment in ``root`` (its dumps landed), registered in ``catalog``;
    with ``remote``, run over that Spark Connect server."""
    dump = root / "landing" / "users" / "dump.json"
    if not dump.exists():  # landed once: a dump changed after registration is refused
        dump.parent.mkdir(parents=True, exist_ok=True)
        dump.write_text("".join(DUMP))
    data: dict[str, Any] = {
        "lake": "lake", "landing": "landing", "window": "1m", "start": "2026-01-01T00:00:00Z",
        "catalog": catalog,
        "sources": [{"name": "users", "topic": "users", "key": {"id": "bigint"},
                     "value": value, "envelope": "upsert", "reclock": "event-time",
                     "history": history}],
    }  # fmt: skip
    if remote is not None:
        data["spark"] = {"remote": remote}
    (root / name).write_text(yaml.safe_dump(data, sort_keys=False))
    return root / name


def client(action: str, config: Path, *args: str) -> dict[str, Any]:
    """Run this module's ``action`` in a process of its own (a Connect client); its JSON."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.catalog.hive", action, str(config), *args],
        capture_output=True, text=True, cwd=REPO, env=client_env(), timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _rows(frame) -> list[list[Any]]:  # noqa: ANN001
    return sorted(([*row] for row in frame.collect()), key=repr)


def _read(config_file: Path, *, versions: bool) -> dict[str, Any]:
    """In a fresh session: the tables of the database, users' state by name (its rows,
    columns, and DESCRIBE's location and properties); with ``versions``, for every
    published version of the state, its rows by name and by path, by name at its commit's
    time, and ``SourceReader.snapshot_at`` (what ``reclock snapshot --as-of`` prints) at
    the time it is as of."""
    from deltalake import DeltaTable

    from cdc_core.app.session import config_spark
    from cdc_core.config import load_config
    from cdc_core.source import SourceReader
    from cdc_core.source.state import STATE_AS_OF

    config = load_config(config_file)
    spark = config_spark(config)
    database = config.catalog.database
    path = str(config.lake / "users" / "state")
    tables = sorted(r["tableName"] for r in spark.sql(f"SHOW TABLES IN {database}").collect())
    described = {
        r["col_name"]: r["data_type"]
        for r in spark.sql(f"DESCRIBE TABLE EXTENDED {database}.users_state").collect()
    }
    reader = SourceReader.open(spark, config, config.sources[0], config.lake)
    name = f"{database}.users_state"
    # The commit times as Delta's Spark connector reads them (what TIMESTAMP AS OF means).
    history = spark.sql(f"DESCRIBE HISTORY {name}").selectExpr(
        "version", "date_format(timestamp, 'yyyy-MM-dd HH:mm:ss.SSS') AS at"
    )
    published = {}
    for commit in sorted(history.collect(), key=lambda c: c["version"]) if versions else []:
        version = commit["version"]
        as_of = DeltaTable(path, version=version).transaction_version(STATE_AS_OF)
        if as_of is None:
            continue  # the empty table's creation
        published[version] = {
            "as_of": as_of,
            "by_name": _rows(spark.sql(f"SELECT * FROM {name} VERSION AS OF {version}")),
            "by_path": _rows(spark.read.format("delta").option("versionAsOf", version)
                             .load(path)),  # fmt: skip
            "by_name_at_commit": _rows(
                spark.sql(f"SELECT * FROM {name} TIMESTAMP AS OF '{commit['at']}'")
            ),
            "snapshot": _rows(reader.snapshot_at(as_of)),
        }  # fmt: skip
    return {
        "tables": tables,
        "properties": described.get("Table Properties", ""),
        "location": described.get("Location", ""),
        "latest": _rows(spark.table(f"{database}.users_state")),
        "columns": spark.table(f"{database}.users_state").columns,
        "versions": published,
    }


def main(action: str, config_file: str, *args: str) -> dict[str, Any]:
    """The client's actions: ``run FIRST LAST`` (windows, 1-based), ``rebuild LAST``,
    ``read`` (the state by name), ``versions`` (and every published version)."""
    from cdc_core.app.session import config_spark
    from cdc_core.calendar import Windows
    from cdc_core.config import load_config
    from cdc_core.source import SourcePipeline, rebuild
    from tests.source.test_history import T0, WINDOW, run

    if action in ("read", "versions"):
        return _read(Path(config_file), versions=action == "versions")
    config = load_config(config_file)
    spark = config_spark(config)
    source = config.sources[0]
    if action == "run":
        try:
            run(SourcePipeline.from_config(spark, config, source), int(args[0]), int(args[1]))
        except Exception as failure:  # what failed, for the test to judge
            return {"failed": type(failure).__name__, "message": str(failure)}
        return {"failed": None}
    if action == "rebuild":
        rebuild(spark, config, source, Windows(T0, T0 + int(args[0]) * WINDOW, WINDOW))
        return {"failed": None}
    raise SystemExit(f"unknown action {action}")


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:]), default=str))
