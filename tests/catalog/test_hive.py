"""Tables registered in a Hive metastore, embedded (Derby under the deployment's folder) and
external (a standalone metastore server on 127.0.0.1, from pyspark's own jars), each run
over a Spark Connect server started from the deployment's config (``reclock spark-server
--config``), as a deployment runs one. A fresh session reads by name what it reads by path
at every version, a version and a commit time by name agree with ``snapshot_at``, DESCRIBE
shows reclock's properties; evolution and a rebuild are followed, a second deployment
keeps to its own database, and a metastore that is down fails the run before it writes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.catalog.hive import (
    DATABASE,
    client,
    connect_server_args,
    metastore_server,
    write_config,
)
from tests.connect_server import running_server
from tests.source.test_evolution import BASE

REGISTERED = ["users_changes", "users_errors", "users_history", "users_state"]
# The state after windows 1-3 of the dump, by hand: id 1 renamed a1 in window 2, id 2 as is.
STATE_AFTER_3 = [[1, "a1", 1], [2, "b", 2]]
STATE_AFTER_1 = [[1, "a", 1], [2, "b", 2]]


def agrees_by_name_and_by_path(read: dict[str, Any]) -> None:
    """Every published version of state: by name = by path = by name at its commit's time
    = the snapshot at the time it is as of."""
    assert len(read["versions"]) == 2  # two runs, two materialized versions
    assert [v["by_name"] for v in read["versions"].values()] == [STATE_AFTER_1, STATE_AFTER_3]
    for version in read["versions"].values():
        assert version["by_name"] == version["by_path"]
        assert version["by_name_at_commit"] == version["by_name"]
        assert version["snapshot"] == version["by_name"]


def registered_with_properties(read: dict[str, Any], root: Path) -> None:
    assert read["tables"] == REGISTERED  # no remap, reclocked: reclock's bookkeeping
    for prop in ("reclock.source=users", "reclock.topic=users", "reclock.envelope=upsert",
                 "reclock.upper=txn reclock.state_as_of"):  # fmt: skip
        assert prop in read["properties"]
    assert read["location"].endswith(f"{root}/lake/users/state")


class TestEmbedded:
    @pytest.fixture(scope="class")
    def deployment(self, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
        """The deployment's folder, its metastore embedded there, and its client config."""
        root = tmp_path_factory.mktemp("hive-embedded")
        server_config = write_config(root, {"kind": "hive", "database": DATABASE},
                                     name="server.yaml")  # fmt: skip
        with running_server(root / "server.log", connect_server_args(server_config)) as remote:
            yield write_config(root, {"kind": "hive", "database": DATABASE}, remote=remote)

    def test_a_fresh_session_reads_by_name_what_it_reads_by_path(self, deployment: Path) -> None:
        assert client("run", deployment, "1", "2") == {"failed": None}
        assert client("run", deployment, "3", "3") == {"failed": None}
        read = client("read", deployment)
        registered_with_properties(read, deployment.parent)
        assert read["latest"] == STATE_AFTER_3
        assert (deployment.parent / "metastore" / "metastore_db").is_dir()


class TestExternal:
    @pytest.fixture(scope="class")
    def metastore(self, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
        with metastore_server(tmp_path_factory.mktemp("metastore")) as (uri, process):
            yield uri, process

    @pytest.fixture(scope="class")
    def server(
        self, metastore: tuple[str, Any], tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[str]:
        """A Spark Connect server whose session catalog is the metastore."""
        root = tmp_path_factory.mktemp("hive-server")
        catalog = {"kind": "hive", "metastore_uri": metastore[0]}
        server_config = write_config(root, catalog, name="server.yaml")
        with running_server(root / "server.log", connect_server_args(server_config)) as remote:
            yield remote

    def catalog(self, metastore: tuple[str, Any], database: str = DATABASE) -> dict[str, str]:
        return {"kind": "hive", "metastore_uri": metastore[0], "database": database}

    def test_by_name_as_by_path_then_evolution_and_rebuild_follow(
        self, metastore: tuple[str, Any], server: str, tmp_path: Path
    ) -> None:
        config = write_config(tmp_path, self.catalog(metastore), remote=server)
        assert client("run", config, "1", "1") == {"failed": None}
        assert client("run", config, "2", "3") == {"failed": None}
        read = client("versions", config)
        registered_with_properties(read, tmp_path)
        assert read["latest"] == STATE_AFTER_3
        agrees_by_name_and_by_path(read)

        evolved = write_config(tmp_path, self.catalog(metastore), remote=server,
                               value={**BASE, "email": "string"})  # fmt: skip
        assert client("run", evolved, "4", "4") == {"failed": None}
        read = client("read", evolved)
        assert read["columns"] == ["id", "name", "n", "email"]
        # Rows written before the column existed read null; window 4 writes c with its email.
        assert read["latest"] == [[1, "a1", 1, None], [2, "b", 2, None], [3, "c", 3, "c@x"]]

        rebuilt = write_config(tmp_path, self.catalog(metastore), remote=server,
                               value={"name": "string", "n": "string"}, history=False)  # fmt: skip
        assert client("rebuild", rebuilt, "4") == {"failed": None}
        read = client("read", rebuilt)
        assert read["tables"] == ["users_changes", "users_errors", "users_state"]
        assert read["latest"] == [[1, "a1", "1"], [2, "b", "2"], [3, "c", "3"]]

    def test_a_second_deployment_keeps_to_its_own_database(
        self, metastore: tuple[str, Any], server: str, tmp_path: Path
    ) -> None:
        first = write_config(tmp_path / "first", self.catalog(metastore, "shop_us"),
                             remote=server)  # fmt: skip
        assert client("run", first, "1", "1") == {"failed": None}
        clashing = write_config(tmp_path / "second", self.catalog(metastore, "shop_us"),
                                remote=server)  # fmt: skip
        failed = client("run", clashing, "1", "1")
        assert failed["failed"] == "CatalogClash"
        assert "shop_us.users_state is registered at" in failed["message"]
        assert not (tmp_path / "second" / "lake" / "users").exists()  # refused before writing
        second = write_config(tmp_path / "second", self.catalog(metastore, "shop_eu"),
                              remote=server)  # fmt: skip
        assert client("run", second, "1", "1") == {"failed": None}
        assert client("read", second)["location"].endswith(f"{tmp_path}/second/lake/users/state")
        assert client("read", first)["location"].endswith(f"{tmp_path}/first/lake/users/state")

    def test_a_metastore_that_is_down_fails_the_run_before_it_writes(
        self, metastore: tuple[str, Any], server: str, tmp_path: Path
    ) -> None:
        """Last of the class: it stops the metastore."""
        process = metastore[1]
        process.terminate()
        process.wait(60)
        config = write_config(tmp_path, self.catalog(metastore), remote=server)
        failed = client("run", config, "1", "1")
        assert failed["failed"] == "CatalogUnreachable"
        assert "hive metastore: opening database shop failed" in failed["message"]
        assert not (tmp_path / "lake" / "users").exists()
